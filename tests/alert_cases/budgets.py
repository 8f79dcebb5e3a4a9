"""Budgets: each team's and namespace's GPU spend (the analyzer's gpulens_workload_allocated_cost_dollars_total)
against a budget of the settings, by the SRE workbook's multiwindow burn rates. Four teams, each in a namespace of
its name, each with a budget of $3,000 a month (BUDGETS: $100 a day, 1/864 dollar a second):

- search spends 20x its pace from the start: the page fires once the hour's burn passes 14.4. A counter that began
  T seconds ago has an hourly rate() of 20 x T / 3600 (Prometheus extrapolates no further back than the counter's
  zero), so the page fires at 44 minutes (14.67) and not at 43 (14.33); the 5-minute burn is 20 throughout;
- nlp spends half its pace, with ten minutes at 30x (minutes 100 to 110): its 5-minute burn passes 14.4, its hour's
  stays at (50 x 0.5 + 10 x 30) / 60 = 5.4: no page;
- vision spends 1.5x: the ticket fires once the 3 days' burn passes 1. The 3 days' spend is the hourly spend at each
  whole hour of them over 72 (gpulens/core/mixin.py, budget_rules), so a counter that began H whole hours ago burns
  1.5 x H / 72: past 1 at 49 hours, not at 48 (search, at 20x, at 4 hours);
- speech spends 0.9x for three days: a slow month, nothing fires; nlp's spike is 5 hours' pace in 3 days: nor it.

Its wasters: search's ranker wasted $0.50 a minute (the plan scales it down, saving $900 a month), its embedder
$0.25 a minute (no fix planned yet)."""

from gpulens.core import mixin
from tests.alert_cases.common import ANALYZER, FLEET_DASHBOARD, annotations

#: The budgets of the settings the rules are generated with (tests/conftest.py), USD a month.
BUDGETS = {scope: dict.fromkeys(("search", "nlp", "vision", "speech"), 3000.0) for scope in mixin.BUDGET_SCOPES}
#: A budget's pace: dollars a minute.
PACE = 3000.0 / 30 / 1440
MINUTES = 3 * 1440 + 120
LINK = f"{FLEET_DASHBOARD}&viewPanel={mixin.FLEET_SPEND_PANEL.id}"


def _ramp(per_minute: list[float]) -> str:
    """promtool's values of a counter at 0 that rises by per_minute[k] in minute k, written out."""
    values, total = ["0"], 0.0
    for rise in per_minute:
        total += rise
        values.append(repr(total))
    return " ".join(values)


def _spend(team: str, per_minute: list[float]) -> dict:
    labels = f'{ANALYZER},namespace="{team}",owner_kind="Deployment",owner="{team}",team="{team}",gpu_model="H100"'
    return {"series": f"gpulens_workload_allocated_cost_dollars_total{{{labels}}}", "values": _ramp(per_minute)}


def _steady(burn: float) -> list[float]:
    return [burn * PACE] * MINUTES


NLP = [0.5 * PACE] * MINUTES
NLP[100:110] = [30 * PACE] * 10
WASTED = "gpulens_workload_wasted_cost_dollars_total"
WASTE = 'namespace="search",owner_kind="Deployment",team="search",bottleneck="idle"'
RANKER_PLAN = 'namespace="search",owner="search/Deployment/ranker",team="search",action="scale_down"'


def _wasters(minutes: int) -> str:
    return (
        f"search/Deployment/ranker wasted ${0.5 * minutes:.2f} in the last day (idle); fix: scale_down, saving $900 a "
        f"month. search/Deployment/embed wasted ${0.25 * minutes:.2f} in the last day (idle); no fix planned yet. "
    )


def _fast(scope: str, minutes: int) -> dict:
    """The page of search at `minutes`: the hour's burn, 20 x the share of the hour its counter has run."""
    burn = 20 * min(minutes, 60) / 60
    who = f"{scope.capitalize()} search"
    return {
        "exp_labels": {"severity": "critical", "component": "workload", scope: "search"},
        "exp_annotations": annotations(
            f"Gpulens{scope.capitalize()}BudgetBurningFast",
            f"{who} is spending its GPU budget {burn:.1f}x as fast as its month allows",
            f"{who} spends ${100 * burn:.2f} a day on GPUs against a budget of $3000 a month: at {burn:.1f} "
            "times the pace that spends it in 30 days, the month's budget is gone within days. What wasted the "
            "most: see `wasters`.",
            LINK,
            wasters=_wasters(minutes),
        ),
    }


def _slow(scope: str, team: str, minutes: int, burn6h: float, spend_day: float) -> dict:
    who = f"{scope.capitalize()} {team}"
    return {
        "exp_labels": {"severity": "warning", "component": "workload", scope: team},
        "exp_annotations": annotations(
            f"Gpulens{scope.capitalize()}BudgetBurningSlowly",
            f"{who} will spend its GPU budget before the month ends",
            f"{who} has spent {burn6h:.2f} times its budget's pace over 3 days: ${spend_day:.2f} a day on GPUs "
            "against $3000 a month. What wasted the most: see `wasters`.",
            LINK,
            wasters=_wasters(minutes) if team == "search" else "none wasted money in the last day.",
        ),
    }


def _cases(scope: str) -> list[dict]:
    fast, slow = f"Gpulens{scope.capitalize()}BudgetBurningFast", f"Gpulens{scope.capitalize()}BudgetBurningSlowly"
    return [
        {"eval_time": "43m", "alertname": fast, "exp_alerts": []},
        {"eval_time": "44m", "alertname": fast, "exp_alerts": [_fast(scope, 44)]},
        # The end of nlp's spike: search alone pages.
        {"eval_time": "110m", "alertname": fast, "exp_alerts": [_fast(scope, 110)]},
        {"eval_time": "239m", "alertname": slow, "exp_alerts": []},
        {"eval_time": "241m", "alertname": slow, "exp_alerts": [_slow(scope, "search", 241, 20 * 4 / 72, 2000.0)]},
        {"eval_time": "2935m", "alertname": slow, "exp_alerts": [_slow(scope, "search", 1440, 20 * 48 / 72, 2000.0)]},
        {
            "eval_time": "2945m",
            "alertname": slow,
            "exp_alerts": [
                _slow(scope, "search", 1440, 20 * 49 / 72, 2000.0),
                _slow(scope, "vision", 0, 1.5 * 49 / 72, 150.0),
            ],
        },
        # Three days on, speech's slow month and nlp's spike have not fired.
        {
            "eval_time": f"{MINUTES - 10}m",
            "alertname": slow,
            "exp_alerts": [
                _slow(scope, "search", 1440, 20.0, 2000.0),
                _slow(scope, "vision", 0, 1.5, 150.0),
            ],
        },
    ]


BUDGET_TESTS = {
    "interval": "1m",
    "input_series": [
        _spend("search", _steady(20)),
        _spend("nlp", NLP),
        _spend("vision", _steady(1.5)),
        _spend("speech", _steady(0.9)),
        {"series": f'{WASTED}{{{ANALYZER},{WASTE},owner="ranker"}}', "values": f"0+0.5x{MINUTES}"},
        {"series": f'{WASTED}{{{ANALYZER},{WASTE},owner="embed"}}', "values": f"0+0.25x{MINUTES}"},
        {"series": f"gpulens_plan_monthly_saving_dollars{{{ANALYZER},{RANKER_PLAN}}}", "values": f"900x{MINUTES}"},
    ],
    "alert_rule_test": [*_cases("team"), *_cases("namespace")],
}
