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

from gpulens.analyzer import frame as fr
from gpulens.analyzer.history import analyze
from gpulens.core import trace as tr
from gpulens.core.bottlenecks import CLASSES
from gpulens.core.thresholds import Thresholds
from gpulens.simulator import workloads
from gpulens.simulator.fleet import load_fleet
from gpulens.simulator.workloads import DAY

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
    "poor_placement": ("poor_placement", ["L40S", "A100-PCIE-40GB"], (2,)),
    "insufficient_data": ("healthy_training", ["H100-SXM5-80GB", "T4"], (1,)),
}
#: Classes that can be judged without profiling fields (utilization, memory, links, clocks only).
WITHOUT_PROFILING = {"idle", "data_starvation", "memory_fragmentation", "interconnect", "throttling", "poor_placement"}


@dataclass
class Scenario:
    label: str
    model: str
    gpus: int
    onset: float  # seconds into the window when the problem starts (0: from the start)
    profiling: bool
    mig: bool
    seed: int


def make_scenarios(seed: int, per_class: int) -> list[Scenario]:
    rng = random.Random(seed)
    out: list[Scenario] = []
    for label, (_, models, gpu_counts) in SCENARIOS.items():
        for _ in range(per_class):
            profiling = not (label in WITHOUT_PROFILING and rng.random() < 0.25)
            mig = label in ("idle", "data_starvation", "healthy") and profiling and rng.random() < 0.2
            # Problems that are phases start mid-window after healthy training; a pod's placement and
            # its nature (a light inference service) do not change mid-run, so those start at 0.
            phase = label not in ("healthy", "insufficient_data", "wrong_gpu_type", "poor_placement")
            onset = rng.uniform(60, 240) if phase and rng.random() < 0.5 else 0.0
            out.append(
                Scenario(
                    label, rng.choice(models), rng.choice(gpu_counts), onset, profiling, mig, seed * 1000 + len(out)
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
    profile = SCENARIOS[s.label][0]
    samples = 20 if s.label == "insufficient_data" else int(window / step)
    indices = list(range(s.gpus)) if s.label != "poor_placement" else [1, 2]  # across sockets
    fleet: dict[str, Any] = {
        "seed": s.seed,
        "nodes": [
            {
                "name": "eval-node",
                "model": s.model,
                "gpus": 4,
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
    samples_of = []
    for index in indices:
        gpu, before = node.gpus[index], warmup.gpus[index]
        activities = []
        for k in range(samples):
            t = start + k * step
            started = k * step >= s.onset
            a = (
                workloads.PROFILES[profile](gpu, t, sample)
                if started
                else workloads.PROFILES["healthy_training"](before, t, sample)
            )
            a.cpu_fraction = 0.97 if profile == "data_starvation" and started else 0.4
            activities.append((t, a))
        samples_of.append((gpu, activities))
    frame = _frame(samples_of, rng, noise)
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
    cpu_limit = 8.0
    rows = []
    for gpu, activities in samples_of:
        model = gpu.model
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
                    gpu.numa_node,
                )
            )
    # The row tuples above are in the trace schema's order.
    frame = pd.DataFrame(rows, columns=["timestamp", "gpu", *tr.SIGNALS])
    for column in tr.RATIOS:
        frame[column] = np.clip(frame[column] + rng.normal(0, noise, len(frame)) * (frame[column] > 0), 0, 1)
    frame["gpu_util"] = frame["gpu_util"].round(2)
    frame["node"], frame["container"] = "eval-node", "main"
    return frame


#: Day-scale scenarios: the simulator's profile and the class it should get over its span.
DAY_SCENARIOS = {
    "serving": "overprovisioned_serving",
    "idle_replica": "idle",
    "notebook": "idle",
    "training_finished": "idle",
}
#: Seconds between samples, and spans of data, that every scenario is judged at.
INTERVALS = (1.0, 15.0, 30.0, 60.0)
SPANS = (600.0, 3600.0, 6 * 3600.0, DAY)


@dataclass
class DayScenario:
    profile: str
    model: str
    step: float
    span: float
    #: Seconds of the (UTC) day the span starts at: the whole span lies within one day.
    offset: float
    #: Only utilization and memory, like an nvidia-smi log (else every field, like DCGM).
    duty_only: bool
    seed: int


def make_day_scenarios(
    seed: int, per_profile: int, intervals: tuple[float, ...], spans: tuple[float, ...]
) -> list[DayScenario]:
    rng = random.Random(seed + 13)
    out: list[DayScenario] = []
    for step in intervals:
        for span in spans:
            for profile in DAY_SCENARIOS:
                for _ in range(per_profile):
                    if profile == "serving" and span < DAY:
                        offset = rng.uniform(9 * 3600, max(9 * 3600, 18 * 3600 - span))  # in working hours
                    else:
                        offset = rng.uniform(0, DAY - span)
                    model = rng.choice(["H100-SXM5-80GB", "A100-SXM4-80GB", "L40S"])
                    out.append(
                        DayScenario(profile, model, step, span, offset, rng.random() < 0.5, seed * 1000 + len(out))
                    )
    return out


def day_trace(s: DayScenario, noise: float = 0.03) -> tuple[pd.DataFrame, str]:
    """A day-scale scenario's trace, and the class it should get: insufficient_data with fewer samples
    than a verdict needs, idle for a serving replica that served nothing in the span."""
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
        finish=end_of_work, work_until=end_of_work, work_from=max(0.0, end_of_work - rng.uniform(1, 3) * 3600)
    )
    samples = int(s.span / s.step)
    profile = workloads.PROFILES[s.profile]
    activities = [(start + k * s.step, profile(gpu, start + k * s.step, min(s.step, 1.0))) for k in range(samples)]
    frame = _frame([(gpu, activities)], rng, noise)
    if s.duty_only:
        keep = {"gpu_util", "memory_used_bytes", "memory_total_bytes"}
        frame[[c for c in tr.SIGNALS if c not in keep]] = np.nan
    frame["gpu_model"] = gpu.model.name
    frame["namespace"], frame["pod"] = "eval", f"{s.profile}-{s.seed}"
    if samples < Thresholds().min_samples:
        label = "insufficient_data"
    elif s.profile == "serving" and profile(gpu, start + s.span, s.span).busy == 0:
        label = "idle"  # no request in the span: nothing served
    else:
        label = DAY_SCENARIOS[s.profile]
    return fr.normalize(frame), label


@dataclass
class Report:
    """What every scenario should have been called and was, with the sampling interval and span."""

    results: pd.DataFrame  # columns: interval, span, kind ("window" or "day"), profile, label, predicted
    #: What the no-profiling DRAM-bound probes were called (kept out of the confusion matrix).
    probe_predictions: list[str] = field(default_factory=list)

    @property
    def labels(self) -> list[str]:
        return list(self.results["label"])

    @property
    def predicted(self) -> list[str]:
        return list(self.results["predicted"])

    def intervals(self) -> list[float]:
        return sorted(self.results["interval"].unique())

    def _at(self, interval: float | None) -> pd.DataFrame:
        return self.results if interval is None else self.results[self.results["interval"] == interval]

    def confusion(self, interval: float | None = None) -> pd.DataFrame:
        r = self._at(interval)
        matrix = pd.crosstab(
            pd.Series(list(r["label"]), name="true"), pd.Series(list(r["predicted"]), name="predicted")
        )
        return matrix.reindex(index=list(CLASSES), columns=list(CLASSES), fill_value=0)

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

    def accuracy(self, interval: float | None = None) -> float:
        r = self._at(interval)
        return float((r["label"] == r["predicted"]).mean())

    def healthy_called_idle(self) -> int:
        r = self.results
        return int(((r["label"] == "healthy") & (r["predicted"] == "idle")).sum())

    def serving_told_to_release(self) -> int:
        """Serving replicas that served requests in their span and were called idle ("release the GPU")."""
        r = self.results
        return int(((r["label"] == "overprovisioned_serving") & (r["predicted"] == "idle")).sum())

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
    minutes), the day-scale ones over every span, judged as `gpulens analyze` judges files."""
    records: list[tuple] = []
    probe_predictions: list[str] = []
    for step in intervals:
        span = max(600.0, 40 * step)
        scenarios = [replace(x, onset=x.onset * span / 600) for x in make_scenarios(seed, per_class)]
        checks = probes(seed)
        frames = [scenario_trace(x, window=span, step=step, noise=noise) for x in scenarios + checks]
        verdicts = {v.pod: v.bottleneck for v in analyze(pd.concat(frames, ignore_index=True), thresholds)}
        for x in scenarios:
            records.append((step, span, "window", SCENARIOS[x.label][0], x.label, verdicts[f"{x.label}-{x.seed}"]))
        probe_predictions += [verdicts[f"{x.label}-{x.seed}"] for x in checks]
    by_cell: dict[tuple[float, float], list[tuple[DayScenario, pd.DataFrame, str]]] = {}
    for d in make_day_scenarios(seed, per_day_profile, intervals, spans):
        by_cell.setdefault((d.step, d.span), []).append((d, *day_trace(d, noise)))
    for (step, span), cell in by_cell.items():
        verdicts = {
            v.pod: v.bottleneck for v in analyze(pd.concat([f for _, f, _ in cell], ignore_index=True), thresholds)
        }
        for d, _, label in cell:
            records.append((step, span, "day", d.profile, label, verdicts[f"{d.profile}-{d.seed}"]))
    results = pd.DataFrame(records, columns=["interval", "span", "kind", "profile", "label", "predicted"])
    return Report(results, probe_predictions)


def render(report: Report) -> str:
    short = {c: c[:10] for c in CLASSES}
    lines = []
    for interval in report.intervals():
        matrix = report.confusion(interval)
        present = [c for c in CLASSES if matrix.loc[c].sum() or matrix[c].sum()]
        matrix = matrix.loc[present, present].rename(index=short, columns=short)
        pods = len(report._at(interval))
        lines += [
            f"sampled every {interval:g} s: {pods} pods, accuracy {report.accuracy(interval):.3f}, "
            f"macro-F1 {report.macro_f1(interval):.3f} (rows: true class, columns: predicted)",
            matrix.to_string(),
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
        "memory_bandwidth claimed without profiling fields: "
        + ("never" if report.never_claims_memory_bandwidth_without_profiling() else "YES"),
    ]
    return "\n".join(lines)
