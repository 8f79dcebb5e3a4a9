"""Simulated fleets: nodes of GPUs, each running a workload profile in a pod.

A fleet is described in YAML (docs/simulator.md); the built-in demo fleet is fleets/demo.yaml. GPU
models come from the catalogue (gpulens.core.catalog), so the simulator plays the same H100 the
analyzer prices.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from gpulens.core.catalog import MODELS
from gpulens.core.config import ConfigError, read_yaml
from gpulens.core.pods import PodRef
from gpulens.core.schema import Flag, Integer, Invalid, ListOf, Record, Text

# CPU_LIMIT_CORES lives with the workloads that draw a share of it; the simulated exporter reads it here.
from gpulens.simulator.workloads import CPU_LIMIT_CORES as CPU_LIMIT_CORES
from gpulens.simulator.workloads import PROFILES, SimGpu, profile_params


class FleetError(ConfigError):
    """A fleet file or simulation flag is wrong; the message names the value and the fix."""


@dataclass
class SimNode:
    name: str
    gpus: list[SimGpu]


def _is_pod_ref(value: str) -> bool:
    parts = value.split("/")
    return len(parts) in (2, 3) and all(parts)


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
                    "workloads": ListOf(
                        Record(
                            {
                                "profile": Text(choices=tuple(PROFILES)),
                                "gpus": ListOf(Integer(low=0), single=True),
                                "pod": Text(valid=_is_pod_ref, what="'namespace/name' or 'namespace/name/container'"),
                            },
                            required=("profile",),
                        )
                    ),
                }
            ),
            min_length=1,
        ),
    },
    required=("nodes",),
    what="a fleet",
)


def load_fleet(config: object, default_seed: int = 0) -> list[SimNode]:
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
        assigned: dict[int, tuple[str, PodRef | None, int]] = {}
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
                assigned[index] = (profile, _pod_ref(workload.get("pod")), role)
        gpus = []
        for index in range(count):
            profile, pod, role = assigned.get(index, ("unallocated", None, 0))
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
                )
            )
        nodes.append(SimNode(name, gpus))
    return nodes


def _pod_ref(value: str | None) -> PodRef | None:
    """'namespace/pod' or 'namespace/pod/container' (container defaults to 'main')."""
    if not value:
        return None
    parts = value.split("/")
    return PodRef(parts[0], parts[1], parts[2] if len(parts) == 3 else "main")


def fleet_from_file(path: str | Path, default_seed: int = 0) -> list[SimNode]:
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
