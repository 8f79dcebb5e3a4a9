"""What gpulens' own plan proposed for a workload before it changed: the live analyzer's plan series as the store
kept them (gpulens_plan_gpus, gpulens_plan_monthly_saving_dollars: core/metrics.py), so that a change can be shown
against the plan that asked for it (analyzer/outputs/outcomes.py, docs/changes.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulens.core import metrics as m
from gpulens.core.config import prometheus_duration
from gpulens.core.mixin import promql_string

if TYPE_CHECKING:
    from gpulens.analyzer.inputs.store import Store


@dataclass(frozen=True)
class Proposal:
    """The plan's action on a workload as the live analyzer last served it before a time."""

    action: str
    gpus_now: float
    gpus_after: float
    #: USD a month (30 days) it said the action saves; NaN where its history was too short to project one.
    saving_usd_per_30d: float
    #: Where it was read: the series, and how far back from the change they were looked for.
    source: str


def read_proposal(store: Store, owner: str, at: float, lookback: float) -> Proposal | None:
    """The plan's action on `owner` (a workload as reports name it: namespace/Kind/name) as last served within
    `lookback` seconds before `at`; None where the live analyzer proposed none (or its series are not in the
    store)."""
    window = prometheus_duration(max(lookback, 1.0))
    owned = f"owner={promql_string(owner)}"

    def by_action(expr: str) -> dict[str, float]:
        return {s["metric"].get("action", ""): float(s["value"][1]) for s in store.query(expr, at)}

    gpus = m.PLAN_GPUS.name
    after = by_action(f'last_over_time({gpus}{{{owned}, state="after"}}[{window}])')
    if not after:
        return None
    now = by_action(f'last_over_time({gpus}{{{owned}, state="now"}}[{window}])')
    saving = by_action(f"last_over_time({m.PLAN_SAVING.name}{{{owned}}}[{window}])")
    action = min(after)  # one action a workload: the name is its one label value
    return Proposal(
        action,
        now.get(action, math.nan),
        after[action],
        saving.get(action, math.nan),
        f"{m.PLAN_GPUS.name}, {m.PLAN_SAVING.name} in the store, last within {window} before the change",
    )
