"""Did the change work? Each change a workload went through (analyzer/judging/changes.py), judged over two windows
of equal length that leave its transition out: what the workload held, cost, did and wasted before it and after,
on one footing; the saving it realised for the work it did; and its health after, in a word (held, regressed,
too early) with its reason and confidence, as verdicts give theirs (docs/changes.md).

The figures come from what the report measured already: each unit's GPU samples binned over the span (use.Use:
GPUs held, work done), its verdict's episodes (waste and class), and, for serving, its engine's own counts over
each window (inputs/engines.py: requests, queue, KV cache, latency), read by the caller.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Literal

import numpy as np

from gpulens.analyzer.inputs.cluster import WorkloadHistory
from gpulens.analyzer.inputs.engines import LATENCY_QUANTILE, Health, Spread
from gpulens.analyzer.inputs.proposals import Proposal, ProposalReader
from gpulens.analyzer.judging.changes import Change, PodSpell, changes, held_changes
from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.evidence import duration
from gpulens.analyzer.outputs.actions import MONTH_HOURS, Action
from gpulens.analyzer.outputs.use import Use
from gpulens.core.catalog import gpu_share_of, model_info
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import rfc3339

#: What became of a change: it held (nothing it protects got worse), it regressed (the reason says what got worse
#: and what would have held), or its windows are too short to tell yet.
Word = Literal["held", "regressed", "too_early"]

DAY = 86400.0
#: Points a window's profile keeps: enough to show a day's shape, few enough for every change of a fleet.
PROFILE_POINTS = 48


@dataclass(frozen=True)
class Footing:
    """A workload over one window (unix seconds, `start` to `end`): what its pods held, cost, did and wasted, each
    a day's worth (the window's figure over its length in days)."""

    start: float
    end: float
    #: Mean GPUs its pods held, a MIG slice as its share of one (catalog.gpu_share_of), from their samples.
    gpus_held: float
    #: What they held cost a day, at the price of each pod's GPU model (--prices, OpenCost, the catalogue), a MIG
    #: slice its share of it.
    cost_usd_per_day: float
    #: GPU-hours of work a day: activity (SM activity, else utilization) times the GPU time held.
    work_gpu_hours_per_day: float
    #: GPU-hours a day its verdicts' episodes booked as waste, pro rata where an episode crosses the window, and
    #: what they cost.
    waste_gpu_hours_per_day: float
    waste_usd_per_day: float
    #: The class that held most of its GPU time in the window ("" where its pods held none).
    bottleneck: str
    #: Requests its engine finished a day, and its health (serving pods whose engine exports its metrics only).
    requests_per_day: float = math.nan
    health: Health | None = None
    #: Its course through the window, at most PROFILE_POINTS points: (seconds from the window's start, GPUs held,
    #: GPUs' worth of work), each the mean over its part of the window (what the HTML report plots).
    profile: tuple[tuple[float, float, float], ...] = ()

    @property
    def work_per_gpu_hour(self) -> float:
        """The share of each GPU-hour held that did work (0-1): a job's pace on its GPU; NaN where none was held."""
        held = self.gpus_held * 24.0
        return self.work_gpu_hours_per_day / held if held > 0 else math.nan


@dataclass(frozen=True)
class Outcome:
    """One change and what became of it (docs/changes.md)."""

    change: Change
    team: str
    #: What the workload is (notebook, serving, job, unknown: analyzer/inputs/kinds.py).
    workload_kind: str
    word: Word
    confidence: float
    #: Why the word, first what got worse where it regressed, and what would have held.
    reason: str
    #: The length of each window (seconds): before ends a step before the change was first seen, after begins
    #: change_settle_seconds after its last step (a rollout, a model loading), cut short by the span and by the
    #: workload's other changes; 0 where there is no room for a window.
    window_seconds: float
    before: Footing | None
    after: Footing | None
    #: USD a day the change saved for the work done after it (negative: it cost more), and how it was reckoned.
    saving_usd_per_day: float
    saving_basis: str
    #: What gpulens' plan had proposed for the workload before the change, where the store kept its series.
    proposed: Proposal | None = None
    evidence: dict[str, str] = field(default_factory=dict)

    @property
    def saving_usd_per_30d(self) -> float:
        return self.saving_usd_per_day * MONTH_HOURS / 24.0

    def saving_words(self) -> str:
        """Its saving in words: what it saves a day and 30 days, or what more it costs."""
        if self.saving_usd_per_day < 0:
            return f"costs ${-self.saving_usd_per_day:,.2f} a day more (${-self.saving_usd_per_30d:,.0f} / 30 d)"
        return f"saves ${self.saving_usd_per_day:,.2f} a day (${self.saving_usd_per_30d:,.0f} / 30 d)"

    def to_dict(self) -> dict:
        """As the JSON report gives it: the change's fields, then what became of it (docs/changes.md)."""
        return {
            **asdict(self.change),
            "team": self.team,
            "workload_kind": self.workload_kind,
            "word": self.word,
            "confidence": self.confidence,
            "reason": self.reason,
            "window_seconds": self.window_seconds,
            "measured_before": asdict(self.before) if self.before is not None else None,
            "measured_after": asdict(self.after) if self.after is not None else None,
            "saving_usd_per_day": self.saving_usd_per_day,
            "saving_usd_per_30d": round(self.saving_usd_per_30d, 2),
            "saving_basis": self.saving_basis,
            "proposed": asdict(self.proposed) if self.proposed is not None else None,
            "evidence": self.evidence,
        }


@dataclass(frozen=True)
class Windows:
    """Where a change's two windows lie (unix seconds): before is [before_start, before_end], after is
    [after_start, after_end], each `length` long; `short_side` names the side that left too little room."""

    before_start: float
    before_end: float
    after_start: float
    after_end: float
    length: float
    short_side: Literal["", "before", "after"]


def windows_of(
    change: Change, others: Sequence[Change], span: tuple[float, float], step: float, t: Thresholds
) -> Windows:
    """The windows of `change` in the report's `span` (start, end), given the `others` its workload went
    through: each as long as the shorter side allows, at most change_window_max_seconds."""
    before_end = change.start - step
    after_start = change.end + t.change_settle_seconds
    earliest = max([span[0], *(c.end + t.change_settle_seconds for c in others if c.end < change.start)])
    latest = min([span[1], *(c.start - step for c in others if c.start > change.end)])
    room_before, room_after = before_end - earliest, latest - after_start
    length = max(0.0, min(room_before, room_after, t.change_window_max_seconds))
    short: Literal["", "before", "after"] = ""
    if length < t.change_window_min_seconds:
        short = "after" if room_after <= room_before else "before"
    return Windows(before_end - length, before_end, after_start, after_start + length, length, short)


#: Reads a workload's health over a window: (namespace, its pods, start, end) -> Health, None where no engine
#: of its pods counts requests.
HealthReader = Callable[[str, list[str], float, float], Health | None]


def footing(
    units: Sequence[Verdict], use: Use, step: float, start: float, end: float, prices: dict[str, float]
) -> Footing:
    """The footing of the workload whose units are `units` between `start` and `end`."""
    days = (end - start) / DAY
    wasted = wasted_cost = cost = 0.0
    covered, held, worked = use.held_by_bin("", start, end, step)  # the window's bins, nothing held yet
    time_by_class: dict[str, float] = defaultdict(float)
    for v in units:
        # A MIG slice counts as its share of a GPU, in what it holds, does and costs.
        share = gpu_share_of(v.gpu_model)
        price = model_info(v.gpu_model, prices).price_per_hour / 3600.0
        _, unit_held, unit_worked = use.held_by_bin(v.unit, start, end, step)
        unit_held, unit_worked = unit_held * share, unit_worked * share
        held, worked, cost = held + unit_held, worked + unit_worked, cost + float(unit_held.sum()) * price
        for e in v.episodes:
            overlap = min(e.end, end) - max(e.start, start)
            if overlap <= 0:
                continue
            # Its waste pro rata the GPU time held, not the clock: a pod away for a while wasted nothing then.
            in_window = use.held_and_worked(v.unit, max(e.start, start), min(e.end, end), step)[0]
            in_episode = use.held_and_worked(v.unit, e.start, e.end, step)[0]
            booked = e.wasted_gpu_seconds * share * (in_window / in_episode if in_episode > 0 else 0.0)
            wasted, wasted_cost = wasted + booked, wasted_cost + booked * price
            time_by_class[e.bottleneck] += in_window
    return Footing(
        start,
        end,
        float(held.sum()) / (end - start),
        cost / days,
        float(worked.sum()) / 3600.0 / days,
        wasted / 3600.0 / days,
        wasted_cost / days,
        max(time_by_class, key=lambda name: time_by_class[name]) if held.sum() > 0 and time_by_class else "",
        profile=_profile(use, start, covered, held, worked),
    )


def _profile(
    use: Use, start: float, covered: np.ndarray, held: np.ndarray, worked: np.ndarray
) -> tuple[tuple[float, float, float], ...]:
    """The window's bins (`covered` seconds of each, GPU-seconds `held` and `worked` in them) merged into at most
    PROFILE_POINTS parts, each (seconds from `start` to its middle, GPUs held, GPUs' worth of work)."""
    inside = np.flatnonzero(covered > 0)
    if not len(inside):
        return ()
    middles = use.bins.middles(use.bins.order())  # of the bins in time order, as `covered` holds them
    out = []
    for part in np.array_split(inside, min(PROFILE_POINTS, len(inside))):
        seconds = float(covered[part].sum())
        middle = float(middles[part[len(part) // 2]]) - start
        out.append(
            (
                round(middle, 1),
                round(float(held[part].sum()) / seconds, 3),
                round(float(worked[part].sum()) / seconds, 3),
            )
        )
    return tuple(out)


def over_span(
    history: WorkloadHistory,
    verdicts: Sequence[Verdict],
    use: Use,
    span: tuple[float, float, float],
    t: Thresholds,
    prices: dict[str, float],
    health: HealthReader | None = None,
    proposals: ProposalReader | None = None,
) -> list[Outcome]:
    """Every change the workloads of `verdicts` (those whose pods held GPUs) went through over `span` (start, end,
    step: unix seconds), found in kube-state-metrics' `history` and in the GPUs their pods held (`use`), in time
    order, and what became of each (outcomes())."""
    held = {v.workload for v in verdicts if v.pod}
    found = changes(history, t.change_settle_seconds, held)
    found += held_changes(spells(verdicts, use), t.change_settle_seconds, span[1], {c.workload for c in found})
    found.sort(key=lambda c: (c.start, c.workload, c.what))
    return outcomes(found, verdicts, use, span, t, prices, health, proposals)


def outcomes(
    changes: Sequence[Change],
    verdicts: Sequence[Verdict],
    use: Use,
    span: tuple[float, float, float],
    t: Thresholds,
    prices: dict[str, float],
    health: HealthReader | None = None,
    proposals: ProposalReader | None = None,
) -> list[Outcome]:
    """What became of each of `changes` over the report's `span` (start, end, step: unix seconds), from the
    report's `verdicts` and `use`; `health` reads a serving workload's engine over a window and `proposals` the
    plan's proposal for a workload before a time (owner, at, lookback), where the store is read (None: files)."""
    start, end, step = span
    by_workload: dict[str, list[Verdict]] = defaultdict(list)
    for v in verdicts:
        if v.pod:
            by_workload[v.workload].append(v)
    out = []
    for change in changes:
        units = by_workload.get(change.workload, [])
        others = [c for c in changes if c.workload == change.workload and c is not change]
        # A workload made within the span has no before earlier than its first sample: an empty stretch would
        # dilute what it held and cost before.
        first = min((e.start for v in units for e in v.episodes), default=start)
        w = windows_of(change, others, (max(start, first), end), step, t)
        out.append(_outcome(change, others, units, w, use, step, t, prices, health, proposals))
    return out


def _outcome(
    change: Change,
    others: Sequence[Change],
    units: Sequence[Verdict],
    w: Windows,
    use: Use,
    step: float,
    t: Thresholds,
    prices: dict[str, float],
    health: HealthReader | None,
    proposals: ProposalReader | None,
) -> Outcome:
    kind = _kind(units)
    team = next((v.team for v in units if v.team), "")
    proposed = proposals(change.workload, w.before_end, t.change_window_max_seconds) if proposals else None
    returned = _returned(change, others, kind, t)
    if w.short_side and returned is None:
        reason = (
            f"too early to tell: {duration(w.length)} after it, fewer than the {duration(t.change_window_min_seconds)} "
            "each window needs; report again later"
            if w.short_side == "after"
            else f"too little history before it in the span ({duration(w.length)} of the "
            f"{duration(t.change_window_min_seconds)} a window needs): report a span that starts earlier"
        )
        return Outcome(change, team, kind, "too_early", 0.0, reason, w.length, None, None, math.nan, "", proposed)
    before = _measured(units, use, step, w.before_start, w.before_end, prices, change, health)
    after = _measured(units, use, step, w.after_start, w.after_end, prices, change, health)
    saving, basis = _saving(change, before, after)
    evidence = _evidence(before, after)
    confidence = 1.0 if w.length >= t.change_window_trusted_seconds else t.plan_short_confidence
    if w.length < t.change_window_trusted_seconds:
        evidence["windows"] = (
            f"{duration(w.length)} each, under a day: the day's pattern is not seen; report again after a day"
        )
    word, reason = _word(change, kind, before, after, returned, t)
    if word == "held" and kind == "serving" and after.health is None and change.fewer:
        confidence = min(confidence, t.plan_short_confidence)
        evidence["health"] = "no engine series (vLLM, TGI, Triton, SGLang): a queue it may have raised is not seen"
    return Outcome(
        change, team, kind, word, confidence, reason, w.length, before, after, saving, basis, proposed, evidence
    )


def _word(
    change: Change, kind: str, before: Footing, after: Footing, returned: float | None, t: Thresholds
) -> tuple[Word, str]:
    """Held or regressed, and why: a culled notebook its user came back to, what its engine counted got worse
    (said first, with the replicas that would have held), else what held."""
    if returned is not None:
        return "regressed", (
            f"regressed: the notebook was back {duration(returned)} after its cull, within the "
            f"{duration(t.plan_cull_seconds)} a cull should outlast: a cull shorter than its user's pauses; set the "
            "culler's timeout past them"
        )
    worse = _worse(before.health, after.health)
    if worse:
        return "regressed", f"regressed: {'; '.join(worse)}" + _would_hold(change, before, after)
    if before.health is not None and after.health is not None:
        return "held", "held: its queue and latency stayed within their spread before the change"
    if kind == "serving":
        return "held", "held: nothing it serves is counted to have got worse"
    if kind == "job" and after.gpus_held > 0:
        pace = f"{before.work_per_gpu_hour:.0%} to {after.work_per_gpu_hour:.0%}"
        return "held", f"held: its work per GPU-hour went from {pace}"
    if kind == "notebook" and change.fewer:
        return "held", "held: no user came back to it within the span"
    return "held", "held: nothing it protects is counted to have got worse"


def spells(verdicts: Sequence[Verdict], use: Use) -> list[PodSpell]:
    """Each pod's time holding GPUs, from its samples (use.Use: to a bin), with the GPUs it held in words."""
    out = []
    for v in verdicts:
        seen = use.first_and_last(v.unit) if v.pod else None
        if seen is not None:
            held = f"{len(v.gpus)} x {v.gpu_model or 'unknown GPU'}"
            out.append(PodSpell(v.namespace, v.workload, v.workload_kind, held, *seen))
    return out


def mark_done(actions: Sequence[Action], outcomes: Sequence[Outcome]) -> None:
    """Mark each action whose workload already went through a change toward it in the span (fewer replicas or
    bounds where it proposes fewer GPUs, more where more): Action.done says the latest such change, when, and
    what became of it. The plan itself stays what the span's use calls for."""
    for action in actions:
        toward = [
            o for o in outcomes if o.change.workload == action.owner and _toward(o, action.gpus_after < action.gpus_now)
        ]
        if toward:
            o = toward[-1]
            c = o.change
            saving = f", {o.saving_words()}" if o.before is not None else ""
            action.done = f"{c.what} {c.values()} at {rfc3339(c.start)}: {o.word.replace('_', ' ')}{saving}"


def _toward(o: Outcome, fewer: bool) -> bool:
    """Whether `o`'s change cut what its workload holds where `fewer` (else added to it): by its values, or
    where they do not say (another GPU) by what it cost a day before and after."""
    cut = o.change.fewer
    if cut is None and o.before is not None and o.after is not None:
        cut = o.after.cost_usd_per_day < o.before.cost_usd_per_day
    return cut is not None and cut == fewer


def _kind(units: Sequence[Verdict]) -> str:
    kinds = {v.workload_kind for v in units} - {"unknown"}
    return min(kinds) if len(kinds) == 1 else "unknown"


def _returned(change: Change, others: Sequence[Change], kind: str, t: Thresholds) -> float | None:
    """Seconds until a culled notebook's next start, where it came back within plan_cull_seconds (a cull set
    too short); None otherwise."""
    if kind != "notebook" or change.what not in ("replicas", "ended") or not change.fewer:
        return None
    back = [c.start - change.end for c in others if c.start > change.end and c.fewer is False]
    first = min(back, default=math.inf)
    return first if first <= t.plan_cull_seconds else None


def _measured(
    units: Sequence[Verdict],
    use: Use,
    step: float,
    start: float,
    end: float,
    prices: dict[str, float],
    change: Change,
    health: HealthReader | None,
) -> Footing:
    """The footing of the units over a window, with its engine's health where it is read: of a workload whose pods
    run a serving engine (their image's, or one whose metrics the report read), not asked of the others."""
    found = footing(units, use, step, start, end, prices)
    pods = [v.pod for v in units]
    serves = any(v.engine or v.engine_load is not None for v in units)
    counted = health(change.namespace, pods, start, end) if health is not None and serves else None
    if counted is None:
        return found
    return replace(found, requests_per_day=counted.requests / ((end - start) / DAY), health=counted)


def _work(before: Footing, after: Footing) -> tuple[float, float, str]:
    """The work of each window a day, in the measure both have: requests where the engine counted them in
    both, else GPU-hours of work."""
    if before.requests_per_day > 0 and after.requests_per_day >= 0:
        return before.requests_per_day, after.requests_per_day, "requests"
    return before.work_gpu_hours_per_day, after.work_gpu_hours_per_day, "GPU-hours of work"


def _saving(change: Change, before: Footing, after: Footing) -> tuple[float, str]:
    """USD a day saved for the work done after, and how: a size an autoscaler sets follows the load, so the
    old bounds are costed at the before's cost per unit of work for the work after (a quieter week saves
    nothing; a busier one did not cost more); a fixed size costs the same whatever the work it holds."""
    work_before, work_after, measure = _work(before, after)
    if change.what.startswith("autoscaler") and work_before > 0:
        at_old = before.cost_usd_per_day * work_after / work_before
        basis = (
            f"an autoscaler sizes it to its load: before, ${before.cost_usd_per_day:,.2f} a day for "
            f"{_amount(work_before, measure)} a day; at that cost per unit of work, the {_amount(work_after, measure)} "
            f"a day after would have cost ${at_old:,.2f}; it cost ${after.cost_usd_per_day:,.2f}"
        )
    else:
        at_old = before.cost_usd_per_day
        why = (
            "no work before to cost the work after by"
            if change.what.startswith("autoscaler")
            else "a fixed size costs the same whatever work it holds"
        )
        basis = (
            f"{why}: before, ${before.cost_usd_per_day:,.2f} a day ({before.gpus_held:.2f} GPUs held, "
            f"{_amount(work_before, measure)} a day); after, ${after.cost_usd_per_day:,.2f} ({after.gpus_held:.2f} "
            f"GPUs, {_amount(work_after, measure)} a day)"
        )
    return round(at_old - after.cost_usd_per_day, 2), basis


def _worse(before: Health | None, after: Health | None) -> list[str]:
    """What got worse past the before window's own spread: the queue (its median after above the before's
    percentile, and at least one request waiting) or a latency (its median after above the before's
    percentile)."""
    if before is None or after is None:
        return []
    worse = []
    if after.waiting.median >= 1.0 and after.waiting.median > before.waiting.at_percentile:
        worse.append(
            f"requests waiting rose to a median of {after.waiting.median:g}, past its p{before.percentile * 100:g} of "
            f"{before.waiting.at_percentile:g} before"
        )
    for name, of in (("time to first token", "first_token_seconds"), ("request latency", "request_seconds")):
        was: Spread = getattr(before, of)
        now: Spread = getattr(after, of)
        if now.median > was.at_percentile:
            worse.append(
                f"{name} (p{LATENCY_QUANTILE * 100:g}) rose to a median of {now.median:.2f} s, past its "
                f"p{before.percentile * 100:g} of {was.at_percentile:.2f} s before"
            )
    return worse


def _would_hold(change: Change, before: Footing, after: Footing) -> str:
    """The replicas that would have held the load after, where the change cut replicas: the before's load per
    replica held, so as many replicas as the load after needs at it (at most the before's). Where requests queued
    after, what was finished after is less than what came (those that waited, or whose clients gave up, are not
    counted): the replicas are then a floor, said "at least"."""
    if change.what != "replicas" or not change.fewer:
        return ""
    assert isinstance(change.before, float) and isinstance(change.after, float)
    work_before, work_after, measure = _work(before, after)
    if not work_before > 0:
        return ""
    needed = min(change.before, max(change.after + 1, math.ceil(change.before * work_after / work_before - 1e-9)))
    queued = after.health is not None and after.health.waiting.median >= 1.0
    came = "were finished after, and more waited" if queued else "came after"
    return (
        f"; {'at least ' if queued else ''}{needed:g} replicas would have held it: before, {change.before:g} served "
        f"{_amount(work_before, measure)} a day within that spread, and {_amount(work_after, measure)} a day {came}"
    )


def _amount(work: float, measure: str) -> str:
    """A day's work in words: requests whole, GPU-hours to a tenth."""
    return f"{work:,.0f} {measure}" if measure == "requests" else f"{work:,.1f} {measure}"


def _evidence(before: Footing, after: Footing) -> dict[str, str]:
    """The figures each window measured, before -> after, in words."""
    evidence = {
        "gpus_held": f"{before.gpus_held:.2f} -> {after.gpus_held:.2f}",
        "cost_usd_per_day": f"{before.cost_usd_per_day:,.2f} -> {after.cost_usd_per_day:,.2f}",
        "work_gpu_hours_per_day": f"{before.work_gpu_hours_per_day:,.2f} -> {after.work_gpu_hours_per_day:,.2f}",
        "waste_gpu_hours_per_day": f"{before.waste_gpu_hours_per_day:,.2f} -> {after.waste_gpu_hours_per_day:,.2f}",
        "class": f"{before.bottleneck or '(no GPU)'} -> {after.bottleneck or '(no GPU)'}",
    }
    if before.health is not None and after.health is not None:
        evidence["requests_per_day"] = f"{before.requests_per_day:,.0f} -> {after.requests_per_day:,.0f}"
        evidence["requests_waiting_median"] = f"{before.health.waiting.median:g} -> {after.health.waiting.median:g}"
        if not math.isnan(before.health.kv_cache.median):
            evidence["kv_cache_median"] = f"{before.health.kv_cache.median:.0%} -> {after.health.kv_cache.median:.0%}"
    return evidence
