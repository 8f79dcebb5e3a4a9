"""`gpulens analyzer`: classifies every pod on a fixed cycle and serves the verdicts.

Each cycle reads the window from its input, classifies, and replaces the verdicts as a whole. Cycles
start at a fixed rate, on the wall clock's multiples of the interval (plus the replica's phase), as
Prometheus evaluates its rule groups: a cycle that overruns skips the starts it missed rather than
pushing every later cycle back, so a store read on a step grid moves one interval's steps a cycle (a
cycle that started `interval` after the last ended would drift over the grid and now and then read two
cycles' steps at once, the slowest cycles of benchmarks/live_prometheus.py). When
the input fails (Prometheus down or slow, exporters unreachable) the last verdicts stay, marked
stale with their age, and the input is asked again at the next interval. Nothing ends the loop: an
unexpected error is logged once with its traceback, counted by stage, and retried with a capped
backoff. /healthz (liveness) fails only when the loop stops cycling; /readyz when verdicts go stale.
A pod whose samples stop while the others' go on (its node stopped reporting) is stale alone: its
verdict stays in the API marked so, its verdict series end, and it accrues no waste or history.

It also keeps what each pod was over the last `history` seconds (a day by default), as `gpulens
report` shows it for files: episodes, the share of time and the waste per class, and a headline.
Memory stays bounded: consecutive cycles with one class are one episode, a pod keeps at most
MAX_EPISODES, and episodes (and pods) older than the history are dropped.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs.cluster import ClusterReading
from gpulens.analyzer.inputs.engines import EngineLoad, Health
from gpulens.analyzer.inputs.kinds import UNKNOWN, PodKey, WorkloadKind
from gpulens.analyzer.inputs.live import AnalyzerInput, InputError
from gpulens.analyzer.inputs.store import StoreError
from gpulens.analyzer.judging.classify import Verdict, classify
from gpulens.analyzer.judging.features import UnitKeys
from gpulens.analyzer.judging.history import Ledger, with_owners, with_workload
from gpulens.analyzer.judging.scheduling import Scheduling, judge_reading
from gpulens.analyzer.outputs.actions import Plan
from gpulens.analyzer.outputs.outcomes import Outcome, mark_done, over_span
from gpulens.analyzer.outputs.plan import make_plan, sized
from gpulens.analyzer.outputs.timelines import RollingTimelines, unit_samples
from gpulens.analyzer.outputs.use import Use
from gpulens.core import metrics as m
from gpulens.core.bottlenecks import GPU_CLASSES, INSUFFICIENT_DATA, POD_CLASSES, WASTEFUL
from gpulens.core.catalog import device_price
from gpulens.core.config import finite_json
from gpulens.core.exposition import Exposition, Families
from gpulens.core.status import MAX_BACKOFF_SECONDS, ProblemLog, backoff
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import rfc3339

log = logging.getLogger(__name__)


#: A pod (namespace, pod, node), or a GPU no pod holds ("", Verdict.unit, node).
Unit = tuple[str, str, str]
#: A workload's waste counter: namespace, owner kind, owner (the pod where the owner is unknown), team,
#: bottleneck class.
Workload = tuple[str, str, str, str, str]
#: A showback counter's series (metrics.SHOWBACK_LABELS): namespace, owner kind, owner, team, GPU model.
Charged = tuple[str, str, str, str, str]
#: Showback's counters: by name (SHOWBACK_COUNTERS), by series.
Held = dict[str, dict[Charged, float]]
#: Showback's counters by State.held's names.
SHOWBACK_COUNTERS = {
    "allocated": m.WORKLOAD_ALLOCATED_GPU_SECONDS,
    "cost": m.WORKLOAD_ALLOCATED_COST,
    "judged": m.WORKLOAD_JUDGED_GPU_SECONDS,
    "worked": m.WORKLOAD_WORKED_GPU_SECONDS,
}


#: Seconds a cycle's start keeps from a step of the input's grid: the newest step a cycle reads is the last
#: one at or before its start, so a start this close to a step could read it in one cycle and not in the
#: next (a wait that ends a few milliseconds early or late), and move the window by 0 steps, then 2.
GRID_CLEARANCE_SECONDS = 1.0


def cycle_offset(phase: float, interval: float, grid_step: float | None) -> float:
    """Where in each interval a replica's cycles start (seconds past a wall-clock multiple of `interval`):
    its `phase`, moved later where it falls within GRID_CLEARANCE_SECONDS (a quarter of the step at most) of
    a step of `grid_step` (seconds; None: an input without a grid)."""
    if not grid_step:
        return phase % interval
    clearance = min(GRID_CLEARANCE_SECONDS, grid_step / 4)
    into_step = phase % grid_step
    if into_step < clearance:
        phase += clearance - into_step
    elif into_step > grid_step - clearance:
        phase += grid_step - into_step + clearance
    return phase % interval


def next_start(started: float, now: float, interval: float, offset: float) -> tuple[float, int]:
    """The next cycle's start at a fixed rate (unix seconds: a multiple of `interval`, plus `offset`) after the
    last cycle `started`, at `now` or later; and how many starts a cycle that ran until `now` skipped."""
    start = (math.floor((started - offset) / interval) + 1) * interval + offset
    if start >= now:
        return start, 0
    skipped = math.ceil((now - start) / interval)
    return start + skipped * interval, skipped


def unit_of(v: Verdict) -> Unit:
    return (v.namespace, v.pod, v.node) if v.pod else ("", v.unit, v.node)


def unit_name(unit: Unit) -> str:
    """A history's unit as Verdict.unit names it."""
    namespace, pod, _ = unit
    return f"{namespace}/{pod}" if namespace else pod


def workload_of(past: Ledger) -> WorkloadKind:
    """What a unit's workload is, as the owners applied to its newest window verdicts say (kinds.py)."""
    known = [v for v in (judged.verdict() for judged in past.latest.values()) if v.workload_kind != "unknown"]
    return known[-1].kind if known else UNKNOWN


def last_sample(v: Verdict) -> float:
    """Unix time the pod's newest sample ends."""
    return v.episodes[-1].end if v.episodes else 0.0


@dataclass
class State:
    verdicts: list[Verdict] = field(default_factory=list)
    produced_at: float | None = None  # unix time of the last successful cycle
    cycle_seconds: float = 0.0
    input_errors: int = 0
    #: Unexpected failures by stage ("input", "analysis"): logged once, counted, retried.
    errors: dict[str, int] = field(default_factory=dict)
    wasted_seconds: dict[tuple[str, str], float] = field(default_factory=dict)
    wasted_cost: dict[tuple[str, str], float] = field(default_factory=dict)
    #: The same by workload: (namespace, owner kind, owner, team, bottleneck) -> GPU-seconds, and money.
    workload_seconds: dict[Workload, float] = field(default_factory=dict)
    workload_cost: dict[Workload, float] = field(default_factory=dict)
    #: Pods whose samples stopped while others' went on (their node stopped reporting, or they ended):
    #: their verdicts describe the past, so they are served as stale, not as current.
    stale: frozenset[Unit] = frozenset()
    #: The cluster's share over the window (kube-state-metrics), where the input reads it.
    scheduling: Scheduling | None = None
    #: Showback's counters (docs/showback.md): "allocated" device-seconds, their "cost", and of them those
    #: "judged" (with an activity signal) and "worked", by (namespace, owner kind, owner, team, GPU model).
    held: Held = field(default_factory=dict)


@dataclass(frozen=True)
class HistoryView:
    """One cycle's view of the history: the state it ended with, each unit's verdict over the history
    (Ledger.verdict) and the plan made of them."""

    cycle: int
    state: State
    verdicts: dict[Unit, Verdict]
    plan: Plan
    #: The changes the workloads went through over the history and what became of each (outcomes.py).
    changes: list[Outcome] = field(default_factory=list)


class AnalyzerService:
    #: Liveness fails after this many intervals without a cycle ending.
    LIVENESS_INTERVALS = 5
    #: Episodes kept per pod: a pod whose class flips every cycle keeps its last MAX_EPISODES cycles.
    MAX_EPISODES = 256
    #: Cycles in a row that overran the interval before it is said.
    OVERRUNS = 3
    #: A pod whose samples stopped this many of its sampling (or analysis) intervals before the newest
    #: sample of the window is stale.
    STALE_INTERVALS = 3

    def __init__(
        self,
        source: AnalyzerInput,
        thresholds: Thresholds,
        prices: dict[str, float],
        interval: float = 15.0,
        clock: Callable[[], float] = time.time,
        history: float = 86400.0,
        phase: float = 0.0,
        grid_step: float | None = None,
    ):
        self.source = source
        #: Seconds the first cycle waits: replicas sharing a store read it at their own points of the interval.
        self.phase = phase
        #: Where in each interval the cycles after the first start (seconds past a wall-clock multiple of
        #: it): the phase, kept clear of the input's step grid (cycle_offset).
        self.offset = cycle_offset(phase, interval, grid_step)
        self.thresholds = thresholds
        self.prices = prices
        self.interval = interval
        self.clock = clock
        self.state = State()
        #: Seconds of each pod's past kept, and the pods' histories.
        self.history_seconds = history
        self.history: dict[Unit, Ledger] = {}
        #: Each unit's activity, memory and power over the history (one bin a cycle at least), and its peak
        #: memory: the timelines of the page at /, and the use the plan sizes; the newest sample added.
        self.use = Use(RollingTimelines(history, interval))
        self._drawn_until = -math.inf
        #: Unix seconds of the newest sample whose time the waste counters and the history hold.
        self._counted_until: float | None = None
        self._view: HistoryView | None = None
        #: The input's last reading of the cluster and its share, judged once for each reading.
        self._cluster: tuple[ClusterReading | None, Scheduling | None] = (None, None)
        #: The changes over the history and what became of them, judged every change_judge_seconds
        #: (time.monotonic() when last): each reads the engines' health of two windows a change.
        self._changes: list[Outcome] = []
        self._changes_at = -math.inf
        #: Successful cycles so far: the page at / asks what changed since the one it shows.
        self.cycles = 0
        #: Held while a cycle changes the history, and while a page reads it.
        self.lock = threading.Lock()
        self._problems = ProblemLog(log)
        self._stop = threading.Event()
        self._overruns = 0  # cycles in a row that overran the interval
        #: time.monotonic() when the loop last ended a cycle (or started): liveness.
        self.last_attempt = time.monotonic()
        #: What /metrics serves: the verdicts, history, plan and counters rendered once an analysis however often
        #: it is scraped (at 10,000 pods, hundreds of thousands of series), the analyzer's own state (the age of
        #: its verdicts, its inputs) at every scrape.
        self.exposition = Exposition(self._cycle_families, lambda: self.state, math.inf, live=self._live_families)

    def _cluster_share(self) -> Scheduling | None:
        """The cluster's share over the window, judged when the input has read the cluster again (once a
        minute: analyzer/inputs/live.py); a judgement that fails keeps the last share."""
        reading = self.source.cluster()
        if reading is not self._cluster[0]:
            try:
                share = None if reading is None else judge_reading(reading, self.thresholds, self.prices)
                self._cluster = (reading, share)
            except (KeyError, TypeError, ValueError) as e:
                log.warning("cannot judge the cluster from kube-state-metrics, keeping the last share: %s", e)
                self._cluster = (reading, self._cluster[1])
        return self._cluster[1]

    def cycle(self) -> bool:
        """One analysis; False if it failed (the previous verdicts are kept, and go stale). Never raises:
        an unexpected error is logged once with its traceback and counted by stage."""
        stage, doing = "input", f"reading the {self.source.name} input"
        try:
            started = self.clock()
            try:
                frame = self.source.window_frame()
            except InputError as e:
                self.state.input_errors += 1
                self._problems.problem("input", f"{e}; serving the last verdicts, marked stale")
                return False
            self._problems.resolved("input", f"the {self.source.name} input answers again")
            stage, doing = "analysis", "analysing the window"
            self._judge(frame, started)
        except Exception:
            self.state.errors[stage] = self.state.errors.get(stage, 0) + 1
            self._problems.problem(
                f"unexpected:{stage}",
                f"unexpected error {doing} (a bug: please report it with this traceback); serving the last "
                "verdicts, marked stale, and retrying",
                exc_info=True,
            )
            return False
        self._problems.resolved("unexpected:input", f"the {self.source.name} input reads cleanly again")
        self._problems.resolved("unexpected:analysis", "analysis cycles succeed again")
        # One line a cycle, at debug: what an operator (and benchmarks/live_prometheus.py) times cycles by without
        # asking /metrics, whose body at 10,000 pods is tens of megabytes.
        log.debug(
            "cycle %d: verdicts of %s in %.3f s, %d units, %d bytes read in all",
            self.cycles,
            rfc3339(self.state.produced_at or 0.0),
            self.state.cycle_seconds,
            len(self.state.verdicts),
            sum(status.read_bytes for status in self.source.target_status().values()),
        )
        return True

    def _judge(self, frame: pd.DataFrame, started: float) -> None:
        """Verdicts for the window's frame; the history, timelines and waste counters move on with them."""
        node_prices = self.source.node_prices()
        verdicts = classify(frame, self.thresholds, self.prices, node_prices)
        verdicts = with_owners(verdicts, self.source.owners({(v.namespace, v.pod) for v in verdicts if v.pod}))
        # What each pod is and what its engine counted over the history settle what its window leaves open (a
        # notebook's cells are never requests; a replica that served is never idle), so that /metrics and the
        # alerts on it say what the history and the reports say.
        loads = self._engine_loads(verdicts)
        verdicts = [with_workload(v, v.kind, loads.get((v.namespace, v.pod)), self.thresholds) for v in verdicts]
        stale = self._stale(verdicts)
        now = self.clock()
        seconds, cost = dict(self.state.wasted_seconds), dict(self.state.wasted_cost)
        workload_seconds, workload_cost = dict(self.state.workload_seconds), dict(self.state.workload_cost)
        held = {name: dict(counts) for name, counts in self.state.held.items()}
        ts = frame["timestamp"].to_numpy() if len(frame) else np.zeros(0)
        new = ts > self._drawn_until  # each sample drawn once, though successive windows overlap
        keys = UnitKeys.of(frame) if len(frame) else None
        seen = self._newly_seen(frame, ts, keys)
        # Read before the lock: a page waits on the lock, never on kube-state-metrics.
        cluster = self._cluster_share()
        with self.lock:
            for v in verdicts:
                if v.window_seconds <= 0 or unit_of(v) in stale:
                    continue
                # The waste and the history of a cycle are those of the time its new samples cover, a share of
                # what the window's samples cover: time that was not seen (an outage, a gap, a clock that
                # jumped) counts for nothing, and the counters' rate() is the waste per second however the
                # cycle is timed.
                elapsed = seen.get(v.unit, 0) * v.sample_seconds / max(1, len(v.gpus))
                if elapsed <= 0:
                    continue
                share = min(1.0, elapsed / (v.window_seconds * max(v.coverage, 1e-9)))
                self._remember(v, now - elapsed, now, share)
                self._charge(held, v, elapsed * len(v.gpus), node_prices.get(v.node))
                if v.bottleneck not in WASTEFUL:
                    continue  # healthy headroom, or time the data cannot judge: no waste by cause
                wasted, spent = v.wasted_gpu_seconds * share, v.wasted_cost * share
                if not (math.isfinite(wasted) and math.isfinite(spent) and wasted >= 0 and spent >= 0):
                    # Counters only grow: a verdict that would make one fall or jump to infinity is a bug.
                    self._problems.problem(
                        "waste",
                        f"a verdict of {v.unit} wastes {v.wasted_gpu_seconds!r} GPU-seconds and {v.wasted_cost!r} "
                        "USD (a bug: please report it): not counted",
                    )
                    continue
                key = (v.namespace, v.bottleneck)
                seconds[key] = seconds.get(key, 0.0) + wasted
                cost[key] = cost.get(key, 0.0) + spent
                workload = (v.namespace, v.owner_kind, v.owner or v.pod, v.team, v.bottleneck)
                workload_seconds[workload] = workload_seconds.get(workload, 0.0) + wasted
                workload_cost[workload] = workload_cost.get(workload, 0.0) + spent
            if new.any():
                self.use.add(unit_samples(frame, keys=keys, where=new))
                self._drawn_until = float(ts[new].max())
            self._forget(now)
            self.cycles += 1
            self.state = State(
                verdicts,
                now,
                now - started,
                self.state.input_errors,
                self.state.errors,
                seconds,
                cost,
                workload_seconds,
                workload_cost,
                stale,
                cluster,
                held,
            )

    def _charge(self, held: Held, v: Verdict, seconds: float, gpu_price: float | None) -> None:
        """Add to showback's counters (State.held) `seconds` device-seconds `v`'s pod held, what they cost at its
        device's price (its node's where the cluster's cost tool prices it), and where an activity signal was
        read, those judged and the time worked."""
        key = (v.namespace, v.owner_kind, v.owner or v.pod, v.team, v.gpu_model)
        worked = v.work_share if v.work_share is not None else v.mean_activity
        parts = {"allocated": seconds, "cost": seconds / 3600 * device_price(v.gpu_model, self.prices, gpu_price)}
        if worked is not None:
            parts |= {"judged": seconds, "worked": seconds * worked}
        for name, amount in parts.items():
            counts = held.setdefault(name, {})
            counts[key] = counts.get(key, 0.0) + amount

    def _newly_seen(self, frame: pd.DataFrame, ts: np.ndarray, keys: UnitKeys | None) -> dict[str, int]:
        """Per unit (as verdicts name it), its samples (a GPU's each) that no cycle before has counted: after
        the newest counted, and on the first cycle those of its last interval only (the window before it
        was counted by whatever ran before: a restart must not count it twice)."""
        if keys is None:
            return {}
        newest = float(ts.max())
        since = newest - self.interval if self._counted_until is None else self._counted_until
        self._counted_until = max(newest, since)
        rows = ts > since
        if not rows.any():
            return {}
        counts = np.bincount(keys.unit[rows], minlength=int(keys.unit.max()) + 1)
        return {str(name): int(count) for name, count in zip(keys.names(frame), counts, strict=True) if count}

    def _stale(self, verdicts: list[Verdict]) -> frozenset[Unit]:
        """The pods whose newest sample is older than the window's newest by more than STALE_INTERVALS of
        their own sampling interval and of the analysis interval: their node stopped reporting (an
        exporter down: Prometheus ends its series) or they ended."""
        newest = max((last_sample(v) for v in verdicts), default=0.0)
        return frozenset(
            unit_of(v)
            for v in verdicts
            if newest - last_sample(v) > self.STALE_INTERVALS * max(v.sample_seconds, self.interval)
        )

    def _remember(self, v: Verdict, start: float, end: float, share: float) -> None:
        """The cycle's time, from the end of the pod's last episode if it was recent, goes to its class."""
        past = self.history.setdefault(unit_of(v), Ledger())
        last_end = past.episodes[-1].end if past.episodes else None
        if last_end is not None and 0 < start - last_end <= self.interval:
            start = last_end  # a late cycle: no gap in the pod's history for it
        covered = v.window_seconds * v.coverage * len(v.gpus) * share
        joins = last_end is not None and start - last_end <= 1e-6
        past.record(v, start, end, covered, v.wasted_gpu_seconds * share, v.wasted_cost * share, joins)
        idle = math.nan if v.idle_ratio is None else v.idle_ratio
        past.account(covered, v.mean_activity, idle, math.nan if v.work_share is None else v.work_share)

    def _forget(self, now: float) -> None:
        oldest = now - self.history_seconds
        for unit in list(self.history):
            past = self.history[unit]
            past.prune(oldest, self.MAX_EPISODES)
            if not past.episodes:
                del self.history[unit]
        self.use.retain({unit_name(unit) for unit in self.history})

    def run(self) -> None:
        """Cycle every interval until stop(). A failed input is asked again at the next interval (so
        verdicts resume within one interval of its return); an unexpected error backs off, doubling up
        to MAX_BACKOFF_SECONDS, so a bug that repeats does not spin."""
        unexpected = 0
        self._stop.wait(self.phase)
        while not self._stop.is_set():
            errors = sum(self.state.errors.values())
            started = self.clock()
            self.cycle()
            self.last_attempt = time.monotonic()
            unexpected = unexpected + 1 if sum(self.state.errors.values()) > errors else 0
            self._stop.wait(backoff(self.interval, unexpected) if unexpected else self._until_next_start(started))

    def _until_next_start(self, started: float) -> float:
        """Seconds from now to the next cycle's start: the first start of the fixed rate after `started` (the
        last cycle's) that is still ahead. Starts a long cycle overran are skipped; OVERRUNS in a row are said
        (the few cycles that fill a large fleet's window after a start may overrun, and are not)."""
        now = self.clock()
        start, skipped = next_start(started, now, self.interval, self.offset)
        self._overruns = self._overruns + 1 if skipped else 0
        if self._overruns >= self.OVERRUNS:
            self._problems.problem(
                "overrun",
                f"{self._overruns} analysis cycles in a row took longer than --analysis.interval ({self.interval:g} "
                f"s), the last {now - started:.1f} s: verdicts are updated less often than the interval says; see "
                "docs/sizing.md (--prometheus.read-parts, shards, a longer interval)",
            )
        elif not skipped:
            self._problems.resolved("overrun", "analysis cycles fit in --analysis.interval again")
        # At most an interval: a clock set back (NTP) during a cycle must not hold the next for as long.
        return min(start - now, self.interval)

    def start(self) -> None:
        self.source.start()
        threading.Thread(target=self.run, name="gpulens-analyzer", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        self.source.close()

    # --- serving --------------------------------------------------------------------------------
    def age(self) -> float | None:
        return None if self.state.produced_at is None else max(0.0, self.clock() - self.state.produced_at)

    def stale(self) -> bool:
        age = self.age()
        return age is None or age > 3 * self.interval

    def verdicts_json(self, query: Mapping[str, str] | None = None) -> tuple[int, str, bytes]:
        with self.lock:  # a cycle may be changing the history meanwhile
            body = self._verdicts_body(self._view_now())
        return 200, "application/json", finite_json(body).encode()

    def _engine_loads(self, verdicts: list[Verdict]) -> dict[PodKey, EngineLoad]:
        """What each serving pod's engine counted over the history kept, read for the pods `verdicts` judge:
        a pod whose window is still insufficient_data has too few samples to size it by (the store's errors
        the cycle's input already counts)."""
        judged = {(v.namespace, v.pod) for v in verdicts if v.pod and v.bottleneck != INSUFFICIENT_DATA}
        return self.source.engine_loads(judged, self.history_seconds, self.thresholds.plan_load_percentile)

    def _verdicts_body(self, view: HistoryView) -> dict:
        return {
            "stale": self.stale(),
            "age_seconds": self.age(),
            "input": self.source.name,
            # A stale verdict is the last one its pod had before its samples stopped.
            "verdicts": [
                {**v.to_dict(), "stale": unit_of(v) in self.state.stale, "last_sample_timestamp": last_sample(v)}
                for v in self.state.verdicts
            ],
            "history_seconds": self.history_seconds,
            # What each pod was over the history, as its span verdict books it: headline, shares and waste by
            # class, episodes (the report's, the page's and the plan's story, not the windows' raw classes), and
            # the size its use over the history fits.
            "history": [
                {
                    "namespace": unit[0],
                    "pod": unit[1],
                    "node": unit[2],
                    "headline": over.bottleneck,
                    "by_class": {name: asdict(part) for name, part in over.by_class.items()},
                    "episodes": [asdict(e) for e in over.episodes],
                    "size": None if over.size is None else asdict(over.size),
                }
                for unit, over in sorted(view.verdicts.items())
            ],
        }

    def over_history(self) -> HistoryView:
        """Each unit's verdict over the history kept, and the plan made of them: once a cycle, by the first
        that asks (/metrics, the page at /, the API), so that all of them show the same cycle."""
        with self.lock:
            return self._view_now()

    def _view_now(self) -> HistoryView:
        """over_history(), the lock held."""
        if self._view is None or self._view.cycle != self.cycles:
            loads = self._engine_loads(self.state.verdicts)
            verdicts = {
                unit: past.verdict(self.thresholds, workload_of(past), loads.get(unit[:2]))
                for unit, past in self.history.items()
            }
            judged = sized(list(verdicts.values()), self.use, self.thresholds, self.prices)
            verdicts = dict(zip(verdicts, judged, strict=True))
            plan = make_plan(list(verdicts.values()), self.use, self.thresholds, self.prices)
            changes = self._changes_over(list(verdicts.values()))
            mark_done(plan.actions, changes)
            self._view = HistoryView(self.cycles, self.state, verdicts, plan, changes)
        return self._view

    def _changes_over(self, verdicts: list[Verdict]) -> list[Outcome]:
        """The changes the workloads of `verdicts` went through over the history and what became of each
        (docs/changes.md), judged anew every change_judge_seconds; the last ones where a read fails, and
        while the input fails (its failure is said once already: the store is not asked again for this)."""
        if time.monotonic() - self._changes_at < self.thresholds.change_judge_seconds or self.stale():
            return self._changes
        self._changes_at = time.monotonic()
        reading = self.source.workloads(self.history_seconds)
        if reading is None:
            return self._changes
        t = self.thresholds

        def health(namespace: str, pods: list[str], start: float, end: float) -> Health | None:
            return self.source.workload_health(namespace, pods, start, end, t.plan_load_percentile)

        span = (reading.start, reading.end, reading.sample_step)
        try:
            self._changes = over_span(
                reading.history, verdicts, self.use, span, t, self.prices, health, self.source.proposal
            )
        except StoreError as e:
            log.warning("cannot judge the workloads' changes, keeping the last: %s", e)
        return self._changes

    def plan(self) -> Plan:
        return self.over_history().plan

    def changes_json(self, query: Mapping[str, str] | None = None) -> tuple[int, str, bytes]:
        """/api/v1/changes: the changes over the history and what became of each, as the JSON report's."""
        document = {"changes": [o.to_dict() for o in self.over_history().changes]}
        return 200, "application/json", finite_json(document).encode()

    def plan_json(self, query: Mapping[str, str] | None = None) -> tuple[int, str, bytes]:
        return 200, "application/json", finite_json(self.plan().to_dict()).encode()

    def health(self) -> tuple[bool, str]:
        """Liveness: the loop keeps cycling (whatever the cycles find). Fails when no cycle has ended
        for LIVENESS_INTERVALS intervals (at least the longest backoff): the loop is dead or hung."""
        limit = max(self.LIVENESS_INTERVALS * self.interval, 2 * MAX_BACKOFF_SECONDS)
        since = time.monotonic() - self.last_attempt
        if since > limit:
            return False, f"no analysis cycle has ended for {since:.0f} s: the analyzer loop is stuck"
        return True, "ok"

    def ready(self) -> tuple[bool, str]:
        """Readiness: fresh verdicts, from an input that answers."""
        if self.state.produced_at is None:
            return False, "no analysis cycle has succeeded yet"
        if self.stale():
            return False, f"verdicts are {self.age():.0f} s old: the {self.source.name} input is failing"
        return True, "ok"

    def describe(self):
        return []

    def collect(self):
        yield from self._families().metric_families()

    def render_text(self, openmetrics: bool = False) -> bytes:
        """/metrics in the Prometheus text format (or OpenMetrics), rendered now."""
        return self._families().text(openmetrics).encode()

    def _families(self) -> Families:
        """Every family /metrics serves."""
        view = self.over_history()
        return self._live_families(self._cycle_families(view), view.state)

    def _cycle_families(self, view: HistoryView | None = None) -> Families:
        """The families whose values change only with an analysis: the verdicts, their history, the plan, the
        changes, the waste and showback counters, the cluster's share."""
        view = view or self.over_history()  # one cycle's state and span verdicts, taken under the cycle's lock
        state = view.state
        out = Families()
        for v in state.verdicts:
            if unit_of(v) in state.stale:
                if v.pod:
                    out.add(m.POD_LAST_SAMPLE, (v.namespace, v.pod, v.node), last_sample(v))
                continue  # its series end, so that alerts on them resolve rather than fire on the past
            if not v.pod:
                # A GPU no pod holds is its own kind of series, keyed by node and GPU: as pod series, every
                # such GPU of a node would be the same series with other values.
                if v.bottleneck in GPU_CLASSES:
                    for name in GPU_CLASSES:
                        out.add(m.GPU_WITHOUT_POD, (v.node, v.gpus[0], name), 1 if name == v.bottleneck else 0)
                continue
            ids = (v.namespace, v.pod, v.node)
            out.add(m.POD_LAST_SAMPLE, ids, last_sample(v))
            for name in POD_CLASSES:
                out.add(m.POD_BOTTLENECK, ids + (name,), 1 if name == v.bottleneck else 0)
            out.add(m.POD_BOTTLENECK_CONFIDENCE, ids, v.confidence)
            out.add(
                m.POD_BOTTLENECK_INFO,
                ids + (v.bottleneck, ",".join(v.secondary), ", ".join(v.evidence), v.recommendation),
                1,
            )
            if v.mean_activity is not None:
                out.add(m.POD_SM_ACTIVE, ids, v.mean_activity)
            if v.idle_ratio is not None:
                out.add(m.POD_IDLE, ids, v.idle_ratio)
            out.add(m.POD_GPUS, ids, len(v.gpus))
            out.add(m.POD_WORKLOAD, ids + (v.workload_kind, v.engine), 1)
        for (namespace, pod, node), over in sorted(view.verdicts.items()):
            if not namespace:
                continue  # a GPU no pod holds (its unit's pod slot names the GPU): not a pod series
            for name, part in over.by_class.items():
                out.add(m.POD_BOTTLENECK_TIME, (namespace, pod, node, name), part.share)
        for (namespace, bottleneck), seconds in sorted(state.wasted_seconds.items()):
            out.add(m.WASTED_GPU_SECONDS, (namespace, bottleneck), seconds)
            out.add(m.WASTED_COST, (namespace, bottleneck), state.wasted_cost[(namespace, bottleneck)])
        plan = view.plan
        for action in plan.actions:
            changed = (action.namespace, action.owner, action.team, action.action)
            if plan.projected:  # a month is not projected from minutes: the series starts once it can be
                out.add(m.PLAN_SAVING, changed, action.saving_usd_per_30d)
            out.add(m.PLAN_GPUS, changed + ("now",), action.gpus_now)
            out.add(m.PLAN_GPUS, changed + ("after",), action.gpus_after)
        latest: dict[tuple[str, str, str, str], Outcome] = {}
        for o in view.changes:  # in time order: the latest of each kind a workload went through
            latest[(o.change.namespace, o.change.workload, o.team, o.change.what)] = o
        for changed, o in sorted(latest.items()):
            out.add(m.CHANGE_TIME, changed, o.change.start)
            for outcome in m.CHANGE_OUTCOMES:
                out.add(m.CHANGE_OUTCOME, changed + (outcome,), 1 if o.word == outcome else 0)
            if o.word != "too_early":
                out.add(m.CHANGE_DAILY_SAVING, changed, o.saving_usd_per_day)
        for workload, seconds in sorted(state.workload_seconds.items()):
            out.add(m.WORKLOAD_WASTED_GPU_SECONDS, workload, seconds)
            out.add(m.WORKLOAD_WASTED_COST, workload, state.workload_cost[workload])
        for name, spec in SHOWBACK_COUNTERS.items():
            for charged, amount in sorted(state.held.get(name, {}).items()):
                out.add(spec, charged, amount)
        if state.scheduling is not None:
            for pool in state.scheduling.pools_now:
                labels = (pool.pool, pool.gpu_model)
                out.add(m.CLUSTER_FREE_GPUS, labels, pool.free_gpus)
                out.add(m.CLUSTER_LARGEST_FREE_GPUS, labels, pool.largest_free_gpus)
                out.add(m.CLUSTER_STRANDED_GPUS, labels, pool.stranded_gpus)
            for waiting in state.scheduling.waiting_now:
                why = (waiting.pool, waiting.gpu_model, waiting.reason)
                out.add(m.CLUSTER_WAITING_PODS, why, waiting.pods)
                out.add(m.CLUSTER_WAITING_GPUS, why, waiting.gpus)
                out.add(m.CLUSTER_WAITING_LONGEST, why, waiting.longest_seconds)
        return out

    def _live_families(self, out: Families | None = None, state: State | None = None) -> Families:
        """The analyzer's own families, added to `out`: how old its verdicts are (which moves between analyses),
        its cycles, its inputs and its errors."""
        out = Families() if out is None else out
        state = state or self.state
        age = self.age()
        if state.produced_at is not None and age is not None:
            out.add(m.ANALYZER_LAST_SUCCESS, (), state.produced_at)
            out.add(m.ANALYZER_VERDICT_AGE, (), age)
            out.add(m.ANALYZER_CYCLE_DURATION, (), state.cycle_seconds)
        out.add(m.ANALYZER_INPUT_ERRORS, (self.source.name,), state.input_errors)
        out.add(m.ANALYZER_INPUT_IMPOSSIBLE_VALUES, (self.source.name,), self.source.checks.left_out)
        for target, status in sorted(self.source.target_status().items()):
            out.add(m.ANALYZER_INPUT_UP, (self.source.name, target), 1 if status.up else 0)
            out.add(m.ANALYZER_INPUT_READ_BYTES, (self.source.name, target), status.read_bytes)
            if status.last_success is not None:
                out.add(m.ANALYZER_INPUT_LAST_SUCCESS, (self.source.name, target), status.last_success)
        for stage in ("input", "analysis"):
            out.add(m.ANALYZER_ERRORS, (stage,), state.errors.get(stage, 0))
        return out
