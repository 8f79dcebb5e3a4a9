"""The cluster's share of the waste: GPUs that sat free while pods waited for them, and why.

From a ClusterHistory (analyzer/inputs/cluster.py: kube-state-metrics over the span) and what each pod is
(analyzer/inputs/owners.py), step by step:
- a node's free GPUs are its allocatable less its pods' requests (none on a cordoned node);
- a waiting pod is judged against the nodes it may run on: the pool and model its node selector names, else
  the pool the settings mean for its kind (`pools.for_kinds`), else every GPU node. Each step of its wait has
  one reason: `fragmented` (enough GPUs free in total, but no node with as many free as it asked),
  `pool_full` (fewer free in total than it asked), `too_large` (no node offers as many), `no_node` (no node
  of its pool or model at all), or `room` (a node had as many free: GPUs did not hold it; taints, affinity,
  CPU or memory did, which its events say);
- a pool's free GPU-seconds are `stranded` at the steps a pod that may use them waited for a fragmented
  block, `unwanted` where no pod waited for them (capacity to shrink: the plan's release_capacity), and the
  rest free while pods waited for more than the pool held.
It then says what to change: the pods to move that free a node whole for a waiting pod (consolidation),
bin-packing (kube-scheduler's MostAllocated scoring) where fragmentation recurs or no move mends it, GPU
quotas for the namespaces with none (planned where one cost others), and pods to move to the pool meant for
them.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from gpulens.analyzer.inputs.cluster import (
    WAITING,
    ClusterHistory,
    ClusterReader,
    ClusterReading,
    Node,
    PodTrack,
    model_name,
    read_cluster,
)
from gpulens.analyzer.inputs.kinds import PodKey, Pools
from gpulens.analyzer.inputs.owners import Owner, OwnerReader
from gpulens.core.catalog import model_info
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import for_people, rfc3339

#: The most pods of one node a consolidation considers moving (2^10 sets at most a node), and the longest
#: fragmented waits a consolidation is sought for.
MAX_MOVABLE = 10
MAX_CONSOLIDATIONS = 20
#: The reasons a step of a wait has, in the order a tie between them is broken.
REASONS = ("fragmented", "pool_full", "too_large", "no_node", "room")
#: What each reason means, as the outputs say it.
REASON_TEXT = {
    "fragmented": "enough GPUs free in its pool, but none of its nodes with as many free as it asked",
    "pool_full": "fewer GPUs free in its pool than it asked",
    "too_large": "no node of its pool offers as many GPUs as it asked",
    "no_node": "no node of its pool or model",
    "room": "a node had as many GPUs free: GPUs did not hold it (its events say what did: taints, affinity, CPU)",
}


@dataclass
class Pending:
    """A GPU pod that waited for a node: how many GPUs it asked, how long it waited in the span, why."""

    namespace: str
    pod: str
    owner: str
    kind: str
    team: str
    gpus: float
    #: Seconds it waited within the span, and unix seconds it began waiting (its creation, where known).
    waited_seconds: float
    waiting_since: float
    #: Unix seconds it was scheduled; None: still waiting at the span's end.
    scheduled_at: float | None
    #: What it was judged against ("pool training, model NVIDIA A100-SXM4-80GB", "every GPU node").
    judged_against: str
    #: The reason of most of its wait, each reason's share of its waiting steps, and the figures that say so.
    reason: str
    reason_shares: dict[str, float]
    evidence: str


@dataclass
class PoolUse:
    """A pool of one GPU model over the span: its free GPU-seconds, the part stranded by fragmentation, the
    part nobody waited for, and the GPU-seconds pods waited for, priced."""

    pool: str
    gpu_model: str
    nodes: int
    gpus: int
    free_gpu_seconds: float
    stranded_gpu_seconds: float
    unwanted_gpu_seconds: float
    waiting_gpu_seconds: float
    price_per_gpu_hour: float
    #: Separate spells of fragmentation that stranded GPUs while a pod waited.
    fragmentation_episodes: int

    @property
    def name(self) -> str:
        return f"{self.pool or '(no pool label)'} / {self.gpu_model or 'unknown model'}"

    @property
    def stranded_cost(self) -> float:
        return self.stranded_gpu_seconds / 3600 * self.price_per_gpu_hour


@dataclass(frozen=True)
class Move:
    """A pod moved to free its node for a waiting pod: which, how many GPUs, from where to where."""

    namespace: str
    pod: str
    kind: str
    gpus: float
    from_node: str
    to_node: str


@dataclass
class Consolidation:
    """The pods to move, at the moment of a wait with the most GPUs free, that free `node` for the pod waiting."""

    namespace: str
    pod: str
    gpus: float
    at: float
    pool: str
    gpu_model: str
    node: str
    moves: list[Move]
    waited_seconds: float


@dataclass
class Misplaced:
    """A pod that ran on a pool not meant for its kind, and how long the pool meant for it had room for it."""

    namespace: str
    pod: str
    owner: str
    kind: str
    gpus: float
    pool: str
    meant_pool: str
    seconds: float
    room_seconds: float
    gpu_model: str
    price_per_gpu_hour: float


@dataclass
class QuotaGap:
    """A namespace that ran GPU pods with no GPU quota: the most GPUs it held, that share of the cluster's, the
    GPU-seconds it held, and how long other namespaces' pods waited while it held more than the dominant share."""

    namespace: str
    peak_gpus: float
    peak_at: float
    peak_share: float
    gpu_seconds: float
    others_waited_seconds: float
    #: The share of the cluster's GPUs above which it took the cluster (Thresholds.schedule_dominant_share).
    dominant_share: float


@dataclass(frozen=True)
class PoolNow:
    """A pool of one GPU model at the span's last step: GPUs free, the most free on one node, and those free
    while a pod that could use them waits for a block none has (stranded)."""

    pool: str
    gpu_model: str
    free_gpus: float
    largest_free_gpus: float
    stranded_gpus: float


@dataclass(frozen=True)
class WaitingNow:
    """The pods waiting at the span's last step for a pool and model (as each was judged: "" where it names
    none), by the reason of that step: how many, the GPUs they ask, and the longest any has waited."""

    pool: str
    gpu_model: str
    reason: str
    pods: int
    gpus: float
    longest_seconds: float


@dataclass
class Scheduling:
    """The cluster's judgement over a span."""

    start: float
    step: float
    span_seconds: float
    pending: list[Pending]
    pools: list[PoolUse]
    consolidations: list[Consolidation]
    misplaced: list[Misplaced]
    quota_gaps: list[QuotaGap]
    #: Groups where fragmentation recurred: bin-pack their nodes.
    recurring: list[PoolUse] = field(default_factory=list)
    #: What the store did not say, and what that leaves out.
    missing: list[str] = field(default_factory=list)
    #: Per pool, free GPUs and the GPUs waiting pods asked for, averaged in bins (for the HTML report).
    timelines: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    #: Per node, its free GPU-seconds and the part of them no pod waited for.
    node_free: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: The cluster at the span's last step (the live analyzer's metrics).
    pools_now: list[PoolNow] = field(default_factory=list)
    waiting_now: list[WaitingNow] = field(default_factory=list)
    #: Per pod, the GPU-seconds kube-state-metrics says it requested while on a node, by UTC day
    #: (ClusterHistory.requested_by_day): what showback checks its sampled hours against.
    requested: dict[PodKey, dict[str, float]] = field(default_factory=dict)

    @property
    def stranded_gpu_seconds(self) -> float:
        return sum(p.stranded_gpu_seconds for p in self.pools)

    def to_dict(self) -> dict:
        """The JSON of the cluster's judgement; times RFC 3339."""

        def when(value: float | None) -> str | None:
            return None if value is None else rfc3339(value)

        return {
            "span_seconds": self.span_seconds,
            "step_seconds": self.step,
            "pending": [
                {**asdict(p), "waiting_since": when(p.waiting_since), "scheduled_at": when(p.scheduled_at)}
                for p in self.pending
            ],
            "pools": [
                {**asdict(p), "stranded_usd": round(p.stranded_cost, 2), "recurring": p in self.recurring}
                for p in self.pools
            ],
            "consolidations": [{**asdict(c), "at": when(c.at)} for c in self.consolidations],
            "misplaced": [asdict(m) for m in self.misplaced],
            "quota_gaps": [{**asdict(q), "peak_at": when(q.peak_at)} for q in self.quota_gaps],
            "missing": self.missing,
        }


def same_model(a: str, b: str) -> bool:
    """Whether two names of a GPU model (NVML's "NVIDIA A100-SXM4-80GB", GPU feature discovery's
    "NVIDIA-A100-SXM4-80GB") name one model: by the catalogue where it knows them, else by their letters."""
    a, b = model_name(a), model_name(b)
    return a == b or re.sub(r"[^a-z0-9]", "", a.lower()) == re.sub(r"[^a-z0-9]", "", b.lower())


@dataclass
class _Capacity:
    """Each node's GPUs at each step (nodes x steps): free to a pod and offered (allocatable, not cordoned), and
    what the waits made of them: stranded by fragmentation while a pod waited, wanted by a waiting pod that may use
    the node, and the GPUs those pods asked of it."""

    free: np.ndarray
    offered: np.ndarray
    stranded: np.ndarray
    waited_for: np.ndarray
    asked: np.ndarray

    @classmethod
    def of(cls, history: ClusterHistory) -> _Capacity:
        alloc = history.allocatable
        usable = (alloc > 0) & ~history.cordoned
        free = np.where(usable, np.maximum(alloc - history.used(), 0.0), 0.0)
        zeros = np.zeros_like(free, dtype=bool)
        return cls(free, np.where(usable, alloc, 0.0), zeros, zeros.copy(), np.zeros_like(free))


@dataclass
class _Waits:
    """What the pods that waited for GPUs show: each wait long enough to judge, with its reason; the pods waiting
    at the end, by pool, model and reason (pods, GPUs, the longest wait); and the waits for fragmented capacity,
    longest first, with the node mask, step and GPUs a consolidation would have to free."""

    pending: list[Pending] = field(default_factory=list)
    waiting_now: dict[tuple[str, str, str], tuple[int, float, float]] = field(default_factory=dict)
    fragmented: list[tuple[float, PodTrack, np.ndarray, int, float]] = field(default_factory=list)


def judge(
    history: ClusterHistory,
    owners: dict[PodKey, Owner],
    t: Thresholds,
    pools: Pools | None = None,
    prices: dict[str, float] | None = None,
    bins: int = 240,
) -> Scheduling:
    """The cluster's judgement: every wait and its reason, stranded and unwanted capacity by pool and model,
    and what to change."""
    pools = pools or Pools()
    steps, step, nodes = history.steps, history.step, history.nodes
    capacity = _Capacity.of(history)
    free = capacity.free

    def kind(key: PodKey) -> str:
        owner = owners.get(key)
        return owner.workload.kind if owner else "unknown"

    waits = _waits(history, owners, pools, t, capacity, kind)
    # The moves that would have ended the longest waits (a month can hold hundreds; the plan names the first
    # of each pool).
    consolidations: list[Consolidation] = []
    for waited, track, mask, at_step, asked_gpus in waits.fragmented[:MAX_CONSOLIDATIONS]:
        found = _consolidate(history, track, mask, at_step, asked_gpus, free, capacity.offered, kind)
        if found is not None:
            found.waited_seconds = waited
            consolidations.append(found)
    groups: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, n in enumerate(nodes):
        groups[(n.pool, n.model)].append(i)
    uses, timelines = _pool_uses(groups, capacity, step, t, prices, bins)
    recurring = [u for u in uses if u.fragmentation_episodes >= t.schedule_recurring_episodes]
    consolidations.sort(key=lambda c: (-c.waited_seconds, c.namespace, c.pod))
    stranded, waited_for = capacity.stranded, capacity.waited_for
    return Scheduling(
        history.start,
        step,
        steps * step,
        sorted(waits.pending, key=lambda p: (-p.waited_seconds, p.namespace, p.pod)),
        sorted(uses, key=lambda u: (-u.stranded_gpu_seconds, -u.free_gpu_seconds, u.name)),
        consolidations,
        _misplaced(history, owners, pools, free, kind, prices or {}),
        _quota_gaps(history, t),
        recurring,
        list(history.missing),
        timelines,
        {
            n.name: (float(free[i].sum() * step), float(free[i][~waited_for[i]].sum() * step))
            for i, n in enumerate(nodes)
        },
        [
            PoolNow(
                pool,
                model,
                float(free[members, -1].sum()),
                float(free[members, -1].max(initial=0.0)),
                float(free[members, -1][stranded[members, -1]].sum()),
            )
            for (pool, model), members in sorted(groups.items())
        ],
        [WaitingNow(*key, *figures) for key, figures in sorted(waits.waiting_now.items())],
        history.requested_by_day(),
    )


def _waits(
    history: ClusterHistory,
    owners: dict[PodKey, Owner],
    pools: Pools,
    t: Thresholds,
    capacity: _Capacity,
    kind: Callable[[PodKey], str],
) -> _Waits:
    """Every pod's waits, each step's reason from the capacity the pod could use then, marked on `capacity`
    (stranded, waited for, asked)."""
    steps, step, nodes = history.steps, history.step, history.nodes
    free, offered = capacity.free, capacity.offered
    found = _Waits()
    pending, waiting_now, fragmented_waits = found.pending, found.waiting_now, found.fragmented
    masks: dict[tuple[str, str], np.ndarray] = {}

    def candidates(track: PodTrack) -> tuple[np.ndarray, str, str]:
        pool = track.wants_pool or pools.for_kinds.get(kind(track.key), "")
        wanted = (pool, track.wants_model)
        if wanted not in masks:
            masks[wanted] = np.array(
                [
                    (not pool or n.pool == pool) and (not track.wants_model or same_model(n.model, track.wants_model))
                    for n in nodes
                ],
                dtype=bool,
            )
        return masks[wanted], pool, track.wants_model

    for track in sorted(history.pods.values(), key=lambda tr: tr.key):
        waits = [r for r in track.runs if r.node == WAITING]
        if not waits:
            continue
        mask, pool, model = candidates(track)
        index = np.concatenate([np.arange(r.first, r.last + 1) for r in waits])
        gpus = np.concatenate([np.full(r.last - r.first + 1, r.gpus) for r in waits])
        sub_free, sub_offered = free[mask][:, index], offered[mask][:, index]
        largest = sub_free.max(axis=0, initial=0.0)
        total = sub_free.sum(axis=0)
        biggest = sub_offered.max(axis=0, initial=0.0)
        reasons = np.select(
            [biggest <= 0, biggest < gpus, largest >= gpus, total >= gpus],
            ["no_node", "too_large", "room", "fragmented"],
            "pool_full",
        )
        fragmented = index[reasons == "fragmented"]
        capacity.stranded[np.ix_(mask, fragmented)] = True
        capacity.waited_for[np.ix_(mask, index)] = True
        capacity.asked[np.ix_(mask, index)] += gpus
        if waits[-1].last == steps - 1:  # waiting now: since its creation where it waited from the start
            since = history.time_of(waits[-1].first)
            if waits[-1].first == 0 and track.created is not None:
                since = min(since, track.created)
            now_key = (pool, model_name(model), str(reasons[-1]))
            pods_now, gpus_now, longest = waiting_now.get(now_key, (0, 0.0, 0.0))
            waiting_now[now_key] = (
                pods_now + 1,
                gpus_now + float(gpus[-1]),
                max(longest, history.time_of(steps - 1) - since),
            )
        waited = len(index) * step
        if waited < t.schedule_pending_seconds:
            continue
        counts = {r: int((reasons == r).sum()) for r in REASONS}
        reason = max(REASONS, key=lambda r: (counts[r], -REASONS.index(r)))
        owner = owners.get(track.key)
        last_wait = waits[-1].last
        after = [r for r in track.runs if r.node != WAITING and r.first > last_wait]
        began = history.time_of(waits[0].first)
        if track.created is not None and waits[0].first == 0 and track.created < began:
            began = track.created
        against = (
            ", ".join(part for part in (f"pool {pool}" if pool else "", f"model {model}" if model else "") if part)
            or "every GPU node"
        )
        at = int(np.argmax(np.where(reasons == reason, total, -1.0)))
        evidence = _wait_evidence(history, mask, int(index[at]), float(gpus[at]), reason, free, offered)
        pending.append(
            Pending(
                track.key[0],
                track.key[1],
                f"{owner.kind}/{owner.name}" if owner and owner.kind else "",
                kind(track.key),
                owner.team if owner else "",
                track.gpus,
                waited,
                began,
                history.time_of(after[0].first) if after else None,
                against,
                reason,
                {r: round(c / len(index), 4) for r, c in counts.items() if c},
                evidence,
            )
        )
        if reason == "fragmented":
            fragmented_waits.append((waited, track, mask, int(index[at]), float(gpus[at])))

    fragmented_waits.sort(key=lambda w: (-w[0], w[1].key))
    return found


def _pool_uses(
    groups: dict[tuple[str, str], list[int]],
    capacity: _Capacity,
    step: float,
    t: Thresholds,
    prices: dict[str, float] | None,
    bins: int,
) -> tuple[list[PoolUse], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """Each pool and model's capacity over the span (its nodes' rows of `capacity`), and its free and asked GPUs
    in `bins` bins for a timeline."""
    uses: list[PoolUse] = []
    timelines: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for (pool, model), members in sorted(groups.items()):
        g_free, g_stranded, asked = capacity.free[members], capacity.stranded[members], capacity.asked[members]
        spells = _spells(g_stranded.any(axis=0) & (g_free.sum(axis=0) > 0), t.schedule_pending_seconds / step)
        use = PoolUse(
            pool,
            model,
            len(members),
            int(capacity.offered[members].max(axis=1).sum()),
            float(g_free.sum() * step),
            float(g_free[g_stranded].sum() * step),
            float(g_free[~capacity.waited_for[members]].sum() * step),
            float(asked.max(axis=0).sum() * step),
            model_info(model, prices).price_per_hour,
            spells,
        )
        uses.append(use)
        timelines[use.name] = (_binned(g_free.sum(axis=0), bins), _binned(asked.max(axis=0), bins))
    return uses, timelines


def judge_store(
    reader: ClusterReader,
    owners: OwnerReader,
    span: tuple[float, float, float],
    t: Thresholds,
    pools: Pools,
    prices: dict[str, float],
    models: dict[str, str] | None = None,
) -> Scheduling | None:
    """The cluster's share over `span` (start, end, step: unix seconds) as a store says it (read_cluster());
    None where no pod asked for a GPU."""
    reading = read_cluster(reader, owners, span, pools, models)
    return None if reading is None else judge_reading(reading, t, prices)


def judge_reading(reading: ClusterReading, t: Thresholds, prices: dict[str, float]) -> Scheduling:
    """The cluster's share as `reading` says it."""
    return judge(reading.history, reading.owners, t, reading.pools, prices)


def _wait_evidence(
    history: ClusterHistory, mask: np.ndarray, at: int, gpus: float, reason: str, free: np.ndarray, offered: np.ndarray
) -> str:
    """The figures of one step of a wait, the step of its reason with the most GPUs free: each node's free GPUs."""
    when = for_people(history.time_of(at))
    blocks = sorted(
        ((history.nodes[i].name, free[i, at]) for i in np.flatnonzero(mask) if free[i, at] > 0),
        key=lambda b: (-b[1], b[0]),
    )
    total = sum(b for _, b in blocks)
    largest = blocks[0][1] if blocks else 0.0
    shown = " + ".join(f"{b:g}" for _, b in blocks[:8]) + (" + ..." if len(blocks) > 8 else "")
    where = f"{len(blocks)} node{'s' if len(blocks) != 1 else ''} ({shown})" if blocks else "no node"
    biggest = offered[mask, at].max(initial=0.0)
    if reason == "fragmented":
        return f"at {when} {total:g} GPUs were free on {where}: the largest block, {largest:g}, < the {gpus:g} asked"
    if reason == "pool_full":
        return f"at its most, at {when}, {total:g} GPUs were free on {where} < the {gpus:g} asked: the pool was full"
    if reason == "too_large":
        return f"no node offers {gpus:g} GPUs: the largest offers {biggest:g}; it cannot be scheduled as asked"
    if reason == "no_node":
        return "no node of its pool or model in the span"
    return f"at {when} a node had {largest:g} GPUs free >= the {gpus:g} asked"


def _consolidate(
    history: ClusterHistory,
    waiting: PodTrack,
    mask: np.ndarray,
    at: int,
    gpus: float,
    free: np.ndarray,
    offered: np.ndarray,
    kind: Callable[[PodKey], str],
) -> Consolidation | None:
    """The fewest GPUs (then pods; jobs last, as a job's pod restarts from its checkpoint) to move, at step
    `at`, so that one node of `mask` has `gpus` free; each moved pod goes to another node of its node's pool and
    model (best fit, largest first). None where no node can be freed so."""
    on_node: dict[int, list[tuple[PodKey, float]]] = defaultdict(list)
    for track in history.pods.values():
        for run in track.runs:
            if run.node != WAITING and run.first <= at <= run.last:
                on_node[run.node].append((track.key, run.gpus))
    nodes = history.nodes
    best: tuple[tuple[float, int, int, str], int, list[Move]] | None = None
    for m in map(int, np.flatnonzero(mask & (offered[:, at] >= gpus))):
        gap = gpus - free[m, at]
        room = {
            i: float(free[i, at])
            for i in range(len(nodes))
            if i != m
            and free[i, at] > 0
            and nodes[i].pool == nodes[m].pool
            and same_model(nodes[i].model, nodes[m].model)
        }
        # Every set of the node's pods that covers the gap, cheapest first (a node holds a handful; past
        # MAX_MOVABLE, the smallest and non-Job ones are tried): the first whose pods all fit elsewhere.
        movable = sorted(on_node[m], key=lambda p: (kind(p[0]) == "job", p[1], p[0]))[:MAX_MOVABLE]
        sets = sorted(
            (
                (sum(g for _, g in combo), len(combo), sum(kind(k) == "job" for k, _ in combo)),
                sorted(k for k, _ in combo),
                combo,
            )
            for r in range(1, len(movable) + 1)
            for combo in itertools.combinations(movable, r)
            if sum(g for _, g in combo) >= gap
        )
        for (moved, count, jobs), _, combo in sets:
            moves = _placed(combo, room, nodes, nodes[m].name, kind)
            if moves is not None:
                cost = (moved, count, jobs, nodes[m].name)
                if best is None or cost < best[0]:
                    best = (cost, m, moves)
                break
    if best is None:
        return None
    node = nodes[best[1]]
    return Consolidation(
        waiting.key[0], waiting.key[1], gpus, history.time_of(at), node.pool, node.model, node.name, best[2], 0.0
    )


def _placed(
    pods: tuple[tuple[PodKey, float], ...],
    room: dict[int, float],
    nodes: list[Node],
    from_node: str,
    kind: Callable[[PodKey], str],
) -> list[Move] | None:
    """The moves that place `pods` onto the nodes with `room` (free GPUs by node index), largest pod first, each
    on the fullest node it fits (best fit); None where one fits nowhere."""
    left = dict(room)
    moves = []
    for key, held in sorted(pods, key=lambda p: (-p[1], p[0])):
        target = next((i for i in sorted(left, key=lambda i: (left[i], nodes[i].name)) if left[i] >= held), None)
        if target is None:
            return None
        left[target] -= held
        moves.append(Move(key[0], key[1], kind(key), held, from_node, nodes[target].name))
    return moves


def _spells(on: np.ndarray, gap_steps: float) -> int:
    """Separate spells of True, spells closer than `gap_steps` joined."""
    where = np.flatnonzero(on)
    if not len(where):
        return 0
    return int(1 + (np.diff(where) > max(gap_steps, 1)).sum())


def _binned(values: np.ndarray, bins: int) -> np.ndarray:
    """The mean of `values` in `bins` equal bins (fewer where there are fewer values)."""
    if not len(values):
        return values
    edges = np.linspace(0, len(values), min(bins, len(values)) + 1).astype(int)
    return np.array([values[a:b].mean() for a, b in zip(edges[:-1], edges[1:], strict=True)])


def _misplaced(
    history: ClusterHistory,
    owners: dict[PodKey, Owner],
    pools: Pools,
    free: np.ndarray,
    kind_of: Callable[[PodKey], str],
    prices: dict[str, float],
) -> list[Misplaced]:
    """Pods that ran on a pool other than the one the settings mean for their kind."""
    if not pools.for_kinds:
        return []
    nodes = history.nodes
    by_pool: dict[str, list[int]] = defaultdict(list)
    for i, n in enumerate(nodes):
        by_pool[n.pool].append(i)
    largest = {pool: free[members].max(axis=0) for pool, members in by_pool.items()}
    out = []
    for track in history.pods.values():
        meant = pools.for_kinds.get(kind_of(track.key), "")
        if not meant:
            continue
        seconds = room = 0.0
        where = ""
        for run in track.runs:
            if run.node == WAITING or nodes[run.node].pool in ("", meant):
                continue
            where = nodes[run.node].pool
            seconds += (run.last - run.first + 1) * history.step
            if meant in largest:
                room += float((largest[meant][run.first : run.last + 1] >= run.gpus).sum() * history.step)
        if seconds:
            owner = owners.get(track.key)
            model = next(nodes[r.node].model for r in track.runs if r.node != WAITING)
            out.append(
                Misplaced(
                    track.key[0],
                    track.key[1],
                    f"{owner.kind}/{owner.name}" if owner and owner.kind else "",
                    kind_of(track.key),
                    track.gpus,
                    where,
                    meant,
                    seconds,
                    room,
                    model,
                    model_info(model, prices).price_per_hour,
                )
            )
    return sorted(out, key=lambda m: (-m.room_seconds, -m.seconds, m.namespace, m.pod))


def _quota_gaps(history: ClusterHistory, t: Thresholds) -> list[QuotaGap]:
    """Namespaces that held GPUs with no GPU quota, most GPU-seconds first."""
    steps = history.steps
    held: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(steps + 1))
    waiting: dict[str, np.ndarray] = defaultdict(lambda: np.zeros(steps + 1))
    for track in history.pods.values():
        namespace = track.key[0]
        for run in track.runs:
            target = waiting if run.node == WAITING else held
            target[namespace][run.first] += run.gpus
            target[namespace][run.last + 1] -= run.gpus
    offered = history.allocatable.sum(axis=0)
    limited = {ns for ns, hard in history.quota_hard.items() if np.isfinite(hard).any()}
    waits = {ns: np.cumsum(w)[:steps] > 0 for ns, w in waiting.items()}
    # Per step, how many namespaces had a pod waiting: another than `namespace` waited where it is more than its own.
    waiting_namespaces = np.sum(list(waits.values()), axis=0) if waits else np.zeros(steps)
    out = []
    for namespace, diff in sorted(held.items()):
        if namespace in limited:
            continue
        gpus = np.cumsum(diff)[:steps]
        peak = int(np.argmax(gpus))
        share = np.divide(gpus, offered, out=np.zeros(steps), where=offered > 0)
        dominant = share > t.schedule_dominant_share
        others = waiting_namespaces - waits.get(namespace, np.zeros(steps, dtype=bool)) > 0
        out.append(
            QuotaGap(
                namespace,
                float(gpus[peak]),
                history.time_of(peak),
                float(share[peak]),
                float(gpus.sum() * history.step),
                float((dominant & others).sum() * history.step),
                t.schedule_dominant_share,
            )
        )
    return sorted(out, key=lambda q: (-q.others_waited_seconds, -q.gpu_seconds, q.namespace))


def quota_advice(gap: QuotaGap) -> str:
    """The quota to add, in the words of a plan."""
    return (
        f"add a ResourceQuota of requests.nvidia.com/gpu: {math.ceil(gap.peak_gpus)} to {gap.namespace} (its peak: "
        "nothing it runs today is refused; lower it to keep room for other namespaces)"
    )


def spent(seconds: float) -> str:
    """GPU-seconds as GPU-hours, as outputs say them."""
    return f"{seconds / 3600:,.1f} GPU-h"
