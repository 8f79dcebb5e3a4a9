"""The right-sizing plan: per workload, what to change and what it saves, from the verdicts over a span and
the use measured in it (Use: each unit's activity in bins, and its peak memory).

One action a workload, the first that applies:
- not planned: too little data (insufficient_data), a GPU at fault (throttling, NVLink faults, a process
  outside any pod), or nothing to change (healthy);
- fix: its problem is its code, its input or its placement (data starvation, host stalls, memory bandwidth,
  fragmentation, interconnect, placement): the waste fixing it recovers and the fix, never a smaller GPU;
- release: idle through the span; for a notebook, cull: its kernel culled after plan_cull_seconds idle;
- fewer_replicas: a serving workload of two replicas or more: the replicas that carry its summed load at
  plan_load_percentile at plan_replica_activity each, and its peak with plan_headroom;
- scale_to_zero: a serving replica whose rests (nights, weekends) outlast plan_scale_to_zero_seconds, where
  that saves more than a smaller share of a GPU: scaled to zero and woken by its next request;
- mig, cheaper_gpu or time_slicing: a workload whose peak memory and peak activity (with plan_headroom)
  fit a MIG profile of its GPU, a cheaper catalogue model, or a time-sliced share: the largest saving;
- release_capacity: the GPUs no pod holds on a node.
The cluster's share (analyzer/judging/scheduling.py), where kube-state-metrics was read: per pool whose GPUs were
stranded by fragmentation while pods waited, consolidate (the pods to move that free a node whole for the pod
that waited) or, where it recurred, bin_pack (kube-scheduler's MostAllocated scoring); add_quota for each
namespace with no GPU quota that held most of the cluster's GPUs while other namespaces' pods waited; re_pool
for a workload that ran on a pool not meant for its kind.

Savings are the cost of the GPU capacity freed at the verdicts' prices (--prices, else the catalogue's),
over the span and per 30 days; a plan never proposes less capacity than the measured peak needs with
plan_headroom. pack() then places every unit's need after the plan onto each model's GPUs: the whole GPUs
and nodes the plan frees, which the actions' shares of a GPU alone do not say.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from typing import cast

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs.engines import EngineLoad
from gpulens.analyzer.judging.classify import NO_POD, XID_FAULTS, Verdict
from gpulens.analyzer.judging.evidence import duration, gpu_count, percent
from gpulens.analyzer.judging.features import UnitKeys
from gpulens.analyzer.judging.scheduling import Scheduling, quota_advice, spent
from gpulens.analyzer.judging.sizing import Size, smallest
from gpulens.analyzer.outputs.timelines import TimelineBins, unit_samples
from gpulens.core.bottlenecks import (
    BY_NAME,
    HOST_STALL,
    OVERPROVISIONED_SERVING,
    PLANNED,
    SIZE_FIRST_CAUSES,
    STALL_CAUSES,
    UNALLOCATED,
    UNEXPLAINED,
    UNEXPLAINED_SETTLES,
)
from gpulens.core.catalog import GpuModel, device_price, gpu_share_of, model_info
from gpulens.core.thresholds import Thresholds

#: Bins of use kept per unit over a span: memory that follows the units (8 KiB each), not the span.
MAX_BINS = 1024
MONTH_HOURS = 30 * 24
#: Classes whose waste is the code's, the input's or the placement's: fixed, not resized.
FIX = PLANNED["fix"]
#: Classes of a GPU at fault, or a process outside any pod: repaired, not planned.
FAULTS = PLANNED["repair"]
#: Classes whose GPU is larger than their use, which a smaller share of a GPU, or fewer replicas, can serve
#: (unexplained is resized too, but alone: its cause unknown, its replicas are not counted as serving load).
OVERSIZED = PLANNED["resize"] - {UNEXPLAINED}
#: Classes a replica of an over-provisioned serving workload can have.
SERVING = OVERSIZED | PLANNED["release"]
#: Owners whose pods are replicas of one another.
REPLICATED = frozenset({"Deployment", "ReplicaSet", "StatefulSet"})
#: Pod names of a Deployment ("name-<replicaset hash>-<5 chars>") and of a StatefulSet ("name-<ordinal>"),
#: to group replicas where kube-state-metrics is not read (files).
_DEPLOYMENT_POD = re.compile(r"^(.+)-[a-z0-9]{6,10}-[a-z0-9]{5}$")
_STATEFULSET_POD = re.compile(r"^(.+)-\d+$")
_NOTEBOOK = re.compile(r"notebook|jupyter", re.IGNORECASE)


class Use:
    """What each unit used, added a piece at a time (unit_samples()): its mean activity per GPU in the bins
    of `bins` (a report's span, or the live service's RollingTimelines), and the most memory one of its
    GPUs held."""

    def __init__(self, bins: TimelineBins):
        self.bins = bins
        self.peak_memory: dict[str, float] = {}

    @classmethod
    def over(cls, start: float, end: float, step: float, t: Thresholds) -> Use:
        """For a report of the span from `start` to `end` sampled every `step` seconds: bins of
        plan_load_bin_seconds, or the step, and at most MAX_BINS over the span."""
        width = max(t.plan_load_bin_seconds, step, (end - start) / MAX_BINS)
        return cls(TimelineBins(start, end, width, np.float32, points=MAX_BINS, columns=("activity",)))

    @classmethod
    def of_trace(cls, trace: pd.DataFrame, step: float, t: Thresholds, keys: UnitKeys | None = None) -> Use:
        """The use in a trace sampled every `step` seconds (`keys`: UnitKeys.of(trace), where the caller has
        it)."""
        if trace.empty:
            return cls.over(0.0, step, step, t)
        ts = trace["timestamp"]
        use = cls.over(float(ts.min()), float(ts.max()), step, t)
        use.add(unit_samples(trace, keys=keys))
        return use

    @property
    def bin_seconds(self) -> float:
        return self.bins.width

    def add(self, samples: pd.DataFrame) -> None:
        if samples.empty:
            return
        self.bins.add(samples)
        memory = pd.Series(samples["memory"].to_numpy() * samples["capacity"].to_numpy())
        for unit, peak in memory.groupby(samples["unit"].to_numpy()).max().items():
            if not math.isnan(peak):
                self.peak_memory[str(unit)] = max(self.peak_memory.get(str(unit), 0.0), float(peak))

    def merge(self, other: Use) -> None:
        """Add what `other` gathered over the same span (another process's share of a report's units)."""
        self.bins.merge(other.bins)
        self.merge_peaks(other.peak_memory)

    def merge_peaks(self, peaks: Mapping[str, float]) -> None:
        """Add the most memory (bytes) other readers saw each unit's GPUs hold."""
        for unit, peak in peaks.items():
            self.peak_memory[unit] = max(self.peak_memory.get(unit, 0.0), float(peak))

    def retain(self, units: set[str]) -> None:
        """Forget every unit but `units` (a live service's, as its history forgets them)."""
        self.bins.retain(units)
        self.peak_memory = {unit: peak for unit, peak in self.peak_memory.items() if unit in units}

    def size_of(self, v: Verdict, t: Thresholds, prices: dict[str, float] | None = None) -> Size:
        """The smallest GPU `v`'s unit fits (sizing.smallest), from its highest bin of activity and its peak
        memory."""
        activity = self.activity(v.unit)
        peak = math.nan if np.isnan(activity).all() else float(np.nanmax(activity))
        memory = self.peak_memory.get(v.unit, math.nan)
        return smallest(v.gpu_model, peak, memory, self.bin_seconds, t, prices, v.engine, v.gpus[0] if v.gpus else "")

    def idle_spells(self, unit: str, t: Thresholds) -> list[float]:
        """How long (seconds) each run of the unit's bins lasted whose mean activity stayed under idle_activity:
        its rests as its samples show them, to a bin (a notebook's 6-minute pause between cells is 6 minutes
        here, where a report's history books whole steps of it). A bin without samples ends a run."""
        quiet = self.activity(unit) < t.idle_activity  # NaN compares False
        edges = np.diff(np.concatenate(([0], quiet.astype(np.int8), [0])))
        starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
        return [float(n) * self.bin_seconds for n in ends - starts]

    def first_and_last(self, unit: str) -> tuple[float, float] | None:
        """The start of the first bin with a sample of the unit and the end of the last (unix seconds); None
        where it has none."""
        row = self.bins.rows.get(unit)
        if row is None:
            return None
        order = self.bins.order()
        counts = self.bins.sums[row][len(self.bins.columns) :, order].sum(axis=0)
        seen = np.flatnonzero(counts > 0)
        if not len(seen):
            return None
        middles = self.bins.middles(order[[seen[0], seen[-1]]])
        return float(middles[0] - self.bin_seconds / 2), float(middles[1] + self.bin_seconds / 2)

    def held_and_worked(self, unit: str, start: float, end: float, step: float) -> tuple[float, float]:
        """The GPU-seconds the unit held between `start` and `end` (unix seconds) and the GPU-seconds of them that
        did work (activity), from its samples taken every `step` seconds (held_by_bin(), summed)."""
        _, held, worked = self.held_by_bin(unit, start, end, step)
        return float(held.sum()), float(worked.sum())

    def held_by_bin(
        self, unit: str, start: float, end: float, step: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """In each bin, in time order: the seconds of it between `start` and `end`, and in them the GPU-seconds the
        unit held and those that did work (activity), from its samples taken every `step` seconds. A bin the
        window cuts counts for the share of it the window covers; zeros where the unit has no samples."""
        order = self.bins.order()
        lows = self.bins.middles(order) - self.bin_seconds / 2
        covered = np.clip(np.minimum(lows + self.bin_seconds, end) - np.maximum(lows, start), 0.0, None)
        row = self.bins.rows.get(unit)
        if row is None:
            return covered, np.zeros(len(order)), np.zeros(len(order))
        share = covered / self.bin_seconds
        k, counts = self.bins.columns.index("activity"), len(self.bins.columns)
        sums = self.bins.sums[row][:, order].astype(float)
        return covered, sums[k + counts] * share * step, sums[k] * share * step

    def activity(self, unit: str) -> np.ndarray:
        """The unit's mean activity per GPU in each bin, in time order; NaN where it has no sample."""
        order = self.bins.order()
        row = self.bins.rows.get(unit)
        if row is None:
            return np.full(len(order), np.nan)
        k, counts = self.bins.columns.index("activity"), len(self.bins.columns)
        sums = self.bins.sums[row][:, order].astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return sums[k] / sums[k + counts]


@dataclass(frozen=True)
class Need:
    """What a unit needs after its change: a `share` of one GPU of a model, whole or shared ("whole", "mig",
    "time-slicing": shares are packed onto GPUs of their own kind only)."""

    gpu_model: str
    share: float
    sharing: str = "whole"
    #: The GPU ("node/uuid") a unit keeps as it is: units that held one GPU in turn need it once.
    board: str = ""


def kept(v: Verdict) -> list[Need]:
    """The GPUs a unit keeps as they are."""
    return [Need(v.gpu_model, 1.0, "whole", f"{v.node}/{gpu.split('/')[0]}") for gpu in v.gpus]


@dataclass
class Action:
    """One workload's change: what to do, the GPUs it holds now and after, and what that saves."""

    namespace: str
    #: The workload as reports name it (Verdict.workload), its team, and its units (pods or GPUs).
    owner: str
    team: str
    action: str
    #: The change in words ("run 1 replica instead of 8").
    what: str
    gpu_model: str
    gpus_now: float
    gpus_after: float
    saving_usd_span: float
    saving_usd_per_30d: float
    confidence: float
    units: list[str]
    #: What was measured, and what was assumed (percentile, headroom, price and its source, span).
    evidence: dict[str, str] = field(default_factory=dict)
    assumptions: dict[str, str] = field(default_factory=dict)
    #: The GPUs (or shares of one) its units need after the change, which the fleet's packing places.
    needs: list[Need] = field(default_factory=list)
    #: The step after it, where its unit's cause and size both call for a change: the fix after a move to a
    #: smaller GPU, or the size after a fix (core.bottlenecks.Bottleneck.fix_before_size); "" where none.
    then: str = ""
    #: The change its workload already went through toward it in the span, and what became of it
    #: (outcomes.mark_done(): "replicas 4 -> 2 at ...: held, saves $120.00 a day"); "" where none.
    done: str = ""

    def change(self) -> str:
        """The change in words, with the step after it where there is one ("move to Tesla T4 ...; then ...")."""
        return f"{self.what}; {self.then}" if self.then else self.what

    def gpus_change(self, arrow: str = "->") -> str:
        """The GPUs it holds now and after, as people read them ("8 -> 1"); "none held" for the cluster's
        actions, which move pods or change settings (what they save is stranded GPU-hours), not "0 -> 0"."""
        if self.action in SCHEDULING_CONFIDENCE:
            return "none held"
        return f"{gpu_count(self.gpus_now)} {arrow} {gpu_count(self.gpus_after)}"


#: The most confidence a replica count sized from GPU activity alone gets (its engine's load sizes it firmly).
GPU_ONLY_REPLICA_CONFIDENCE = 0.5


@dataclass
class NotPlanned:
    owner: str
    units: list[str]
    reason: str


@dataclass
class PlanSum:
    """Actions summed: by team, or the fleet's ("" key)."""

    key: str
    actions: int = 0
    gpus_now: float = 0.0
    gpus_after: float = 0.0
    saving_usd_span: float = 0.0
    saving_usd_per_30d: float = 0.0


@dataclass
class Packed:
    """One GPU model of the fleet after the plan: every unit's need (changed or not) packed onto its GPUs,
    first-fit decreasing, and what that frees. Freed GPUs below zero are GPUs to add (a cheaper model the
    fleet does not have yet); nodes are freed whole, assuming pods may move between nodes of the model."""

    gpu_model: str
    gpus_present: int
    nodes_present: int
    gpus_needed: int
    #: The least GPUs any packing could use: the whole GPUs, and each kind of share's sum rounded up.
    lower_bound: int
    gpus_freed: int
    nodes_freed: int
    saving_usd_per_30d: float


@dataclass
class Plan:
    actions: list[Action]
    not_planned: list[NotPlanned]
    span_seconds: float
    #: The fleet's total, and the teams', most saving first.
    total: PlanSum
    by_team: list[PlanSum]
    #: Per GPU model, the fleet's GPUs and nodes the actions free once packed.
    fleet: list[Packed] = field(default_factory=list)
    #: Seconds of samples a month is projected from (Thresholds.plan_projection_min_seconds): over a shorter
    #: span every output says what the actions saved in the span, and no per-30-day figure.
    projection_min_seconds: float = 0.0
    #: When it was made: the time of the newest sample it read (unix seconds; 0 without one), so that a plan kept
    #: as a file can be shown against the changes made after it (docs/changes.md).
    made_at: float = 0.0

    @property
    def projected(self) -> bool:
        """Whether the span is long enough to project 30 days from."""
        return self.span_seconds >= self.projection_min_seconds

    def saving(self, per_30d: float, in_span: float) -> str:
        """A saving as the outputs say it: per 30 days, or where the span is too short to project one, what it
        saved in the span."""
        if self.projected:
            return f"${per_30d:,.0f} per 30 days"
        return f"${in_span:,.2f} in the {duration(self.span_seconds)} seen"

    def held(self, arrow: str = "->") -> str:
        """The GPUs the actions change, now and after, with what the count covers: each unit's GPUs whenever
        in the span it ran, so that a span with pods that came and went counts each of them (a day of a live
        analyzer's history beside a report of the last hours differ for that). The cluster's actions hold none."""
        units = sum(len(a.units) for a in self.actions if a.action not in SCHEDULING_CONFIDENCE)
        return (
            f"GPUs held {gpu_count(self.total.gpus_now)} {arrow} {gpu_count(self.total.gpus_after)} (by the {units:,} "
            f"pod{'s' if units != 1 else ''} and GPUs it changes, each counted whenever it ran in the "
            f"{duration(self.span_seconds)} seen)"
        )

    def unprojected(self) -> str:
        """Why no per-30-day figure is given ("" where one is)."""
        if self.projected:
            return ""
        least = duration(self.projection_min_seconds)
        return f"no month projected from under {least} of samples"

    def to_dict(self) -> dict:
        """The JSON of the plan: `plan`, one object per action, and `plan_summary`, its sums, what it did not
        plan and why, and the fleet once packed. Per-30-day figures are null over a span too short to
        project them (`projected` false)."""

        return {
            "plan": self.action_documents(),
            "plan_summary": {
                "made_at": self.made_at,
                "span_seconds": self.span_seconds,
                "projected": self.projected,
                "projection_min_seconds": self.projection_min_seconds,
                "total": self._month(asdict(self.total)),
                "by_team": [self._month(asdict(s)) for s in self.by_team],
                "not_planned": [asdict(n) for n in self.not_planned],
                "fleet": [self._month(asdict(p)) for p in self.fleet],
            },
        }

    def action_documents(self) -> list[dict]:
        """One document per action, as every machine output (JSON, CSV) writes it: the per-30-day saving null
        over a span too short to project a month from."""
        return [self._month(asdict(a)) for a in self.actions]

    def _month(self, document: dict) -> dict:
        return document if self.projected else {**document, "saving_usd_per_30d": None}


def sized(verdicts: list[Verdict], use: Use, t: Thresholds, prices: dict[str, float] | None = None) -> list[Verdict]:
    """The verdicts, each with the size its use fits (Verdict.size): what every output shows and the plan
    proposes, measured once."""
    return [replace(v, size=use.size_of(v, t, prices)) for v in verdicts]


def make_plan(
    verdicts: list[Verdict],
    use: Use,
    t: Thresholds,
    prices: dict[str, float] | None = None,
    scheduling: Scheduling | None = None,
) -> Plan:
    """The plan for `verdicts` (their headlines over the span), the `use` measured in it and, where
    kube-state-metrics was read, the cluster's `scheduling`."""
    span = max((v.window_seconds for v in verdicts), default=0.0)
    planner = _Planner(use, t, prices or {}, span)
    actions: list[Action] = []
    skipped: list[NotPlanned] = []
    unheld: dict[str, list[Verdict]] = defaultdict(list)
    groups: dict[tuple[str, str, str], list[Verdict]] = defaultdict(list)
    for v in verdicts:
        if not v.pod and v.bottleneck == UNALLOCATED:
            unheld[v.node].append(v)
        else:
            groups[_workload(v)].append(v)
    for (namespace, kind, name), members in sorted(groups.items()):
        done, left = planner.replicas(namespace, kind, name, members)
        actions += done
        skipped += left
    for node, gpus in sorted(unheld.items()):
        released = planner.unallocated(node, gpus)
        free, unwanted = scheduling.node_free.get(node, (0.0, 0.0)) if scheduling else (0.0, 0.0)
        if free and unwanted < free:  # pods waited for some of these GPUs: only the rest is capacity to shrink
            kept = unwanted / free
            if not kept:
                skipped.append(
                    NotPlanned(
                        released.owner,
                        released.units,
                        "release_capacity: pods of its pool waited whenever its GPUs were free: the pool's "
                        "consolidate or bin_pack action uses them",
                    )
                )
                continue
            released.saving_usd_span = round(released.saving_usd_span * kept, 2)
            released.saving_usd_per_30d = round(released.saving_usd_per_30d * kept, 2)
            released.evidence["waited_for"] = (
                f"pods of its pool waited through {percent(1 - kept)} of its free GPU-hours: counted, the rest"
            )
        actions.append(released)
    # A change of nothing (its GPUs as they are, nothing saved) is not an action; a fix to code or input is.
    idle = [a for a in actions if a.action != "fix" and a.gpus_after >= a.gpus_now and a.saving_usd_span <= 0]
    skipped += [NotPlanned(a.owner, a.units, f"{a.action}: changes nothing in the span seen") for a in idle]
    actions = [a for a in actions if a not in idle]
    if scheduling is not None:
        actions += scheduling_actions(scheduling, t)
    actions.sort(key=lambda a: (-a.saving_usd_per_30d, a.owner))
    fleet = pack(verdicts, actions, prices or {})
    made_at = max((e.end - v.sample_seconds for v in verdicts for e in v.episodes), default=0.0)
    return Plan(
        actions, skipped, span, _sum("", actions), _by_team(actions), fleet, t.plan_projection_min_seconds, made_at
    )


#: What the cluster's actions are sure of: consolidation and quotas are read from kube-state-metrics' own
#: word; bin-packing and re-pooling assume the waits to come are like those seen.
SCHEDULING_CONFIDENCE = {"consolidate": 0.9, "add_quota": 0.9, "bin_pack": 0.8, "re_pool": 0.8}
#: kube-scheduler's configuration that packs GPUs (docs/cluster.md).
BIN_PACKING = (
    "score nodes with NodeResourcesFit's MostAllocated strategy for nvidia.com/gpu (KubeSchedulerConfiguration "
    "pluginConfig: scoringStrategy type MostAllocated, resources nvidia.com/gpu weight 1), or a second scheduler "
    "profile for GPU pods"
)


def scheduling_actions(s: Scheduling, t: Thresholds) -> list[Action]:
    """The cluster's actions: per pool that stranded GPUs, consolidate or bin_pack; add_quota per namespace
    with none; re_pool per workload on a pool not meant for it. Their savings are the cost of the capacity
    that sat free while pods waited for it (stranded, or held on the wrong pool while its own had room):
    capacity paid for and not used; a quota saves nothing by itself."""
    month = MONTH_HOURS * 3600 / s.span_seconds if s.span_seconds else 0.0

    def confidence(action: str) -> tuple[float, dict[str, str]]:
        notes = {"span": f"{duration(s.span_seconds)} of kube-state-metrics"}
        value = SCHEDULING_CONFIDENCE[action]
        if s.span_seconds < t.plan_trusted_span_seconds:
            value = min(value, t.plan_short_confidence)
            notes["span"] += f" < {t.plan_trusted_span_seconds / 86400:g} d: plan again over a week"
        return value, notes

    def action(
        kind: str, namespace: str, owner: str, what: str, model: str, saving: float, units: list[str], **evidence: str
    ) -> Action:
        value, notes = confidence(kind)
        return Action(
            namespace,
            owner,
            "",
            kind,
            what,
            model,
            0.0,
            0.0,
            round(saving, 2),
            round(saving * month, 2),
            value,
            units,
            dict(evidence),
            notes,
        )

    out: list[Action] = []
    for pool in s.pools:
        if not pool.stranded_gpu_seconds:
            continue
        saving = pool.stranded_cost
        found = [c for c in s.consolidations if (c.pool, c.gpu_model) == (pool.pool, pool.gpu_model)]
        now = ""
        if found:
            c = found[0]
            moved = ", ".join(
                f"{m.namespace}/{m.pod} ({m.gpus:g} GPU{'s' if m.gpus != 1 else ''}) to {m.to_node}" for m in c.moves
            )
            now = (
                f"move {moved}: {c.node} then has {c.gpus:g} GPUs free for {c.namespace}/{c.pod}, which waited "
                f"{duration(c.waited_seconds)}"
            )
        spells = pool.fragmentation_episodes
        evidence = {
            "stranded": f"{spent(pool.stranded_gpu_seconds)} free while pods waited for more than any node had free",
            "free": f"{spent(pool.free_gpu_seconds)} free in all, {spent(pool.unwanted_gpu_seconds)} of it while "
            "no pod waited",
            "spells": f"{spells} spell{'s' if spells != 1 else ''} of fragmentation",
            "price": f"${pool.price_per_gpu_hour:.2f}/GPU-h",
        }
        if pool in s.recurring or not found:
            # Recurring, or no moves free a node for the pod that waited: keep fragmentation from building up.
            what = f"bin-pack pool {pool.name}: {BIN_PACKING}" + (f"; now: {now}" if now else "")
            out.append(
                action(
                    "bin_pack",
                    "",
                    f"pool {pool.name}",
                    what,
                    pool.gpu_model,
                    saving,
                    sorted({f"{m.namespace}/{m.pod}" for c in found for m in c.moves}),
                    **evidence,
                )
            )
        else:
            out.append(
                action(
                    "consolidate",
                    found[0].namespace,
                    f"pool {pool.name}",
                    now,
                    pool.gpu_model,
                    saving,
                    [f"{m.namespace}/{m.pod}" for m in found[0].moves],
                    **evidence,
                )
            )
    # A namespace without a GPU quota is an action where it cost others: it held more than the dominant share
    # while their pods waited. The rest are listed in the cluster's section, not planned.
    for gap in (g for g in s.quota_gaps if g.others_waited_seconds > 0):
        out.append(
            action(
                "add_quota",
                gap.namespace,
                f"namespace {gap.namespace}",
                quota_advice(gap),
                "",
                0.0,
                [],
                peak=f"{gap.peak_gpus:g} GPUs ({gap.peak_share:.1%} of the cluster's)",
                held=spent(gap.gpu_seconds),
                others_waited=f"{duration(gap.others_waited_seconds)} while it held more than "
                f"{gap.dominant_share:.0%} of the cluster's GPUs",
            )
        )
    by_owner: dict[tuple[str, str, str, str], list] = defaultdict(list)
    for m in s.misplaced:
        by_owner[(m.namespace, m.owner or m.pod, m.pool, m.meant_pool)].append(m)
    for (namespace, owner, ran_on, meant), pods in sorted(by_owner.items()):
        model = pods[0].gpu_model
        saving = sum(p.room_seconds * p.gpus * p.price_per_gpu_hour for p in pods) / 3600
        out.append(
            action(
                "re_pool",
                namespace,
                f"{namespace}/{owner}",
                f"run {owner} on pool {meant} (its kind, {pods[0].kind}, belongs "
                f"there): a node selector and its pool's tolerations",
                model,
                saving,
                [f"{namespace}/{p.pod}" for p in pods],
                ran_on=f"pool {ran_on} for {duration(sum(p.seconds for p in pods))}",
                room=f"pool {meant} had room for it for {duration(sum(p.room_seconds for p in pods))}",
            )
        )
    return out


def _capacity(load: EngineLoad, kv_bound: float) -> float:
    """Requests one replica carries: where its KV cache filled, the requests that fit up to `kv_bound` of it
    (its running peak scaled by kv_bound over the KV cache's peak); without a KV gauge, its running peak,
    which it carried (queued or not)."""
    if not math.isnan(load.kv_cache_peak) and load.kv_cache_peak > 0:
        return load.running_peak * kv_bound / load.kv_cache_peak
    return load.running_peak


def _capacity_says(load: EngineLoad, t: Thresholds) -> str:
    if not math.isnan(load.kv_cache_peak) and load.kv_cache_peak > 0:
        return (
            f"its peak of {load.running_peak:.3g} running filled {load.kv_cache_peak:.0%} of its KV cache; "
            f"{t.plan_kv_cache_bound:.0%} of it holds {_capacity(load, t.plan_kv_cache_bound):.3g}"
        )
    return f"the most it ran at once ({load.running_peak:.3g}); its engine says nothing of its KV cache"


def pack(verdicts: list[Verdict], actions: list[Action], prices: dict[str, float]) -> list[Packed]:
    """Each model's GPUs after the plan: the actions' needs, and the whole GPUs of every unit no action
    changes, packed first-fit decreasing onto the GPUs of the model."""
    # The cluster's actions move pods or change settings; the GPUs their pods need stay as they are.
    changed = {unit for a in actions if a.action not in SCHEDULING_CONFIDENCE for unit in a.units}
    needs = [n for a in actions for n in a.needs]
    needs += [n for v in verdicts if v.unit not in changed for n in kept(v)]
    present: dict[str, set[tuple[str, str]]] = defaultdict(set)
    nodes: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for v in verdicts:
        for gpu in v.gpus:
            board = gpu.split("/")[0]  # a MIG instance's board
            present[v.gpu_model].add((v.node, board))
            nodes[v.gpu_model][v.node].add(board)
    out = []
    for model in sorted(set(present) | {n.gpu_model for n in needs}):
        mine = [n for n in needs if n.gpu_model == model]
        boards = {n.board for n in mine if n.sharing == "whole" and n.board}
        whole = len(boards) + sum(1 for n in mine if n.sharing == "whole" and not n.board)
        needed, bound = whole, whole
        for sharing in ("mig", "time-slicing"):
            shares = [Fraction(n.share).limit_denominator(64) for n in mine if n.sharing == sharing]
            needed += _first_fit_decreasing(shares)
            bound += math.ceil(sum(shares, Fraction(0)))
        have = len(present.get(model, ()))
        per_node = min((len(gpus) for gpus in nodes[model].values()), default=0)
        freed = have - needed
        out.append(
            Packed(
                model,
                have,
                len(nodes[model]),
                needed,
                bound,
                freed,
                freed // per_node if per_node and freed > 0 else 0,
                round(freed * model_info(model, prices).price_per_hour * MONTH_HOURS, 2),
            )
        )
    return out


def _first_fit_decreasing(shares: list[Fraction]) -> int:
    """GPUs that hold `shares` (each at most 1), placed largest first on the first GPU with room."""
    free: list[Fraction] = []
    for share in sorted(shares, reverse=True):
        room = next((k for k, left in enumerate(free) if left >= share), None)
        if room is None:
            free.append(1 - share)
        else:
            free[room] -= share
    return len(free)


def _workload(v: Verdict) -> tuple[str, str, str]:
    """(namespace, owner kind, owner name): kube-state-metrics' where read, else from the pod's name
    (kind "Deployment?" or "StatefulSet?": inferred), else the pod alone."""
    if not v.pod:
        return ("", "", v.unit)
    if v.owner_kind:
        return (v.namespace, v.owner_kind, v.owner)
    for kind, pattern in (("Deployment?", _DEPLOYMENT_POD), ("StatefulSet?", _STATEFULSET_POD)):
        if match := pattern.match(v.pod):
            return (v.namespace, kind, match[1])
    return (v.namespace, "Pod", v.pod)


def _sum(key: str, actions: Iterable[Action]) -> PlanSum:
    total = PlanSum(key)
    for a in actions:
        total.actions += 1
        total.gpus_now += a.gpus_now
        total.gpus_after += a.gpus_after
        total.saving_usd_span += a.saving_usd_span
        total.saving_usd_per_30d += a.saving_usd_per_30d
    return PlanSum(
        key,
        total.actions,
        round(total.gpus_now, 3),
        round(total.gpus_after, 3),
        round(total.saving_usd_span, 2),
        round(total.saving_usd_per_30d, 2),
    )


def _by_team(actions: list[Action]) -> list[PlanSum]:
    teams: dict[str, list[Action]] = defaultdict(list)
    for a in actions:
        teams[a.team or "(no team)"].append(a)
    return sorted(
        (_sum(team, members) for team, members in teams.items()), key=lambda s: (-s.saving_usd_per_30d, s.key)
    )


class _Planner:
    def __init__(self, use: Use, t: Thresholds, prices: dict[str, float], span: float):
        self.use, self.t, self.prices, self.span = use, t, prices, span

    # --- what every action says ------------------------------------------------------------------
    def _model(self, v: Verdict) -> GpuModel:
        """Its GPU's catalogue entry, priced as what it holds costs: a MIG instance its share of its GPU
        (catalog.device_price), as the waste it is planned from was."""
        return replace(model_info(v.gpu_model, self.prices), price_per_hour=device_price(v.gpu_model, self.prices))

    def _price_source(self, v: Verdict) -> str:
        model = self._model(v)
        named = any(key in v.gpu_model for key in self.prices)
        unit = "GPU-h" if gpu_share_of(v.gpu_model) == 1 else f"h for its {v.gpu_model.partition(' MIG ')[2]} slice"
        return f"${model.price_per_hour:.2f}/{unit} ({'--prices' if named else 'the catalogue'})"

    def _confidence(self, members: list[Verdict]) -> tuple[float, dict[str, str]]:
        confidence = min(v.confidence for v in members)
        notes = {"span": f"{duration(self.span)} of samples"}
        if self.span < self.t.plan_trusted_span_seconds:
            confidence = min(confidence, self.t.plan_short_confidence)
            notes["span"] += (
                f" < {self.t.plan_trusted_span_seconds / 86400:g} d: a weekly pattern (weekends, batch days) is not "
                "seen; plan again over a week"
            )
        return round(confidence, 2), notes

    def _action(
        self,
        members: list[Verdict],
        action: str,
        what: str,
        gpus_after: float,
        saving_span: float,
        per_hour: float,
        needs: list[Need] | None = None,
        **evidence: str,
    ) -> Action:
        """An action on `members`: `saving_span` USD over the span, `per_hour` USD an hour from now on; `needs`
        what they need after it (None: their GPUs, whole, as now)."""
        first = members[0]
        confidence, assumptions = self._confidence(members)
        assumptions["price"] = self._price_source(first)
        return Action(
            namespace=first.namespace,
            owner=first.workload if first.pod else first.unit,
            team=first.team,
            action=action,
            what=what,
            gpu_model=first.gpu_model,
            gpus_now=float(sum(len(v.gpus) for v in members)),
            gpus_after=round(gpus_after, 3),
            saving_usd_span=round(float(saving_span), 2),
            saving_usd_per_30d=round(float(per_hour) * MONTH_HOURS, 2),
            confidence=float(confidence),
            units=[v.unit for v in members],
            evidence=dict(evidence),
            assumptions=assumptions,
            needs=[n for v in members for n in kept(v)] if needs is None else needs,
        )

    def _rate(self, saving_span: float) -> float:
        """USD an hour, from what the span shows."""
        return saving_span / (self.span / 3600) if self.span else 0.0

    def _held_hours(self, members: list[Verdict]) -> float:
        """GPU-hours the units' samples cover."""
        return sum(v.window_seconds * v.coverage * len(v.gpus) for v in members) / 3600

    # --- workloads ------------------------------------------------------------------------------
    def replicas(
        self, namespace: str, kind: str, name: str, members: list[Verdict]
    ) -> tuple[list[Action], list[NotPlanned]]:
        """A workload's action: fewer replicas where it has several serving ones, else each unit's own."""
        serving = [v for v in members if v.bottleneck in SERVING]
        # What Kubernetes says the pods are decides; where it says nothing, a notebook's name.
        kinds = {v.workload_kind for v in members}
        replicas = kinds == {"serving"} or (kinds == {"unknown"} and not _NOTEBOOK.search(name))
        done: list[Action] = []
        skipped: list[NotPlanned] = []
        if (
            len(members) >= 2
            and kind.rstrip("?") in REPLICATED
            and replicas
            and len(serving) == len(members)
            and any(v.bottleneck in OVERSIZED for v in members)
        ):
            fewer = self._fewer_replicas(namespace, kind, name, members)
            if isinstance(fewer, Action):
                return [fewer], []
            if fewer is not None:  # its engines' load needs every replica: said, and each unit's own fix follows
                skipped.append(fewer)
        for v in members:
            outcome = self.unit(v)
            if isinstance(outcome, Action):
                done.append(outcome)
            elif outcome is not None:
                skipped.append(outcome)
        return done, skipped

    def _fewer_replicas(
        self, namespace: str, kind: str, name: str, members: list[Verdict]
    ) -> Action | NotPlanned | None:
        counted = [v.engine_load for v in members]
        if all(load is not None and not math.isnan(load.running_peak) for load in counted):
            return self._fewer_replicas_by_engine(namespace, kind, name, members, cast(list[EngineLoad], counted))
        t = self.t
        per_replica = max(len(v.gpus) for v in members)
        loads = np.array([self.use.activity(v.unit) * len(v.gpus) for v in members])
        seen = ~np.isnan(loads).all(axis=0)
        if not seen.any():
            return None
        load = np.nansum(loads[:, seen], axis=0)  # GPUs' worth of work in each bin
        at_percentile, peak = float(np.quantile(load, t.plan_load_percentile)), float(load.max())
        after = max(
            1,
            math.ceil(at_percentile / t.plan_replica_activity / per_replica - 1e-9),
            math.ceil(peak * (1 + t.plan_headroom) / per_replica - 1e-9),
        )
        if after >= len(members):
            return None
        price = self._model(members[0]).price_per_hour
        freed_share = 1 - after / len(members)
        inferred = " (inferred from the pods' names)" if kind.endswith("?") else ""
        action = self._action(
            members,
            "fewer_replicas",
            f"run {after} replica{'s' if after > 1 else ''} instead of {len(members)}, scaled on request rate "
            "or queue depth (KEDA, HPA)",
            float(after * per_replica),
            self._held_hours(members) * freed_share * price,
            (sum(len(v.gpus) for v in members) - after * per_replica) * price,
            [Need(members[0].gpu_model, 1.0)] * (after * per_replica),
            replicas=f"{len(members)} of {kind.rstrip('?')} {namespace}/{name}{inferred}",
            load=(
                f"the replicas' summed activity over {self.use.bin_seconds:.0f} s bins: "
                f"p{t.plan_load_percentile * 100:g} {at_percentile:.3g}, peak {peak:.3g} GPUs' worth"
            ),
            sizing=(
                f"p{t.plan_load_percentile * 100:g} at {t.plan_replica_activity:.0%} a replica, and the peak with "
                f"{t.plan_headroom:.0%} headroom"
            ),
        )
        action.owner = f"{namespace}/{kind.rstrip('?')}/{name}"  # the workload, not one of its pods
        # SM activity does not show what bounds a replica (an LLM server's KV cache and queue): said, and held
        # below the engines' sizing.
        action.confidence = min(action.confidence, GPU_ONLY_REPLICA_CONFIDENCE)
        action.assumptions["sizing"] = (
            f"from GPU activity alone, confidence at most {GPU_ONLY_REPLICA_CONFIDENCE:g}: its engine's running and "
            "waiting requests and KV cache use (vLLM's vllm:num_requests_running, vllm:num_requests_waiting and "
            "vllm:kv_cache_usage_perc, or TGI's, Triton's or SGLang's: docs/workloads.md) would size it by what "
            "bounds a replica"
        )
        return action

    def _fewer_replicas_by_engine(
        self, namespace: str, kind: str, name: str, members: list[Verdict], loads: list[EngineLoad]
    ) -> Action | NotPlanned | None:
        """Replicas sized by what their engines carried: the requests they ran at once, summed at the
        percentile, over what one replica ran at its peak without a queue (its KV cache, where the engine says
        how full, taken to plan_kv_cache_bound). Never fewer than carried the replicas' summed peak."""
        t = self.t
        per_replica = max(len(v.gpus) for v in members)
        capacities = [_capacity(load, t.plan_kv_cache_bound) for load in loads]
        capacity = min(capacities)
        if not capacity > 0:
            return None
        at_percentile = sum(load.running_at_percentile for load in loads)
        peak = sum(load.running_peak for load in loads)  # the peaks' sum: at least the summed peak
        after = max(1, math.ceil(at_percentile / capacity - 1e-9), math.ceil(peak / capacity - 1e-9))
        engine = loads[0].engine
        load = (
            f"{engine}'s requests running, summed over the replicas: p{loads[0].percentile * 100:g} "
            f"{at_percentile:.3g}, peaks {peak:.3g}"
        )
        sizing = f"{capacity:.3g} running requests a replica: {_capacity_says(loads[capacities.index(capacity)], t)}"
        if after >= len(members):  # said, so that the plan's silence is not read as "nothing measured"
            return NotPlanned(
                f"{namespace}/{kind.rstrip('?')}/{name}",
                [v.unit for v in members],
                f"its engines' load needs all {len(members)} replicas ({after} by it): {load}; {sizing}",
            )
        price = self._model(members[0]).price_per_hour
        action = self._action(
            members,
            "fewer_replicas",
            f"run {after} replica{'s' if after > 1 else ''} instead of {len(members)}, scaled on its engine's "
            "running and waiting requests (KEDA, HPA)",
            float(after * per_replica),
            self._held_hours(members) * (1 - after / len(members)) * price,
            (sum(len(v.gpus) for v in members) - after * per_replica) * price,
            [Need(members[0].gpu_model, 1.0)] * (after * per_replica),
            replicas=f"{len(members)} of {kind.rstrip('?')} {namespace}/{name}",
            load=load,
            sizing=sizing,
        )
        action.owner = f"{namespace}/{kind.rstrip('?')}/{name}"
        return action

    def unit(self, v: Verdict) -> Action | NotPlanned | None:
        """One unit's action, why it has none, or None (nothing to change: healthy on the GPU it needs)."""
        name = v.bottleneck
        plan = BY_NAME[name].plan
        if plan != "release" and _notebook(v) and self.use.idle_spells(v.unit, self.t):
            # A notebook in use between its cells: its pauses are culled where they outlast the cull time;
            # where none does and its work needs nothing, it says why nothing changes.
            culled = self._cull(v)
            if isinstance(culled, Action) or (plan == "none" and not self._size(v).smaller):
                return culled
        if plan == "not_planned":  # the data does not say what would help: the class's fix says what would
            return NotPlanned(v.workload, [v.unit], f"{name}: {v.recommendation.split(':')[0].split('. ')[0]}")
        if "xid_fault" in v.facts:
            return NotPlanned(
                v.workload, [v.unit], f"a hardware XID on its GPU: {v.evidence[XID_FAULTS]}; repair first"
            )
        if "nvlink_fault" in v.facts:
            return NotPlanned(v.workload, [v.unit], f"{name}: its GPUs' NVLinks are down or failing; repair first")
        if name in FAULTS:  # the class's fix opens with what is wrong: "The GPU slows itself down: check ..."
            return NotPlanned(v.workload, [v.unit], f"{name}: {BY_NAME[name].fix.split(':')[0]}; repair first")
        if plan == "release":
            return self._release(v)
        size = self._size(v)
        if name in FIX:
            return self._fix_and_size(v, size)
        sized = self._sized(v, size, then=self._then_fix(v))
        if plan == "none":  # healthy: a smaller GPU where its use fits one, else nothing to change
            return sized if isinstance(sized, Action) else None
        # A replica at rest for hours (nights, weekends): scaled to zero, where that saves more than a resize.
        zero = self._scale_to_zero(v) if name == OVERPROVISIONED_SERVING else None
        if zero is not None and (not isinstance(sized, Action) or zero.saving_usd_span > sized.saving_usd_span):
            return zero
        if name == UNEXPLAINED and not isinstance(sized, Action):  # no size saves: what would settle the cause
            return NotPlanned(v.workload, [v.unit], f"{sized.reason}; {v.recommendation.split('. ')[0]}")
        return sized

    def _size(self, v: Verdict) -> Size:
        """The size `v` carries (sized()), else the one its use fits."""
        return v.size if v.size is not None else self.use.size_of(v, self.t, self.prices)

    def _fix_and_size(self, v: Verdict, size: Size) -> Action:
        """A unit whose problem is its code, input or placement: its fix, and the smaller GPU its use fits in the
        order its cause argues for (Bottleneck.fix_before_size): the size first where its work runs as fast on
        it (a loop one host thread drives), else the fix first and the size after, which the action says."""
        against = BY_NAME[v.bottleneck].fix_before_size
        if size.smaller and (not against or v.cause in SIZE_FIRST_CAUSES):
            resized = self._sized(v, size, then=self._then_fix(v))
            if isinstance(resized, Action):
                return resized
        action = self._action(
            [v],
            "fix",
            v.recommendation.split(". ")[0],
            float(len(v.gpus)),
            v.wasted_cost,
            self._rate(v.wasted_cost),
            waste=f"{v.wasted_gpu_seconds / 3600:.2f} GPU-h (${v.wasted_cost:.2f}) to {v.bottleneck}: its code, input "
            "or placement, not its GPU's size",
        )
        if size.smaller:
            action.then = f"then size it again from what it uses: today its use fits {size.fits}, but {against}"
        return action

    def _then_fix(self, v: Verdict) -> str:
        """What to fix after a resize: the cause its evidence showed beside the size (a loop one host thread
        drives), which raises its use, so that it is sized again after; for unexplained low activity, what
        would settle its cause. "" where none."""
        if v.bottleneck == UNEXPLAINED:
            return f"then find why it works little: {UNEXPLAINED_SETTLES}"
        if v.bottleneck == HOST_STALL or HOST_STALL in v.secondary:
            fix = STALL_CAUSES.get(v.cause, "")
            if fix:
                return f"then {fix[0].lower()}{fix[1:]} Each fix raises its use: size it again after"
        return ""

    def _sized(self, v: Verdict, size: Size, then: str = "") -> Action | NotPlanned:
        """`v` moved to the smaller GPU its use fits (`size`), or why it has none."""
        if not size.smaller:
            reason = size.basis if size.fit == "unknown" else f"no smaller GPU fits: {size.basis}"
            return NotPlanned(v.workload, [v.unit], reason)
        model = self._model(v)
        gpus, hours = len(v.gpus), self._held_hours([v])
        saved = 1 - size.price_share  # of its GPU's price, per GPU
        measured = {"peak": size.peak, "fits": size.basis}
        if size.fit == "mig":
            what, after, need = size.fits, gpus * size.price_share, Need(v.gpu_model, size.price_share, "mig")
        elif size.fit == "cheaper_gpu":
            what = f"move to {size.gpu_model} (${model.price_per_hour * saved:.2f}/GPU-h less)"
            after, need = float(gpus), Need(size.gpu_model, 1.0)
        else:
            slices = round(1 / size.price_share)
            what = f"share its GPU with {slices - 1} other such pods (time-slicing, replicas: {slices})"
            after, need = gpus * size.price_share, Need(v.gpu_model, size.price_share, "time-slicing")
        action = self._action(
            [v],
            size.fit,
            what,
            after,
            hours * saved * model.price_per_hour,
            gpus * saved * model.price_per_hour,
            [need] * gpus,
            **measured,
        )
        action.then = then
        return action

    def _release(self, v: Verdict) -> Action | NotPlanned:
        """An idle unit's GPUs released; a notebook's kernel culled, or where its rare cells keep a culler from
        ever firing (sparse use), moved off its GPU."""
        what, idle = (
            "release its GPUs (scale to zero, or end the job)",
            f"idle {1 - (v.mean_activity or 0.0):.0%} of the span",
        )
        if _notebook(v):
            culled = self._cull(v)
            if isinstance(culled, Action) or "sparse_use" not in v.facts:
                return culled
            what = (
                "move its kernel off the GPU (onto CPU, or a time-sliced share): its cells come too often for an "
                "idle-culler to reclaim it, and too seldom to need a GPU of its own"
            )
            idle = f"{v.work_share or 0.0:.1%} of the span worked; {culled.reason}"
        price = self._model(v).price_per_hour
        return self._action(
            [v], "release", what, 0.0, self._held_hours([v]) * price, len(v.gpus) * price, [], idle=idle
        )

    def _cull(self, v: Verdict) -> Action | NotPlanned:
        """A notebook's kernel culled after plan_cull_seconds idle: each idle spell (Use.idle_spells()) past the cull
        time is time a culled kernel would not have held. Where none outlasts it, why culling would free nothing."""
        price = self._model(v).price_per_hour
        cull = self.t.plan_cull_seconds
        spells = self.use.idle_spells(v.unit, self.t)
        idle = sum(max(0.0, length - cull) for length in spells)
        if idle <= 0:  # culling would have freed nothing: no change, not an action of $0
            longest = max(spells, default=0.0)
            return NotPlanned(
                v.workload,
                [v.unit],
                f"idle {duration(longest)} at most at a stretch in the {duration(self.span)} seen, under the "
                f"{duration(cull)} a culler waits (plan_cull_seconds): culling would have freed nothing yet",
            )
        return self._action(
            [v],
            "release",
            f"cull its kernel after {duration(cull)} idle (JupyterHub idle-culler, Kubeflow culling)",
            len(v.gpus) * (1 - idle / self.span) if self.span else 0.0,
            idle * len(v.gpus) / 3600 * price,
            self._rate(idle * len(v.gpus) / 3600 * price),
            idle=f"{duration(idle)} of idle spells past {duration(cull)} ({self.use.bin_seconds:.0f} s bins)",
        )

    def _scale_to_zero(self, v: Verdict) -> Action | None:
        """A serving replica scaled to zero after plan_scale_to_zero_seconds without a request and woken by the
        next: each of its rests (Use.idle_spells(): nights, weekends) past that delay is time it would not have held
        its GPUs. None where no rest outlasts the delay."""
        delay = self.t.plan_scale_to_zero_seconds
        chance = _chance_gap_seconds(v)
        rests = [length for length in self.use.idle_spells(v.unit, self.t) if length > max(delay, chance)]
        freed = sum(length - delay for length in rests)
        if freed <= 0:
            return None
        price = self._model(v).price_per_hour
        return self._action(
            [v],
            "scale_to_zero",
            f"scale it to zero after {duration(delay)} without a request, woken by the next (KEDA's HTTP add-on, "
            "Knative): that request waits for the model to load",
            len(v.gpus) * (1 - freed / self.span) if self.span else 0.0,
            freed * len(v.gpus) / 3600 * price,
            self._rate(freed * len(v.gpus) / 3600 * price),
            rests=f"{len(rests)} rest{'s' if len(rests) > 1 else ''} without requests longer than {duration(delay)}, "
            f"the longest {duration(max(rests))}: {duration(freed)} of them past {duration(delay)} "
            f"({self.use.bin_seconds:.0f} s bins)"
            + (
                f"; only rests over {duration(chance)} count: at {v.work_share:.1%} of its time busy, samples "
                f"{v.sample_seconds:.0f} s apart would miss every request of a shorter stretch of work "
                f"{REST_CHANCE:.0%} of the time or more"
                if chance > delay
                else ""
            ),
        )

    def unallocated(self, node: str, gpus: list[Verdict]) -> Action:
        price = self._model(gpus[0]).price_per_hour
        action = self._action(
            gpus,
            "release_capacity",
            f"{len(gpus)} GPU{'s' if len(gpus) > 1 else ''} no pod holds on {node or 'a node the data does not name'}: "
            "let pending pods use them, or shrink the node pool",
            0.0,
            self._held_hours(gpus) * price,
            len(gpus) * price,
            [],
            unallocated=", ".join(v.gpus[0] for v in gpus),
        )
        action.owner, action.namespace = f"{NO_POD} {node}", ""
        return action


#: The chance a rest may be a stretch of work whose every request fell between point samples, under which a
#: rest counts as one (a 5% significance level).
REST_CHANCE = 0.05


def _chance_gap_seconds(v: Verdict) -> float:
    """How long a run of point samples must see no work before chance (under REST_CHANCE) would leave it so
    while the unit worked its span's share of the time: ln(REST_CHANCE) / ln(1 - share) samples. A replica busy
    1.2% of its time, sampled every 60 s, shows gaps of an hour or more between caught requests about half the
    time, and of 4 h 8 min 5% of the time. 0 where it never worked."""
    share = v.work_share or 0.0
    if not 0 < share < 1:
        return 0.0
    return math.log(REST_CHANCE) / math.log1p(-share) * v.sample_seconds


def _notebook(v: Verdict) -> bool:
    """A notebook's kernel: as Kubernetes says, or where nothing says, as its pod's name does."""
    return v.workload_kind == "notebook" or (v.workload_kind == "unknown" and bool(_NOTEBOOK.search(v.pod)))
