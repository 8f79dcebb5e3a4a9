"""The gates, judged before any cause and deciding alone where they hold: too few samples to judge (and a GPU no
pod holds), and idle (work that stopped or never came, sparse use, a replica that serves nothing)."""

from __future__ import annotations

import math

from gpulens.analyzer.judging.evidence import Evidence, percent, seconds, share
from gpulens.analyzer.judging.features import PodFeatures
from gpulens.analyzer.judging.rules.base import SPARSE, Finding, Rule, memory_held, served, sparse_use, start_up
from gpulens.core.activity import BUSY_LEVEL
from gpulens.core.catalog import GpuModel
from gpulens.core.thresholds import Thresholds


def gpu_without_pod(f: PodFeatures, t: Thresholds) -> Finding:
    """A GPU no pod holds: held without a pod when memory above a CUDA context stays used on most samples or
    kernels run (busy on sparse_busy_share or more of the samples), else unallocated capacity."""
    evidence = {"pod": "none: the kubelet assigned this GPU to no pod, while it assigned others"}
    held = f.model_held_share >= t.signature_fraction
    if held:
        evidence["memory_held_fraction"] = Evidence(
            share(f.model_held_share),
            f" of samples hold >= {t.serving_memory_bytes / 1024**3:g} GiB >= ",
            share(t.signature_fraction),
            ": a process outside any pod",
        )
    busy = 1.0 - f.quiet_share
    working = busy >= t.sparse_busy_share  # False where the data has no activity (NaN)
    if working:
        evidence[SPARSE] = Evidence(share(busy), " >= ", share(t.sparse_busy_share), ": kernels run without a pod")
    memory_held(f, evidence)
    return Finding("held_without_pod" if held or working else "unallocated", t.confidence_without_pod, evidence)


# --- the signatures, in docs/signals.md's order ----------------------------------------------------
def insufficient_data(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    per_gpu_samples = f.samples / f.gpus
    if per_gpu_samples >= t.min_samples and f.has_activity:
        return None
    return Finding(
        "insufficient_data",
        1.0,
        {
            "samples_per_gpu": f"{per_gpu_samples:.0f} < {t.min_samples}"
            if f.has_activity
            else "no utilization or activity signal at all"
        },
    )


def idle(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """No work for the last idle_seconds (or the whole window), after sustained work, or none, or
    quiet far longer than any pause while it worked: the work stopped, rather than paused between
    requests or notebook cells. Or sparse use (_sparse)."""
    found = _sparse(f, t) or _nothing_served(f, t)
    if found:
        return found
    # Idle after a model load is measured from the load's end, and the load is no work.
    idle_for = min(t.idle_seconds, f.window_seconds if math.isnan(f.steady_seconds) else f.steady_seconds)
    quiet = f.trailing_idle_seconds
    if quiet < idle_for - f.sample_seconds / 2:
        return None
    worked = not math.isnan(f.busy_before_share) and not (f.load_seen and f.last_busy < f.load_end)
    # Pauses are measured only from samples that resolve them: from sparse point samples, the
    # "pauses" between the few busy samples seen are chance, and a replica would be told to go.
    resolved = f.sample_seconds <= t.starvation_max_sample_seconds
    stopped = resolved and quiet >= t.idle_pause_factor * f.longest_pause_seconds
    if worked and f.busy_before_share < t.idle_sustained_share and not stopped:
        return None
    if f.cpu_at_limit_after_work >= t.signature_fraction:
        return None  # the pod's CPU is at its limit meanwhile: working, not idle (input pipeline, CPU eval)
    evidence = {
        "idle_for_seconds": Evidence(
            seconds(quiet), " >= ", seconds(idle_for), f" (activity < {percent(t.idle_activity)})"
        ),
        **start_up(f),
    }
    if worked and f.busy_before_share >= t.idle_sustained_share:
        evidence["busy_before_fraction"] = Evidence(
            share(f.busy_before_share),
            f" of the {t.recent_samples} samples before >= ",
            share(t.idle_sustained_share),
            ": sustained work that stopped",
        )
    elif worked:
        evidence["longest_pause_while_working_seconds"] = Evidence(
            seconds(f.longest_pause_seconds),
            f": quiet {quiet / f.longest_pause_seconds:.1f}x longer >= {t.idle_pause_factor:g}x",
        )
    memory_held(f, evidence)
    confident = f.idle_share >= t.idle_confident_share
    return Finding("idle", t.confidence_idle if confident else t.confidence_idle_partly, evidence)


def _sparse(f: PodFeatures, t: Thresholds) -> Finding | None:
    """Work on under sparse_busy_share of a window of an hour or more: idle whatever the pattern of the few
    blips (a notebook's rare cells, a replica that loaded its model and served nothing), unless the pod's
    CPU is at its limit meanwhile (working on the CPU). Measured in seconds of work (work_share), not in
    samples that caught a blip: at 30 s, a 2 s health check caught by one row is not 30 s of work. Read
    after the start-up (a model load is no work served)."""
    if not f.steady_seconds >= t.sparse_span_seconds or not f.work_share < t.sparse_busy_share:
        return None
    if f.cpu_at_limit_share >= t.signature_fraction:
        return None
    evidence = {SPARSE: sparse_use(f.work_share, f.steady_seconds, t), **start_up(f)}
    memory_held(f, evidence)
    # Any work at all: requests still arrive (a replica's quiet hour), where a stopped job's hour has none.
    return Finding("idle", t.confidence_sparse, evidence, served=f.work_share > 0, facts=frozenset({"sparse_use"}))


def _nothing_served(f: PodFeatures, t: Thresholds) -> Finding | None:
    """No burst of work (activity rising through BUSY_LEVEL) in idle_seconds or more of steady state, and
    under sparse_busy_share of it worked: a replica that loaded its model and served nothing, a notebook
    left open. Its blips (health checks, probes, the model load before) are no work served, however coarse
    the samples that caught them."""
    if not f.steady_seconds >= t.idle_seconds or served(f, t):
        return None
    if f.cpu_at_limit_share >= t.signature_fraction:
        return None
    evidence = {
        "no_burst_seconds": Evidence(
            seconds(f.steady_seconds),
            " >= ",
            seconds(t.idle_seconds),
            f" without a burst of work (activity rising through {percent(BUSY_LEVEL)}), ",
            *sparse_use(f.work_share, f.steady_seconds, t).parts,
        ),
        **start_up(f),
    }
    memory_held(f, evidence)
    return Finding("idle", t.confidence_idle_partly, evidence)


INSUFFICIENT_DATA_RULE = Rule(
    ("insufficient_data",),
    insufficient_data,
    features=("gpus", "has_activity", "samples"),
    thresholds=("min_samples",),
    gate=True,
)
IDLE_RULE = Rule(
    ("idle",),
    idle,
    features=(
        "bursts_after_load",
        "busy_before_share",
        "cpu_at_limit_after_work",
        "cpu_at_limit_share",
        "idle_share",
        "last_busy",
        "load_end",
        "load_seen",
        "longest_pause_seconds",
        "memory_peak_bytes",
        "sample_seconds",
        "start",
        "start_up_seconds",
        "steady_seconds",
        "trailing_idle_seconds",
        "window_seconds",
        "work_share",
    ),
    thresholds=(
        "confidence_idle",
        "confidence_idle_partly",
        "confidence_sparse",
        "idle_activity",
        "idle_confident_share",
        "idle_pause_factor",
        "idle_seconds",
        "idle_sustained_share",
        "recent_samples",
        "signature_fraction",
        "sparse_busy_share",
        "sparse_span_seconds",
        "starvation_max_sample_seconds",
    ),
    gate=True,
)

#: This module's rules, in the order they are tried (rules.RULES).
RULES: tuple[Rule, ...] = (
    INSUFFICIENT_DATA_RULE,
    IDLE_RULE,
)
