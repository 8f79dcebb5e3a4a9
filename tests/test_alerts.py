"""The generated alert rules: promtool checks them, and `promtool test rules` proves every alert fires on
its signature (positive case) and not on a healthy target or a brief dip (negative case), with the analyzer's
verdict in the annotations; the cases are in tests/alert_cases/, a module an area. Default thresholds: 30 % SM
for 30 min, 5 min rate window. Routing is tests/test_alert_routing.py."""

import re
import subprocess
import time

import pytest
import requests
import yaml

from gpulens.alerts import cli, routing, rules
from gpulens.cli import main
from gpulens.core import mixin
from gpulens.core.mixin import MixinConfig
from tests.alert_cases.budgets import BUDGET_TESTS
from tests.alert_cases.changes import CHANGE_TESTS
from tests.alert_cases.cluster import CLUSTER_TESTS
from tests.alert_cases.common import ANALYZER, STARVING_FIX, gpu, pod_link
from tests.alert_cases.dcgm import DCGM_TESTS
from tests.alert_cases.flapping import FLAPPING_TESTS
from tests.alert_cases.gpus import GPU_TESTS
from tests.alert_cases.pods import POD_TESTS
from tests.alert_cases.targets import NOTHING_SCRAPED, TARGET_TESTS
from tests.helpers import REPO, VictoriaMetrics, free_port, require_binary, wait_until

ALL_TESTS = [
    POD_TESTS,
    GPU_TESTS,
    TARGET_TESTS,
    NOTHING_SCRAPED,
    DCGM_TESTS,
    FLAPPING_TESTS,
    CLUSTER_TESTS,
    CHANGE_TESTS,
    BUDGET_TESTS,
]


def test_promtool_checks_the_rules(generated):
    promtool = require_binary("promtool")
    result = subprocess.run(
        [promtool, "check", "rules", str(generated / cli.RULES_FILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 58 rules found" in result.stdout


@pytest.mark.slow
def test_every_alert_fires_on_its_signature_and_not_otherwise(generated):
    """`promtool test rules`: every alert has a case where it fires with exact labels and annotations
    and a case where it must not (a brief dip, a healthy target, the normal power cap)."""
    promtool = require_binary("promtool")
    fired, silent = set(), set()
    for group in ALL_TESTS:
        for case in group["alert_rule_test"]:
            (fired if case["exp_alerts"] else silent).add(case["alertname"])
    names = {a.name for a in rules.alerts(MixinConfig())}
    assert fired == names, f"alerts without a firing case: {names - fired}"
    assert silent == names, f"alerts without a case where they must stay silent: {names - silent}"
    test_file = generated / "rules.test.yaml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [cli.RULES_FILE],
                "evaluation_interval": "1m",
                # As Prometheus does in a rule file's order: without it, promtool picks an order per run,
                # and an alert evaluated before the recording rules sees them a minute late.
                "group_eval_order": [g["name"] for g in rules.rule_groups(MixinConfig())["groups"]],
                "tests": ALL_TESTS,
            },
            sort_keys=False,
            width=10_000,
        )
    )
    result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_rules_are_current():
    """alerts/generated/ is what `gpulens alerts --out alerts/generated` writes today."""
    for name, text in cli.generate(MixinConfig()).items():
        assert (REPO / "alerts" / "generated" / name).read_text() == text, (
            f"alerts/generated/{name} is stale: run `gpulens alerts --out alerts/generated`"
        )


def test_thresholds_file_changes_the_rules(tmp_path):
    """A deployment's thresholds reach the rules: a 20 % / 10 min page, its duration written as
    Prometheus writes durations whatever form the file used."""
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text("alert_low_sm: 0.2\nalert_low_sm_for: 600s\nalert_rate_window: 2m\n")
    assert main(["alerts", "--out", str(tmp_path / "out"), "--thresholds", str(thresholds)]) == 0
    groups = yaml.safe_load((tmp_path / "out" / cli.RULES_FILE).read_text())["groups"]
    alerting = next(g for g in groups if g["name"] == "gpulens.alerts")["rules"]
    page = next(r for r in alerting if r["alert"] == "GpulensPodLowSmActivity")
    assert page["expr"] == "namespace_pod:gpulens_gpu_activity:avg_ratio_rate < 0.2"
    assert page["for"] == "10m"
    assert "has stayed under 20% for 10m" in page["annotations"]["description"]
    busy = groups[0]["rules"][0]["expr"]
    assert busy.startswith('rate(gpulens_gpu_busy_seconds_total{job="gpulens-exporter"}[2m]) or ')
    assert 'DCGM_FI_DEV_GPU_UTIL_RATIO", job="nvidia-dcgm-exporter"}[2m]) * 0.01' in busy  # dcgm-exporter's too


def test_every_duration_is_written_one_way():
    """`for:` and the durations in texts read as Prometheus writes them (5m, 1h30m), never 300s."""
    groups = rules.rule_groups(MixinConfig())["groups"]
    durations = [r["for"] for r in next(g for g in groups if g["name"] == "gpulens.alerts")["rules"] if "for" in r]
    assert sorted(set(durations)) == ["15m", "1h", "1m", "30m", "5m"]
    text = yaml.safe_dump(groups)
    assert not re.search(r"\b\d+0s\b", text), re.search(r".{40}\b\d+0s\b.{40}", text)


def test_bad_thresholds_file_is_refused(tmp_path, capsys):
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text("alert_low_sm_for: half an hour\n")
    assert main(["alerts", "--out", str(tmp_path / "out"), "--thresholds", str(thresholds)]) == 2
    assert (
        "alert_low_sm_for: expected a Prometheus duration such as 30s, 5m or 1h, at most 10y, got 'half an hour'"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


def test_the_runbooks_point_to_a_docs_section_that_exists():
    """The runbooks send readers to docs/alerts.md for routing and settings: that heading must exist."""
    anchor = rules.ALERTS_ROUTING.partition("#")[2]
    headings = re.findall(r"^#+ (.+)$", (REPO / "docs" / "alerts.md").read_text(), re.M)
    slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
    assert anchor in slugs
    assert f"]({rules.ALERTS_ROUTING})" in (REPO / "alerts" / "generated" / "runbooks.md").read_text()


def test_the_runbooks_table_reads_as_words_not_templates():
    """Each alert's summary in the runbooks' table as a person reads it: labels as {pod}, the value as {value},
    the label a query reads as what it is; no Go template left (the low-SM summary showed its whole query)."""
    table = [line for line in rules.runbooks_markdown(mixin.MixinConfig()).splitlines() if line.startswith("| [")]
    assert len(table) == len(rules.alerts(mixin.MixinConfig())) and not [line for line in table if "{{" in line]
    assert table[0].endswith(
        "| {namespace}/{pod} keeps its GPUs' SMs busy only {value} of the time: {the analyzer's bottleneck} |"
    )


@pytest.mark.slow
def test_victoriametrics_vmalert_loads_the_rules_and_pages_with_the_verdict(generated, tmp_path):
    """The generated rules in vmalert (Debian's victoria-metrics), not only Prometheus: it parses every
    expression and template of the default rules (-dryRun); and rules generated with a 10 s page, evaluated
    by vmalert on a real VictoriaMetrics holding the last ten minutes of two pods (recording rules written
    back through its remote write), page the pod at 10% SM with the analyzer's verdict and links as
    Prometheus renders them, and not the pod at 90%. (Its replay mode cannot run the `query` templates the
    annotations use, so this runs live.)"""
    vmalert = require_binary("vmalert")
    checked = subprocess.run(
        [vmalert, f"-rule={generated / cli.RULES_FILE}", "-dryRun"], capture_output=True, text=True, cwd=tmp_path
    )
    assert checked.returncode == 0 and "fatal" not in checked.stderr, checked.stderr
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text("alert_rate_window: 1m\nalert_low_sm_for: 10s\n")
    fast = tmp_path / "fast"
    assert main(["alerts", "--out", str(fast), "--thresholds", str(thresholds)]) == 0
    now = int(time.time())
    lines = []
    for n, (pod, busy) in enumerate((("bert", 0.1), ("resnet", 0.9))):
        for k in range(-60, 61):  # every 10 s, from ten minutes ago to ten minutes ahead of the test
            ms = (now + 10 * k) * 1000
            lines.append(f"gpulens_gpu_sm_active_seconds_total{{{gpu(n)}}} {busy * 10 * (k + 60):g} {ms}")
            lines.append(f"gpulens_gpu_pod_info{{{gpu(n, namespace='nlp', pod=pod, container='main')}}} 1 {ms}")
    lines.append(
        f'gpulens_pod_bottleneck_info{{{ANALYZER},namespace="nlp",pod="bert",node="n1",bottleneck="data_starvation",'
        f'secondary="",evidence="switches_per_minute=12.0 >= 2.0",recommendation="{STARVING_FIX}"}} 1 {now * 1000}'
    )
    store = VictoriaMetrics(tmp_path, ("-search.latencyOffset=0s",))
    port = free_port()
    log = open(tmp_path / "vmalert.log", "w")
    evaluator = subprocess.Popen(
        [
            vmalert,
            f"-rule={fast / cli.RULES_FILE}",
            f"-datasource.url={store.url}",
            f"-remoteWrite.url={store.url}",
            "-remoteWrite.flushInterval=500ms",
            "-notifier.url=http://127.0.0.1:1",  # delivery is Alertmanager's test; this one reads vmalert's API
            "-evaluationInterval=2s",
            f"-httpListenAddr=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        store.load("\n".join(lines) + "\n")

        def firing() -> list[dict]:
            try:
                answer = requests.get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=2).json()
            except (requests.RequestException, ValueError):
                return []
            alerts = answer["data"]["alerts"] or []
            return [a for a in alerts if a["name"] == routing.PAGE and a["state"] == "firing"]

        [page] = wait_until(firing, 60, interval=0.5, what="vmalert to fire the page")
    finally:
        evaluator.terminate()
        evaluator.wait(timeout=10)
        log.close()
        store.stop()
    assert page["labels"] == {
        "alertgroup": "gpulens.alerts",
        "alertname": routing.PAGE,
        "severity": "critical",
        "component": "pod",
        "namespace": "nlp",
        "pod": "bert",
        "node": "n1",
    }
    annotations = page["annotations"]
    assert annotations["summary"] == "nlp/bert keeps its GPUs' SMs busy only 10% of the time: data_starvation"
    assert (annotations["bottleneck"], annotations["recommendation"]) == ("data_starvation", STARVING_FIX)
    assert annotations["dashboard_url"] == pod_link("nlp", "bert", mixin.POD_SM_PANEL)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        # Each passed promtool and meant something else, or failed only when the rules were loaded.
        (
            "--exporter.job",
            'gpulens-exporter",job!="',
            "a job name may not hold '\"': it would end the PromQL string it is written in",
        ),
        (
            "--analyzer.job",
            "gpulens-%analyzer",
            "a job name may not hold '%': it would be a verb of the printf that builds an alert template's query",
        ),
        (
            "--dcgm.job",
            "dcgm`x",
            "a job name may not hold '`': it would end the raw string of an alert template's query",
        ),
        (
            "--dcgm.job",
            "dcgm{{x}}",
            "a job name may not hold '{': it would open a Go template action or a PromQL selector",
        ),
        (
            "--exporter.job",
            "",
            "the alerts and dashboards select its series by their job (an alert on every target gone needs it); "
            "give the job's name (any job is the analyzer's alone)",
        ),
        (
            "--dcgm.job",
            "",
            "the alerts and dashboards select its series by their job (an alert on every target gone needs it); "
            "give the job's name (any job is the analyzer's alone)",
        ),
        ("--grafana.url", "javascript:alert(1)", "give an http:// or https:// URL with a host"),
        (
            "--runbook.url",
            "https://wiki/{{$labels.pod}}",
            "a URL may not hold '{': it would open a Go template action or a PromQL selector; percent-encode it",
        ),
        ("--grafana.url", "https://grafana/a b", "a URL may not hold ' '; percent-encode it"),
    ],
)
def test_settings_that_would_break_the_text_they_land_in_are_refused(tmp_path, capsys, flag, value, message):
    assert main(["alerts", "--out", str(tmp_path / "out"), flag, value]) == 2
    assert capsys.readouterr().err == f"gpulens alerts: {flag} {value!r}: {message}\n"
    assert not (tmp_path / "out").exists()
    # The same settings reach the dashboards, and are refused there too.
    assert main(["dashboards", "--out", str(tmp_path / "out"), flag, value]) == 2
    assert not (tmp_path / "out").exists()


def test_a_job_name_of_a_service_monitor_is_written_as_a_promql_string():
    """Job names of Kubernetes service monitors hold slashes: fine in every text they land in."""
    c = MixinConfig(exporter_job="serviceMonitor/monitoring/gpulens/0")
    assert c.exporter == 'job="serviceMonitor/monitoring/gpulens/0"'
