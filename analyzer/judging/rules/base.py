"""What every rule shares: a Finding (the class a signature found, its confidence, evidence and cause), the
Signature a rule is, the Settles record of the evidence that rules out a rival, and the evidence several rules
write the same way (a start-up left out, the memory a model holds, sparse use, the waste of waiting)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from gpulens.analyzer.judging.evidence import Evidence, byte_count, duration, percent, share
from gpulens.analyzer.judging.features import PodFeatures
from gpulens.core.catalog import GpuModel
from gpulens.core.thresholds import Thresholds


def worked(activity: float, waiting_share: float | None) -> float:
    """The share of GPU time that did work (0-1), what waste is counted from: mean `activity`, less the
    samples busy at low power where they count as no work (Verdict.waiting_share)."""
    return activity * (1.0 - (waiting_share or 0.0))


def wasted_seconds(activity: float, waiting_share: float | None, gpu_seconds: float) -> float:
    """GPU-seconds of `gpu_seconds` that did no work: the share worked() leaves, of the GPU time held. A window's
    waste (classify) and a slot's (history.Ledger) are both this."""
    return (1.0 - worked(activity, waiting_share)) * gpu_seconds


#: The evidence key of sparse use called idle (_sparse): history.py lets it judge the start of the data.
SPARSE = "busy_fraction"
#: What a verdict found beyond its class that outputs act on (Verdict.facts), typed rather than read from
#: its evidence: a hardware XID on its GPUs (the plan leaves it to be repaired), NVLinks down or failing (the
#: same), idle judged on sparse use (history lets a later window that saw enough judge the data's start), bursts
#: of work whose window ends quiet for idle_seconds or more and idle_pause_factor times its longest pause while it
#: worked (a notebook's kernel idle now, where Kubernetes says the unit is a notebook: history.notebook_relabels()).
Fact = Literal["xid_fault", "nvlink_fault", "sparse_use", "quiet_at_end"]


@dataclass(frozen=True)
class Finding:
    """What a signature found: the class, how sure (0-1, from Thresholds' confidences), the evidence that
    decided it, the cause it found where its class names several (host_stall: a STALL_CAUSES key, whose fix
    the verdict gives), the share of samples whose kernel ran as no work where activity cannot show it
    (Verdict.waiting_share), whether work was still being served (Verdict.served), and its facts."""

    bottleneck: str
    confidence: float
    evidence: dict[str, str]
    cause: str = ""
    waiting_share: float | None = None
    served: bool = False
    facts: frozenset[Fact] = frozenset()
    #: Classes whose evidence held too, which the finding's evidence settled against (Verdict.secondary).
    also: tuple[str, ...] = ()


#: A signature: a Finding when it holds for the unit, else None.
Signature = Callable[[PodFeatures, Thresholds, GpuModel], "Finding | None"]


def fmt(value: float) -> str:
    return f"{value:.3g}"


def is_oversized(f: PodFeatures, t: Thresholds, info: GpuModel, activity: float | None) -> bool:
    """A sliver of a high-end GPU used, in activity and in memory, by a pod that is not idle."""
    return (
        info.high_end
        and activity is not None
        and activity <= t.oversized_activity
        and not math.isnan(f.memory_peak_bytes)
        and f.memory_peak_bytes <= t.oversized_memory_bytes
        and f.trailing_idle_seconds < min(t.idle_seconds, f.window_seconds)
    )


def served(f: PodFeatures, t: Thresholds) -> bool:
    """Work seen after the start-up, as serving requests would leave it: a burst (activity rising through
    BUSY_LEVEL), or sparse_busy_share of the time worked (coarse samples may catch requests only part-way)."""
    return f.bursts_after_load >= 1 or f.work_share >= t.sparse_busy_share


def start_up(f: PodFeatures) -> dict[str, str]:
    """The evidence of a start-up left out of the steady state the verdict read: the rows before the features'
    start (a process starting with the data: pod_features), or those before load_end within them."""
    seconds = f.start_up_seconds if f.start_up_seconds > 0 else f.load_end - f.start if f.load_seen else 0.0
    if not seconds > 0:
        return {}
    return {"start_up": f"a model load and its warm-up, the first {seconds:.0f} s, left out"}


def sparse_use(work: float, span_seconds: float, t: Thresholds) -> Evidence:
    """The evidence of sparse use: `work` (0-1) of `span_seconds` of a GPU's time worked."""
    return Evidence(
        share(work),
        f" of {duration(span_seconds)} worked ({duration(work * span_seconds)}) < ",
        share(t.sparse_busy_share),
        ": sparse use (rare notebook cells, a replica with no requests) is idle",
    )


def memory_held(f: PodFeatures, evidence: dict[str, str]) -> None:
    if not math.isnan(f.memory_peak_bytes):
        evidence["memory_held_bytes"] = Evidence(byte_count(f.memory_peak_bytes))


@dataclass(frozen=True)
class Settles:
    """Evidence (a key a signature writes) that rules out a rival class where both signatures hold: the
    evidence that excludes the other decides, never the order they run in. docs/analyzer.md's class table
    names each, beside its class (tests/test_weighing.py holds the two to each other)."""

    rivals: tuple[str, ...]
    #: Why it rules them out, in words the verdict's `deciding` evidence quotes.
    why: str
    #: The classes whose signatures write the key: the rule's (Rule.finds), filled in where the rules are
    #: ordered (rules/__init__.py).
    of: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    """A signature as one unit, in the module that holds its decision and its helpers: the classes its
    findings name, whether it is a gate (judged first, deciding alone where it holds) or a cause (every one
    tried, weighed against the others that hold), what it reads, and by evidence key what its evidence settles."""

    finds: tuple[str, ...]
    decide: Signature
    #: What its decision reads, however deep within the rules (tests/test_classes.py holds the two equal): the
    #: PodFeatures fields (analyzer/judging/features.py) and the Thresholds (core/thresholds.py, with sources).
    features: tuple[str, ...] = ()
    thresholds: tuple[str, ...] = ()
    gate: bool = False
    settles: Mapping[str, Settles] = field(default_factory=dict)


def waiting_waste(found: Finding, f: PodFeatures, t: Thresholds) -> Finding:
    """`found` with its waste counting the samples busy at low power as no work, where activity is
    utilization or graphics-engine activity (no SM activity): both say only that a kernel ran, and a kernel
    spinning on a peer runs all the time. With SM activity, activity already shows the SMs idle."""
    if not math.isnan(f.sm_active) or math.isnan(f.activity):
        return found
    found.evidence["waste"] = (
        f"the {percent(f.waiting_share)} of samples busy under {percent(t.waiting_power_share)} of the power "
        "limit counted as no "
        "work (utilization shows only that a kernel ran)"
    )
    return replace(found, waiting_share=float(f.waiting_share))
