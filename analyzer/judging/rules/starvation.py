"""data_starvation: bursts of work between gaps with no kernel, at a training step's steady period, the
input not keeping up; and the evidence of bursts and of the resolution that can see them."""

from __future__ import annotations

import math

from gpulens.analyzer.judging.evidence import Evidence, percent, seconds, share
from gpulens.analyzer.judging.features import PodFeatures
from gpulens.analyzer.judging.rules.base import Finding, Rule, fmt
from gpulens.analyzer.judging.rules.host_stall import host_transfers
from gpulens.core.catalog import GpuModel
from gpulens.core.thresholds import Thresholds


def data_starvation(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """Bursts near full activity and gaps near zero, switching several times a minute at a steady
    period (training steps, not requests), from samples fine enough to show them; else (coarser samples,
    or bursts that do not switch like steps) only a pod whose CPU sits at its limit while the GPU waits."""
    if host_transfers(f, t, info) == "both ways":
        return None  # parameters in and gradients out at offload's volume: CPU offload's (host_stall), not input
    cpu_saturated = f.cpu_at_limit_share >= t.signature_fraction
    coarse = f.resolution_seconds > t.starvation_max_sample_seconds
    switches = f.switches / f.gpus / max(f.window_seconds / 60.0, 1e-9)
    if coarse or not (
        f.high_share > t.starvation_tail
        and f.low_share > t.starvation_tail
        and switches >= t.starvation_switches_per_minute
    ):
        if not (cpu_saturated and f.activity_at_cpu_limit < t.ineffective_sm):
            return None
        evidence = {
            "cpu_at_limit_fraction": Evidence(share(f.cpu_at_limit_share), " >= ", share(t.signature_fraction)),
            "activity_while_cpu_at_limit": f"{percent(f.activity_at_cpu_limit)} < {percent(t.ineffective_sm)}",
        }
        if coarse:
            evidence["sample_interval_seconds"] = Evidence(
                seconds(f.resolution_seconds),
                " > ",
                seconds(t.starvation_max_sample_seconds, "g"),
                ": too coarse to see the bursts and gaps of training steps; judged on the CPU alone",
            )
        else:
            evidence["busy_idle_switches_per_minute"] = (
                f"{switches:.1f} < {t.starvation_switches_per_minute}: not the bursts and gaps of training steps; "
                "judged on the CPU alone"
            )
        return Finding("data_starvation", t.confidence_starvation_coarse, evidence)
    measured = f.bursts >= t.min_bursts
    regular = measured and bursts_steady(f, t)
    if not (regular or cpu_saturated):
        # Bursts at random (requests arriving), or too few to time (a serving period's edges, a warm-up), and
        # the CPU does not say otherwise: nothing here shows a starved input pipeline.
        return None
    evidence = {
        "activity_p95_above": f"{percent(t.starvation_high)} ({percent(f.high_share)} of samples)",
        "activity_p5_below": f"{percent(t.starvation_low)} ({percent(f.low_share)} of samples)",
        "busy_idle_switches_per_minute": f"{switches:.1f} >= {t.starvation_switches_per_minute}",
    }
    if measured:
        burst_evidence(f, t, evidence)
    else:
        evidence["bursts"] = f"{f.bursts:.0f} < {t.min_bursts}: too few to tell training steps from requests"
    resolution_evidence(f, t, evidence)
    if not math.isnan(f.cpu_at_limit_share):
        evidence["cpu_at_limit_fraction"] = Evidence(share(f.cpu_at_limit_share))
    cpu = t.confidence_starvation_cpu if cpu_saturated else 0.0
    return Finding("data_starvation", t.confidence_starvation + cpu, evidence)


def bursts_steady(f: PodFeatures, t: Thresholds) -> bool:
    """Bursts at a steady period, like training steps: from the exporter's steady-burst counters where
    the trace has them, else from the spread of the time between burst starts in the rows."""
    if f.has_shape:
        return bool(f.steady_burst_share >= t.starvation_steady_share)
    return bool(f.burst_spread <= t.starvation_regularity)


def burst_evidence(f: PodFeatures, t: Thresholds, evidence: dict[str, str]) -> None:
    steady = bursts_steady(f, t)
    if f.has_shape:
        evidence["steady_burst_fraction"] = Evidence(
            share(f.steady_burst_share),
            f" of {f.bursts:.0f} bursts started within 1.5x of the previous period",
            f" (>= {percent(t.starvation_steady_share)}: steady, like training steps)"
            if steady
            else f" (< {percent(t.starvation_steady_share)}: at random, like requests)",
        )
    else:
        evidence["burst_period_seconds"] = Evidence(
            seconds(f.burst_period_seconds, ".3g"),
            f", spread {fmt(f.burst_spread)}",
            f" <= {t.starvation_regularity}: steady, like training steps"
            if steady
            else f" > {t.starvation_regularity}: at random, like requests",
        )


def resolution_evidence(f: PodFeatures, t: Thresholds, evidence: dict[str, str]) -> None:
    if f.has_shape:
        evidence["driver_samples"] = (
            f"{f.shape_samples:.0f}, one every {f.resolution_seconds:.3g} s, counted by the exporter between "
            f"rows {f.sample_seconds:.3g} s apart"
        )
    else:
        evidence["sample_interval_seconds"] = Evidence(
            seconds(f.sample_seconds, ".3g"), " <= ", seconds(t.starvation_max_sample_seconds, "g")
        )


DATA_STARVATION_RULE = Rule(
    ("data_starvation",),
    data_starvation,
    features=(
        "activity_at_cpu_limit",
        "burst_period_seconds",
        "burst_spread",
        "bursts",
        "cpu_at_limit_share",
        "device_to_host_in_gaps_bytes_per_second",
        "gpus",
        "has_shape",
        "high_share",
        "host_to_device_in_gaps_bytes_per_second",
        "low_share",
        "resolution_seconds",
        "sample_seconds",
        "shape_samples",
        "steady_burst_share",
        "switches",
        "window_seconds",
    ),
    thresholds=(
        "confidence_starvation",
        "confidence_starvation_coarse",
        "confidence_starvation_cpu",
        "ineffective_sm",
        "min_bursts",
        "offload_pcie_bytes_per_second",
        "offload_return_share",
        "signature_fraction",
        "starvation_high",
        "starvation_low",
        "starvation_max_sample_seconds",
        "starvation_regularity",
        "starvation_steady_share",
        "starvation_switches_per_minute",
        "starvation_tail",
    ),
)

#: This module's rules, in the order they are tried (rules.RULES).
RULES: tuple[Rule, ...] = (DATA_STARVATION_RULE,)
