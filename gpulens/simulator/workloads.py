"""Workload profiles: what a GPU shows while a named kind of workload runs on it.

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
from dataclasses import dataclass, field

from gpulens.core.catalog import GpuModel
from gpulens.core.pods import PodRef


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
    return Activity(
        busy=1.0,
        sm_active=sm,
        sm_occupancy=0.48 + g.noise(t, 0.04, 1),
        tensor=0.58 + g.noise(t, 0.05, 2),
        dram=0.42 + g.noise(t, 0.04, 3),
        fp16=0.30,
        fp32=0.12,
        memory_fraction=g.params["memory"],
        pcie_rx=0.04 * g.model.pcie_bytes_per_second,
        pcie_tx=0.01 * g.model.pcie_bytes_per_second,
        nvlink_tx=0.15 * g.model.nvlink_link_bytes_per_second * g.model.nvlink_links,
        nvlink_rx=0.15 * g.model.nvlink_link_bytes_per_second * g.model.nvlink_links,
        power_fraction=0.85 + g.noise(t, 0.05, 4),
        temperature_celsius=66 + g.noise(t, 2, 5),
        process=True,
    )


def _data_starvation(g: SimGpu, t: float, w: float) -> Activity:
    period, burst, phase = g.params["period"], g.params["burst"], g.params["phase"]
    on = duty(t, w, period, burst, phase)
    # Host-to-device copies spike in the first 0.2 s of each burst.
    spike = duty(t, w, period, 0.2, phase)
    pcie = g.model.pcie_bytes_per_second
    return Activity(
        busy=on,
        sm_active=0.86 * on,
        sm_occupancy=0.45 * on,
        tensor=0.55 * on,
        dram=0.40 * on,
        fp16=0.28 * on,
        fp32=0.10 * on,
        memory_fraction=g.params["memory"],
        pcie_rx=0.7 * pcie * spike + 0.01 * pcie,
        pcie_tx=0.005 * pcie,
        power_fraction=0.15 + 0.7 * on,
        temperature_celsius=52 + 8 * on,
        reasons=0 if on > 0 else 0x1,
        process=True,
        cpu_fraction=0.97 + g.noise(t, 0.02, 6),
    )  # the input pipeline sits at its CPU limit


def _xid_errors(g: SimGpu, t: float, w: float) -> Activity:
    # Healthy training on a GPU whose driver records row-remapping events (XID 63) twice a minute.
    a = _healthy(g, t, w)
    a.xid, a.xid_rate = 63, 1 / 30
    return a


def _fallen_off_bus(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(lost=True)


def _memory_bandwidth(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(
        busy=1.0,
        sm_active=0.72 + g.noise(t, 0.03),
        sm_occupancy=0.22,
        tensor=0.03,
        dram=0.79 + g.noise(t, 0.02, 1),
        fp32=0.12,
        fp16=0.02,
        memory_fraction=g.params["memory"],
        pcie_rx=0.02 * g.model.pcie_bytes_per_second,
        power_fraction=0.75,
        temperature_celsius=63,
        process=True,
    )


def _memory_fragmentation(g: SimGpu, t: float, w: float) -> Activity:
    # Memory climbs from 60% to the limit over `cycle` seconds with allocation churn, then the
    # process dies (OOM) and is restarted after `down` seconds of nothing.
    cycle, down = g.params["cycle"], 10.0
    run = t + g.params["phase"]
    generation, position = divmod(run, cycle + down)
    if position >= cycle:
        return Activity(
            memory_fraction=0.0, restarts=int(generation) + 1, reasons=0x1, clock_fraction=0.2, temperature_celsius=45
        )
    churn = 0.03 * math.sin(position * 2 * math.pi / 7.0)
    memory = min(0.6 + 0.39 * position / cycle + churn, 0.995)
    return Activity(
        busy=0.9,
        sm_active=0.62 + g.noise(t, 0.05),
        sm_occupancy=0.35,
        tensor=0.35,
        dram=0.35,
        fp16=0.2,
        fp32=0.1,
        memory_fraction=memory,
        pcie_rx=0.05 * g.model.pcie_bytes_per_second,
        power_fraction=0.6,
        temperature_celsius=60,
        process=True,
        restarts=int(generation),
    )


def _idle(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(
        memory_fraction=g.params["context_memory"],
        power_fraction=0.0,
        temperature_celsius=33 + g.noise(t, 1),
        clock_fraction=0.12,
        reasons=0x1,
        process=True,
        cpu_fraction=0.01,
    )


def _memory_held(g: SimGpu, t: float, w: float) -> Activity:
    return Activity(
        memory_fraction=g.params["memory"],
        power_fraction=0.02,
        temperature_celsius=34,
        clock_fraction=0.12,
        reasons=0x1,
        process=False,
    )


def _interconnect(g: SimGpu, t: float, w: float) -> Activity:
    links = g.model.nvlink_links * g.model.nvlink_link_bytes_per_second
    a = Activity(
        busy=0.95,
        sm_active=0.24 + g.noise(t, 0.03),
        sm_occupancy=0.12,
        tensor=0.08,
        dram=0.22,
        fp16=0.05,
        fp32=0.05,
        memory_fraction=g.params["memory"],
        power_fraction=0.45,
        temperature_celsius=55,
        process=True,
    )
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
    return Activity(
        busy=min(1.0, on * 1.1),
        sm_active=0.55 * on + 0.01,
        sm_occupancy=0.2 * on,
        tensor=0.2 * on,
        dram=0.1 * on,
        fp16=0.2 * on,
        memory_fraction=g.params["memory"],
        pcie_rx=0.005 * g.model.pcie_bytes_per_second,
        power_fraction=0.08,
        temperature_celsius=40,
        clock_fraction=0.9,
        process=True,
    )


def _poor_placement(g: SimGpu, t: float, w: float) -> Activity:
    # The first GPU of the job does the work; the others wait on exchanges over PCIe across sockets.
    level = 0.85 if g.role == 0 else 0.3
    a = Activity(
        busy=1.0 if g.role == 0 else 0.6,
        sm_active=level + g.noise(t, 0.03),
        sm_occupancy=0.4 * level,
        tensor=0.6 * level,
        dram=0.4 * level,
        fp16=0.3 * level,
        memory_fraction=g.params["memory"],
        pcie_tx=0.45 * g.model.pcie_bytes_per_second,
        pcie_rx=0.45 * g.model.pcie_bytes_per_second,
        power_fraction=0.8 * level,
        temperature_celsius=50 + 15 * level,
        process=True,
    )
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


def profile_params(profile: str, rng: random.Random) -> dict[str, float]:
    """Per-GPU jitter, so that no two simulated GPUs are in lock step."""
    return {
        "memory": rng.uniform(0.04, 0.09)
        if profile == "light_inference"
        else rng.uniform(0.3, 0.45)
        if profile == "memory_held"
        else rng.uniform(0.6, 0.8),
        "context_memory": rng.uniform(0.005, 0.012),
        "period": rng.uniform(5.0, 6.5),
        "burst": rng.uniform(1.1, 1.4),
        "phase": rng.uniform(0, 100),
        "cycle": rng.uniform(150, 240),
    }
