"""`gpulens eval`: how well the classifier names the bottleneck of simulated pods it has never seen.

Scenarios are built from the simulator's workload profiles (gpulens/simulator/) replayed
in virtual time: every class, several GPU models, noise on every ratio, problems that start
mid-window after a healthy phase, MIG instances (no utilization field, activity from the graphics
engine), multi-GPU pods, and GPUs without profiling fields; and what production fleets look like over hours
and days: serving replicas whose requests come and go with the time of day, replicas holding a model
nobody calls, notebooks idle after an hour of work, training jobs that finished and kept their GPU.
Every scenario is sampled every 1, 15, 30 and 60 s, as point samples (a sample is the last second's
average, as NVML's utilization and nvidia-smi logs are), over spans from 10 minutes to 24 hours, and
the report gives a confusion matrix per sampling interval. The thresholds were tuned on seeds 0-7;
the report uses seed 1000 by default, so it measures, not memorises.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.judging.history import analyze
from gpulens.analyzer.outputs.plan import sized
from gpulens.analyzer.outputs.use import Use
from gpulens.core import trace as tr
from gpulens.core.activity import ActivityShape
from gpulens.core.bottlenecks import BY_NAME, POD_CLASSES
from gpulens.core.thresholds import Thresholds
from gpulens.core.topology import GROUPS
from gpulens.simulator import workloads
from gpulens.simulator.fleet import load_fleet
from gpulens.simulator.workloads import CPU_LIMIT_CORES, DAY

#: A variant of a class (VARIANTS): (profile, models it makes sense on, the pod's GPUs, sources that show it).
Variant = tuple[str, list[str], list[int], tuple[str, ...]]

# label -> (profile, models it makes sense on, GPUs per pod)
SCENARIOS = {
    "healthy": ("healthy_training", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S", "T4"], (1, 2)),
    "idle": ("idle", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S", "T4"], (1,)),
    "data_starvation": ("data_starvation", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S", "T4"], (1,)),
    "memory_bandwidth": ("memory_bandwidth", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S"], (1,)),
    "memory_fragmentation": ("memory_fragmentation", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S", "T4"], (1,)),
    "interconnect": ("interconnect", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S"], (1,)),
    "throttling": ("thermal_throttling", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S"], (1,)),
    "wrong_gpu_type": ("light_inference", ["H100-SXM5-80GB", "A100-SXM4-80GB"], (1,)),
    "poor_placement": ("poor_placement", [], (2,)),  # one scenario per fault in PLACEMENTS
    "host_stall": ("checkpointing", [], (4,)),  # one scenario per cause in STALLS
    "insufficient_data": ("healthy_training", ["H100-SXM5-80GB", "T4"], (1,)),
    # Low activity that no signature explains from the GPU's telemetry: the class that says so.
    "unexplained": ("host_bound_loop", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S", "T4"], (1,)),
}
#: Placement faults (class poor_placement) -> (profile, models, the pod's GPUs on an 8-GPU node whose CPU
#: sockets are GPUs 0-3 and 4-7 and whose PCIe root complexes are pairs 0-1, 2-3, ..., sources that show it).
PLACEMENTS: dict[str, Variant] = {
    # Across sockets with no NVLink, one GPU far busier: only the topology shows it (uneven activity alone is
    # a stall or a straggler).
    "sockets": ("poor_placement", ["L40S", "A100-PCIE-40GB"], [1, 4], ("gpulens",)),
    # Across root complexes of one socket with no NVLink, evenly half used: only the topology shows it.
    "roots": ("exchange_over_pcie", ["L40S", "A100-PCIE-40GB"], [1, 2], ("gpulens",)),
    # Joined by NVLink that sits idle while PCIe carries the exchange (NCCL_P2P_DISABLE).
    "nvlink_unused": ("exchange_over_pcie", ["H100-SXM5-80GB", "A100-SXM4-40GB"], [0, 1], ("dcgm", "gpulens")),
    # NVLinks down and failing on the first GPU: the exporter's link states and error counters show it.
    "nvlink_faults": ("nvlink_faults", ["H100-SXM5-80GB", "A100-SXM4-40GB"], [0, 1], ("gpulens",)),
}
#: Classes that can be judged without profiling fields (utilization, memory, links, clocks only).
WITHOUT_PROFILING = {
    "idle",
    "unexplained",
    "data_starvation",
    "memory_fragmentation",
    "interconnect",
    "throttling",
    "poor_placement",
    "host_stall",
}
#: Host stalls (class host_stall) -> (profile, models, the pod's GPUs, sources that show it): the waits of
#: real recordings (docs/signals.md: busy is not working).
STALLS: dict[str, Variant] = {
    # Rank 0 writes a checkpoint (15-25 s after 15-40 s of steps) while ranks 1-3 wait at low power.
    "checkpoint": ("checkpointing", ["H100-SXM5-80GB", "A100-SXM4-40GB"], [0, 1, 2, 3], ("dcgm", "gpulens")),
    # Rank 0 of such a job in a pod of its own (one GPU per pod): no kernel while it saves, work between. Only
    # the exporter's counters time its gaps at any scrape interval; other tools' rows do at 1 s only.
    "checkpoint_rank": ("checkpointing", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S"], [0], ("gpulens",)),
    # Its second rank works through every step while the first finishes early and waits for it.
    "straggler": ("straggler", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S"], [0, 1], ("dcgm", "gpulens")),
    # A one-GPU pod whose rank waits in collectives on a rank in another pod most of the time.
    "peer": ("collective_wait", ["H100-SXM5-80GB", "A100-SXM4-40GB", "T4"], [0], ("dcgm", "gpulens")),
    # FSDP with CPU offload over two NVLinked GPUs: each waits on parameters fetched over PCIe.
    "offload": ("cpu_offload", ["H100-SXM5-80GB", "A100-SXM4-40GB"], [0, 1], ("dcgm", "gpulens")),
    # ZeRO-Offload fine-tuning on one GPU.
    "offload_one": ("cpu_offload", ["A100-SXM4-40GB", "L40S", "T4"], [0], ("dcgm", "gpulens")),
    # FSDP with CPU offload as a real 10 Hz recording shows it: parameters in at 27 GB/s and gradients out at 12
    # GB/s in bursts of a tenth of a step (1.35 and 0.6 GB/s on average), steps at a steady period.
    "offload_bursts": ("offload_bursts", ["H100-SXM5-80GB", "A100-SXM4-80GB"], [0], ("dcgm", "gpulens")),
    # A generate() loop from one Python thread, its pod's CPU at one core (SCENARIOS' unexplained without it).
    "host_thread": ("generate_loop", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S", "T4"], [0], ("dcgm", "gpulens")),
    # Four pipeline stages with too few micro-batches (2-6): each waits in its bubble, 0.33-0.6 of a step.
    "pipeline": ("pipeline_stages", ["H100-SXM5-80GB", "A100-SXM4-40GB"], [0, 1, 2, 3], ("dcgm", "gpulens")),
}
#: Starved jobs beyond SCENARIOS' own: their input pipeline at its CPU limit copying 1-4 GB/s of batches into the
#: GPU while it waits, one way (5% back): the CPU settles input over CPU offload.
STARVED: dict[str, Variant] = {
    "input_heavy": ("input_heavy_starvation", ["H100-SXM5-80GB", "A100-SXM4-40GB", "L40S"], [0], ("dcgm", "gpulens")),
}
#: Low activity whose cause the data leaves open (class unexplained), beyond SCENARIOS' own.
LEFT_OPEN: dict[str, Variant] = {
    # Four independent inference processes in one pod, one per GPU, the first serving a larger model: no
    # exchange between them, nothing moving together, so no straggler and no collective to wait in.
    "independent": ("independent_decode", ["H100-SXM5-80GB", "A100-SXM4-40GB"], [0, 1, 2, 3], ("dcgm", "gpulens")),
}
#: Healthy pods beyond SCENARIOS' own.
HEALTHY: dict[str, Variant] = {
    # Four pipeline stages with enough micro-batches (28-36): gaps of seconds that take turns, a bubble of
    # 0.077-0.097, within GPipe's for m >= 4p (0.16): what the schedule costs, not a stall.
    "pipeline_deep": ("pipeline_deep", ["H100-SXM5-80GB", "A100-SXM4-40GB"], [0, 1, 2, 3], ("dcgm", "gpulens")),
}
#: The classes whose scenarios are variants (a fault, a cause), each with its own profile and GPUs. A class
#: with no models of its own in SCENARIOS is made of its variants only.
VARIANTS: dict[str, dict[str, Variant]] = {
    "data_starvation": STARVED,
    "poor_placement": PLACEMENTS,
    "host_stall": STALLS,
    "unexplained": LEFT_OPEN,
    "healthy": HEALTHY,
}
#: Variants that are what a pod runs, not a phase its job enters: they hold from the window's start.
WHAT_A_POD_IS = ("independent",)
#: Variants added after the eval's figures were first published (issue 47): drawn after all the others, from
#: a random stream of their own, in this order, so that the earlier scenarios keep their draws and the figures
#: compare (append, never insert).
VARIANTS_ADDED = (
    "offload",
    "offload_one",
    "host_thread",
    "independent",
    "pipeline",
    "pipeline_deep",
    "offload_bursts",
    "input_heavy",
)
#: Profiles whose CPU use is their story: the eval keeps what they draw (others use 40% of their limit).
OWN_CPU = ("generate_loop", "input_heavy_starvation")


#: Where a trace comes from: "dcgm", a tool whose rows hold only what was sampled at each row (a dcgm-exporter
#: through Prometheus, a DCGM log); "gpulens", a gpulens exporter sampling every second, whose histogram and
#: counters carry the shape of every second between rows (trace.SHAPE); "nvidia-smi", an nvidia-smi log
#: (utilization and memory only; day-scale scenarios).
SOURCES = ("dcgm", "gpulens")


@dataclass
class Scenario:
    label: str
    model: str
    gpus: int
    onset: float  # seconds into the window when the problem starts (0: from the start)
    profiling: bool
    mig: bool
    seed: int
    source: str = "dcgm"
    #: A data-starved job waiting on storage or the network, its CPU not at its limit: only the shape of
    #: its activity shows it (made with source "gpulens" only; from rows alone it looks like serving).
    io_bound: bool = False
    #: Which variant (VARIANTS: a placement fault, a stall's cause) the scenario plays.
    variant: str = ""

    @property
    def truth(self) -> str:
        """The class the scenario's data can show. A rank alone in its pod waiting on a peer elsewhere, seen
        without SM activity, is a kernel busy at low power and nothing else: a small-batch decode looks the
        same, so the right verdict leaves the cause open (unexplained)."""
        if self.variant == "peer" and not self.profiling:
            return "unexplained"
        if self.variant == "independent" and not self.profiling:
            return "healthy"  # kernels all the time at 40-70% of the power: nothing says the GPUs wait
        return self.label

    def workload(self) -> tuple[str, list[int]]:
        """The simulator's profile, and the pod's GPUs on the scenario's 8-GPU node."""
        if self.variant:
            profile, _, indices, _ = VARIANTS[self.label][self.variant]
            return profile, indices
        return SCENARIOS[self.label][0], list(range(self.gpus))


def make_scenarios(seed: int, per_class: int) -> list[Scenario]:
    rng = random.Random(seed)
    out: list[Scenario] = []
    for label, (_, models, gpu_counts) in SCENARIOS.items():
        if not models:
            out += _variant_scenarios(rng, seed, label, per_class // 2, len(out))
            continue
        for _ in range(per_class):
            profiling = not (label in WITHOUT_PROFILING and rng.random() < 0.25)
            mig = label in ("idle", "data_starvation", "healthy") and profiling and rng.random() < 0.2
            # Problems that are phases start mid-window after healthy training; a pod's placement and
            # its nature (a light inference service) do not change mid-run, so those start at 0.
            phase = BY_NAME[label].phase
            onset = rng.uniform(60, 240) if phase and rng.random() < 0.5 else 0.0
            # Starved jobs twice over: as the others, and waiting on storage with their CPU not at its
            # limit, seen by a gpulens exporter (from rows alone nothing tells those from serving).
            for source, io_bound in [(rng.choice(SOURCES), False)] + (
                [("gpulens", True)] if label == "data_starvation" else []
            ):
                out.append(
                    Scenario(
                        label,
                        rng.choice(models),
                        rng.choice(gpu_counts),
                        onset,
                        profiling,
                        mig,
                        seed * 1000 + len(out),
                        source,
                        io_bound,
                    )
                )
    added = random.Random(f"{seed}:added")
    for variant in VARIANTS_ADDED:
        label = next(label for label, variants in VARIANTS.items() if variant in variants)
        out += _variant_scenarios(added, seed, label, per_class // 2, len(out), only=variant)
    return out


def _variant_scenarios(
    rng: random.Random, seed: int, label: str, per_variant: int, first: int, only: str = ""
) -> list[Scenario]:
    """The scenarios of `label`'s variants drawn first (all but VARIANTS_ADDED), or of the added one `only`."""
    out: list[Scenario] = []
    for variant, (_, models, indices, sources) in VARIANTS[label].items():
        if variant != only if only else variant in VARIANTS_ADDED:
            continue
        for _ in range(per_variant):
            profiling = rng.random() >= 0.25
            phase = BY_NAME[label].phase and variant not in WHAT_A_POD_IS
            onset = rng.uniform(60, 240) if phase and rng.random() < 0.5 else 0.0
            out.append(
                Scenario(
                    label,
                    rng.choice(models),
                    len(indices),
                    onset,
                    profiling,
                    False,
                    seed * 1000 + first + len(out),
                    rng.choice(sources),
                    variant=variant,
                )
            )
    return out


def probes(seed: int, count: int = 4) -> list[Scenario]:
    """DRAM-bound pods on GPUs without profiling fields: whatever they are called, it must not be
    memory_bandwidth, which nothing but DRAM activity can show. Kept out of the confusion matrix."""
    rng = random.Random(seed + 7)
    return [
        Scenario(
            "memory_bandwidth",
            rng.choice(SCENARIOS["memory_bandwidth"][1]),
            1,
            0.0,
            False,
            False,
            seed * 1000 + 900 + i,
        )
        for i in range(count)
    ]


def scenario_trace(s: Scenario, window: float = 600.0, step: float = 1.0, noise: float = 0.03) -> pd.DataFrame:
    """The trace one scenario's pod would leave: `window` seconds at `step` resolution."""
    profile, indices = s.workload()
    samples = 20 if s.label == "insufficient_data" else int(window / step)
    fleet: dict[str, Any] = {
        "seed": s.seed,
        "nodes": [
            {
                "name": "eval-node",
                "model": s.model,
                "gpus": 8,
                "workloads": [{"profile": profile, "gpus": indices, "pod": "eval/pod"}],
            }
        ],
    }
    node = load_fleet(fleet)[0]
    warmup = load_fleet(
        {
            **fleet,
            "nodes": [
                {
                    **fleet["nodes"][0],
                    "workloads": [{"profile": "healthy_training", "gpus": indices, "pod": "eval/pod"}],
                }
            ],
        }
    )[0]
    rng = np.random.default_rng(s.seed)
    start = 1_800_000_000.0 + rng.uniform(0, 1e5)
    sample = min(step, 1.0)  # point samples: each the last second's average, whatever the interval

    def at(gpu: workloads.SimGpu, before: workloads.SimGpu, offset: float, window: float) -> workloads.Activity:
        started = offset >= s.onset
        a = (
            workloads.PROFILES[profile](gpu, start + offset, window)
            if started
            else workloads.PROFILES["healthy_training"](before, start + offset, window)
        )
        if profile not in OWN_CPU or not started:
            a.cpu_fraction = 0.97 if profile == "data_starvation" and started and not s.io_bound else 0.4
        return a

    samples_of, seconds_of = [], []
    for index in indices:
        gpu, before = node.gpus[index], warmup.gpus[index]
        samples_of.append((gpu, [(start + k * step, at(gpu, before, k * step, sample)) for k in range(samples)]))
        if s.source == "gpulens":
            seconds_of.append([(start + j, at(gpu, before, j, 1.0).busy) for j in range(int(samples * step))])
    frame = _frame(samples_of, rng, noise)
    if seconds_of:
        frame = _with_shape(frame, seconds_of, rng, noise)
    else:  # other tools' rows say nothing of the topology, nor of the memory the driver reserves
        frame = frame.drop(columns=tr.LINKS + tr.MEMORY)
        frame["numa_node"] = np.nan
    if not s.profiling:
        frame[tr.PROFILING] = np.nan
    if s.mig:
        frame["gpu_util"] = np.nan  # NVML has no utilization on MIG instances
        frame["gpu"] = frame["gpu"].str.replace("GPU-", "MIG-")
    frame["gpu_model"] = node.gpus[0].model.name + (" MIG 1g.10gb" if s.mig else "")
    frame["namespace"], frame["pod"] = "eval", f"{s.label}-{s.seed}"
    return fr.normalize(frame)


def _frame(samples_of: list, rng: np.random.Generator, noise: float) -> pd.DataFrame:
    """The trace rows of simulated GPUs: [(SimGpu, [(time, Activity), ...]), ...], noise on every ratio."""
    cpu_limit = CPU_LIMIT_CORES
    rows = []
    gpus = [gpu for gpu, _ in samples_of]
    pairs = [(a.uuid, b.uuid, *a.connection(b)) for a in gpus for b in gpus if a is not b]
    socket, root, island = (of(pairs) for of in GROUPS.values())
    for gpu, activities in samples_of:
        model = gpu.model
        nvlink = 1.0 if model.nvlink_links else math.nan  # NVLink states and errors only where there are links
        usable = model.memory_total_bytes - model.memory_reserved_bytes
        for t, a in activities:
            rows.append(
                (
                    t,
                    gpu.uuid,
                    a.busy,
                    a.sm_active,
                    a.sm_occupancy,
                    a.tensor,
                    a.dram,
                    a.busy,
                    a.fp16,
                    a.fp32,
                    a.fp64,
                    a.memory_fraction * usable,
                    model.memory_total_bytes,
                    a.pcie_tx,
                    a.pcie_rx,
                    a.nvlink_tx,
                    a.nvlink_rx,
                    model.idle_power_watts + a.power_fraction * (model.power_limit_watts - model.idle_power_watts),
                    a.temperature_celsius,
                    model.sm_clock_max_mhz * a.clock_fraction * 1e6,
                    model.sm_clock_max_mhz * 1e6,
                    a.reasons,
                    cpu_limit * a.cpu_fraction,
                    cpu_limit,
                    a.restarts,
                    socket.get(gpu.uuid, math.nan),
                    root.get(gpu.uuid, math.nan),
                    island.get(gpu.uuid, math.nan),
                    nvlink * a.nvlink_links_down,
                    nvlink * a.nvlink_crc_rate,
                    nvlink * a.nvlink_replay_rate,
                    nvlink * a.nvlink_recovery_rate,
                )
            )
    # The row tuples above are in the trace schema's order.
    frame = pd.DataFrame(rows, columns=["timestamp", "gpu", *tr.SIGNALS, *tr.LINKS])
    reserved = {gpu.uuid: float(gpu.model.memory_reserved_bytes) for gpu in gpus}
    frame["memory_reserved_bytes"] = frame["gpu"].map(reserved)
    for column in tr.RATIOS:
        frame[column] = np.clip(frame[column] + rng.normal(0, noise, len(frame)) * (frame[column] > 0), 0, 1)
    frame["gpu_util"] = frame["gpu_util"].round(2)
    frame["node"], frame["container"] = "eval-node", "main"
    return frame


def _with_shape(frame: pd.DataFrame, seconds_of: list, rng: np.random.Generator, noise: float) -> pd.DataFrame:
    """The trace.SHAPE columns a gpulens exporter sampling each GPU every second would give each row:
    `seconds_of` holds each GPU's [(time, activity), ...] at 1 s, in the order of the frame's GPUs."""
    shapes = []
    offset = 0
    for seconds in seconds_of:
        times = np.array([t for t, _ in seconds])
        values = np.array([v for _, v in seconds])
        values = np.round(np.clip(values + rng.normal(0, noise, len(values)) * (values > 0), 0, 1), 2)
        rows = frame["timestamp"].to_numpy()[offset : offset + len(frame) // len(seconds_of)]
        offset += len(rows)
        shapes.append(pd.DataFrame(shape_rows(times, values, rows), columns=tr.SHAPE))
    shape = pd.concat(shapes, ignore_index=True)
    return pd.concat([frame.reset_index(drop=True), shape], axis=1)


def shape_rows(times: np.ndarray, values: np.ndarray, row_times: np.ndarray) -> list[dict[str, float]]:
    """What an exporter that saw `values` at `times` would give rows at `row_times`: the trace.SHAPE
    columns, counted by core/activity.py as the exporter's sampler counts them."""
    shape = ActivityShape()
    out = []
    previous = None
    j = 0
    for row_time in row_times:
        while j < len(times) and times[j] <= row_time:
            shape.observe(float(times[j]), float(values[j]))
            j += 1
        totals = shape.counts().totals()
        out.append(tr.shape_row(previous, totals))
        previous = totals
    return out


#: Day-scale scenarios: the simulator's profile and the class it should get over its span.
DAY_SCENARIOS = {
    "serving": "overprovisioned_serving",
    "idle_replica": "idle",
    "notebook": "idle",
    "sparse_notebook": "idle",
    "training_finished": "idle",
    "never_served": "idle",
    # Its start-up (a model load, then warm-up steps at low activity) is no verdict on it: healthy, or
    # insufficient_data where too few samples follow it (day_traces).
    "training_started": "healthy",
}
#: What Kubernetes says each day-scale profile's pod is (analyzer/inputs/kinds.py): a Deployment's replica, a JupyterHub
#: user's server, a Job. The eval judges every day-scale pod twice: from its GPU alone, and with its kind in the
#: trace's workload_kind column (Report.with_kinds).
DAY_KINDS = {
    "serving": "serving",
    "idle_replica": "serving",
    "notebook": "notebook",
    "sparse_notebook": "notebook",
    "training_finished": "job",
    "never_served": "serving",
    "training_started": "job",
}
#: Profiles added since the eval's figures were first published: their scenarios are drawn after all the
#: others', each after the one before, so that adding one leaves every earlier scenario as it was and the
#: figures stay comparable (append, never insert).
DAY_SCENARIOS_ADDED = ("never_served", "training_started")
BIG_GPUS = ("H100-SXM5-80GB", "A100-SXM4-80GB")


@dataclass(frozen=True)
class Shape:
    """A workload shape users met on histories gpulens was not tuned on (issue 73), built from its description."""

    #: What Kubernetes says it is, where the shape is judged with its kind.
    kind: str
    #: The class its span verdict must give.
    bottleneck: str
    #: Whether it is judged from its GPU alone too (a notebook's cells and a replica's requests look alike there,
    #: so the notebook is judged with its kind only).
    alone: bool
    #: Whether its size must be a smaller GPU than its own (Verdict.size.smaller), whatever its class.
    smaller: bool = False
    #: The GPU models it is played on.
    models: tuple[str, ...] = ("H100-SXM5-80GB", "A100-SXM4-80GB", "L40S")
    #: The sources it is recorded from (SOURCES, and "nvidia-smi": utilization and memory only).
    sources: tuple[str, ...] = ("nvidia-smi", *SOURCES)


#: The shapes: a notebook training in cells (5-15 min at 60-90% SM, 5-10 min pauses) is in use and healthy while
#: it works, never idle; a replica serving by day and resting at night (busy 1-1.5% of a day) is serving, never
#: "release its GPUs", with its kind or without; a light job (5 GB, about 10% of an A100 or H100) whose pod's CPU
#: sits at one core is wrong_gpu_type and sized down; a job holding 10 GB at about 10% with no signature is
#: unexplained, and sized down whatever its cause. Each is judged over a day from midnight and over 6 hours from
#: 06:00 (SHAPE_SPANS), apart from the published figures.
SHAPES: dict[str, Shape] = {
    "notebook_cells": Shape("notebook", "healthy", alone=False),
    "diurnal_replica": Shape("serving", "overprovisioned_serving", alone=True),
    # Its shape is its CPU at one core, which an nvidia-smi log does not record (a store's cAdvisor series do).
    "light_loop": Shape("job", "wrong_gpu_type", alone=True, smaller=True, models=BIG_GPUS, sources=SOURCES),
    "light_job": Shape("job", "unexplained", alone=True, smaller=True, models=BIG_GPUS),
}
SHAPE_SPANS = ((0.0, DAY), (6 * 3600.0, 6 * 3600.0))
SHAPE_INTERVALS = (15.0, 30.0, 60.0)
#: Seconds between samples, and spans of data, that every scenario is judged at.
INTERVALS = (1.0, 15.0, 30.0, 60.0)
SPANS = (600.0, 3600.0, 6 * 3600.0, DAY)


@dataclass
class DayScenario:
    profile: str
    model: str
    span: float
    #: Seconds of the (UTC) day the span starts at: the whole span lies within one day.
    offset: float
    #: "nvidia-smi" (utilization and memory only), "dcgm" (every field) or "gpulens" (every field, and the
    #: shape of every second between rows): see SOURCES.
    source: str
    seed: int


def make_day_scenarios(seed: int, per_profile: int, spans: tuple[float, ...]) -> list[DayScenario]:
    """Day-scale scenarios, each seen at every sampling interval: the same pods, sampled more or less often."""
    rng = random.Random(seed + 13)
    out: list[DayScenario] = []
    first = [p for p in DAY_SCENARIOS if p not in DAY_SCENARIOS_ADDED]
    for profiles in (first, *([added] for added in DAY_SCENARIOS_ADDED)):
        for span, profile in ((span, profile) for span in spans for profile in profiles):
            for _ in range(per_profile):
                if profile == "serving" and span < DAY:
                    offset = rng.uniform(9 * 3600, max(9 * 3600, 18 * 3600 - span))  # in working hours
                else:
                    offset = rng.uniform(0, DAY - span)
                model = rng.choice(["H100-SXM5-80GB", "A100-SXM4-80GB", "L40S"])
                source = rng.choice(("nvidia-smi", *SOURCES))
                out.append(DayScenario(profile, model, span, offset, source, seed * 1000 + len(out)))
    return out


def day_traces(
    s: DayScenario, intervals: tuple[float, ...], noise: float = 0.03
) -> dict[float, tuple[pd.DataFrame, str]]:
    """A day-scale scenario's trace at each sampling interval, and the class it should get there:
    insufficient_data with fewer samples than a verdict needs, idle for a serving replica that served
    nothing in the span. Every interval samples the same second-by-second activity."""
    node = load_fleet(
        {
            "seed": s.seed,
            "nodes": [
                {
                    "name": "eval-node",
                    "model": s.model,
                    "gpus": 1,
                    "workloads": [{"profile": s.profile, "gpus": [0], "pod": "eval/pod"}],
                }
            ],
        }
    )[0]
    gpu = node.gpus[0]
    rng = np.random.default_rng(s.seed)
    day = math.floor(1_800_000_000.0 / DAY) * DAY + DAY * int(rng.integers(0, 30))
    start = day + s.offset
    # Notebooks stop working, and training jobs finish, a fifth to two fifths into the span.
    end_of_work = s.offset + s.span * rng.uniform(0.2, 0.4)
    gpu.params.update(
        finish=end_of_work,
        work_until=end_of_work,
        work_from=max(0.0, end_of_work - rng.uniform(1, 3) * 3600),
        started=s.offset,  # a replica that never served, and a training job that starts, start with the span
    )
    profile = workloads.PROFILES[s.profile]
    # Each second's activity (the last second's average, as NVML's utilization and nvidia-smi logs are):
    # a row every `step` seconds samples it, and a gpulens exporter counts all of it between rows.
    seconds = [(start + k, profile(gpu, start + k, 1.0)) for k in range(int(s.span))]
    worked = profile(gpu, start + s.span, s.span).busy  # the share of the span busy, from the schedule itself
    served = worked > 0
    min_samples = Thresholds().min_samples
    out = {}
    for step in intervals:
        samples = int(s.span / step)
        frame = _frame([(gpu, seconds[:: int(step)][:samples])], rng, noise)
        if s.source == "nvidia-smi":
            keep = {"gpu_util", "memory_used_bytes", "memory_total_bytes"}
            frame[[c for c in tr.SIGNALS if c not in keep]] = np.nan
            frame = frame.drop(columns=tr.LINKS + tr.MEMORY)
        if s.source == "gpulens":
            frame = _with_shape(frame, [[(t, a.busy) for t, a in seconds]], rng, noise)
        frame["gpu_model"] = gpu.model.name
        frame["namespace"], frame["pod"] = "eval", f"{s.profile}-{s.seed}"
        if samples < min_samples:
            label = "insufficient_data"
        elif s.profile == "serving" and not served:
            label = "idle"  # no request in the span: nothing served
        elif s.profile == "training_started" and (s.span - workloads.start_up_seconds(gpu)) / step < min_samples:
            label = "insufficient_data"  # its start-up left out, too few samples of its steady state are left
        elif s.profile in SHAPES and _seen_working(s, seconds, step, samples, worked) < Thresholds().sparse_busy_share:
            label = "idle"  # under the documented bar of sparse use as its samples show it: idle, whatever its shape
        elif s.profile in SHAPES:
            label = SHAPES[s.profile].bottleneck
        else:
            label = DAY_SCENARIOS[s.profile]
        out[step] = (fr.normalize(frame), label)
    return out


def _seen_working(s: DayScenario, seconds: list, step: float, samples: int, worked: float) -> float:
    """The share of a day-scale scenario's span worked as its rows show it: all of it from gpulens' exporter (it
    counts every second between rows), else the busy share of the seconds its point samples caught (a replica
    busy 1.2% of six hours, caught by 3 rows of 360 at 60 s, shows 0.8%)."""
    if s.source == "gpulens":
        return worked
    return float(np.mean([a.busy for _, a in seconds[:: int(step)][:samples]]))


@dataclass
class Report:
    """What every scenario should have been called and was, with the sampling interval and span."""

    #: columns: interval, span, kind ("window" or "day"), profile, variant (VARIANTS, for poor_placement and host_stall
    #: scenarios), source, label, predicted
    results: pd.DataFrame
    #: What the no-profiling DRAM-bound probes were called (kept out of the confusion matrix).
    probe_predictions: list[str] = field(default_factory=list)
    #: The day-scale rows of `results` judged again with what Kubernetes says each pod is (DAY_KINDS): the
    #: same columns, kept out of the figures above, which are the GPU's alone.
    with_kinds: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The workload shapes (SHAPES): `results`' columns, "with_kind", and "smaller" (its size a smaller GPU than its
    #: own), kept out of the figures above.
    shapes: pd.DataFrame = field(default_factory=pd.DataFrame)

    def shapes_found(self, interval: float) -> str:
        """Per shape at `interval`, with its kind and from its GPU alone: how many got their class (and, where the
        shape must be sized down, a smaller GPU too), "found/all"."""
        r = self.shapes[self.shapes["interval"] == interval]
        parts = []
        for profile, shape in SHAPES.items():
            for with_kind in (True, False):
                pods = r[(r["profile"] == profile) & (r["with_kind"] == with_kind)]
                if len(pods):
                    found = int(((pods["predicted"] == pods["label"]) & (pods["smaller"] | (not shape.smaller))).sum())
                    parts.append(f"{profile} {'with its kind' if with_kind else 'alone'} {found}/{len(pods)}")
        return ", ".join(parts)

    @property
    def labels(self) -> list[str]:
        return list(self.results["label"])

    @property
    def predicted(self) -> list[str]:
        return list(self.results["predicted"])

    def intervals(self) -> list[float]:
        return sorted(self.results["interval"].unique())

    def _at(self, interval: float | None, source: str | None = None) -> pd.DataFrame:
        r = self.results if interval is None else self.results[self.results["interval"] == interval]
        return r if source is None else r[r["source"] == source]

    def confusion(self, interval: float | None = None) -> pd.DataFrame:
        r = self._at(interval)
        matrix = pd.crosstab(
            pd.Series(list(r["label"]), name="true"), pd.Series(list(r["predicted"]), name="predicted")
        )
        return matrix.reindex(index=list(POD_CLASSES), columns=list(POD_CLASSES), fill_value=0)

    def scores(self, interval: float | None = None) -> pd.DataFrame:
        m = self.confusion(interval)
        tp = np.diag(m.to_numpy())
        precision = tp / np.maximum(m.sum(axis=0).to_numpy(), 1)
        recall = tp / np.maximum(m.sum(axis=1).to_numpy(), 1)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall, 1e-12), 0)
        return pd.DataFrame(
            {"precision": precision, "recall": recall, "f1": f1, "support": m.sum(axis=1)}, index=m.index
        )

    def macro_f1(self, interval: float | None = None) -> float:
        """Mean F1 over the classes that have scenarios."""
        scores = self.scores(interval)
        return float(scores[scores["support"] > 0]["f1"].mean())

    def accuracy(self, interval: float | None = None, source: str | None = None) -> float:
        r = self._at(interval, source)
        return float((r["label"] == r["predicted"]).mean())

    def recall(self, label: str, interval: float | None = None, source: str | None = None) -> float:
        """Share of the pods of class `label` that were called so (NaN with none)."""
        r = self._at(interval, source)
        r = r[r["label"] == label]
        return float((r["predicted"] == label).mean()) if len(r) else math.nan

    def variants(self, label: str, interval: float) -> list[tuple[str, str]]:
        """Per variant of `label` (VARIANTS): how many of its pods were given the class their data shows
        (`label`, or Scenario.truth), as "found/all"."""
        r = self._at(interval)
        out = []
        for name in VARIANTS[label]:
            pods = r[r["variant"] == name]
            out.append((name, f"{int((pods['predicted'] == pods['label']).sum())}/{len(pods)}"))
        return out

    def healthy_called_idle(self) -> int:
        r = self.results
        return int(((r["label"] == "healthy") & (r["predicted"] == "idle")).sum())

    def serving_told_to_release(self) -> int:
        """Serving replicas that served requests in their span and were called idle ("release the GPU")."""
        r = self.results
        return int(((r["label"] == "overprovisioned_serving") & (r["predicted"] == "idle")).sum())

    def kinds_said(self, interval: float) -> str:
        """The day-scale pods at `interval` from their GPU alone and with their kind: accuracy, notebooks called
        serving, replicas that served called idle (each "found/all")."""
        alone = self.results[(self.results["kind"] == "day") & (self.results["interval"] == interval)]
        said = self.with_kinds[self.with_kinds["interval"] == interval]

        def counts(r: pd.DataFrame) -> tuple[float, str, str]:
            notebooks = r[r["profile"].isin(["notebook", "sparse_notebook"])]
            served = r[r["label"] == "overprovisioned_serving"]
            return (
                float((r["label"] == r["predicted"]).mean()),
                f"{int((notebooks['predicted'] == 'overprovisioned_serving').sum())}/{len(notebooks)}",
                f"{int((served['predicted'] == 'idle').sum())}/{len(served)}",
            )

        (a, notebooks, served), (a_said, notebooks_said, served_said) = counts(alone), counts(said)
        return (
            f"day-scale pods with their kind (GPU alone): accuracy {a_said:.3f} ({a:.3f}); notebooks called serving "
            f"{notebooks_said} ({notebooks}); replicas that served called idle {served_said} ({served})"
        )

    def never_served_found(self) -> str:
        """Replicas that loaded a model and served nothing (never_served), judged where they have enough
        samples: how many were called idle, as "found/all"."""
        r = self.results
        r = r[(r["profile"] == "never_served") & (r["label"] == "idle")]
        return f"{int((r['predicted'] == 'idle').sum())}/{len(r)}"

    def never_claims_memory_bandwidth_without_profiling(self) -> bool:
        return "memory_bandwidth" not in (self.probe_predictions or [])


def evaluate(
    seed: int = 1000,
    per_class: int = 12,
    thresholds: Thresholds | None = None,
    noise: float = 0.03,
    intervals: tuple[float, ...] = INTERVALS,
    spans: tuple[float, ...] = SPANS,
    per_day_profile: int = 3,
) -> Report:
    """Every scenario at every sampling interval: the window scenarios over 40 samples (at least 10
    minutes), the day-scale ones over every span, judged as `gpulens report` judges files."""
    records: list[tuple] = []
    probe_predictions: list[str] = []
    for step in intervals:
        span = max(600.0, 40 * step)
        scenarios = [replace(x, onset=x.onset * span / 600) for x in make_scenarios(seed, per_class)]
        checks = probes(seed)
        # The added variants in a fleet of their own: the windows a fleet's span is cut into start at its first
        # sample, so their data would move the earlier scenarios' windows (VARIANTS_ADDED).
        added = [x for x in scenarios if x.variant in VARIANTS_ADDED]
        verdicts: dict[str, str] = {}
        for fleet in ([x for x in scenarios if x not in added] + checks, added):
            frames = [scenario_trace(x, window=span, step=step, noise=noise) for x in fleet]
            verdicts |= {v.pod: v.bottleneck for v in analyze(pd.concat(frames, ignore_index=True), thresholds)}
        for x in scenarios:
            predicted = verdicts[f"{x.label}-{x.seed}"]
            records.append((step, span, "window", x.workload()[0], x.variant, x.source, x.truth, predicted))
        probe_predictions += [verdicts[f"{x.label}-{x.seed}"] for x in checks]
    # One report per sampling interval and span, as a fleet's would be; added profiles in reports of their
    # own, so that their data leaves the earlier scenarios' slots where they were (DAY_SCENARIOS_ADDED).
    by_cell: dict[tuple[float, float, bool], list[tuple[DayScenario, pd.DataFrame, str]]] = {}
    for d in make_day_scenarios(seed, per_day_profile, spans):
        for step, (frame, label) in day_traces(d, intervals, noise).items():
            by_cell.setdefault((step, d.span, d.profile in DAY_SCENARIOS_ADDED), []).append((d, frame, label))
    said: list[tuple] = []
    for (step, span, _), cell in by_cell.items():
        for rows, kinds in ((records, False), (said, True)):
            judged = pd.concat(
                [fr.normalize(f.assign(workload_kind=DAY_KINDS[d.profile])) if kinds else f for d, f, _ in cell],
                ignore_index=True,
            )
            verdicts = {v.pod: v.bottleneck for v in analyze(judged, thresholds)}
            for d, _, label in cell:
                rows.append((step, span, "day", d.profile, "", d.source, label, verdicts[f"{d.profile}-{d.seed}"]))
    columns = ["interval", "span", "kind", "profile", "variant", "source", "label", "predicted"]
    shapes = pd.DataFrame(
        _shapes(seed, per_day_profile, tuple(i for i in intervals if i in SHAPE_INTERVALS), noise, thresholds),
        columns=[*columns, "with_kind", "smaller"],
    )
    return Report(
        pd.DataFrame(records, columns=columns), probe_predictions, pd.DataFrame(said, columns=columns), shapes
    )


def _shapes(
    seed: int, per_shape: int, intervals: tuple[float, ...], noise: float, thresholds: Thresholds | None
) -> list[tuple]:
    """Every workload shape (SHAPES), per_shape pods over each of SHAPE_SPANS, judged a fleet per interval and
    span as a report would, and sized from its use: with its kind, and from its GPU alone where the shape says."""
    t = thresholds or Thresholds()
    by_cell: dict[tuple[float, float], list[tuple[DayScenario, pd.DataFrame, str]]] = {}
    # Each shape draws its own pods (its own random stream and seeds): adding a shape leaves the others as they were.
    for index, (profile, shape) in enumerate(SHAPES.items()):
        rng = random.Random(f"{seed}:{profile}")
        for drawn, (offset, span) in enumerate(
            (offset, span) for offset, span in SHAPE_SPANS for _ in range(per_shape)
        ):
            model = rng.choice(shape.models)
            d = DayScenario(profile, model, span, offset, rng.choice(shape.sources), seed * 7300 + 100 * index + drawn)
            for step, (frame, label) in day_traces(d, intervals, noise).items():
                by_cell.setdefault((step, span), []).append((d, frame, label))
    out: list[tuple] = []
    for (step, span), cell in by_cell.items():
        for with_kind in (True, False):
            judged = [(d, f, label) for d, f, label in cell if with_kind or SHAPES[d.profile].alone]
            frames = [
                fr.normalize(f.assign(workload_kind=SHAPES[d.profile].kind)) if with_kind else f for d, f, _ in judged
            ]
            trace = pd.concat(frames, ignore_index=True)
            verdicts = {v.pod: v for v in sized(analyze(trace, t), Use.of_trace(trace, step, t), t)}
            for d, _, label in judged:
                v = verdicts[f"{d.profile}-{d.seed}"]
                smaller = v.size is not None and v.size.smaller
                out.append((step, span, "shape", d.profile, "", d.source, label, v.bottleneck, with_kind, smaller))
    return out


def render(report: Report) -> str:
    short = {c: c[:10] for c in POD_CLASSES}
    lines = []
    for interval in report.intervals():
        matrix = report.confusion(interval)
        present = [c for c in POD_CLASSES if matrix.loc[c].sum() or matrix[c].sum()]
        matrix = matrix.loc[present, present].rename(index=short, columns=short)
        pods = len(report._at(interval))
        lines += [
            f"sampled every {interval:g} s: {pods} pods, accuracy {report.accuracy(interval):.3f}, "
            f"macro-F1 {report.macro_f1(interval):.3f} (rows: true class, columns: predicted)",
            matrix.to_string(),
            "  by source: "
            + "; ".join(
                f"{source} {report.accuracy(interval, source):.3f} (data_starvation recall "
                f"{report.recall('data_starvation', interval, source):.2f})"
                for source in ("nvidia-smi", *SOURCES)
                if len(report._at(interval, source))
            ),
            "  placement faults found: "
            + ", ".join(f"{name} {found}" for name, found in report.variants("poor_placement", interval)),
            "  host stalls found: "
            + ", ".join(f"{name} {found}" for name, found in report.variants("host_stall", interval)),
            "  starved jobs weighed against offload: "
            + ", ".join(f"{name} {found}" for name, found in report.variants("data_starvation", interval)),
            "  causes left open: "
            + ", ".join(f"{name} {found}" for name, found in report.variants("unexplained", interval)),
            "  " + report.kinds_said(interval),
            *(["  workload shapes: " + report.shapes_found(interval)] if interval in SHAPE_INTERVALS else []),
            "",
        ]
    scores = report.scores()
    lines += [
        "all intervals:",
        scores[scores["support"] > 0].to_string(float_format=lambda v: f"{v:.3f}"),
        "",
        f"macro-F1: {report.macro_f1():.3f}",
        f"healthy pods called idle: {report.healthy_called_idle()}",
        f"serving replicas that served requests called idle: {report.serving_told_to_release()}",
        f"replicas that loaded a model and served nothing called idle: {report.never_served_found()}",
        "memory_bandwidth claimed without profiling fields: "
        + ("never" if report.never_claims_memory_bandwidth_without_profiling() else "YES"),
    ]
    return "\n".join(lines)
