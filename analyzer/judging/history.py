"""Verdicts over hours or days: an analysis window slides across the data, and each pod gets its
episodes (runs of one class), the share of time and the waste in each class, and one headline verdict
for the whole span: the problem that wasted the most, not whatever the last minutes looked like.

The span is cut into slots of `step` seconds. The window that ends with a slot (the last `window`
seconds) decides the slot's class; a slot that window cannot judge (too few samples yet, at the start
of the data or of a pod) takes the class of the first later window that covers it and can. Time and
waste are counted per slot, from the slot's own samples, so that a job that stopped an hour ago counts
an hour of idle, not a window's worth. All windows are reduced at once: a pass per window offset
(window / step passes), each a single vectorised reduction over every pod and window.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs.engines import EngineLoad
from gpulens.analyzer.inputs.kinds import UNKNOWN, PodKey, WorkloadKind
from gpulens.analyzer.inputs.owners import Owner
from gpulens.analyzer.judging.classify import (
    XID_FAULTS,
    ClassShare,
    DayUse,
    Episode,
    Judgement,
    Verdict,
    judge,
    judgements,
)
from gpulens.analyzer.judging.evidence import duration
from gpulens.analyzer.judging.features import PerSample, UnitKeys, pod_features
from gpulens.analyzer.judging.rules.base import SPARSE, sparse_use, wasted_seconds
from gpulens.core.bottlenecks import (
    BY_NAME,
    HEALTHY,
    IDLE,
    INSUFFICIENT_DATA,
    OVERPROVISIONED_SERVING,
    PROBLEMS,
    RECOMMENDATIONS,
    UNEXPLAINED,
)
from gpulens.core.catalog import device_price
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import for_people

#: What a rest of a span was (rest_kinds()): a pause of a workload in use, a rest before the first work the span
#: saw, or the rest after its work stopped.
Rest = Literal["pause", "before", "stopped"]

#: The shortest default window: long enough for a serving replica's quiet spells to be pauses.
MIN_DEFAULT_WINDOW = 3600.0


def default_window(sample_seconds: float, t: Thresholds) -> tuple[float, float]:
    """Window and step for data sampled every `sample_seconds`: an hour, or longer when an hour holds
    fewer than twice the samples a verdict needs; the step a quarter of it."""
    window = max(MIN_DEFAULT_WINDOW, 2 * t.min_samples * sample_seconds)
    return window, window / 4


def sample_interval(trace: pd.DataFrame, keys: UnitKeys) -> float:
    """The median seconds between one GPU's consecutive samples, over the whole trace (1.0 if none)."""
    ts, gpu = trace["timestamp"].to_numpy(), keys.gpu
    if keys.order is not None:
        ts, gpu = ts[keys.order], gpu[keys.order]
    spacing = np.diff(ts)[gpu[1:] == gpu[:-1]]
    return float(np.median(spacing)) if len(spacing) else 1.0


def analyze(
    trace: pd.DataFrame,
    t: Thresholds | None = None,
    prices: dict[str, float] | None = None,
    window: float | None = None,
    step: float | None = None,
    workloads: Mapping[str, WorkloadKind] | None = None,
    engines: Mapping[str, EngineLoad] | None = None,
) -> list[Verdict]:
    """Per unit (pod, or GPU no pod holds): its headline verdict, with episodes and shares by class, and what
    its workload is and its engine counted where `workloads` and `engines` say (by unit, "namespace/pod";
    kinds.py, engines.py). Without `workloads`, the trace's own WORKLOAD columns say (workloads_in()).

    window and step are seconds (None: default_window()). Data spanning no more than one window gets
    one verdict for all of it, as classify() gives."""
    t = t or Thresholds()
    if trace.empty:
        return []
    keys = UnitKeys.of(trace)
    fr.require_few_enough(int(keys.unit.max()) + 1)
    window, step = window_and_slide(window, step, lambda: sample_interval(trace, keys), t)
    ts = trace["timestamp"].to_numpy()
    workloads = workloads_in(trace) if workloads is None else workloads
    engines = engines or {}
    if float(ts.max()) - float(ts.min()) < window:
        return judged_whole(trace, t, prices, lambda unit: workloads.get(unit, UNKNOWN), engines.get, keys)
    found = ledgers(trace, t, prices, window, step, keys=keys)
    return [ledger.verdict(t, workloads.get(unit, UNKNOWN), engines.get(unit)) for unit, ledger in found.items()]


def judged_whole(
    trace: pd.DataFrame,
    t: Thresholds,
    prices: dict[str, float] | None,
    workload: Callable[[str], WorkloadKind],
    engine: Callable[[str], EngineLoad | None],
    keys: UnitKeys | None = None,
) -> list[Verdict]:
    """Data spanning less than one window (a file, a short report): one verdict a unit for all of it, as
    classify() gives, with what its workload is and its engine counted (by unit, "namespace/pod")."""
    if trace.empty:
        return []
    return [
        with_workload(v, workload(v.unit), engine(v.unit), t)
        for v in judge(pod_features(trace, t, keys=keys), t, prices)
    ]


#: What a trace's WORKLOAD columns are, as a verdict's kind_source says it.
TRACE_KIND_SOURCE = "the trace's workload_kind column"


def workloads_in(trace: pd.DataFrame) -> dict[str, WorkloadKind]:
    """What each pod of a trace is, by unit ("namespace/pod"), where its WORKLOAD columns (core/trace.py) say:
    its latest row that names a kind. Empty for a trace without them."""
    if "workload_kind" not in trace:
        return {}
    said = trace[trace["pod"].ne("").to_numpy() & trace["workload_kind"].ne("").to_numpy()]
    latest = said.sort_values("timestamp", kind="stable").drop_duplicates(["namespace", "pod"], keep="last")
    return {
        f"{namespace}/{pod}": WorkloadKind(kind, engine if kind == "serving" else "", TRACE_KIND_SOURCE)
        for namespace, pod, kind, engine in latest[["namespace", "pod", "workload_kind", "engine"]].itertuples(
            index=False
        )
        if kind != "unknown"
    }


def with_owners(verdicts: list[Verdict], owners: dict[PodKey, Owner]) -> list[Verdict]:
    """The verdicts with their pods' owners and teams (unchanged where the owner is not known)."""
    out = []
    for v in verdicts:
        owner = owners.get((v.namespace, v.pod))
        if owner is None:
            out.append(v)
            continue
        workload = owner.workload
        out.append(
            replace(
                v,
                owner_kind=owner.kind,
                owner=owner.name,
                team=owner.team,
                workload_kind=workload.kind,
                engine=workload.engine,
                kind_source=workload.source,
            )
        )
    return out


def with_workload(v: Verdict, workload: WorkloadKind, engine: EngineLoad | None, t: Thresholds) -> Verdict:
    """A verdict of one window (classify()'s) with what its workload is and what its engine counted, by the
    rules of Ledger.verdict(): a notebook's bursts are cells, never requests; a replica whose engine finished no
    request is idle, one that finished requests never is. Its time and waste stay as judged."""
    if not v.pod:
        return v  # a GPU no pod holds is no workload
    samples = v.window_seconds * v.coverage / v.sample_seconds if v.sample_seconds > 0 else math.inf
    worked = Worked(math.nan if v.work_share is None else v.work_share, samples, intensity(v))
    name = dict(workload_relabels(workload, engine, worked, t)).get(v.bottleneck, v.bottleneck)
    if workload.kind == "notebook" and engine is None and name != IDLE and "quiet_at_end" in v.facts:
        name = IDLE  # its kernel is idle now (Ledger._quiet_now())
    said = _workload_evidence(workload, name) | ({"engine": engine_evidence(engine)} if engine is not None else {})
    if name == v.bottleneck and not said and v.kind == workload:
        return v  # nothing to add: most verdicts of a live cycle, so it copies none of them
    if name != v.bottleneck:
        v = replace(
            _as_class(v, name),
            episodes=[replace(e, bottleneck=name) for e in v.episodes],  # one window, one class: all of it
            by_class={name: v.by_class[v.bottleneck]} if v.bottleneck in v.by_class else {},
        )
    return replace(
        v,
        evidence=v.evidence | said,
        workload_kind=workload.kind,
        engine=workload.engine,
        kind_source=workload.source,
        engine_load=engine,
    )


def intensity(v: Verdict) -> float:
    """A verdict's mean activity while it worked (as Ledger.worked() measures it): its mean activity over its share not
    idle; NaN where either is unknown or it never worked."""
    if v.mean_activity is None or v.idle_ratio is None or v.idle_ratio >= 1.0:
        return math.nan
    return v.mean_activity / (1.0 - v.idle_ratio)


def window_and_slide(
    window: float | None, slide: float | None, interval: Callable[[], float], t: Thresholds
) -> tuple[float, float]:
    """The analysis window and how far it slides (seconds): as given, else default_window() for data sampled every
    `interval()` seconds (asked only where one is not given); check_slide()'s ValueError where they cannot go
    together."""
    if window is None or slide is None:
        auto_window, auto_slide = default_window(interval(), t)
        window, slide = window or auto_window, slide or min(auto_slide, window or auto_slide)
    check_slide(window, slide)
    return window, slide


def check_slide(window: float, slide: float) -> None:
    """ValueError where the window does not slide forward, or slides further than it is long: windows would skip
    data. (The flags' words: the report's --window and --step.)"""
    if not (window > 0 and 0 < slide <= window):
        raise ValueError(
            f"--step ({slide:g} s) must be positive and at most --window ({window:g} s): windows would skip data"
        )


def ledgers(
    trace: pd.DataFrame,
    t: Thresholds,
    prices: dict[str, float] | None,
    window: float,
    step: float,
    origin: float | None = None,
    counted: tuple[float, float] = (-math.inf, math.inf),
    keys: UnitKeys | None = None,
) -> dict[str, Ledger]:
    """Each unit's ledger of the slots that start within `counted` (unix seconds, [from, to)).

    Slots are `step` seconds from `origin` (default: the first sample). A span read in pieces gives the
    ledgers of reading it whole when every piece shares the origin, counts its own slots, and holds a
    window of samples before and after them: the windows that judge its slots, and the later windows a
    slot falls back on (_slot_verdict), are then all in it. Ledger.merge() joins the pieces."""
    if trace.empty:
        return {}
    keys = keys or UnitKeys.of(trace)
    ts = trace["timestamp"].to_numpy()
    origin = float(ts.min()) if origin is None else origin
    slot = ((ts - origin) // step).astype(np.int64)
    first_slot, slots, per_window = int(slot.min()), int(slot.max()) + 1, max(1, round(window / step))
    # The verdict of the window ending with each slot, by unit.
    by_window: dict[str, dict[int, Judgement]] = defaultdict(dict)
    # Each pass's windows' features, from what each sample shows made once (whichever window it falls in), then
    # judged once that is let go: the windows' features are a few MB, the samples' signals hundreds.
    per_sample = PerSample.of(trace, t, keys)
    passes = []
    for offset in range(per_window):
        end_slot = slot + (offset - slot) % per_window
        end_slot[end_slot >= slots] = -1  # windows that would end after the data
        passes.append(pod_features(trace, t, window=end_slot, keys=keys, per_sample=per_sample))
    del per_sample
    for features in passes:
        for unit, k, judgement in zip(features.index, features["window"], judgements(features, t, prices), strict=True):
            if k >= first_slot:
                by_window[str(unit)][int(k)] = judgement
    own = _slots(trace, keys, slot, slots, t)
    low, high = (counted[0] - origin) / step, (counted[1] - origin) / step
    own = own[(own["window"] >= low) & (own["window"] < high)]
    out: dict[str, Ledger] = {}
    if own.empty:
        return out
    # _slots() gives each unit's slots together, in time order: its rows are one run of the arrays, which are
    # taken from the frame once (a column selection per unit cost more than judging its slots).
    units = own.index.to_numpy()
    rows = own[list(_SLOT_COLUMNS)].to_numpy(dtype=float)
    funnels = own[[f"{name}_{part}" for name in FUNNEL for part in ("mean", "samples")]].to_numpy(dtype=float)
    bounds = np.flatnonzero(units[1:] != units[:-1]) + 1
    for first, last in zip(np.r_[0, bounds], np.r_[bounds, len(units)], strict=True):
        unit, ledger = units[first], Ledger()
        for (k, samples, activity, idle, work, ts_min, ts_max), shares in zip(
            rows[first:last], funnels[first:last], strict=True
        ):
            judged = _slot_verdict(by_window[str(unit)], int(k), per_window, t)
            if judged is not None:
                ledger.add(int(k), judged, samples, activity, idle, work, ts_min, ts_max, prices)
                for day, part in day_parts(ts_min, ts_max + judged.sample_seconds):
                    ledger.days[day].add_funnel(shares, judged.sample_seconds * part)
        if ledger.episodes:
            ledger.write_out()
            out[str(unit)] = ledger
    return out


_SLOT_COLUMNS = ("window", "samples", "activity", "idle", "work", "ts_min", "ts_max")
#: The efficiency funnel's fields, each a share of the time held (showback.md, "The efficiency funnel"): a kernel
#: ran (utilization), the SMs were active (profiling fields), and the tensor FLOPs delivered of the peak (OFU).
FUNNEL = ("busy", "sm_active", "flop")


def _funnel_fields(trace: pd.DataFrame) -> dict[str, pd.Series]:
    """Each sample's funnel fields (FUNNEL), NaN where the trace does not carry what one needs."""
    return {"busy": trace["gpu_util"], "sm_active": trace["sm_active"], "flop": fr.flop_utilization(trace)}


def _slots(trace: pd.DataFrame, keys: UnitKeys, slot: np.ndarray, slots: int, t: Thresholds) -> pd.DataFrame:
    """What each slot's own samples show, per unit: how many, when, mean activity, share idle (from the
    exporter's histogram, every driver sample since the row before, where the trace carries it), and work
    (frame.work)."""
    activity = fr.activity(trace).to_numpy()
    idle = np.where(np.isnan(activity), np.nan, activity < t.idle_activity)
    if fr.has_shape(trace):
        counted = trace["activity_idle_ratio"].to_numpy()
        idle = np.where(np.isnan(counted), idle, counted)
    stats = (
        pd.DataFrame(
            {
                "key": keys.unit * slots + slot,
                "ts": trace["timestamp"].to_numpy(),
                "activity": activity,
                "idle": idle,
                "work": fr.work(trace) if fr.has_shape(trace) else activity,
                **{name: values.to_numpy() for name, values in _funnel_fields(trace).items()},
            }
        )
        .groupby("key", sort=True)
        .agg(
            samples=("ts", "size"),
            ts_min=("ts", "min"),
            ts_max=("ts", "max"),
            activity=("activity", "mean"),
            idle=("idle", "mean"),
            work=("work", "mean"),
            **{f"{name}_mean": (name, "mean") for name in FUNNEL},
            **{f"{name}_samples": (name, "count") for name in FUNNEL},
        )
    )
    names = keys.names(trace)
    key = stats.index.to_numpy()
    stats["window"] = key % slots
    stats.index = names[key // slots]
    return stats


def _slot_verdict(windows: dict[int, Judgement], k: int, per_window: int, t: Thresholds) -> Judgement | None:
    """The verdict of the window ending with slot k, or if it could not judge, of the first later
    window that covers slot k and could. A window that saw less than sparse_span_seconds (the start of
    the data) cannot tell sparse use from serving: where a later window that covers slot k saw enough to
    call it sparse, that is the slot's verdict."""
    first = windows.get(k)
    later = [v for v in (windows.get(j) for j in range(k + 1, k + per_window)) if v is not None]
    if first is not None and first.window_seconds < t.sparse_span_seconds:
        sparse = next((v for v in later if "sparse_use" in v.facts), None)
        if sparse is not None:
            return sparse
    if first is not None and first.bottleneck != INSUFFICIENT_DATA:
        return first
    return next((v for v in later if v.bottleneck != INSUFFICIENT_DATA), first)


#: Seconds in a day: showback's days are UTC days (unix seconds // DAY), as FOCUS' charge periods are.
DAY = 86400


def day_parts(start: float, end: float) -> list[tuple[int, float]]:
    """The UTC days (unix seconds // DAY) a slot from `start` to `end` (unix seconds) spans, each with its share of
    the slot's time: a slot that crosses midnight (a slide that does not divide a day) is split there, its samples
    taken as spread evenly over it."""
    first = int(start // DAY)
    last = max(first, math.ceil(end / DAY) - 1)  # a slot that ends at midnight is the day before's alone
    if first == last or end <= start:
        return [(first, 1.0)]
    return [
        (day, (min(end, (day + 1) * DAY) - max(start, day * DAY)) / (end - start)) for day in range(first, last + 1)
    ]


def day_name(day: int) -> str:
    """A UTC day (unix seconds // DAY) as ISO 8601 writes it: "2026-12-01"."""
    return time.strftime("%Y-%m-%d", time.gmtime(day * DAY))


@dataclass
class DayBook:
    """A ledger's seconds of one day (Ledger.days): device-seconds covered, judged (with an activity signal) and
    worked; and for each of the funnel's fields (FUNNEL), the device-seconds it was read over and its share of
    them (the field's mean x those seconds)."""

    covered: float = 0.0
    judged: float = 0.0
    worked: float = 0.0
    funnel: dict[str, tuple[float, float]] = field(default_factory=dict)

    def add(self, other: DayBook) -> None:
        self.covered += other.covered
        self.judged += other.judged
        self.worked += other.worked
        for name, (read, share) in other.funnel.items():
            had = self.funnel.get(name, (0.0, 0.0))
            self.funnel[name] = (had[0] + read, had[1] + share)

    def add_funnel(self, shares: np.ndarray, sample_seconds: float) -> None:
        """A slot's funnel: per field, its mean and the samples it was read in (FUNNEL's order, mean then count)."""
        for name, mean, samples in zip(FUNNEL, shares[0::2], shares[1::2], strict=True):
            if samples > 0:
                read = samples * sample_seconds
                had = self.funnel.get(name, (0.0, 0.0))
                self.funnel[name] = (had[0] + read, had[1] + float(mean) * read)


@dataclass
class Ledger:
    """One unit's time by class over a span: its episodes (runs of one class), oldest first, with the
    GPU-seconds each covered, the money it wasted and the confidence it was judged with; and, for a
    report, the newest verdict of each class and the busy and idle time. Totals by class are sums over
    the episodes, so that dropping old ones keeps them right.

    The one bookkeeping of `gpulens report` and of the live service: a report adds slots in time order
    (add) and merges the ledgers of consecutive pieces of a span (merge); the service records each
    cycle (record) and drops what is older than its history (prune)."""

    episodes: list[Episode] = field(default_factory=list)
    #: Per episode: the GPU-seconds it covered, the money it wasted, and confidence x GPU-seconds.
    episode_seconds: list[float] = field(default_factory=list)
    episode_cost: list[float] = field(default_factory=list)
    episode_weight: list[float] = field(default_factory=list)
    #: Per episode: whether its newest window still served work (Verdict.served: a replica's quiet hour, not
    #: the fading tail of work that stopped).
    episode_served: list[bool] = field(default_factory=list)
    #: The newest window verdict of each class: the headline's fix and evidence come from it (reports). A
    #: report's windows are booked as Judgements, and the newest written out at the end of a piece (write_out()).
    latest: dict[str, Verdict | Judgement] = field(default_factory=dict)
    gpus: set[str] = field(default_factory=set)
    busy_seconds: float = 0.0
    idle_seconds: float = 0.0
    work_seconds: float = 0.0
    judged_seconds: float = 0.0
    #: The first slot added, and the newest: an episode goes on only into the next slot.
    first_slot: int | None = None
    last_slot: int | None = None
    #: The newest hardware XID evidence of any window (classify.XID_FAULTS), with its window's end (unix
    #: seconds): a GPU at fault stays so whatever the windows after it were judged.
    xid_fault: tuple[float, str] | None = None
    #: A report's: per UTC day (unix seconds // DAY), the device-seconds its slots covered, those with an
    #: activity signal, their worked seconds, and the funnel's (day_uses(); a slot across midnight split there).
    days: dict[int, DayBook] = field(default_factory=dict)

    def record(
        self,
        verdict: Verdict | Judgement,
        start: float,
        end: float,
        covered: float,
        waste: float,
        cost: float,
        joins: bool,
    ) -> None:
        """From `start` to `end` (unix seconds) judged `verdict`, covering `covered` GPU-seconds that wasted
        `waste` GPU-seconds and `cost` money. `joins`: it follows the last episode without a gap, which it
        continues if the class is the same."""
        self.latest[verdict.bottleneck] = verdict
        self.gpus.update(verdict.gpus)
        if "xid_fault" in verdict.facts:
            self.xid_fault = (end, verdict.verdict().evidence[XID_FAULTS])
        last = self.episodes[-1] if self.episodes else None
        if joins and last is not None and last.bottleneck == verdict.bottleneck:
            last.extend(end, verdict.confidence, waste)
            self.episode_seconds[-1] += covered
            self.episode_cost[-1] += cost
            self.episode_weight[-1] += verdict.confidence * covered
            self.episode_served[-1] = verdict.served
        else:
            self.episodes.append(Episode(verdict.bottleneck, start, end, verdict.confidence, waste))
            self.episode_seconds.append(covered)
            self.episode_cost.append(cost)
            self.episode_weight.append(verdict.confidence * covered)
            self.episode_served.append(verdict.served)

    def add(
        self,
        k: int,
        verdict: Verdict | Judgement,
        samples: float,
        mean_activity: float,
        idle: float,
        work: float,
        ts_min: float,
        ts_max: float,
        prices: dict[str, float] | None,
    ) -> None:
        """Slot k: `samples` samples from ts_min to ts_max, judged `verdict`, with their mean activity,
        share idle and share worked (NaN where the input had no activity signal)."""
        covered = samples * verdict.sample_seconds
        activity = None if math.isnan(mean_activity) else float(mean_activity)
        waste = 0.0
        if activity is not None and BY_NAME[verdict.bottleneck].waste:
            waste = wasted_seconds(activity, verdict.waiting_share, covered)
        cost = waste / 3600 * device_price(verdict.gpu_model, prices)
        self.account(covered, activity, idle, work)
        end = float(ts_max + verdict.sample_seconds)
        for day, part in day_parts(float(ts_min), end):
            book = self.days.setdefault(day, DayBook())
            book.covered += covered * part
            if activity is not None:
                book.judged += covered * part
                book.worked += (activity if math.isnan(work) else float(work)) * covered * part
        self.record(verdict, float(ts_min), end, covered, waste, cost, joins=self.last_slot == k - 1)
        if self.first_slot is None:
            self.first_slot = k
        self.last_slot = k

    def account(self, covered: float, activity: float | None, idle: float, work: float) -> None:
        """`covered` GPU-seconds at mean `activity` (0-1; None where the input has no activity signal), a
        share `idle` of them idle and `work` of them worked (PodFeatures.work_share; NaN: unknown): what the
        span's mean activity, idle ratio and sparse use read."""
        if activity is not None:
            self.judged_seconds += covered
            self.busy_seconds += activity * covered
            self.idle_seconds += (0.0 if math.isnan(idle) else float(idle)) * covered
            self.work_seconds += (activity if math.isnan(work) else float(work)) * covered

    def write_out(self) -> None:
        """Write out the newest window verdict of each class (Judgement.verdict()), so that the ledger holds
        no window's features: a report's ledgers outlive the piece of the span they were judged in."""
        self.latest = {name: judged.verdict() for name, judged in self.latest.items()}

    def merge(self, later: Ledger) -> None:
        """Add the ledger of the next piece of the span (its slots all after this one's)."""
        self.latest.update(later.latest)
        self.gpus |= later.gpus
        self.xid_fault = later.xid_fault or self.xid_fault
        self.busy_seconds += later.busy_seconds
        self.idle_seconds += later.idle_seconds
        self.work_seconds += later.work_seconds
        self.judged_seconds += later.judged_seconds
        for day, book in later.days.items():
            self.days.setdefault(day, DayBook()).add(book)
        parts = list(
            zip(
                later.episodes,
                later.episode_seconds,
                later.episode_cost,
                later.episode_weight,
                later.episode_served,
                strict=True,
            )
        )
        last = self.episodes[-1] if self.episodes else None
        if parts and last is not None and last.bottleneck == parts[0][0].bottleneck:
            if self.last_slot is not None and later.first_slot == self.last_slot + 1:
                first, seconds, cost, weight, served = parts.pop(0)
                last.extend(first.end, first.confidence, first.wasted_gpu_seconds)
                self.episode_seconds[-1] += seconds
                self.episode_cost[-1] += cost
                self.episode_weight[-1] += weight
                self.episode_served[-1] = served
        for episode, seconds, cost, weight, served in parts:
            self.episodes.append(episode)
            self.episode_seconds.append(seconds)
            self.episode_cost.append(cost)
            self.episode_weight.append(weight)
            self.episode_served.append(served)
        self.last_slot = later.last_slot

    def prune(self, oldest: float, keep: int) -> None:
        """Drop the episodes that ended before `oldest`, and all but the newest `keep`."""
        drop = next((i for i, e in enumerate(self.episodes) if e.end >= oldest), len(self.episodes))
        drop = max(drop, len(self.episodes) - keep)
        if self.xid_fault is not None and self.xid_fault[0] < oldest:
            self.xid_fault = None
        del self.episodes[:drop], self.episode_seconds[:drop], self.episode_cost[:drop], self.episode_weight[:drop]
        del self.episode_served[:drop]

    def totals(self) -> tuple[dict[str, float], dict[str, float], dict[str, float], dict[str, float]]:
        """By class: GPU-seconds covered, GPU-seconds wasted, money wasted, and mean confidence."""
        seconds: dict[str, float] = defaultdict(float)
        wasted: dict[str, float] = defaultdict(float)
        cost: dict[str, float] = defaultdict(float)
        weight: dict[str, float] = defaultdict(float)
        for e, covered, money, judged in zip(
            self.episodes, self.episode_seconds, self.episode_cost, self.episode_weight, strict=True
        ):
            seconds[e.bottleneck] += covered
            wasted[e.bottleneck] += e.wasted_gpu_seconds
            cost[e.bottleneck] += money
            weight[e.bottleneck] += judged
        confidence = {name: weight[name] / seconds[name] if seconds[name] else 0.0 for name in seconds}
        return seconds, wasted, cost, confidence

    def day_uses(self) -> list[DayUse]:
        """Its use day by day (DayUse), oldest first: the slots' seconds as booked, and each episode's waste and
        cost split among the days it spans in proportion to its time in each (within an episode its class, and
        so its rate of waste, held)."""
        wasted: dict[int, float] = defaultdict(float)
        cost: dict[int, float] = defaultdict(float)
        for e, money in zip(self.episodes, self.episode_cost, strict=True):
            for day, part in day_parts(e.start, e.end):
                wasted[day] += e.wasted_gpu_seconds * part
                cost[day] += money * part
        return [
            DayUse(
                day_name(day),
                round(book.covered, 3),
                round(book.judged, 3),
                round(book.worked, 3),
                round(wasted.get(day, 0.0), 3),
                round(cost.get(day, 0.0), 6),
                {name: [round(read, 3), round(share, 3)] for name, (read, share) in sorted(book.funnel.items())},
            )
            for day, book in sorted(self.days.items())
        ]

    def by_class(self) -> dict[str, ClassShare]:
        seconds, wasted, cost, _ = self.totals()
        return class_shares(seconds, wasted, cost)

    def headline(self, t: Thresholds, workload: WorkloadKind = UNKNOWN, engine: EngineLoad | None = None) -> str:
        """The class of the unit's verdict over the span (verdict()): the one judgement every output serves."""
        return self.verdict(t, workload, engine).bottleneck

    def verdict(self, t: Thresholds, workload: WorkloadKind = UNKNOWN, engine: EngineLoad | None = None) -> Verdict:
        """The unit's verdict over the span, decided here and nowhere else: what the workload did and what to
        change. What the workload is (analyzer/inputs/kinds.py, from Kubernetes) and what its serving engine
        counted (analyzer/inputs/engines.py) settle what its GPU leaves open first (workload_relabels()); then
        its rests are told apart (rests()): pauses of a workload in use, or the rest after its work stopped.
        The class is that of its work (headline()); its episodes and shares by class are booked as decided
        (a replica's quiet hours as serving's, all of a sparse span as idle), so every output reads one story."""
        relabeled = self
        for old, new in workload_relabels(workload, engine, self.worked(), t):
            relabeled = relabeled._relabeled(old, new)
        if workload.kind == "notebook" and engine is None and self._quiet_now():
            relabeled = relabeled._rebooked({len(relabeled.episodes) - 1: IDLE})
            relabeled.latest.setdefault(IDLE, _as_class(self.latest[OVERPROVISIONED_SERVING].verdict(), IDLE))
        judged = relabeled._judged(t, workload)
        if engine is None:
            return judged
        return replace(judged, evidence=judged.evidence | {"engine": engine_evidence(engine)}, engine_load=engine)

    def worked(self) -> Worked:
        """How it worked over the span (Worked): its share of the time worked, from the samples of its newest
        window's interval, and its mean activity while it worked (over the samples that were not idle: a
        notebook's cells at 75% with long pauses between read 0.75 here, and 0.3 as a mean)."""
        if not self.judged_seconds:
            return Worked(math.nan, 0.0, math.nan)
        working = self.judged_seconds - self.idle_seconds
        interval = self.latest[self.episodes[-1].bottleneck].sample_seconds  # a unit's rows keep one interval
        samples = self.judged_seconds / max(len(self.gpus), 1) / interval if interval > 0 else math.inf
        return Worked(
            self.work_seconds / self.judged_seconds,
            samples,
            self.busy_seconds / working if working > 0 else math.nan,
        )

    def _quiet_now(self) -> bool:
        """Its newest episode was judged serving, and that window ended quiet far longer than it paused while
        it worked (the "quiet_at_end" fact): for a notebook, its kernel is idle now."""
        last = self.episodes[-1] if self.episodes else None
        return (
            last is not None
            and last.bottleneck == OVERPROVISIONED_SERVING
            and "quiet_at_end" in self.latest[OVERPROVISIONED_SERVING].facts
        )

    def _judged(self, t: Thresholds, workload: WorkloadKind) -> Verdict:
        """verdict() of this ledger's classes as they stand (the workload's relabels done)."""
        seen = rest_kinds(self.episodes, self.episode_served)
        booked = self._with_quiet_hours(t, workload.kind, seen)
        rests = rest_kinds(booked.episodes, booked.episode_served)
        seconds, wasted_by_class, cost, _ = booked.totals()
        # How sure of its class: its own windows', not those of the rests booked under it (idle's, which needs
        # no profiling fields, would lift a serving verdict over the cap without them).
        confidences = self.totals()[3]
        total = sum(seconds.values())
        name = headline(seconds, wasted_by_class, total, booked.episodes, booked.episode_seconds, rests, t)
        gpus = sorted(booked.gpus)
        sampled = booked.judged_seconds / len(gpus)
        work = booked.work_seconds / booked.judged_seconds if booked.judged_seconds else math.nan
        pod_class = BY_NAME[name].unit == "pod"  # a GPU no pod holds is no idle pod, however sparse its use
        sparse = pod_class and name != IDLE and sampled >= t.sparse_span_seconds and work < t.sparse_busy_share
        if sparse:
            # Windows that each saw part of a sparse hour cannot tell it from serving; the span can: all of it
            # is idle, and booked so.
            windows = ", ".join(f"{c} {part.share:.0%}" for c, part in booked.by_class().items())
            for c in list(seconds):
                if c != IDLE:
                    booked = booked._relabeled(c, IDLE)
            seconds, wasted_by_class, cost, _ = booked.totals()
            name = IDLE
        base, confidence = booked.latest[name].verdict(), confidences.get(name, t.confidence_sparse)
        episodes = [e.rounded() for e in booked.episodes]
        by_class = class_shares(seconds, wasted_by_class, cost)
        span = episodes[-1].end - episodes[0].start
        wasted = wasted_by_class[name]
        fault = {XID_FAULTS: booked.xid_fault[1]} if booked.xid_fault else {}
        evidence = {
            "history": f"{by_class[name].share:.0%} of {duration(total / len(gpus))} sampled"
            + (f", wasting {wasted / 3600:.1f} GPU-h" if wasted else "")
            + f"; latest: {episodes[-1].bottleneck} since {for_people(episodes[-1].start)}",
            **_rest_evidence(self, seen, booked is not self, name),
            **fault,
            **{key: value for key, value in base.evidence.items() if key != XID_FAULTS},
        }
        if sparse:
            kept = {k: v for k, v in base.evidence.items() if k in ("not_judged", "model_memory_bytes")}
            confidence = t.confidence_sparse
            base = replace(
                base,
                bottleneck=name,
                recommendation=RECOMMENDATIONS[name],
                secondary=[],
                cause="",
                facts=["sparse_use"],
            )
            evidence = {
                SPARSE: sparse_use(work, sampled, t),
                "history": f"windows of the span, each too short to tell, were judged {windows}",
                **fault,
                **kept,
            }
        return replace(
            base,
            gpus=gpus,
            confidence=round(confidence, 2),
            evidence=evidence | _workload_evidence(workload, name),
            workload_kind=workload.kind,
            engine=workload.engine,
            kind_source=workload.source,
            wasted_gpu_seconds=round(sum(wasted_by_class.values()), 1),
            wasted_cost=round(sum(cost.values()), 4),
            mean_activity=round(booked.busy_seconds / booked.judged_seconds, 4) if booked.judged_seconds else None,
            idle_ratio=round(booked.idle_seconds / booked.judged_seconds, 4) if booked.judged_seconds else None,
            work_share=None if math.isnan(work) else round(work, 4),
            window_seconds=round(span, 3),
            coverage=round(min(total / (len(gpus) * span), 1.0), 4),
            episodes=episodes,
            pauses=[self.episodes[k].rounded() for k, rest in sorted(seen.items()) if rest != "stopped"],
            by_class=by_class,
            facts=sorted({*base.facts, *(["xid_fault"] if booked.xid_fault else [])}),
            days=booked.day_uses(),
        )

    def _with_quiet_hours(self, t: Thresholds, kind: str, rests: dict[int, Rest]) -> Ledger:
        """This ledger with a serving workload's rests booked as serving: its nights and quiet hours are the
        replica's, whose fix (fewer replicas at night, scale to zero with an autoscaler that wakes on a request)
        is serving's, not "release". A workload serves where Kubernetes says so and it served in the span, or
        where serving holds headline_min_share of the time it was not pausing. The rest after a replica's work
        stopped is serving's too where Kubernetes says it is a replica (its Deployment keeps it); else it stays
        idle, and rest_kinds() of the ledger returned, with no pause left before it, calls it the rest after the
        work stopped."""
        seconds, _, _, _ = self.totals()
        if not seconds.get(OVERPROVISIONED_SERVING, 0.0) > 0:
            return self
        replica = kind == "serving"
        paused = sum(covered for k, covered in enumerate(self.episode_seconds) if rests.get(k) == "pause")
        if not replica and seconds[OVERPROVISIONED_SERVING] < t.headline_min_share * (sum(seconds.values()) - paused):
            return self
        quiet = {k for k, rest in rests.items() if rest == "pause" or replica}  # "before": nothing says it served
        if not quiet:
            return self
        booked = self._rebooked(dict.fromkeys(quiet, OVERPROVISIONED_SERVING))
        if not any(e.bottleneck == IDLE for e in booked.episodes):
            booked.latest = {c: v for c, v in booked.latest.items() if c != IDLE}
        return booked

    def _relabeled(self, old: str, new: str) -> Ledger:
        """This ledger with its episodes of class `old` of class `new` (verdict()): the same time and waste."""
        if old not in self.latest:
            return self
        was = self.latest[old].verdict()
        now = self.latest[new].verdict() if new in self.latest else _as_class(was, new)
        booked = self._rebooked({k: new for k, e in enumerate(self.episodes) if e.bottleneck == old})
        booked.latest = {**{c: v for c, v in self.latest.items() if c != old}, new: now}
        return booked

    def _rebooked(self, classes: Mapping[int, str]) -> Ledger:
        """A copy with the episodes of the indices in `classes` of the class given there, each joined to the one
        before where they touch and are now of one class: the same time, waste and weight, fewer episodes."""
        booked = replace(self, episodes=[], episode_seconds=[], episode_cost=[], episode_weight=[], episode_served=[])
        for k, e in enumerate(self.episodes):
            e = replace(e, bottleneck=classes.get(k, e.bottleneck))
            last = booked.episodes[-1] if booked.episodes else None
            if last is not None and last.bottleneck == e.bottleneck and last.end == e.start:
                last.extend(e.end, e.confidence, e.wasted_gpu_seconds)
                booked.episode_seconds[-1] += self.episode_seconds[k]
                booked.episode_cost[-1] += self.episode_cost[k]
                booked.episode_weight[-1] += self.episode_weight[k]
                booked.episode_served[-1] = self.episode_served[k]
                continue
            booked.episodes.append(e)
            booked.episode_seconds.append(self.episode_seconds[k])
            booked.episode_cost.append(self.episode_cost[k])
            booked.episode_weight.append(self.episode_weight[k])
            booked.episode_served.append(self.episode_served[k])
        return booked


#: The evidence of causes a relabel settles (an unexplained verdict's open causes and what would tell them apart).
SETTLED = ("causes_open", "would_tell_them_apart")


def _as_class(v: Verdict, name: str) -> Verdict:
    """`v` relabeled `name` by what its workload or engine says: that class's fix, its other evidence kept."""
    return replace(
        v,
        bottleneck=name,
        recommendation=RECOMMENDATIONS[name],
        secondary=[],
        cause="",
        served=name == OVERPROVISIONED_SERVING,
        evidence={k: text for k, text in v.evidence.items() if k not in SETTLED},
    )


#: The one-sided normal quantile of a 95% lower bound (Wilson's score interval).
Z_95 = 1.645


@dataclass(frozen=True)
class Worked:
    """How a unit worked over a window or a span, what settles a notebook's bursts (workload_relabels()): the
    share of its time that did work (0-1, PodFeatures.work_share; NaN unknown), the samples it was measured from
    (point samples: a 5 s cell caught by one row of 60 is no 1.7% of the hour for sure), and its mean activity
    while it worked (0-1)."""

    share: float
    samples: float
    intensity: float

    def surely_over(self, share: float) -> bool:
        """Whether the share worked is over `share` at 95% confidence: the lower bound of Wilson's score interval
        for a proportion (Wilson 1927) of `samples` point samples. False where the share is unknown."""
        if math.isnan(self.share):
            return False
        if math.isinf(self.samples):
            return self.share >= share
        n, p, z2 = self.samples, self.share, Z_95**2
        low = (p + z2 / (2 * n) - Z_95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))) / (1 + z2 / n)
        return low >= share


def workload_relabels(
    workload: WorkloadKind, engine: EngineLoad | None, worked: Worked, t: Thresholds
) -> list[tuple[str, str]]:
    """The classes what a unit is and what its engine counted settle, as (from, to), in order: the engine's
    count where there is one (engine_relabels()); else a notebook's bursts are cells, never requests. Its
    bursts with quiet spells between (serving's signature) are idle unless it surely worked sparse_busy_share of
    its time or more (Worked.surely_over(): a notebook has no replica's quiet hours to tell its sparse use from);
    else cells with pauses, in use: healthy where they worked at ineffective_sm or more while they ran, else light
    cells whose cause the data leaves open (unexplained). Whether its kernel is idle now is the newest episode's
    to say (Ledger._quiet_now())."""
    if engine is not None:
        return engine_relabels(engine)
    if workload.kind != "notebook":
        return []
    if not worked.surely_over(t.sparse_busy_share):
        return [(OVERPROVISIONED_SERVING, IDLE)]
    return [(OVERPROVISIONED_SERVING, HEALTHY if worked.intensity >= t.ineffective_sm else UNEXPLAINED)]


def engine_relabels(load: EngineLoad) -> list[tuple[str, str]]:
    """The classes a serving engine's count settles, as (from, to): a replica that finished no request is idle
    whatever its GPU showed; one that finished requests is never idle, and where its queue stayed empty its low
    activity with no other signature is headroom (serving), not a cause left open."""
    if not load.served:
        return [(OVERPROVISIONED_SERVING, IDLE)]
    return [(IDLE, OVERPROVISIONED_SERVING)] + ([(UNEXPLAINED, OVERPROVISIONED_SERVING)] if load.unqueued else [])


def engine_evidence(load: EngineLoad) -> str:
    """What a serving engine counted over the span, as the evidence says it."""
    if not load.served:
        return (
            f"{load.engine}: no request finished over the span; idle whatever its GPU showed (a model load, "
            "health checks)"
        )
    at = f"p{load.percentile * 100:g}"
    parts = [f"{load.engine}: {load.requests:,.0f} requests finished over the span"]
    for what, at_percentile, peak, fmt in (
        ("running", load.running_at_percentile, load.running_peak, "{:.3g}"),
        ("waiting", load.waiting_at_percentile, load.waiting_peak, "{:.3g}"),
        ("KV cache in use", load.kv_cache_at_percentile, load.kv_cache_peak, "{:.0%}"),
    ):
        if not math.isnan(at_percentile):
            parts.append(f"{what} {fmt.format(at_percentile)} at {at}, {fmt.format(peak)} at peak")
    return "; ".join(parts)


def _workload_evidence(workload: WorkloadKind, name: str) -> dict[str, str]:
    """What Kubernetes says the workload is, and where it says nothing of a serving or idle unit, what would
    tell them apart."""
    if workload.kind != "unknown":
        engine = f", its engine {workload.engine}" if workload.engine else ""
        return {"workload": f"{workload.kind}{engine} ({workload.source})"}
    if name in (OVERPROVISIONED_SERVING, IDLE):
        return {
            "workload": "unknown: what the pod is (kube-state-metrics' kube_pod_owner, kube_pod_labels and "
            "kube_pod_container_info, or a rule in --analysis.config) would tell a replica's quiet hours from a "
            "notebook's kernel left open"
        }
    return {}


def class_shares(seconds: dict[str, float], wasted: dict[str, float], cost: dict[str, float]) -> dict[str, ClassShare]:
    """By class, longest first: its share of the covered GPU-seconds, the GPU-seconds and money it wasted."""
    total = sum(seconds.values()) or 1.0
    return {
        name: ClassShare(round(seconds[name] / total, 4), round(wasted[name], 1), round(cost[name], 4))
        for name in sorted(seconds, key=lambda c: -seconds[c])
    }


def rest_kinds(episodes: list[Episode], served: list[bool]) -> dict[int, Rest]:
    """What each idle episode of a span was, by its index: a pause where work came before and after it (a
    notebook between cells, a replica at night, a job between runs: episodes judged anything but idle or
    insufficient_data) or the workload still served through it (Verdict.served: sparse use with some work); a
    rest before the first work the span saw (it came to work: in use, though nothing says what it rested from);
    else the rest after the work stopped, unless it is no longer than the longest rest before it (a night like
    the night before: nothing in the data says the work stopped)."""
    worked = [k for k, e in enumerate(episodes) if e.bottleneck not in (IDLE, INSUFFICIENT_DATA)]
    first_work, last_work = (worked[0], worked[-1]) if worked else (-1, -1)
    out: dict[int, Rest] = {}
    longest = 0.0
    for k, e in enumerate(episodes):
        if e.bottleneck != IDLE:
            continue
        if served[k] or first_work < k < last_work:
            out[k] = "pause"
        elif k < first_work:
            out[k] = "before"
        else:
            out[k] = "pause" if worked and e.end - e.start <= longest else "stopped"
        longest = max(longest, e.end - e.start)
    return out


def headline(
    seconds: dict[str, float],
    wasted: dict[str, float],
    total: float,
    episodes: list[Episode],
    episode_seconds: list[float],
    rests: dict[int, Rest],
    t: Thresholds,
) -> str:
    """The class of what the workload did over the span: the problem that wasted the most among those that
    held for headline_min_share of the time; without one, the class that held longest. Its pauses (rests
    between work, rest_kinds()) are no problem of their own: idle is a candidate with the time after its work
    stopped and before the first work the span saw (a GPU held for hours before its job began, whose windows at
    the start of the data are judged by the later ones that could: nothing says it was in use then)."""
    seconds, wasted = dict(seconds), dict(wasted)
    for k, rest in rests.items():
        if rest == "pause" and episodes[k].bottleneck == IDLE:
            seconds[IDLE] -= episode_seconds[k]
            wasted[IDLE] -= episodes[k].wasted_gpu_seconds
    if IDLE in seconds and seconds[IDLE] <= 1e-9 * total and len(seconds) > 1:
        del seconds[IDLE], wasted[IDLE]
    # Healthy and "cannot tell" are a pod's headline only when no problem holds long enough.
    problems = [c for c in seconds if c in PROBLEMS and seconds[c] >= t.headline_min_share * total]
    if problems:
        return max(problems, key=lambda c: (wasted[c], seconds[c]))
    return max(seconds, key=lambda c: seconds[c])


def _rest_evidence(ledger: Ledger, rests: dict[int, Rest], quiet_hours: bool, name: str) -> dict[str, str]:
    """What the span's rests were (rest_kinds() of `ledger`), as the evidence says it: the pauses of a workload
    in use and its rest before work, their waste counted (a replica's pauses booked as its quiet hours where
    `quiet_hours`, else as idle), and, where the verdict is idle, when the work stopped."""
    out: dict[str, str] = {}
    pauses = [ledger.episodes[k] for k, rest in rests.items() if rest != "stopped"]
    if pauses:
        lengths = sorted(e.end - e.start for e in pauses)
        waste = sum(e.wasted_gpu_seconds for e in pauses)
        out["pauses"] = (
            f"{len(pauses)} rest{'s' if len(pauses) > 1 else ''} of {duration(lengths[0])}"
            + (f" to {duration(lengths[-1])}" if duration(lengths[-1]) != duration(lengths[0]) else "")
            + f", each followed by work or no longer than one that was: a workload in use, not work that stopped "
            f"({waste / 3600:.2f} GPU-h wasted"
            + (", its pauses booked as its quiet hours)" if quiet_hours else ", booked as idle)")
        )
    stopped = [ledger.episodes[k] for k, rest in rests.items() if rest == "stopped"]
    if stopped and name == IDLE:
        out["stopped"] = f"no work since {for_people(stopped[-1].start)}: the work stopped and did not come back"
    return out
