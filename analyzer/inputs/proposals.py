"""What gpulens' own plan proposed for a workload before it changed: the live analyzer's plan series as the store
kept them (gpulens_plan_gpus, gpulens_plan_monthly_saving_dollars: core/metrics.py), or a plan a user kept as a file
(a JSON report's, or the live analyzer's /api/v1/plan), so that a change can be shown against the plan that asked
for it (analyzer/outputs/outcomes.py, docs/changes.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpulens.core import metrics as m
from gpulens.core.config import ConfigError, prometheus_duration
from gpulens.core.mixin import promql_string
from gpulens.core.times import rfc3339

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


#: The plan's action on a workload (namespace/Kind/name) as proposed last within `lookback` seconds before `at`
#: (unix seconds): (owner, at, lookback) -> Proposal, None where none was.
ProposalReader = Callable[[str, float, float], "Proposal | None"]


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


@dataclass(frozen=True)
class KeptPlan:
    """A plan kept as a file (`gpulens report --format json`, or the live analyzer's /api/v1/plan): when it was made
    (the newest sample it read, unix seconds) and its action on each workload."""

    path: str
    made_at: float
    actions: dict[str, Proposal]


def read_plan_file(path: str) -> KeptPlan:
    """The plan kept in `path`; ConfigError naming the file and the fix where it holds none."""
    try:
        with open(path, encoding="utf-8") as f:
            document = json.load(f)
    except OSError as e:
        raise ConfigError(f"--plan {path}: cannot read it ({e.strerror or e}); {_KEPT}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ConfigError(f"--plan {path}: not JSON ({e}); {_KEPT}") from None
    summary = document.get("plan_summary") if isinstance(document, dict) else None
    made_at = summary.get("made_at") if isinstance(summary, dict) else None
    actions = document.get("plan") if isinstance(document, dict) else None
    if not isinstance(made_at, (int, float)) or not math.isfinite(made_at) or not isinstance(actions, list):
        raise ConfigError(f"--plan {path}: no plan with the time it was made (plan_summary.made_at) in it; {_KEPT}")
    when = rfc3339(float(made_at))
    proposals = {}
    for k, a in enumerate(actions):
        try:
            saving = a["saving_usd_per_30d"]
            proposals[str(a["owner"])] = Proposal(
                str(a["action"]),
                float(a["gpus_now"]),
                float(a["gpus_after"]),
                math.nan if saving is None else float(saving),
                f"the plan in {path}, made at {when}",
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ConfigError(f"--plan {path}: plan[{k}] is not an action gpulens wrote ({e!r}); {_KEPT}") from None
    return KeptPlan(path, float(made_at), proposals)


def kept_proposal(plans: Sequence[KeptPlan]) -> ProposalReader:
    """The proposal for a workload from the plans kept: the newest made within `lookback` seconds before the
    change that had an action on it."""

    def proposal(owner: str, at: float, lookback: float) -> Proposal | None:
        made = [p for p in plans if at - lookback <= p.made_at <= at and owner in p.actions]
        return max(made, key=lambda p: p.made_at).actions[owner] if made else None

    return proposal


def first_proposal(*readers: ProposalReader) -> ProposalReader:
    """The proposal the first of `readers` has for a workload (a plan kept as a file before the store's series)."""

    def proposal(owner: str, at: float, lookback: float) -> Proposal | None:
        return next((p for read in readers if (p := read(owner, at, lookback)) is not None), None)

    return proposal


#: What a plan file is, as every error about one says.
_KEPT = (
    "keep a plan as `gpulens report ... --format json --out plan.json`, or the live analyzer's /api/v1/plan, and "
    "give that file"
)
