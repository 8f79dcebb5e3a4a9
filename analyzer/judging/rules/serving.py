"""overprovisioned_serving: a replica that holds a model and serves bursts far below its GPU's capacity."""

from __future__ import annotations

import math

from gpulens.analyzer.judging.evidence import Evidence, byte_count, percent, seconds, share
from gpulens.analyzer.judging.features import PodFeatures
from gpulens.analyzer.judging.rules.base import Fact, Finding, Rule, is_oversized, served
from gpulens.analyzer.judging.rules.starvation import burst_evidence, bursts_steady, resolution_evidence
from gpulens.core.activity import BUSY_LEVEL
from gpulens.core.catalog import GpuModel
from gpulens.core.thresholds import Thresholds


def overprovisioned_serving(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """A model held in memory, work in bursts with quiet spells between them, low activity overall: a
    serving replica with more GPU than requests. Not idle: it works whenever requests come. Not bursts
    measured at a steady period: those are training steps, not requests."""
    if (
        not f.activity < t.ineffective_sm
        or f.model_held_share < t.serving_held_share
        or f.quiet_share < t.serving_quiet_share
        or not served(f, t)
    ):
        return None
    if f.cpu_at_limit_share >= t.signature_fraction:
        return None  # a replica waits for requests; a pod at its CPU limit is busy feeding its GPU
    if is_oversized(f, t, info, f.activity):
        return None  # a sliver of a high-end GPU: a smaller GPU or a MIG slice is the sharper fix
    measured = f.resolution_seconds <= t.starvation_max_sample_seconds and f.bursts >= t.min_bursts
    if measured and bursts_steady(f, t):
        return None
    evidence = _serving_evidence(f, t)
    seen = f"{f.bursts_after_load:.0f} bursts of work between them" if f.bursts_after_load else "work without bursts"
    evidence["quiet_fraction"] = Evidence(
        share(f.quiet_share), " of samples >= ", share(t.serving_quiet_share), f" ({seen})"
    )
    if measured:
        burst_evidence(f, t, evidence)
        if f.has_shape:
            resolution_evidence(f, t, evidence)
    elif f.resolution_seconds <= t.starvation_max_sample_seconds:
        evidence["bursts"] = f"{f.bursts:.0f} < {t.min_bursts} above {percent(BUSY_LEVEL)}: too few to time"
    else:
        evidence["sample_interval_seconds"] = Evidence(
            seconds(f.resolution_seconds, ".3g"), ": too coarse to time single bursts"
        )
    confidence = t.confidence_serving if measured else t.confidence_serving_untimed
    quiet = f.trailing_idle_seconds >= max(
        t.idle_seconds - f.sample_seconds / 2, t.idle_pause_factor * _or_zero(f.longest_pause_seconds)
    )
    facts: frozenset[Fact] = frozenset({"quiet_at_end"}) if quiet else frozenset()
    return Finding("overprovisioned_serving", confidence, evidence, served=True, facts=facts)


def _or_zero(value: float) -> float:
    return 0.0 if math.isnan(value) else value


def _serving_evidence(f: PodFeatures, t: Thresholds) -> dict[str, str]:
    return {
        "mean_activity": f"{percent(f.activity)} < {percent(t.ineffective_sm)}",
        "model_memory_bytes": model_memory(f),
    }


def model_memory(f: PodFeatures) -> Evidence:
    return Evidence(byte_count(f.memory_peak_bytes), f" held on {percent(f.model_held_share)} of samples")


SERVING = Rule(
    ("overprovisioned_serving",),
    overprovisioned_serving,
    features=(
        "activity",
        "burst_period_seconds",
        "burst_spread",
        "bursts",
        "bursts_after_load",
        "cpu_at_limit_share",
        "has_shape",
        "longest_pause_seconds",
        "memory_peak_bytes",
        "model_held_share",
        "quiet_share",
        "resolution_seconds",
        "sample_seconds",
        "shape_samples",
        "steady_burst_share",
        "trailing_idle_seconds",
        "window_seconds",
        "work_share",
    ),
    thresholds=(
        "confidence_serving",
        "confidence_serving_untimed",
        "idle_pause_factor",
        "idle_seconds",
        "ineffective_sm",
        "min_bursts",
        "oversized_activity",
        "oversized_memory_bytes",
        "serving_held_share",
        "serving_quiet_share",
        "signature_fraction",
        "sparse_busy_share",
        "starvation_max_sample_seconds",
        "starvation_regularity",
        "starvation_steady_share",
    ),
)

#: This module's rules, in the order they are tried (rules.RULES).
RULES: tuple[Rule, ...] = (SERVING,)
