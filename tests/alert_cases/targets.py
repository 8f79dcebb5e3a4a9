"""The alerts on gpulens itself: exporters, collectors, the analyzer, and fleets that scrape nothing."""

from gpulens.core import mixin
from tests.alert_cases.common import ANALYZER, ANALYZER_PANEL, FLEET_DASHBOARD, annotations, node_link


def target_alert(name, summary, description, dashboard, severity, component, **labels):
    return {
        "exp_labels": {"severity": severity, "component": component, **labels},
        "exp_annotations": annotations(name, summary, description, dashboard),
    }


TARGET_TESTS = {
    "interval": "1m",
    "input_series": [
        {"series": 'up{job="gpulens-exporter",instance="n1:9848",node="n1"}', "values": "1x5 0x20"},
        {"series": 'up{job="gpulens-exporter",instance="n2:9848",node="n2"}', "values": "1x25"},
        {
            "series": 'gpulens_exporter_collector_success{job="gpulens-exporter",instance="n2:9848",node="n2",'
            'collector="kubelet"}',
            "values": "0x25",
        },
        {
            "series": 'gpulens_exporter_collector_success{job="gpulens-exporter",instance="n2:9848",node="n2",'
            'collector="nvml"}',
            "values": "1x25",
        },
        {
            "series": 'gpulens_exporter_sample_age_seconds{job="gpulens-exporter",instance="n2:9848",node="n2"}',
            "values": "1x5 30x20",
        },
        {
            "series": 'gpulens_exporter_sample_interval_seconds{job="gpulens-exporter",instance="n2:9848",node="n2"}',
            "values": "1x25",
        },
        {"series": f"up{{{ANALYZER}}}", "values": "1x5 0x20"},
        # The analyzer's last good cycle at 5 minutes (300 s): stale after 5 more minutes.
        {"series": f"gpulens_analyzer_last_success_timestamp_seconds{{{ANALYZER}}}", "values": "0+60x5 300x20"},
    ],
    "alert_rule_test": [
        {"eval_time": "9m", "alertname": "GpulensExporterDown", "exp_alerts": []},
        {
            "eval_time": "12m",
            "alertname": "GpulensExporterDown",
            "exp_alerts": [
                target_alert(
                    "GpulensExporterDown",
                    "The gpulens exporter on n1 is down",
                    "Prometheus has failed to scrape n1:9848 for 5m. Every GPU alert for n1 is blind meanwhile "
                    "(pod alerts there are inhibited).",
                    node_link("n1", mixin.NODE_EXPORTER_UP_PANEL),
                    "critical",
                    "exporter",
                    job="gpulens-exporter",
                    instance="n1:9848",
                    node="n1",
                )
            ],
        },
        {"eval_time": "12m", "alertname": "GpulensExporterAbsent", "exp_alerts": []},
        {"eval_time": "3m", "alertname": "GpulensExporterCollectorFailing", "exp_alerts": []},
        {"eval_time": "4m", "alertname": "GpulensAnalyzerDown", "exp_alerts": []},
        {
            "eval_time": "12m",
            "alertname": "GpulensExporterCollectorFailing",
            "exp_alerts": [
                target_alert(
                    "GpulensExporterCollectorFailing",
                    "The kubelet collector of the exporter on n2 is failing",
                    "gpulens' kubelet collector on n2 has failed for 5m; its series are missing or stale. The "
                    "exporter's log names the cause.",
                    node_link("n2", mixin.NODE_COLLECTORS_PANEL),
                    "warning",
                    "exporter",
                    job="gpulens-exporter",
                    instance="n2:9848",
                    node="n2",
                    collector="kubelet",
                )
            ],
        },
        {
            "eval_time": "12m",
            "alertname": "GpulensExporterStale",
            "exp_alerts": [
                target_alert(
                    "GpulensExporterStale",
                    "The exporter on n2 serves old samples",
                    "The exporter on n2 answers scrapes but its last sample is 30s old: NVML calls hang.",
                    node_link("n2", mixin.NODE_SAMPLE_AGE_PANEL),
                    "warning",
                    "exporter",
                    job="gpulens-exporter",
                    instance="n2:9848",
                    node="n2",
                )
            ],
        },
        {"eval_time": "4m", "alertname": "GpulensExporterStale", "exp_alerts": []},
        {
            "eval_time": "12m",
            "alertname": "GpulensAnalyzerDown",
            "exp_alerts": [
                target_alert(
                    "GpulensAnalyzerDown",
                    "The gpulens analyzer is down or not scraped",
                    "Prometheus has not scraped the analyzer (job gpulens-analyzer) for 5m: pod alerts come "
                    "without a verdict and the waste counters stop.",
                    ANALYZER_PANEL,
                    "warning",
                    "analyzer",
                    job="gpulens-analyzer",
                    instance="analyzer:9849",
                )
            ],
        },
        {"eval_time": "8m", "alertname": "GpulensAnalyzerStale", "exp_alerts": []},
        {
            "eval_time": "12m",
            "alertname": "GpulensAnalyzerStale",
            "exp_alerts": [
                target_alert(
                    "GpulensAnalyzerStale",
                    "The gpulens analyzer's verdicts are 7m 0s old",
                    "The analyzer runs but has not completed an analysis for 7m 0s: its input (Prometheus or the "
                    "exporters) does not answer. It keeps serving the last verdicts, marked stale.",
                    ANALYZER_PANEL,
                    "warning",
                    "analyzer",
                    job="gpulens-analyzer",
                    instance="analyzer:9849",
                )
            ],
        },
    ],
}

NOTHING_SCRAPED = {
    "interval": "1m",
    "input_series": [{"series": 'up{job="prometheus"}', "values": "1x20"}],
    "alert_rule_test": [
        {"eval_time": "3m", "alertname": "GpulensExporterAbsent", "exp_alerts": []},
        {
            "eval_time": "10m",
            "alertname": "GpulensExporterAbsent",
            "exp_alerts": [
                target_alert(
                    "GpulensExporterAbsent",
                    "No gpulens exporter is being scraped",
                    "Prometheus has no target of job gpulens-exporter at all: no GPU in the fleet is watched.",
                    FLEET_DASHBOARD,
                    "critical",
                    "exporter",
                    job="gpulens-exporter",
                )
            ],
        },
        {
            "eval_time": "10m",
            "alertname": "GpulensAnalyzerDown",
            "exp_alerts": [
                target_alert(
                    "GpulensAnalyzerDown",
                    "The gpulens analyzer is down or not scraped",
                    "Prometheus has not scraped the analyzer (job gpulens-analyzer) for 5m: pod alerts come "
                    "without a verdict and the waste counters stop.",
                    ANALYZER_PANEL,
                    "warning",
                    "analyzer",
                    job="gpulens-analyzer",
                )
            ],
        },
    ],
}
