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
The cluster's actions (consolidate, bin_pack, add_quota, re_pool) are cluster_actions.py's; the records are
actions.py's. Savings are the cost of the GPU capacity freed at the verdicts' prices (--prices, else the
catalogue's), over the span and per 30 days; a plan never proposes less capacity than the measured peak needs
with plan_headroom. packing.py then places every unit's need after the plan onto each model's GPUs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from typing import cast

import numpy as np

from gpulens.analyzer.inputs.engines import EngineLoad
from gpulens.analyzer.judging.classify import NO_POD, XID_FAULTS, Verdict
from gpulens.analyzer.judging.evidence import duration, percent
from gpulens.analyzer.judging.scheduling import Scheduling
from gpulens.analyzer.judging.sizing import Size
from gpulens.analyzer.outputs.actions import (
    GPU_ONLY_REPLICA_CONFIDENCE,
    MONTH_HOURS,
    Action,
    Need,
    NotPlanned,
    Plan,
    PlanSum,
    kept,
)
from gpulens.analyzer.outputs.cluster_actions import scheduling_actions
from gpulens.analyzer.outputs.packing import pack
from gpulens.analyzer.outputs.use import Use
from gpulens.analyzer.outputs.workloads import (
    NOTEBOOK,
    REPLICATED,
    is_notebook,
    replica_capacity,
    replica_capacity_says,
    workload_of,
)
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

#: Classes whose waste is the code's, the input's or the placement's: fixed, not resized.
FIX = PLANNED["fix"]
#: Classes of a GPU at fault, or a process outside any pod: repaired, not planned.
FAULTS = PLANNED["repair"]
#: Classes whose GPU is larger than their use, which a smaller share of a GPU, or fewer replicas, can serve
#: (unexplained is resized too, but alone: its cause unknown, its replicas are not counted as serving load).
OVERSIZED = PLANNED["resize"] - {UNEXPLAINED}
#: Classes a replica of an over-provisioned serving workload can have.
SERVING = OVERSIZED | PLANNED["release"]


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
            groups[workload_of(v)].append(v)
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
        replicas = kinds == {"serving"} or (kinds == {"unknown"} and not NOTEBOOK.search(name))
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
        capacities = [replica_capacity(load, t.plan_kv_cache_bound) for load in loads]
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
        sizing = (
            f"{capacity:.3g} running requests a replica: {replica_capacity_says(loads[capacities.index(capacity)], t)}"
        )
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
        if plan != "release" and is_notebook(v) and self.use.idle_spells(v.unit, self.t):
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
        if is_notebook(v):
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
