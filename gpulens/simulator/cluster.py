"""What Kubernetes says of a simulated fleet's pods, as kube-state-metrics exports it.

A fleet file gives each workload's pod its controller (`owner: Deployment/chat-api`), its labels and its
container image (docs/simulator.md); `kube_state_metrics()` writes the series kube-state-metrics 2.x
serves for them, with its label names and conventions (kubernetes/kube-state-metrics, docs/metrics/workload):
- kube_pod_info{namespace, pod, uid, node, created_by_kind, created_by_name, ...}
- kube_pod_owner{namespace, pod, uid, owner_kind, owner_name, owner_is_controller}: a Deployment's pod is
  owned by its ReplicaSet, a CronJob's by its Job; a pod with no controller has owner "<none>";
- kube_replicaset_owner{namespace, replicaset, owner_kind, owner_name, owner_is_controller} and
  kube_job_owner{namespace, job_name, ...}: the ReplicaSet's Deployment, the Job's CronJob;
- kube_pod_labels{namespace, pod, uid, label_<key>}: every label, as if kube-state-metrics ran with
  --metric-labels-allowlist=pods=[*] (by default it exports none: say so where labels are read);
- kube_pod_container_info{namespace, pod, uid, container, image, image_spec, image_id, container_id};
- kube_pod_status_phase{namespace, pod, uid, phase}: Running 1 (Pending 1 for a pod waiting for a node), the
  other phases 0;
- the cluster's GPUs (analyzer/inputs/cluster.py reads them): kube_node_status_allocatable{node, resource=
  "nvidia_com_gpu"}, kube_node_spec_unschedulable, kube_node_labels{node, label_karpenter_sh_nodepool,
  label_nvidia_com_gpu_product} (as if --metric-labels-allowlist=nodes=[...] named them),
  kube_pod_container_resource_requests{..., node, resource="nvidia_com_gpu"}, kube_pod_created, and for a
  waiting pod kube_pod_nodeselectors (opt-in in kube-state-metrics).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
#: The image of a pod the fleet gives none: NVIDIA's PyTorch container, which says nothing of what runs in it.
DEFAULT_IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


@dataclass(frozen=True)
class SimPod:
    """A simulated pod as the Kubernetes API describes it: where it runs, its controller ("" for a bare
    pod), its labels and its one container's image."""

    namespace: str
    pod: str
    container: str
    node: str
    owner_kind: str = ""
    owner_name: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    image: str = ""
    #: The serving engine whose metrics it exports (simulator/engines.py: vllm, triton), or "".
    engine: str = ""
    #: GPUs it asks for (kube_pod_container_resource_requests); a pod on no node ("") waits for them, on the
    #: pool and GPU model its node selector names ("": any).
    gpus: int = 0
    pool: str = ""
    product: str = ""
    #: The MIG profile of the instance it asks for ("3g.40gb": nvidia.com/mig-3g.40gb) in place of a GPU, or "".
    mig: str = ""

    @property
    def uid(self) -> str:
        """A stable UID (Kubernetes' are random v4 UUIDs; the same pod keeps its UID here across runs)."""
        digest = hashlib.sha256(f"{self.namespace}/{self.pod}".encode()).hexdigest()
        return f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-a{digest[17:20]}-{digest[20:32]}"

    def controller(self) -> tuple[str, str]:
        """The object that owns the pod itself (kube_pod_owner): a Deployment's ReplicaSet (the pod's name
        less its last part), a CronJob's Job (likewise), else the owner named; ("<none>", "<none>") for a
        bare pod."""
        if not self.owner_kind:
            return "<none>", "<none>"
        if self.owner_kind in ("Deployment", "CronJob"):
            return ("ReplicaSet" if self.owner_kind == "Deployment" else "Job"), self.pod.rsplit("-", 1)[0]
        return self.owner_kind, self.owner_name


#: The node label of a node's pool (Karpenter's, the first the analyzer looks for) and GPU feature discovery's
#: label of its GPU model.
POOL_LABEL = "karpenter.sh/nodepool"
PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True)
class SimNodeInfo:
    """A simulated node as the Kubernetes API describes it: its GPUs the device plugin offers (a GPU fallen
    off the bus is not offered), its GPU model as GPU feature discovery labels it, and its pool ("" none)."""

    name: str
    product: str
    allocatable: int
    pool: str = ""


def gfd_product(model_name: str) -> str:
    """GPU feature discovery's nvidia.com/gpu.product of an NVML model name: spaces made dashes
    ("NVIDIA H100 80GB HBM3" -> "NVIDIA-H100-80GB-HBM3")."""
    return model_name.replace(" ", "-")


def owner_problem(pod: str, owner_kind: str, owner_name: str) -> str:
    """Why `pod` cannot be a pod of that owner ("" where it can): a Deployment's pods are named
    <deployment>-<replicaset hash>-<suffix>, a CronJob's <cronjob>-<schedule time>-<suffix>."""
    if owner_kind == "Deployment" and not re.fullmatch(rf"{re.escape(owner_name)}-[a-z0-9]+-[a-z0-9]+", pod):
        return f"a Deployment's pod is named {owner_name}-<replicaset hash>-<suffix>, as {owner_name}-6c8f9d7b54-x2k4p"
    if owner_kind == "CronJob" and not re.fullmatch(rf"{re.escape(owner_name)}-[0-9]+-[a-z0-9]+", pod):
        return f"a CronJob's pod is named {owner_name}-<scheduled minute>-<suffix>, as {owner_name}-29380320-q8z2m"
    return ""


def label_name(key: str) -> str:
    """The Prometheus label kube-state-metrics gives a Kubernetes label: label_ and the key with every
    character a label name cannot hold made "_" (app.kubernetes.io/name -> label_app_kubernetes_io_name)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def _escaped(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote and line feed escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escaped(v)}"' for k, v in pairs.items()) + "}"


def kube_state_metrics(
    pods: list[SimPod],
    nodes: list[SimNodeInfo] | None = None,
    created: float = 0.0,
    replicas: dict[tuple[str, str, str], int] | None = None,
) -> str:
    """kube-state-metrics' exposition (text format 0.0.4) of `pods`, their ReplicaSets' and Jobs' owners, and
    of the GPU `nodes`; every pod created at unix time `created`; and each Deployment's and StatefulSet's
    `replicas` ((namespace, kind, name) -> replicas its spec asks), where given."""
    families: dict[str, list[str]] = {}

    def add(family: str, labels: dict[str, str], value: float = 1) -> None:
        # Every digit of a double: "%g" keeps six, and rounded a pod's creation time to 10,000 s.
        families.setdefault(family, []).append(f"{family}{_labels(labels)} {float(value)!r}")

    for n in sorted(nodes or [], key=lambda n: n.name):
        gpu = {"resource": "nvidia_com_gpu", "unit": "integer"}
        add("kube_node_status_allocatable", {"node": n.name, **gpu}, n.allocatable)
        add("kube_node_spec_unschedulable", {"node": n.name}, 0)
        node_labels = {label_name(PRODUCT_LABEL): n.product, **({label_name(POOL_LABEL): n.pool} if n.pool else {})}
        add("kube_node_labels", {"node": n.name, **node_labels})

    owners_seen: set[tuple[str, str]] = set()
    for p in sorted(pods, key=lambda p: (p.namespace, p.pod)):
        ids = {"namespace": p.namespace, "pod": p.pod, "uid": p.uid}
        kind, name = p.controller()
        add("kube_pod_info", {**ids, "node": p.node, "created_by_kind": kind, "created_by_name": name})
        controller = "true" if p.owner_kind else "<none>"
        add("kube_pod_owner", {**ids, "owner_kind": kind, "owner_name": name, "owner_is_controller": controller})
        if kind in ("ReplicaSet", "Job") and (p.namespace, name) not in owners_seen:
            owners_seen.add((p.namespace, name))
            family, key = (
                ("kube_replicaset_owner", "replicaset") if kind == "ReplicaSet" else ("kube_job_owner", "job_name")
            )
            owner = {"owner_kind": p.owner_kind, "owner_name": p.owner_name, "owner_is_controller": "true"}
            add(family, {"namespace": p.namespace, key: name, **owner})
        add("kube_pod_labels", {**ids, **{label_name(k): v for k, v in p.labels.items()}})
        image = p.image or DEFAULT_IMAGE
        add(
            "kube_pod_container_info",
            {
                **ids,
                "container": p.container,
                "image": image,
                "image_spec": image,
                "image_id": f"{image.split(':')[0]}@sha256:{hashlib.sha256(image.encode()).hexdigest()}",
                "container_id": f"containerd://{hashlib.sha256(f'{p.uid}/{p.container}'.encode()).hexdigest()}",
            },
        )
        now = "Running" if p.node else "Pending"
        for phase in PHASES:
            add("kube_pod_status_phase", {**ids, "phase": phase}, int(phase == now))
        add("kube_pod_created", ids, created)
        if p.gpus:
            # kube-state-metrics names an extended resource as a label name: nvidia.com/mig-3g.40gb is
            # nvidia_com_mig_3g_40gb.
            resource = label_name(f"nvidia.com/mig-{p.mig}")[6:] if p.mig else "nvidia_com_gpu"
            request = {"container": p.container, "node": p.node, "resource": resource, "unit": "integer"}
            add("kube_pod_container_resource_requests", {**ids, **request}, p.gpus)
        if p.pool or p.product:
            selectors = {
                **({"nodeselector_" + label_name(POOL_LABEL)[6:]: p.pool} if p.pool else {}),
                **({"nodeselector_" + label_name(PRODUCT_LABEL)[6:]: p.product} if p.product else {}),
            }
            add("kube_pod_nodeselectors", {**ids, **selectors})
    for (namespace, kind, name), count in sorted((replicas or {}).items()):
        if kind == "Deployment":
            add("kube_deployment_spec_replicas", {"namespace": namespace, "deployment": name}, count)
        elif kind == "StatefulSet":
            add("kube_statefulset_replicas", {"namespace": namespace, "statefulset": name}, count)
    lines = []
    for family, series in families.items():
        lines.append(f"# TYPE {family} gauge")
        lines.extend(series)
    return "\n".join(lines) + "\n"
