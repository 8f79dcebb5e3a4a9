"""What each workload is: a notebook, a serving replica (with its engine where known), a job (training or
batch), or unknown, from what Kubernetes says of its pod rather than from its GPU series.

Read from kube-state-metrics (analyzer/inputs/owners.py reads the series): the pod's controller (kube_pod_owner,
through ReplicaSets to Deployments and Jobs to CronJobs), its labels (kube_pod_labels: only those its
--metric-labels-allowlist exports; by default none) and its containers' images (kube_pod_container_info).
Rules are tried in order, the first that matches names the kind; a settings file's rules come before the
defaults (`DEFAULT_RULES`), so a platform team names its own stacks. The engine is the first serving
engine whose image the pod runs, whatever rule named the kind.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from gpulens.core.config import ConfigError, read_yaml
from gpulens.core.schema import ListOf, MapOf, Record, Text, validate

#: A pod's identity in a store or the cluster: (namespace, pod).
PodKey = tuple[str, str]

Kind = Literal["notebook", "serving", "job", "unknown"]
KINDS: tuple[Kind, ...] = ("notebook", "serving", "job", "unknown")


@dataclass(frozen=True)
class PodFacts:
    """What kube-state-metrics says of a pod: its workload's kind (Deployment, Job, ...; "" unknown), its
    labels (Kubernetes keys, as the allow-list exports them) and its containers' images."""

    owner_kind: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    images: tuple[str, ...] = ()


@dataclass(frozen=True)
class KindRule:
    """A kind for the pods that match: every label given (value "*": any value), an image matching the glob
    (on the image without its registry's scheme: `*vllm-openai*`), or an owner of one of the kinds."""

    kind: Kind
    labels: dict[str, str] = field(default_factory=dict)
    image: str = ""
    owner_kinds: tuple[str, ...] = ()

    def matches(self, pod: PodFacts) -> bool:
        if self.labels and not all(
            key in pod.labels and value in ("*", pod.labels[key]) for key, value in self.labels.items()
        ):
            return False
        if self.image and not any(fnmatch.fnmatchcase(image, self.image) for image in pod.images):
            return False
        if self.owner_kinds and pod.owner_kind not in self.owner_kinds:
            return False
        return bool(self.labels or self.image or self.owner_kinds)

    def says(self, pod: PodFacts) -> str:
        """What of the pod matched, as the evidence names it: `label component=singleuser-server`,
        `image vllm/vllm-openai:v0.6.3`, `owner CronJob`."""
        parts = [f"label {k}={pod.labels[k]}" for k in self.labels]
        if self.image:
            parts.append(f"image {next(i for i in pod.images if fnmatch.fnmatchcase(i, self.image))}")
        parts += [f"owner {pod.owner_kind}"] if self.owner_kinds else []
        return ", ".join(parts)


@dataclass(frozen=True)
class WorkloadKind:
    """A workload's kind, its serving engine ("" where none is known) and what said so ("" for unknown)."""

    kind: Kind = "unknown"
    engine: str = ""
    source: str = ""


#: Nothing says what the workload is.
UNKNOWN = WorkloadKind()


#: Serving engines by the image their pods run (the images their projects publish).
ENGINE_IMAGES: tuple[tuple[str, str], ...] = (
    ("vllm", "*vllm*"),  # vllm/vllm-openai
    ("tgi", "*text-generation-inference*"),  # ghcr.io/huggingface/text-generation-inference
    ("triton", "*tritonserver*"),  # nvcr.io/nvidia/tritonserver (TensorRT-LLM runs in it)
    ("sglang", "*sglang*"),  # lmsysorg/sglang
)

#: Controllers whose pods run to completion: batch/v1 and the training operators' (Kubeflow, Ray, Volcano).
JOB_OWNERS = (
    "Job",
    "CronJob",
    "PyTorchJob",
    "TFJob",
    "MPIJob",
    "XGBoostJob",
    "PaddleJob",
    "JAXJob",
    "TrainJob",
    "RayJob",
)

#: The common stacks, most specific first.
DEFAULT_RULES: tuple[KindRule, ...] = (
    # JupyterHub's KubeSpawner labels each user server so; Kubeflow's notebook controller, its pods.
    KindRule("notebook", labels={"component": "singleuser-server"}),
    KindRule("notebook", labels={"notebook-name": "*"}),
    KindRule("job", owner_kinds=JOB_OWNERS),
    # Kueue and Volcano queue batch workloads; the training operators label their pods.
    KindRule("job", labels={"kueue.x-k8s.io/queue-name": "*"}),
    KindRule("job", labels={"volcano.sh/job-name": "*"}),
    KindRule("job", labels={"training.kubeflow.org/job-name": "*"}),
    KindRule("serving", labels={"serving.kserve.io/inferenceservice": "*"}),
    *(KindRule("serving", image=glob) for _, glob in ENGINE_IMAGES),
    KindRule("notebook", image="*jupyter*"),
    KindRule("notebook", image="*-notebook*"),
    # A Deployment keeps its replicas running whatever they do: serving, short of a label or image that says
    # otherwise. StatefulSets run notebooks and servers alike: no kind from them alone.
    KindRule("serving", owner_kinds=("Deployment",)),
)


#: The engines gpulens knows.
ENGINES = tuple(engine for engine, _ in ENGINE_IMAGES)


def engine_of(images: Iterable[str]) -> str:
    """The serving engine the images run, or ""."""
    for engine, glob in ENGINE_IMAGES:
        if any(fnmatch.fnmatchcase(image, glob) for image in images):
            return engine
    return ""


def kind_of(pod: PodFacts, rules: Sequence[KindRule] = DEFAULT_RULES) -> WorkloadKind:
    """The first rule's kind that matches, with the engine the pod's images run where it serves."""
    for rule in rules:
        if rule.matches(pod):
            return WorkloadKind(rule.kind, engine_of(pod.images) if rule.kind == "serving" else "", rule.says(pod))
    return UNKNOWN


def label_keys(rules: Iterable[KindRule]) -> set[str]:
    """The Kubernetes label keys the rules read (kube_pod_labels is asked for these alone)."""
    return {key for rule in rules for key in rule.labels}


_RULE = Record(
    {
        "kind": Text(choices=KINDS),
        "labels": MapOf(Text()),
        "image": Text(valid=bool, what="a glob on the image, as *vllm-openai*"),
        "owner_kinds": ListOf(Text(valid=bool, what="a controller's kind, as Deployment"), single=True),
    },
    required=("kind",),
    what="a rule",
)
_POOLS = Record(
    {
        "label": Text(valid=bool, what="a node label key, as karpenter.sh/nodepool"),
        "for_kinds": MapOf(Text(valid=bool, what="a pool's name"), key=Text(choices=KINDS[:-1])),
    },
    what="pools",
)
_SETTINGS = Record({"workload_kinds": ListOf(_RULE), "pools": _POOLS}, what="the analyzer's settings")


@dataclass(frozen=True)
class Pools:
    """Where each kind of workload belongs: the node label that names a node's pool ("": the first of
    analyzer/cluster.POOL_LABELS a node carries) and the pool meant for each kind (`for_kinds`: serving ->
    inference; a kind not named may run on any pool)."""

    label: str = ""
    for_kinds: dict[str, str] = field(default_factory=dict)


def load_pools(path: str) -> Pools:
    """The settings file's `pools` (none without a file). ConfigError naming the key and the fix."""
    if not path:
        return Pools()
    document = validate(read_yaml(path, "--analysis.config"), _SETTINGS, f"--analysis.config {path}", empty={})
    pools = document.get("pools", {})
    return Pools(pools.get("label", ""), dict(pools.get("for_kinds", {})))


def load_rules(path: str) -> tuple[KindRule, ...]:
    """The settings file's `workload_kinds` rules, then DEFAULT_RULES (the defaults alone without a file).
    ConfigError naming the key and the fix."""
    if not path:
        return DEFAULT_RULES
    document = validate(read_yaml(path, "--analysis.config"), _SETTINGS, f"--analysis.config {path}", empty={})
    rules = []
    for i, entry in enumerate(document.get("workload_kinds", [])):
        rule = KindRule(
            entry["kind"], entry.get("labels", {}), entry.get("image", ""), tuple(entry.get("owner_kinds", ()))
        )
        if not (rule.labels or rule.image or rule.owner_kinds):
            raise ConfigError(
                f"--analysis.config {path}: workload_kinds[{i}]: a rule needs labels, an image or owner_kinds to "
                "match; without one it would match every pod"
            )
        rules.append(rule)
    return (*rules, *DEFAULT_RULES)
