"""Simulated fleets: nodes of GPUs, each running a workload profile in a pod.

A fleet is described in YAML (docs/simulator.md); the built-in demo fleet is fleets/demo.yaml. GPU
models come from the catalogue (gpulens.core.catalog), so the simulator plays the same H100 the
analyzer prices.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpulens.core.catalog import MODELS, GpuModel
from gpulens.core.config import ConfigError, read_yaml
from gpulens.core.pods import PodRef
from gpulens.core.schema import Flag, Integer, Invalid, ListOf, MapOf, Number, Record, Text
from gpulens.simulator.cluster import SimNodeInfo, SimPod, gfd_product, owner_problem
from gpulens.simulator.engines import ENGINES

# CPU_LIMIT_CORES lives with the workloads that draw a share of it; the simulated exporter reads it here.
from gpulens.simulator.workloads import CPU_LIMIT_CORES as CPU_LIMIT_CORES
from gpulens.simulator.workloads import ENGINE_PROFILES, PROFILES, SimGpu, profile_params


class FleetError(ConfigError):
    """A fleet file or simulation flag is wrong; the message names the value and the fix."""


@dataclass
class SimNode:
    name: str
    gpus: list[SimGpu]
    #: The node's pods as the Kubernetes API describes them (kube-state-metrics: simulator/cluster.py).
    pods: list[SimPod] = field(default_factory=list)
    #: The node pool it belongs to ("" none).
    pool: str = ""

    def info(self) -> SimNodeInfo:
        """The node as the Kubernetes API describes it: a GPU fallen off the bus is not offered."""
        # A MIG-enabled GPU is offered as its instances' resources (nvidia.com/mig-<profile>), not as a GPU.
        offered = sum(g.profile != "fallen_off_bus" and not g.mig for g in self.gpus)
        model = self.gpus[0].model.name if self.gpus else ""
        return SimNodeInfo(self.name, gfd_product(model), offered, self.pool)


class Fleet(list[SimNode]):
    """A fleet's nodes, and the pods that wait for a node (`pending`: pods on no node, asking for GPUs)."""

    def __init__(self, nodes: list[SimNode], pending: list[SimPod] | None = None):
        super().__init__(nodes)
        self.pending = pending or []


def _is_pod_ref(value: str) -> bool:
    parts = value.split("/")
    return len(parts) in (2, 3) and all(parts)


def _is_owner_ref(value: str) -> bool:
    kind, _, name = value.partition("/")
    return bool(re.fullmatch(r"[A-Z][A-Za-z0-9]*", kind)) and bool(name) and "/" not in name


#: A fleet file (docs/simulator.md).
FLEET_SCHEMA = Record(
    {
        "seed": Integer(),
        "nodes": ListOf(
            Record(
                {
                    "name": Text(valid=bool, what="a node name"),
                    "model": Text(choices=tuple(MODELS)),
                    "gpus": Integer(1, 64),
                    "profiling": Flag(),
                    "pool": Text(valid=bool, what="a node pool's name"),
                    "workloads": ListOf(
                        Record(
                            {
                                "profile": Text(choices=tuple(PROFILES)),
                                "gpus": ListOf(Integer(low=0), single=True),
                                "pod": Text(valid=_is_pod_ref, what="'namespace/name' or 'namespace/name/container'"),
                                "owner": Text(
                                    valid=_is_owner_ref,
                                    what="'Kind/name': Deployment/chat-api, StatefulSet/jupyter, Job/train, "
                                    "CronJob/nightly, or another controller's (PyTorchJob/llama-ft)",
                                ),
                                "labels": MapOf(Text()),
                                "image": Text(valid=bool, what="an image reference"),
                                "engine": Text(choices=ENGINES),
                                # Its one GPU is MIG-enabled and its pod holds an instance of this profile.
                                "mig": Text(valid=bool, what="a MIG profile of the node's model, as 3g.40gb"),
                                # When its pod runs, in simulated seconds after the fleet starts.
                                "from": Number(low=0, noun="seconds after the fleet starts"),
                                "until": Number(low=0, noun="seconds after the fleet starts"),
                                # Its engine's requests `times` as fast from `from` seconds on, each step
                                # until the next.
                                "traffic": ListOf(
                                    Record(
                                        {
                                            "from": Number(low=0, noun="seconds after the fleet starts"),
                                            "times": Number(low=0, noun="a factor of its requests"),
                                        },
                                        required=("from", "times"),
                                    ),
                                    single=True,
                                ),
                            },
                            required=("profile",),
                        )
                    ),
                }
            ),
            min_length=1,
        ),
        # Pods waiting for a node: GPUs asked, and the pool and model their node selector names.
        "pending": ListOf(
            Record(
                {
                    "pod": Text(valid=_is_pod_ref, what="'namespace/name' or 'namespace/name/container'"),
                    "owner": Text(valid=_is_owner_ref, what="'Kind/name': Job/train, PyTorchJob/llama-ft"),
                    "labels": MapOf(Text()),
                    "image": Text(valid=bool, what="an image reference"),
                    "gpus": Integer(1, 64),
                    "pool": Text(valid=bool, what="a node pool's name"),
                    "model": Text(choices=tuple(MODELS)),
                },
                required=("pod", "gpus"),
            )
        ),
    },
    required=("nodes",),
    what="a fleet",
)


def load_fleet(config: object, default_seed: int = 0) -> Fleet:
    """Build simulated nodes from a fleet description (the YAML format in docs/simulator.md)."""
    try:
        fleet = FLEET_SCHEMA.check(config, "")
    except Invalid as e:
        raise FleetError(str(e)) from None
    seed = fleet.get("seed", default_seed)
    rng = random.Random(seed)
    nodes = []
    for n, node in enumerate(fleet["nodes"]):
        name = node.get("name", f"sim-node-{n + 1}")
        where = f"nodes[{n}] ({name})"
        model = MODELS[node.get("model", "H100-SXM5-80GB")]
        count = node.get("gpus", 8)
        profiling = node.get("profiling", True)
        assigned: dict[int, tuple[str, PodRef | None, int, str]] = {}
        lifetimes: dict[int, dict] = {}
        pods: list[SimPod] = []
        for w, workload in enumerate(node.get("workloads", [])):
            profile = workload["profile"]
            for role, index in enumerate(workload.get("gpus", [])):
                if index >= count:
                    raise FleetError(
                        f"{where}.workloads[{w}]: workload '{profile}' names GPU {index}, but the node has GPUs "
                        f"0-{count - 1}"
                    )
                if index in assigned:
                    raise FleetError(f"{where}.workloads[{w}]: GPU {index} is given two workloads")
                ref, owner = _pod_ref(workload.get("pod")), workload.get("owner", "")
                # Replicas of one controller, on any node, run one engine configuration.
                config = f"{seed}:{ref.namespace}/{owner}" if ref and owner else ""
                assigned[index] = (profile, ref, role, config)
                lifetimes[index] = _lifetime(workload, f"{where}.workloads[{w}]")
                if "mig" in workload:
                    lifetimes[index]["mig"] = _mig_profile(workload, model, f"{where}.workloads[{w}]")
            spec = _sim_pod(workload, name, f"{where}.workloads[{w}]")
            if spec and all((q.namespace, q.pod) != (spec.namespace, spec.pod) for q in pods):
                pods.append(spec)
        gpus = []
        for index in range(count):
            profile, pod, role, config = assigned.get(index, ("unallocated", None, 0, ""))
            uuid = (
                f"GPU-{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-{rng.getrandbits(16):04x}-"
                f"{rng.getrandbits(16):04x}-{rng.getrandbits(48):012x}"
            )
            gpus.append(
                SimGpu(
                    index=index,
                    uuid=uuid,
                    model=model,
                    profile=profile,
                    profiling=profiling,
                    numa_node=0 if index < count / 2 else 1,
                    seed=seed + n * 1000,
                    # Two GPUs per PCIe switch, each switch under its own root complex; SXM models all
                    # on one NVSwitch fabric.
                    pcie_root=index // 2,
                    nvlink_group=0 if model.nvlink_links else None,
                    pod=pod,
                    role=role,
                    base_pid=10000 + 1000 * index + rng.randrange(500),
                    params=profile_params(profile, rng),
                    engine_config=config,
                    **lifetimes.get(index, {}),
                )
            )
        nodes.append(SimNode(name, gpus, pods, node.get("pool", "")))
    pending = []
    for w, waiting in enumerate(fleet.get("pending", [])):
        spec = _sim_pod({**waiting, "profile": "", "gpus": []}, "", f"pending[{w}]")
        assert spec is not None  # a pending pod has its pod
        product = gfd_product(MODELS[waiting["model"]].name) if "model" in waiting else ""
        pending.append(replace(spec, gpus=waiting["gpus"], pool=waiting.get("pool", ""), product=product))
    return Fleet(nodes, pending)


def _lifetime(workload: dict, where: str) -> dict:
    """SimGpu's `runs` and traffic fields from a workload's `from`, `until` and `traffic`; FleetError where
    they cannot hold."""
    runs = (float(workload.get("from", 0.0)), float(workload.get("until", math.inf)))
    if runs[0] >= runs[1]:
        raise FleetError(f"{where}.until: {runs[1]:g} is not after from ({runs[0]:g}): its pod would never run")
    if ("from" in workload or "until" in workload) and "pod" not in workload:
        raise FleetError(f"{where}: from and until say when a pod runs; give the workload a pod")
    out: dict = {"runs": runs}
    if "traffic" in workload:
        if workload["profile"] != "vllm_replica":
            raise FleetError(f"{where}.traffic: only a vllm_replica's requests are drawn at a rate; use that profile")
        steps = sorted((float(step["from"]), float(step["times"])) for step in workload["traffic"])
        out["traffic"] = tuple(steps)
    return out


def _mig_profile(workload: dict, model: GpuModel, where: str) -> str:
    """The MIG profile a workload's instance has; FleetError where its GPU cannot hold one."""
    offered = [p.name for p in model.mig_profiles]
    if workload["mig"] not in offered:
        raise FleetError(
            f"{where}.mig: {model.name} has no MIG profile {workload['mig']!r}; "
            + (f"it offers {', '.join(offered)}" if offered else "it has no MIG: give the workload a whole GPU")
        )
    if len(workload.get("gpus", [])) != 1:
        raise FleetError(f"{where}.mig: a MIG instance is a slice of one GPU; give the workload one GPU")
    return str(workload["mig"])


def _sim_pod(workload: dict, node: str, where: str) -> SimPod | None:
    """The workload's pod as Kubernetes describes it (None without a pod); FleetError where its owner
    cannot have a pod of that name."""
    ref = _pod_ref(workload.get("pod"))
    if ref is None:
        for key in ("owner", "labels", "image", "engine"):
            if key in workload:
                raise FleetError(f"{where}.{key}: a workload without a pod has no {key}; give it a pod")
        return None
    kind, _, owner = workload.get("owner", "").partition("/")
    problem = owner_problem(ref.pod, kind, owner)
    if problem:
        raise FleetError(f"{where}.pod: {ref.pod!r} cannot be a pod of {kind} {owner}: {problem}")
    engine = workload.get("engine", "")
    if engine and not workload.get("gpus"):
        raise FleetError(f"{where}.engine: an engine serves from its pod's GPUs; give the workload gpus")
    if engine and workload["profile"] not in ENGINE_PROFILES:
        raise FleetError(
            f"{where}.engine: profile '{workload['profile']}' serves no requests; an engine runs "
            f"{', '.join(ENGINE_PROFILES)}"
        )
    labels, image = workload.get("labels", {}), workload.get("image", "")
    gpus = len(workload.get("gpus", []))
    return SimPod(
        ref.namespace,
        ref.pod,
        ref.container,
        node,
        kind,
        owner,
        labels,
        image,
        engine,
        gpus,
        mig=workload.get("mig", ""),
    )


def _pod_ref(value: str | None) -> PodRef | None:
    """'namespace/pod' or 'namespace/pod/container' (container defaults to 'main')."""
    if not value:
        return None
    parts = value.split("/")
    return PodRef(parts[0], parts[1], parts[2] if len(parts) == 3 else "main")


def fleet_from_file(path: str | Path, default_seed: int = 0) -> Fleet:
    try:
        return load_fleet(read_yaml(path, "--simulate.config"), default_seed)
    except FleetError as e:
        raise FleetError(f"--simulate.config {path}: {e}") from e


def fleet_from_flags(gpus: int, model: str, profiles: list[str], seed: int) -> list[SimNode]:
    """One node with `gpus` GPUs of `model`, profiles assigned round-robin, one pod per GPU."""
    workloads = [
        {
            "profile": profiles[i % len(profiles)],
            "gpus": [i],
            "pod": f"sim/{profiles[i % len(profiles)].replace('_', '-')}-{i}",
        }
        for i in range(gpus)
    ]
    return load_fleet(
        {"seed": seed, "nodes": [{"name": "sim-node-1", "model": model, "gpus": gpus, "workloads": workloads}]}
    )


DEFAULT_FLEET = Path(__file__).resolve().parent / "fleets" / "demo.yaml"
