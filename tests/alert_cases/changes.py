"""The workloads' changes: a change judged regressed tickets the workload's team, once it has been so for
alert_change_regressed_for (15m), with what it saves a day."""

from gpulens.core import mixin
from tests.alert_cases.common import ANALYZER, FLEET_DASHBOARD, annotations

CHAT = 'namespace="serve",owner="serve/Deployment/chat",team="search",what="replicas"'
RANKER = 'namespace="serve",owner="serve/Deployment/ranker",team="search",what="replicas"'
#: chat's cut judged regressed from the test's start; ranker's held; each saving what it saves a day.
CHANGE_TESTS = {
    "interval": "1m",
    "input_series": [
        {"series": f'gpulens_change_outcome{{{ANALYZER},{CHAT},outcome="regressed"}}', "values": "1x30"},
        {"series": f'gpulens_change_outcome{{{ANALYZER},{CHAT},outcome="held"}}', "values": "0x30"},
        {"series": f'gpulens_change_outcome{{{ANALYZER},{RANKER},outcome="regressed"}}', "values": "0x30"},
        {"series": f'gpulens_change_outcome{{{ANALYZER},{RANKER},outcome="held"}}', "values": "1x30"},
        {"series": f"gpulens_change_daily_saving_dollars{{{ANALYZER},{CHAT}}}", "values": "180x30"},
        {"series": f"gpulens_change_daily_saving_dollars{{{ANALYZER},{RANKER}}}", "values": "120x30"},
    ],
    "alert_rule_test": [
        {"eval_time": "10m", "alertname": "GpulensWorkloadChangeRegressed", "exp_alerts": []},
        {
            "eval_time": "16m",
            "alertname": "GpulensWorkloadChangeRegressed",
            "exp_alerts": [
                {
                    "exp_labels": {
                        "severity": "warning",
                        "component": "workload",
                        "namespace": "serve",
                        "owner": "serve/Deployment/chat",
                        "team": "search",
                        "what": "replicas",
                        "outcome": "regressed",
                        **dict(label.split("=") for label in ANALYZER.replace('"', "").split(",")),
                    },
                    "exp_annotations": annotations(
                        "GpulensWorkloadChangeRegressed",
                        "serve/Deployment/chat's latest change (replicas) regressed",
                        "gpulens compared serve/Deployment/chat (team search) over equal windows before and after "
                        "its latest replicas change: what it serves got worse (its queue or latency rose past their "
                        "spread before the change), or its user came back within the cull timeout of a cull. The "
                        "change saves $180.00 a day. Why, and the replicas that would have held the load: the "
                        "analyzer's /api/v1/changes, or gpulens report over the span.",
                        f"{FLEET_DASHBOARD}&viewPanel={mixin.FLEET_CHANGES_PANEL.id}",
                    ),
                }
            ],
        },
    ],
}
