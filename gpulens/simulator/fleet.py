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
from gpulens.simulator.workloads import PROFILES, SimGpu, profile_params

#: CPU limit of every simulated pod, in cores.
CPU_LIMIT_CORES = 4.0


class FleetError(ConfigError):
    """A fleet file or simulation flag is wrong; the message names the value and the fix."""


@dataclass
class SimNode:
    name: str
    gpus: list[SimGpu]


def load_fleet(config: dict, default_seed: int = 0) -> list[SimNode]:
    """Build simulated nodes from a fleet description (the YAML format in docs/simulator.md)."""
    if not isinstance(config, dict) or not isinstance(config.get("nodes"), list) or not config["nodes"]:
        raise FleetError("the fleet must have a non-empty 'nodes' list")
    seed = int(config.get("seed", default_seed))
    rng = random.Random(seed)
    nodes = []
    for n, node in enumerate(config["nodes"]):
        where = f"node {n + 1}"
        if not isinstance(node, dict):
            raise FleetError(f"{where}: expected a mapping with name, model, gpus and workloads")
        name = str(node.get("name", f"sim-node-{n + 1}"))
        where = f"node '{name}'"
        model_key = node.get("model", "H100-SXM5-80GB")
        if model_key not in MODELS:
            raise FleetError(f"{where}: unknown GPU model '{model_key}'; choose one of {', '.join(MODELS)}")
        model = MODELS[model_key]
        count = node.get("gpus", 8)
        if not isinstance(count, int) or not 1 <= count <= 64:
            raise FleetError(f"{where}: 'gpus' must be a whole number from 1 to 64, got {count!r}")
        profiling = bool(node.get("profiling", True))
        assigned: dict[int, tuple[str, PodRef | None, int]] = {}
        for workload in node.get("workloads", []) or []:
            profile = workload.get("profile") if isinstance(workload, dict) else None
            if profile not in PROFILES:
                raise FleetError(f"{where}: unknown workload profile {profile!r}; choose one of {', '.join(PROFILES)}")
            indices = workload.get("gpus", [])
            if isinstance(indices, int):
                indices = [indices]
            for role, index in enumerate(indices):
                if not isinstance(index, int) or not 0 <= index < count:
                    raise FleetError(
                        f"{where}: workload '{profile}' names GPU {index!r}, but the node has GPUs 0-{count - 1}"
                    )
                if index in assigned:
                    raise FleetError(f"{where}: GPU {index} is given two workloads")
                assigned[index] = (profile, _pod_ref(workload.get("pod"), where), role)
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


def _pod_ref(value: object, where: str) -> PodRef | None:
    """'namespace/pod' or 'namespace/pod/container' (container defaults to 'main')."""
    if value in (None, ""):
        return None
    parts = str(value).split("/")
    if len(parts) not in (2, 3) or not all(parts):
        raise FleetError(f"{where}: pod {value!r} must be 'namespace/name' or 'namespace/name/container'")
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
