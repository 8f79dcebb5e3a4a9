"""`gpulens report`'s machine outputs: the JSON report, and CSV of the verdicts, the waste by a dimension, the
plan and the cluster's judgement (docs/analyzer.md). Times are RFC 3339 (core/times.py)."""

from __future__ import annotations

import csv
import io
from dataclasses import asdict, fields

from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.scheduling import Pending, PoolUse, Scheduling
from gpulens.analyzer.outputs.actions import Action, Plan
from gpulens.analyzer.outputs.outcomes import Outcome
from gpulens.analyzer.outputs.showback import DIMENSIONS as SHOWBACK_DIMENSIONS
from gpulens.analyzer.outputs.showback import Charge, price_sources, showback_by
from gpulens.analyzer.outputs.summary import DIMENSIONS, WasteSum, waste_by
from gpulens.core.times import rfc3339


def report_json(
    verdicts: list[Verdict],
    plan: Plan,
    scheduling: Scheduling | None = None,
    changes: list[Outcome] | None = None,
    bills: list[Charge] | None = None,
    prices: dict[str, float] | None = None,
    checks: list[str] | None = None,
) -> dict:
    """The JSON report: the verdicts, their waste summed by class, namespace, owner and team, and the plan:
    one object per action, then its sums, what it did not plan and why, and what it assumed; the cluster's share,
    and the changes the workloads went through with what became of each (docs/changes.md), each null where
    kube-state-metrics is not read; showback: the charges, their sums, the prices they were made at and what they
    were checked against (showback.checks: kube-state-metrics' requests, OpenCost's prices; docs/showback.md)."""
    return {
        "verdicts": [v.to_dict() for v in verdicts],
        "waste": {dimension: [asdict(s) for s in waste_by(verdicts, dimension)] for dimension in DIMENSIONS},
        **plan.to_dict(),
        "cluster": scheduling.to_dict() if scheduling is not None else None,
        "changes": [c.to_dict() for c in changes] if changes is not None else None,
        "showback": {**showback_json(bills or [], prices), "checks": checks or []},
    }


def showback_json(bills: list[Charge], prices: dict[str, float] | None) -> dict:
    """Showback as the JSON report holds it: the charges (a workload's devices of a model a UTC day), their sums
    by team, namespace, owner and GPU model with each group's use, and the price of each model and its source."""
    return {
        "charges": [asdict(c) for c in bills],
        "by": {
            dimension: [
                {**asdict(s), "used_share": s.used_share, "funnel": s.funnel()} for s in showback_by(bills, dimension)
            ]
            for dimension in SHOWBACK_DIMENSIONS
        },
        "prices": price_sources(bills, prices),
    }


def charges_csv(bills: list[Charge]) -> str:
    """Showback's charges, a row each (docs/showback.md)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(Charge)])
    writer.writeheader()
    for c in bills:
        writer.writerow(asdict(c))
    return out.getvalue()


def waste_csv(verdicts: list[Verdict], dimension: str) -> str:
    """The waste summed by `dimension` (class, namespace, workload, team: summary.DIMENSIONS), a row each."""
    out = io.StringIO()
    columns = list(WasteSum.__dataclass_fields__)
    writer = csv.DictWriter(out, fieldnames=[dimension if f == "key" else f for f in columns])
    writer.writeheader()
    for total in waste_by(verdicts, dimension):
        row = asdict(total)
        writer.writerow({dimension if k == "key" else k: value for k, value in row.items()})
    return out.getvalue()


def plan_csv(plan: Plan) -> str:
    """The plan, a row per action; its evidence and assumptions as "key: value; ..." text. Its figures follow
    the JSON's rules (Plan.action_documents): over a span too short to project a month, `saving_usd_per_30d`
    is empty, and `saving_usd_span` holds what the action saved."""
    out = io.StringIO()
    columns = [f for f in Action.__dataclass_fields__ if f != "needs"]
    writer = csv.DictWriter(out, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    for row in plan.action_documents():
        row["units"] = " ".join(row["units"])
        for key in ("evidence", "assumptions"):
            row[key] = "; ".join(f"{k}: {v}" for k, v in row[key].items())
        writer.writerow(row)
    return out.getvalue()


def cluster_csv(scheduling: Scheduling | None, by: str) -> str:
    """The cluster's judgement as CSV: a row per pod that waited (`pending`), or per pool and GPU model
    (`pool`); the header alone where kube-state-metrics said nothing of GPU pods."""
    out = io.StringIO()
    if by == "pending":
        writer = csv.DictWriter(out, fieldnames=[f.name for f in fields(Pending)])
        writer.writeheader()
        for waited in scheduling.pending if scheduling else []:
            row = asdict(waited)
            row["waiting_since"] = rfc3339(waited.waiting_since)
            row["scheduled_at"] = "" if waited.scheduled_at is None else rfc3339(waited.scheduled_at)
            row["reason_shares"] = "; ".join(f"{k} {v}" for k, v in waited.reason_shares.items())
            writer.writerow(row)
    else:
        writer = csv.DictWriter(out, fieldnames=[*(f.name for f in fields(PoolUse)), "stranded_usd", "recurring"])
        writer.writeheader()
        for pool in scheduling.pools if scheduling else []:
            recurring = pool in scheduling.recurring if scheduling else False
            writer.writerow({**asdict(pool), "stranded_usd": round(pool.stranded_cost, 2), "recurring": recurring})
    return out.getvalue()


CHANGE_CSV_FIELDS = [
    "namespace",
    "workload",
    "team",
    "workload_kind",
    "what",
    "before",
    "after",
    "start",
    "end",
    "word",
    "confidence",
    "window_seconds",
    "gpus_held_before",
    "gpus_held_after",
    "cost_usd_per_day_before",
    "cost_usd_per_day_after",
    "work_gpu_hours_per_day_before",
    "work_gpu_hours_per_day_after",
    "requests_per_day_before",
    "requests_per_day_after",
    "saving_usd_per_day",
    "saving_usd_per_30d",
    "proposed_action",
    "proposed_saving_usd_per_30d",
    "reason",
    "saving_basis",
]


def changes_csv(outcomes: list[Outcome] | None) -> str:
    """A row per change and what became of it (docs/changes.md), times RFC 3339; a window's figures empty where
    it is too early to measure them. The header alone where none was found or kube-state-metrics is not read."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CHANGE_CSV_FIELDS)
    writer.writeheader()
    for o in outcomes or []:
        c = o.change
        row = {
            "namespace": c.namespace,
            "workload": c.workload,
            "team": o.team,
            "workload_kind": o.workload_kind,
            "what": c.what,
            "before": c.before,
            "after": c.after,
            "start": rfc3339(c.start),
            "end": rfc3339(c.end),
            "word": o.word,
            "confidence": o.confidence,
            "window_seconds": o.window_seconds,
            "reason": o.reason,
            "saving_basis": o.saving_basis,
        }
        if o.before is not None and o.after is not None:
            for side, footing in (("before", o.before), ("after", o.after)):
                row[f"gpus_held_{side}"] = round(footing.gpus_held, 3)
                row[f"cost_usd_per_day_{side}"] = round(footing.cost_usd_per_day, 2)
                row[f"work_gpu_hours_per_day_{side}"] = round(footing.work_gpu_hours_per_day, 3)
                if footing.health is not None:
                    row[f"requests_per_day_{side}"] = round(footing.requests_per_day, 1)
            row |= {"saving_usd_per_day": o.saving_usd_per_day, "saving_usd_per_30d": round(o.saving_usd_per_30d, 2)}
        if o.proposed is not None:
            row |= {"proposed_action": o.proposed.action, "proposed_saving_usd_per_30d": o.proposed.saving_usd_per_30d}
        writer.writerow(row)
    return out.getvalue()


VERDICT_CSV_FIELDS = [
    "namespace",
    "pod",
    "node",
    "gpus",
    "gpu_model",
    "bottleneck",
    "confidence",
    "secondary",
    "wasted_gpu_seconds",
    "wasted_cost",
    "mean_activity",
    "idle_ratio",
    "evidence",
    "recommendation",
    # Added later: at the end, so that readers by position keep working.
    "window_seconds",
    "coverage",
    "sample_seconds",
    "time_share",
    "episodes",
    "owner_kind",
    "owner",
    "team",
    "workload_kind",
    "engine",
    # The smallest GPU its use fits (Verdict.size): how, what, and its price over its GPU's.
    "size_fit",
    "size_fits",
    "size_price_share",
]


def verdicts_csv(verdicts: list[Verdict]) -> str:
    """A row per verdict, in VERDICT_CSV_FIELDS' order; lists as text (episodes: start/end class confidence waste)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=VERDICT_CSV_FIELDS, extrasaction="ignore")
    writer.writeheader()
    for v in verdicts:
        row = v.to_dict()
        row["gpus"] = " ".join(v.gpus)
        row["secondary"] = " ".join(v.secondary)
        row["evidence"] = "; ".join(f"{k}: {val}" for k, val in v.evidence.items())
        row["time_share"] = "; ".join(f"{name} {part.share}" for name, part in v.by_class.items())
        row["episodes"] = "; ".join(
            f"{rfc3339(e.start)}/{rfc3339(e.end)} {e.bottleneck} {e.confidence} {e.wasted_gpu_seconds}"
            for e in v.episodes
        )
        if v.size is not None:
            row |= {"size_fit": v.size.fit, "size_fits": v.size.fits, "size_price_share": round(v.size.price_share, 4)}
        writer.writerow(row)
    return out.getvalue()
