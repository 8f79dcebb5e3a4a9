"""A simulated node: GPUs that run named workload profiles, for the demo, tests and evaluation.

Each profile is a pure function of time that returns what NVML (or DCGM) would report, averaged over
the sample window the way the driver averages (utilization is "fraction of the last period in which a
kernel ran"). Because profiles are functions of time, not of a running loop, the analyzer's evaluator
can replay hours of a profile in milliseconds, and a live exporter sees the same shapes in real time.

The shapes follow ../shared/guide/SIGNALS.md:

healthy_training     SM active ~0.88, tensor pipes busy, memory steady, clocks at max.
data_starvation      each iteration a compute burst then a gap waiting for input: SM activity swings
                     between ~0.85 and ~0; PCIe host-to-device spikes at each burst start.
memory_bandwidth     DRAM active ~0.78 (near the practical peak 0.8) while tensor/FP pipes idle;
                     SM active stays fairly high because warps waiting on memory count as active.
memory_fragmentation memory climbs in a sawtooth of allocation churn to the limit, the process is
                     OOM-killed and restarts (new PID), and the cycle repeats.
idle                 allocated, a process holds a CUDA context, no kernel runs; clocks at idle.
memory_held          memory in use and no process at all (a job's leftovers).
interconnect         NVLink (or PCIe where there is none) near link capacity, SM and tensor low.
thermal_throttling   busy, hot, hw/sw thermal clock-event bits set, SM clock ~60% of max.
light_inference      sparse small requests on a big GPU: activity ~0.1, a few GB of memory.
poor_placement       one job on GPUs that share no NVLink and sit across CPU sockets; one GPU much
                     busier than the other, heavy PCIe traffic for the exchange.
unallocated          no workload at all.
"""
from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

from gpulens.core import metrics as m
from gpulens.exporter.attribution.attributor import Attribution, AttributionState
from gpulens.exporter.attribution.kubelet import DeviceRef
from gpulens.core.pods import PodRef
from gpulens.exporter.sources.base import DeviceSample, NodeSample, ProcessSample, Source
from gpulens.core.status import CollectorStatus
from gpulens.core.config import ConfigError, read_yaml

MIB = 1024**2
GIB = 1024**3
GB = 1e9


@dataclass(frozen=True)
class GpuModel:
    """Datasheet figures the simulator needs. Link rates are bytes per second per direction."""

    name: str  # as NVML reports it
    memory_total_bytes: int
    memory_reserved_bytes: int
    sm_clock_max_mhz: int
    memory_clock_mhz: int
    power_limit_watts: float
    idle_power_watts: float
    nvlink_links: int
    nvlink_link_bytes_per_second: float
    pcie_generation: int
    pcie_width: int
    has_gpm: bool  # Hopper and newer: NVML GPM gives SM activity without DCGM

    @property
    def pcie_bytes_per_second(self) -> float:
        """Usable PCIe bandwidth per direction (NVIDIA: Gen3 0.985 GB/s per lane, doubling per gen)."""
        return 0.985 * GB * 2 ** (self.pcie_generation - 3) * self.pcie_width


GPU_MODELS: dict[str, GpuModel] = {
    "H100-SXM5-80GB": GpuModel("NVIDIA H100 80GB HBM3", 81559 * MIB, 329 * MIB, 1980, 2619, 700, 72,
                               18, 25 * GB, 5, 16, True),
    "A100-SXM4-80GB": GpuModel("NVIDIA A100-SXM4-80GB", 81920 * MIB, 431 * MIB, 1410, 1593, 400, 60,
                               12, 25 * GB, 4, 16, False),
    "A100-SXM4-40GB": GpuModel("NVIDIA A100-SXM4-40GB", 40960 * MIB, 431 * MIB, 1410, 1215, 400, 55,
                               12, 25 * GB, 4, 16, False),
    "A100-PCIE-40GB": GpuModel("NVIDIA A100-PCIE-40GB", 40960 * MIB, 431 * MIB, 1410, 1215, 250, 40,
                               0, 0, 4, 16, False),
    "L40S": GpuModel("NVIDIA L40S", 46068 * MIB, 513 * MIB, 2520, 9001, 350, 35, 0, 0, 4, 16, False),
    "T4": GpuModel("Tesla T4", 15360 * MIB, 255 * MIB, 1590, 5000, 70, 10, 0, 0, 3, 16, False),
}


@dataclass
class Activity:
    """What a workload does to one GPU over one sample window. Ratios are 0-1; memory_fraction is
    of usable memory; link rates are bytes per second; clock_fraction is SM clock / max."""

    busy: float = 0.0
    sm_active: float = 0.0
    sm_occupancy: float = 0.0
    tensor: float = 0.0
    dram: float = 0.0
    fp16: float = 0.0
    fp32: float = 0.0
    fp64: float = 0.0
    memory_fraction: float = 0.0
    pcie_tx: float = 0.0
    pcie_rx: float = 0.0
    nvlink_tx: float = 0.0
    nvlink_rx: float = 0.0
    power_fraction: float = 0.0  # 0 = idle power, 1 = power limit
    temperature_celsius: float = 32.0
    clock_fraction: float = 1.0
    reasons: int = 0
    process: bool = False
    restarts: int = 0  # how many times the process was replaced (it gets a new PID)
    #: XID events per second, and their code; the source counts them like NVML's event watcher.
    xid_rate: float = 0.0
    xid: int = 0
    #: The GPU no longer answers (NVML_ERROR_GPU_IS_LOST): the exporter keeps only gpulens_gpu_up 0.
    lost: bool = False
    #: CPU use of the pod's containers as a fraction of its CPU limit (the simulated kubelet's cAdvisor).
    cpu_fraction: float = 0.3


def duty(t: float, window: float, period: float, on: float, phase: float = 0.0) -> float:
    """Fraction of [t - window, t] inside the 'on' part of a square wave (on for `on` seconds of
    every `period`, shifted by `phase`). Exact, so no aliasing against the sampler."""

    def cumulative(x: float) -> float:
        x += phase
        return math.floor(x / period) * on + min(x % period, on)

    return (cumulative(t) - cumulative(t - window)) / window


@dataclass
class SimGpu:
    """One simulated GPU and the workload on it."""

    index: int
    uuid: str
    model: GpuModel
    profile: str
    profiling: bool  # SM/tensor/DRAM activity available (GPM on Hopper, or DCGM beside it)
    numa_node: int
    seed: int
    pod: PodRef | None = None  # the pod the workload runs in
    role: int = 0  # position within a multi-GPU job (0 = first GPU)
    base_pid: int = 0
    params: dict[str, float] = field(default_factory=dict)

    def noise(self, t: float, scale: float, salt: int = 0) -> float:
        """Deterministic noise in [-scale, scale], the same for the same GPU, time and salt."""
        r = random.Random(f"{self.seed}:{self.index}:{salt}:{int(t * 4)}").random()
        return (2 * r - 1) * scale


def _healthy(g: SimGpu, t: float, w: float) -> Activity:
    sm = 0.88 + g.noise(t, 0.03)
    return Activity(busy=1.0, sm_active=sm, sm_occupancy=0.48 + g.noise(t, 0.04, 1),
                    tensor=0.58 + g.noise(t, 0.05, 2), dram=0.42 + g.noise(t, 0.04, 3),
                    fp16=0.30, fp32=0.12, memory_fraction=g.params["memory"],
                    pcie_rx=0.04 * g.model.pcie_bytes_per_second, pcie_tx=0.01 * g.model.pcie_bytes_per_second,
                    nvlink_tx=0.15 * g.model.nvlink_link_bytes_per_second * g.model.nvlink_links,
                    nvlink_rx=0.15 * g.model.nvlink_link_bytes_per_second * g.model.nvlink_links,
                    power_fraction=0.85 + g.noise(t, 0.05, 4), temperature_celsius=66 + g.noise(t, 2, 5),
                    process=True)


def _data_starvation(g: SimGpu, t: float, w: float) -> Activity:
    period, burst, phase = g.params["period"], g.params["burst"], g.params["phase"]
    on = duty(t, w, period, burst, phase)
    # Host-to-device copies spike in the first 0.2 s of each burst.
    spike = duty(t, w, period, 0.2, phase)
    pcie = g.model.pcie_bytes_per_second
    return Activity(busy=on, sm_active=0.86 * on, sm_occupancy=0.45 * on, tensor=0.55 * on, dram=0.40 * on,
                    fp16=0.28 * on, fp32=0.10 * on, memory_fraction=g.params["memory"],
                    pcie_rx=0.7 * pcie * spike + 0.01 * pcie, pcie_tx=0.005 * pcie,
                    power_fraction=0.15 + 0.7 * on, temperature_celsius=52 + 8 * on,
                    reasons=0 if on > 0 else 0x1, process=True,
                    cpu_fraction=0.97 + g.noise(t, 0.02, 6))  # the input pipeline sits at its CPU limit


def _xid_errors(g: SimGpu, t: float, w: float) -> Activity:
    # Healthy training on a GPU whose driver records row-remapping events (XID 63) twice a minute.
    a = _healthy(g, t, w)
    a.xid, a.xid_rate = 63, 1 / 30
    return a


def _fallen_off_bus(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(lost=True)


def _memory_bandwidth(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(busy=1.0, sm_active=0.72 + g.noise(t, 0.03), sm_occupancy=0.22, tensor=0.03,
                    dram=0.79 + g.noise(t, 0.02, 1), fp32=0.12, fp16=0.02,
                    memory_fraction=g.params["memory"], pcie_rx=0.02 * g.model.pcie_bytes_per_second,
                    power_fraction=0.75, temperature_celsius=63, process=True)


def _memory_fragmentation(g: SimGpu, t: float, w: float) -> Activity:
    # Memory climbs from 60% to the limit over `cycle` seconds with allocation churn, then the
    # process dies (OOM) and is restarted after `down` seconds of nothing.
    cycle, down = g.params["cycle"], 10.0
    run = t + g.params["phase"]
    generation, position = divmod(run, cycle + down)
    if position >= cycle:
        return Activity(memory_fraction=0.0, restarts=int(generation) + 1, reasons=0x1,
                        clock_fraction=0.2, temperature_celsius=45)
    churn = 0.03 * math.sin(position * 2 * math.pi / 7.0)
    memory = min(0.6 + 0.39 * position / cycle + churn, 0.995)
    return Activity(busy=0.9, sm_active=0.62 + g.noise(t, 0.05), sm_occupancy=0.35, tensor=0.35, dram=0.35,
                    fp16=0.2, fp32=0.1, memory_fraction=memory,
                    pcie_rx=0.05 * g.model.pcie_bytes_per_second, power_fraction=0.6,
                    temperature_celsius=60, process=True, restarts=int(generation))


def _idle(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(memory_fraction=g.params["context_memory"], power_fraction=0.0,
                    temperature_celsius=33 + g.noise(t, 1), clock_fraction=0.12, reasons=0x1, process=True,
                    cpu_fraction=0.01)


def _memory_held(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(memory_fraction=g.params["memory"], power_fraction=0.02, temperature_celsius=34,
                    clock_fraction=0.12, reasons=0x1, process=False)


def _interconnect(g: SimGpu, t: float, w: float) -> Activity:
    links = g.model.nvlink_links * g.model.nvlink_link_bytes_per_second
    a = Activity(busy=0.95, sm_active=0.24 + g.noise(t, 0.03), sm_occupancy=0.12, tensor=0.08, dram=0.22,
                 fp16=0.05, fp32=0.05, memory_fraction=g.params["memory"], power_fraction=0.45,
                 temperature_celsius=55, process=True)
    if links:
        a.nvlink_tx = a.nvlink_rx = 0.9 * links
        a.pcie_rx = 0.02 * g.model.pcie_bytes_per_second
    else:
        a.pcie_tx = a.pcie_rx = 0.9 * g.model.pcie_bytes_per_second
    return a


def _thermal_throttling(g: SimGpu, t: float, w: float) -> Activity:
    a = _healthy(g, t, w)
    a.clock_fraction = 0.6 + g.noise(t, 0.03, 9)
    a.temperature_celsius = 89 + g.noise(t, 1.5, 5)
    a.reasons = 0x40 | 0x20  # hw_thermal | sw_thermal
    a.sm_active *= 0.95
    return a


def _light_inference(g: SimGpu, t: float, w: float) -> Activity:
    # Requests of ~60 ms arrive about twice a second.
    on = duty(t, w, 0.5, 0.06, g.params["phase"])
    return Activity(busy=min(1.0, on * 1.1), sm_active=0.55 * on + 0.01, sm_occupancy=0.2 * on,
                    tensor=0.2 * on, dram=0.1 * on, fp16=0.2 * on, memory_fraction=g.params["memory"],
                    pcie_rx=0.005 * g.model.pcie_bytes_per_second, power_fraction=0.08,
                    temperature_celsius=40, clock_fraction=0.9, process=True)


def _poor_placement(g: SimGpu, t: float, w: float) -> Activity:
    # The first GPU of the job does the work; the others wait on exchanges over PCIe across sockets.
    level = 0.85 if g.role == 0 else 0.3
    a = Activity(busy=1.0 if g.role == 0 else 0.6, sm_active=level + g.noise(t, 0.03), sm_occupancy=0.4 * level,
                 tensor=0.6 * level, dram=0.4 * level, fp16=0.3 * level, memory_fraction=g.params["memory"],
                 pcie_tx=0.45 * g.model.pcie_bytes_per_second, pcie_rx=0.45 * g.model.pcie_bytes_per_second,
                 power_fraction=0.8 * level, temperature_celsius=50 + 15 * level, process=True)
    return a


def _unallocated(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(memory_fraction=0.0, temperature_celsius=31, clock_fraction=0.12, reasons=0x1)


PROFILES = {
    "healthy_training": _healthy,
    "data_starvation": _data_starvation,
    "memory_bandwidth": _memory_bandwidth,
    "memory_fragmentation": _memory_fragmentation,
    "idle": _idle,
    "memory_held": _memory_held,
    "interconnect": _interconnect,
    "thermal_throttling": _thermal_throttling,
    "light_inference": _light_inference,
    "poor_placement": _poor_placement,
    "unallocated": _unallocated,
    "xid_errors": _xid_errors,
    "fallen_off_bus": _fallen_off_bus,
}


def _params(profile: str, rng: random.Random) -> dict[str, float]:
    """Per-GPU jitter, so that no two simulated GPUs are in lock step."""
    return {
        "memory": rng.uniform(0.04, 0.09) if profile == "light_inference"
        else rng.uniform(0.3, 0.45) if profile == "memory_held" else rng.uniform(0.6, 0.8),
        "context_memory": rng.uniform(0.005, 0.012),
        "period": rng.uniform(5.0, 6.5),
        "burst": rng.uniform(1.1, 1.4),
        "phase": rng.uniform(0, 100),
        "cycle": rng.uniform(150, 240),
    }


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
        if model_key not in GPU_MODELS:
            raise FleetError(f"{where}: unknown GPU model '{model_key}'; choose one of {', '.join(GPU_MODELS)}")
        model = GPU_MODELS[model_key]
        count = node.get("gpus", 8)
        if not isinstance(count, int) or not 1 <= count <= 64:
            raise FleetError(f"{where}: 'gpus' must be a whole number from 1 to 64, got {count!r}")
        profiling = bool(node.get("profiling", True))
        assigned: dict[int, tuple[str, str, int]] = {}
        for workload in node.get("workloads", []) or []:
            profile = workload.get("profile") if isinstance(workload, dict) else None
            if profile not in PROFILES:
                raise FleetError(f"{where}: unknown workload profile {profile!r}; choose one of {', '.join(PROFILES)}")
            indices = workload.get("gpus", [])
            if isinstance(indices, int):
                indices = [indices]
            for role, index in enumerate(indices):
                if not isinstance(index, int) or not 0 <= index < count:
                    raise FleetError(f"{where}: workload '{profile}' names GPU {index!r}, but the node has GPUs 0-{count - 1}")
                if index in assigned:
                    raise FleetError(f"{where}: GPU {index} is given two workloads")
                assigned[index] = (profile, _pod_ref(workload.get("pod"), where), role)
        gpus = []
        for index in range(count):
            profile, pod, role = assigned.get(index, ("unallocated", None, 0))
            uuid = "GPU-%08x-%04x-%04x-%04x-%012x" % (
                rng.getrandbits(32), rng.getrandbits(16), rng.getrandbits(16), rng.getrandbits(16), rng.getrandbits(48))
            gpus.append(SimGpu(index=index, uuid=uuid, model=model, profile=profile, profiling=profiling,
                               numa_node=0 if index < count / 2 else 1, seed=seed + n * 1000, pod=pod, role=role,
                               base_pid=10000 + 1000 * index + rng.randrange(500),
                               params=_params(profile, rng)))
        nodes.append(SimNode(name, gpus))
    return nodes


def _pod_ref(value, where: str) -> PodRef | None:
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
    workloads = [{"profile": profiles[i % len(profiles)], "gpus": [i],
                  "pod": f"sim/{profiles[i % len(profiles)].replace('_', '-')}-{i}"} for i in range(gpus)]
    return load_fleet({"seed": seed, "nodes": [{"name": "sim-node-1", "model": model, "gpus": gpus,
                                                "workloads": workloads}]})


DEFAULT_FLEET = Path(__file__).resolve().parent.parent / "fleets" / "demo.yaml"


class SimulatedSource(Source):
    """Serves one simulated node as if it were NVML on that node."""

    name = "simulated"

    def __init__(self, node: SimNode, clock=time.time, speed: float = 1.0):
        """`speed` runs the workloads faster than real time (speed 10: ten simulated seconds per
        second), so that slow signatures such as a memory-fragmentation cycle show within a minute."""
        self.node = node
        self.speed = speed
        self._real_clock = clock
        self._started = clock()
        self._last: float | None = None
        # Cumulative hardware counters the simulator integrates from rates, per GPU index.
        self._counters = {g.index: {"pcie_tx": 0.0, "pcie_rx": 0.0, "nvlink_tx": 0.0, "nvlink_rx": 0.0,
                                    "energy": 0.0, "xid": 0.0} for g in node.gpus}
        # CPU seconds used by each pod's container, integrated from its first GPU's workload.
        self._cpu_seconds = {g.pod: 0.0 for g in node.gpus if g.pod is not None and g.role == 0}

    def clock(self) -> float:
        """Simulated time: real time, sped up by `speed` from the moment the source was made."""
        real = self._real_clock()
        return self._started + (real - self._started) * self.speed

    def sample(self) -> NodeSample:
        now = self.clock()
        elapsed = 1.0 if self._last is None else max(now - self._last, 1e-3)
        self._last = now
        window = min(elapsed, 1.0)  # NVML averages over at most ~1 s
        devices = []
        for g in self.node.gpus:
            activity = PROFILES[g.profile](g, now, window)
            if g.pod is not None and g.role == 0:
                self._cpu_seconds[g.pod] += activity.cpu_fraction * CPU_LIMIT_CORES * elapsed / self.speed
            devices.append(self._device(g, activity, elapsed))
        topology = []
        for a in self.node.gpus:
            for b in self.node.gpus:
                if a is not b:
                    level = "host_bridge" if a.numa_node == b.numa_node else "system"
                    topology.append((a.uuid, b.uuid, level))
        return NodeSample(devices, driver_version="550.90.07", nvml_version="12.550.90.07", topology=topology)

    def _device(self, g: SimGpu, a: Activity, elapsed: float) -> DeviceSample:
        model = g.model
        d = DeviceSample(gpu=str(g.index), uuid=g.uuid, model=model.name,
                         pci_bus_id=f"00000000:{0x18 + 0x10 * g.index:02X}:00.0", up=not a.lost)
        if a.lost:
            return d
        c = self._counters[g.index]
        power = model.idle_power_watts + a.power_fraction * (model.power_limit_watts - model.idle_power_watts)
        for key, rate in (("pcie_tx", a.pcie_tx), ("pcie_rx", a.pcie_rx), ("nvlink_tx", a.nvlink_tx),
                          ("nvlink_rx", a.nvlink_rx), ("energy", power), ("xid", a.xid_rate)):
            c[key] += rate * elapsed
        usable = model.memory_total_bytes - model.memory_reserved_bytes
        memory_used = round(a.memory_fraction * usable) if a.memory_fraction else 1 * MIB
        d.set(m.UTILIZATION, round(a.busy, 2))  # NVML reports whole percent
        d.set(m.MEMORY_CONTROLLER_UTILIZATION, round(a.dram * 0.9, 2))
        if g.profiling:
            for spec, value in ((m.GRAPHICS_ENGINE_ACTIVE, a.busy), (m.SM_ACTIVE, a.sm_active),
                                (m.SM_OCCUPANCY, a.sm_occupancy), (m.TENSOR_ACTIVE, a.tensor),
                                (m.DRAM_ACTIVE, a.dram), (m.FP16_ACTIVE, a.fp16), (m.FP32_ACTIVE, a.fp32),
                                (m.FP64_ACTIVE, a.fp64)):
                d.set(spec, round(min(max(value, 0.0), 1.0), 4))
        d.set(m.MEMORY_USED, memory_used)
        d.set(m.MEMORY_TOTAL, model.memory_total_bytes)
        d.set(m.MEMORY_RESERVED, model.memory_reserved_bytes)
        d.set(m.PCIE_TRANSMIT, int(c["pcie_tx"]))
        d.set(m.PCIE_RECEIVE, int(c["pcie_rx"]))
        if model.nvlink_links:
            d.set(m.NVLINK_TRANSMIT, int(c["nvlink_tx"]) // 1024 * 1024)  # NVML counts KiB
            d.set(m.NVLINK_RECEIVE, int(c["nvlink_rx"]) // 1024 * 1024)
        d.set(m.NVLINK_LINKS, model.nvlink_links)
        d.set(m.PCIE_LINK_GENERATION, model.pcie_generation)
        d.set(m.PCIE_LINK_MAX_GENERATION, model.pcie_generation)
        d.set(m.PCIE_LINK_WIDTH, model.pcie_width)
        d.set(m.PCIE_LINK_MAX_WIDTH, model.pcie_width)
        d.set(m.SM_CLOCK, round(model.sm_clock_max_mhz * a.clock_fraction) * 1e6)
        d.set(m.SM_CLOCK_MAX, model.sm_clock_max_mhz * 1e6)
        d.set(m.MEMORY_CLOCK, model.memory_clock_mhz * 1e6)
        d.set(m.POWER, round(power, 3))
        d.set(m.POWER_LIMIT, model.power_limit_watts)
        d.set(m.ENERGY, round(c["energy"], 3))
        d.set(m.TEMPERATURE, round(a.temperature_celsius))
        d.clock_event_reasons = a.reasons
        for kind in ("corrected", "uncorrected"):
            d.set(m.ECC_ERRORS, 0, kind)
        for cause in ("correctable", "uncorrectable"):
            d.set(m.REMAPPED_ROWS, 0, cause)
        if a.xid:
            d.set(m.XID_ERRORS, int(c["xid"] + 1e-9), str(a.xid))  # 30 x (1/30) is 9.999...
        d.set(m.ROW_REMAP_PENDING, 0)
        d.set(m.ROW_REMAP_FAILED, 0)
        if a.process:
            d.processes.append(ProcessSample(pid=g.base_pid + a.restarts, command="python3",
                                             memory_used_bytes=memory_used, utilization=round(a.busy, 2),
                                             pod=g.pod, container_id=f"{g.uuid[4:12]}{a.restarts:056x}"))
        return d


    def cadvisor_text(self) -> tuple[int, str, bytes]:
        """What the node's kubelet serves on /metrics/cadvisor for the simulated pods' containers:
        CPU seconds used (in real seconds, whatever --simulate.speed is) and the CFS quota that a
        CPU limit of CPU_LIMIT_CORES sets. Served by the simulated exporter on the same path."""
        lines = ["# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.",
                 "# TYPE container_cpu_usage_seconds_total counter"]
        series = [(pod, f'container="{pod.container}",namespace="{pod.namespace}",pod="{pod.pod}"')
                  for pod in self._cpu_seconds]
        lines += [f"container_cpu_usage_seconds_total{{{labels}}} {self._cpu_seconds[pod]:.3f}" for pod, labels in series]
        for name, help_, value in (("container_spec_cpu_quota", "CPU quota of the container.", CPU_LIMIT_CORES * 100000),
                                   ("container_spec_cpu_period", "CPU period of the container.", 100000)):
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
            lines += [f"{name}{{{labels}}} {value:.0f}" for _, labels in series]
        return 200, "text/plain; version=0.0.4; charset=utf-8", ("\n".join(lines) + "\n").encode()


class SimulatedAttribution(Attribution):
    """Plays the kubelet of a simulated node: the pods of the fleet file hold their GPUs."""

    name = "kubelet"

    def __init__(self, node: SimNode):
        allocations = tuple((DeviceRef(uuid=g.uuid), g.pod) for g in node.gpus if g.pod is not None)
        self._state = AttributionState(True, allocations, 0, CollectorStatus(True, 0.0, 0))

    def state(self) -> AttributionState:
        return self._state

    def process_pod(self, pid: int) -> tuple[PodRef | None, str]:
        return None, ""  # the simulated source puts its processes in their pods itself
