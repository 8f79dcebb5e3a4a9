"""The cluster's share of the plan (analyzer/judging/scheduling.py, where kube-state-metrics was read): per pool
whose GPUs were stranded by fragmentation while pods waited, consolidate or bin_pack; add_quota for a namespace
with no GPU quota that held most of the GPUs while others waited; re_pool for a workload on a pool not meant for
its kind."""

from __future__ import annotations

from collections import defaultdict

from gpulens.analyzer.judging.evidence import duration
from gpulens.analyzer.judging.scheduling import Scheduling, quota_advice, spent
from gpulens.analyzer.outputs.actions import MONTH_HOURS, SCHEDULING_CONFIDENCE, Action
from gpulens.core.thresholds import Thresholds

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
    actions = _ClusterActions(s, t)
    return [*actions.pools(), *actions.quotas(), *actions.re_pools()]


class _ClusterActions:
    """The cluster's actions of a Scheduling, each priced over its span and per 30 days."""

    def __init__(self, s: Scheduling, t: Thresholds):
        self.s, self.t = s, t
        self.month = MONTH_HOURS * 3600 / s.span_seconds if s.span_seconds else 0.0

    def confidence(self, action: str) -> tuple[float, dict[str, str]]:
        """An action's confidence, capped where kube-state-metrics was read for less than a trusted span."""
        s, t = self.s, self.t
        notes = {"span": f"{duration(s.span_seconds)} of kube-state-metrics"}
        value = SCHEDULING_CONFIDENCE[action]
        if s.span_seconds < t.plan_trusted_span_seconds:
            value = min(value, t.plan_short_confidence)
            notes["span"] += f" < {t.plan_trusted_span_seconds / 86400:g} d: plan again over a week"
        return value, notes

    def action(
        self,
        kind: str,
        namespace: str,
        owner: str,
        what: str,
        model: str,
        saving: float,
        units: list[str],
        **evidence: str,
    ) -> Action:
        value, notes = self.confidence(kind)
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
            round(saving * self.month, 2),
            value,
            units,
            dict(evidence),
            notes,
        )

    def pools(self) -> list[Action]:
        """Per pool that stranded GPUs: consolidate (the moves that free a node for the pod that waited
        longest), or bin_pack where fragmentation recurred or no moves free a node."""
        found_actions: list[Action] = []
        for pool in self.s.pools:
            if not pool.stranded_gpu_seconds:
                continue
            saving = pool.stranded_cost
            found = [c for c in self.s.consolidations if (c.pool, c.gpu_model) == (pool.pool, pool.gpu_model)]
            now = ""
            if found:
                c = found[0]
                moved = ", ".join(
                    f"{m.namespace}/{m.pod} ({m.gpus:g} GPU{'s' if m.gpus != 1 else ''}) to {m.to_node}"
                    for m in c.moves
                )
                now = (
                    f"move {moved}: {c.node} then has {c.gpus:g} GPUs free for {c.namespace}/{c.pod}, which waited "
                    f"{duration(c.waited_seconds)}"
                )
            spells = pool.fragmentation_episodes
            evidence = {
                "stranded": f"{spent(pool.stranded_gpu_seconds)} free while pods waited for more than any node had "
                "free",
                "free": f"{spent(pool.free_gpu_seconds)} free in all, {spent(pool.unwanted_gpu_seconds)} of it while "
                "no pod waited",
                "spells": f"{spells} spell{'s' if spells != 1 else ''} of fragmentation",
                "price": f"${pool.price_per_gpu_hour:.2f}/GPU-h",
            }
            if pool in self.s.recurring or not found:
                # Recurring, or no moves free a node for the pod that waited: keep fragmentation from building up.
                what = f"bin-pack pool {pool.name}: {BIN_PACKING}" + (f"; now: {now}" if now else "")
                found_actions.append(
                    self.action(
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
                found_actions.append(
                    self.action(
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
        return found_actions

    def quotas(self) -> list[Action]:
        """add_quota per namespace without a GPU quota that held more than the dominant share while others waited."""
        found_actions: list[Action] = []
        # A namespace without a GPU quota is an action where it cost others: it held more than the dominant share
        # while their pods waited. The rest are listed in the cluster's section, not planned.
        for gap in (g for g in self.s.quota_gaps if g.others_waited_seconds > 0):
            found_actions.append(
                self.action(
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
        return found_actions

    def re_pools(self) -> list[Action]:
        """re_pool per workload that ran on a pool not meant for its kind while its own had room."""
        found_actions: list[Action] = []
        by_owner: dict[tuple[str, str, str, str], list] = defaultdict(list)
        for m in self.s.misplaced:
            by_owner[(m.namespace, m.owner or m.pod, m.pool, m.meant_pool)].append(m)
        for (namespace, owner, ran_on, meant), pods in sorted(by_owner.items()):
            model = pods[0].gpu_model
            saving = sum(p.room_seconds * p.gpus * p.price_per_gpu_hour for p in pods) / 3600
            found_actions.append(
                self.action(
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
        return found_actions
