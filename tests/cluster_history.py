"""A constructed cluster, four hours at one minute, whose waits and stranded GPUs are worked by hand
(tests/test_cluster.py), as a store holds it: kube-state-metrics' series and gpulens' GPU series.

Pool `training` (node label node-pool, GPU feature discovery's NVIDIA-A100-SXM4-80GB): four nodes of 8 GPUs.
Pool `inference` (NVIDIA-L4): two nodes of 4. Steps 0-239, START + i minutes:

    node  pods (GPUs)                                          free
    t1    ml/trainer-a (4), ml/trainer-b (2; deleted at 200)   2, 4 from step 200
    t2    ml/trainer-c (6; Succeeded at 150), then             2; 8 at step 150; 0 from 151
          research/train-big-0 (8) from step 151
    t3    ml/trainer-d (2), ml/trainer-e (2), ml/trainer-g (1) 3
    t4    ml/trainer-f (4), serve/chat-7d9f8-h4k2p (1)         3
    i1    serve/chat-7d9f8-q8z2m (1)                           3
    i2    -                                                    4

research/train-big-0 (a Job's pod, 8 GPUs, its node selector naming pool and model) is created at step 30
and waits to step 150: 10 GPUs free in training on four nodes (3 + 3 + 2 + 2), none with 8.
research/train-huge-0 asks 16 from step 60 to the end: no node offers 16. The chat replica on t4 is a
Deployment's (serving) on the training pool while inference has room. research has a GPU quota (24); ml and
serve have none.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from gpulens.analyzer.inputs import frame as fr
from tests.store_history import Families, _labels, series_lines

#: 2025-12-01T00:00:00Z.
START = 1_764_547_200.0
STEP = 60.0
STEPS = 240
TRAINING = "NVIDIA-A100-SXM4-80GB"
INFERENCE = "NVIDIA-L4"
NODES = {"t1": ("training", 8), "t2": ("training", 8), "t3": ("training", 8), "t4": ("training", 8)}
NODES |= {"i1": ("inference", 4), "i2": ("inference", 4)}
PRODUCTS = {"training": TRAINING, "inference": INFERENCE}
#: What the report's settings say: the node label of pools, and the pool meant for each kind.
SETTINGS = "pools:\n  label: node-pool\n  for_kinds:\n    serving: inference\n    job: training\n"


@dataclass(frozen=True)
class Pod:
    """A pod: GPUs asked; the steps it exists (first to last, inclusive); the step it is scheduled (None:
    never); its node; the step it Succeeded (None: never); its owner; its GPUs' indices on the node."""

    namespace: str
    pod: str
    gpus: int
    first: int
    last: int
    scheduled: int | None
    node: str
    owner: tuple[str, str]
    indices: tuple[int, ...] = ()
    succeeded: int | None = None
    created: float | None = None


PODS = (
    Pod("ml", "trainer-a", 4, 0, 239, 0, "t1", ("Job", "trainer-a"), (0, 1, 2, 3)),
    Pod("ml", "trainer-b", 2, 0, 199, 0, "t1", ("Job", "trainer-b"), (4, 5)),
    Pod("ml", "trainer-c", 6, 0, 239, 0, "t2", ("Job", "trainer-c"), (0, 1, 2, 3, 4, 5), succeeded=150),
    Pod("ml", "trainer-d", 2, 0, 239, 0, "t3", ("Job", "trainer-d"), (0, 1)),
    Pod("ml", "trainer-e", 2, 0, 239, 0, "t3", ("Job", "trainer-e"), (2, 3)),
    Pod("ml", "trainer-g", 1, 0, 239, 0, "t3", ("Job", "trainer-g"), (4,)),
    Pod("ml", "trainer-f", 4, 0, 239, 0, "t4", ("Job", "trainer-f"), (0, 1, 2, 3)),
    Pod("serve", "chat-7d9f8-h4k2p", 1, 0, 239, 0, "t4", ("ReplicaSet", "chat-7d9f8"), (4,)),
    Pod("serve", "chat-7d9f8-q8z2m", 1, 0, 239, 0, "i1", ("ReplicaSet", "chat-7d9f8"), (0,)),
    Pod("research", "train-big-0", 8, 30, 239, 151, "t2", ("Job", "train-big"), tuple(range(8)), created=START + 1800),
    Pod("research", "train-huge-0", 16, 60, 239, None, "", ("Job", "train-huge"), created=START + 3600),
)
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
KSM = {"job": "kube-state-metrics", "instance": "10.0.9.3:8080"}


def _phase(pod: Pod, step: int) -> str:
    if pod.succeeded is not None and step >= pod.succeeded:
        return "Succeeded"
    return "Running" if pod.scheduled is not None and step >= pod.scheduled else "Pending"


def kube_state_metrics() -> Families:
    """kube-state-metrics' series of the cluster, every step each object exists."""
    out: Families = {}

    def add(name: str, labels: dict[str, str], at: int, value: float) -> None:
        out.setdefault(name, []).append((_labels({**labels, **KSM}), START + at * STEP, value))

    for node, (pool, gpus) in NODES.items():
        for i in range(STEPS):
            add(
                "kube_node_status_allocatable", {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"}, i, gpus
            )
            add("kube_node_spec_unschedulable", {"node": node}, i, 0)
            labels = {"node": node, "label_node_pool": pool, "label_nvidia_com_gpu_product": PRODUCTS[pool]}
            add("kube_node_labels", labels, i, 1)
    for pod in PODS:
        ids = {"namespace": pod.namespace, "pod": pod.pod, "uid": f"uid-{pod.pod}"}
        kind, name = pod.owner
        for i in range(pod.first, pod.last + 1):
            node = pod.node if pod.scheduled is not None and i >= pod.scheduled else ""
            request = {**ids, "container": "main", "node": node, "resource": "nvidia_com_gpu", "unit": "integer"}
            add("kube_pod_container_resource_requests", request, i, pod.gpus)
            for phase in PHASES:
                add("kube_pod_status_phase", {**ids, "phase": phase}, i, float(_phase(pod, i) == phase))
            add("kube_pod_created", ids, i, pod.created if pod.created is not None else START - 3600)
            owner = {**ids, "owner_kind": kind, "owner_name": name, "owner_is_controller": "true"}
            add("kube_pod_owner", owner, i, 1)
            if pod.pod == "train-big-0":  # its node selector (kube_pod_nodeselectors, opt-in): pool and model
                selectors = {"nodeselector_node_pool": "training", "nodeselector_nvidia_com_gpu_product": TRAINING}
                add("kube_pod_nodeselectors", {**ids, **selectors}, i, 1)
    for i in range(STEPS):
        add(
            "kube_replicaset_owner",
            {
                "namespace": "serve",
                "replicaset": "chat-7d9f8",
                "owner_kind": "Deployment",
                "owner_name": "chat",
                "owner_is_controller": "true",
            },
            i,
            1,
        )
        for kind in ("hard", "used"):
            quota = {"namespace": "research", "resourcequota": "gpus", "resource": "requests.nvidia.com/gpu"}
            used = sum(p.gpus for p in PODS if p.namespace == "research" and p.first <= i <= p.last)
            add("kube_resourcequota", {**quota, "type": kind}, i, 24 if kind == "hard" else used)
    return out


def gpu_trace() -> pd.DataFrame:
    """Every GPU's samples as gpulens' exporter reports them: a pod's GPU busy (90% utilization, 70% SM
    activity, 40 GiB), a free GPU idle and empty."""
    rows = []
    for node, (pool, count) in NODES.items():
        model = PRODUCTS[pool].replace("NVIDIA-", "NVIDIA ")
        for index in range(count):
            for i in range(STEPS):
                holder = next(
                    (
                        p
                        for p in PODS
                        if p.node == node
                        and index in p.indices
                        and p.scheduled is not None
                        and max(p.first, p.scheduled) <= i <= p.last
                        and (p.succeeded is None or i < p.succeeded)
                    ),
                    None,
                )
                rows.append(
                    {
                        "timestamp": START + i * STEP,
                        "gpu": f"GPU-{node}-{index}",
                        "node": node,
                        "gpu_model": model,
                        "namespace": holder.namespace if holder else "",
                        "pod": holder.pod if holder else "",
                        "container": "main" if holder else "",
                        "gpu_util": 0.9 if holder else 0.0,
                        "sm_active": 0.7 if holder else 0.0,
                        "memory_used_bytes": 10 * 2**30 if holder else 0.0,
                        "memory_total_bytes": 80 * 2**30 if pool == "training" else 24 * 2**30,
                        "power_watts": 300.0 if holder else 60.0,
                    }
                )
    return fr.normalize(pd.DataFrame(rows))


def families() -> Families:
    """kube-state-metrics' series, and the GPUs' as gpulens' exporter (job="gpulens") and as NVIDIA
    dcgm-exporter under the GPU Operator (job="dcgm-exported": the pod's labels on every value series)."""
    out = kube_state_metrics()
    trace = gpu_trace()
    for layout in ("gpulens", "dcgm-exported"):
        for name, samples in series_lines(trace, layout).items():
            out.setdefault(name, []).extend(samples)
    return out
