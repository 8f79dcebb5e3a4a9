"""Memory: fragmentation (a pod near its GPU's memory while its work is low) and bandwidth (DRAM busy while the
math pipes wait)."""

from __future__ import annotations

import math

from gpulens.analyzer.judging.evidence import Evidence, percent, share
from gpulens.analyzer.judging.features import PodFeatures
from gpulens.analyzer.judging.rules.base import Finding, Rule
from gpulens.core.catalog import GpuModel
from gpulens.core.thresholds import Thresholds


def memory_fragmentation(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """Memory near full and growing, with the process dying and restarting or staying full for long."""
    if not f.memory_peak >= t.memory_full:
        return None
    if f.memory_spread < t.preallocator_flatness or f.memory_spread_after_load < t.preallocator_flatness:
        return None  # flat and high (after its model load): a pre-allocating server (vLLM, JAX, TensorRT-LLM)
    grew = f.memory_peak - f.memory_low >= t.memory_growth
    restarted = f.memory_drops >= 1 or f.restarts_max > f.restarts_min
    full_for_long = f.memory_full_share * f.window_seconds >= t.memory_full_seconds
    if not (grew and (restarted or full_for_long)):
        return None
    evidence = {
        "memory_peak_fraction": Evidence(share(f.memory_peak), " >= ", share(t.memory_full)),
        "memory_range": f"{percent(f.memory_low)}..{percent(f.memory_peak)} (grew >= {percent(t.memory_growth)})",
    }
    if restarted:
        evidence["restarts_or_oom_drops"] = f"{f.memory_drops:.0f} drops" + (
            "" if math.isnan(f.restarts_max) else f", {f.restarts_max - f.restarts_min:.0f} restarts"
        )
    confidence = (
        t.confidence_fragmentation
        + (t.confidence_fragmentation_restarts if restarted else 0.0)
        + (t.confidence_fragmentation_full if full_for_long else 0.0)
    )
    if f.capacity_from_catalogue:
        evidence["memory_capacity"] = (
            f"the catalogue's for the {f.gpu_model} (or the most used, where more): the input has no memory total "
            "(dcgm-exporter without DCGM_FI_DEV_FB_FREE)"
        )
    return Finding("memory_fragmentation", confidence, evidence)


def memory_bandwidth(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """DRAM near its peak while the compute pipes idle: only profiling fields can show it."""
    if not f.has_profiling or not f.dram_bound_share >= t.signature_fraction:
        return None
    evidence = {
        "dram_bound_fraction": Evidence(
            share(f.dram_bound_share),
            f" of samples with DRAM >= {percent(t.dram_active)} and pipes < {percent(t.pipes_idle)}",
        ),
        "dram_active": percent(f.dram_active),
    }
    return Finding("memory_bandwidth", t.confidence_share_base + t.confidence_share_gain * f.dram_bound_share, evidence)


FRAGMENTATION = Rule(
    ("memory_fragmentation",),
    memory_fragmentation,
    features=(
        "capacity_from_catalogue",
        "gpu_model",
        "memory_drops",
        "memory_full_share",
        "memory_low",
        "memory_peak",
        "memory_spread",
        "memory_spread_after_load",
        "restarts_max",
        "restarts_min",
        "window_seconds",
    ),
    thresholds=(
        "confidence_fragmentation",
        "confidence_fragmentation_full",
        "confidence_fragmentation_restarts",
        "memory_full",
        "memory_full_seconds",
        "memory_growth",
        "preallocator_flatness",
    ),
)
BANDWIDTH = Rule(
    ("memory_bandwidth",),
    memory_bandwidth,
    features=("dram_active", "dram_bound_share", "has_profiling"),
    thresholds=("confidence_share_base", "confidence_share_gain", "dram_active", "pipes_idle", "signature_fraction"),
)

#: This module's rules, in the order they are tried (rules.RULES).
RULES: tuple[Rule, ...] = (
    FRAGMENTATION,
    BANDWIDTH,
)
