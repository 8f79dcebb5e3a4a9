"""Alertmanager routing, generated from a deployment's settings: amtool checks the config and tests its routes,
a real Alertmanager groups the pages by namespace and mutes a paged pod's class ticket, the settings are
refused where they would break the config, and the demo's receiver reads what each notification says."""

import dataclasses
import subprocess

import pytest
import yaml

from gpulens.alerts import cli, routing, rules
from gpulens.cli import main
from gpulens.core.mixin import MixinConfig
from gpulens.receiver import AlertReceiver
from tests.helpers import REPO, Alertmanager, require_binary, wait_until


def test_amtool_checks_the_alertmanager_config(generated):
    amtool = require_binary("amtool")
    result = subprocess.run(
        [amtool, "check-config", str(generated / cli.ALERTMANAGER_FILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 inhibit rules" in result.stdout and "2 receivers" in result.stdout


def test_routing_pages_critical_and_tickets_warnings(generated):
    """amtool's routing test on the real config: which receiver each severity reaches."""
    amtool = require_binary("amtool")
    config = str(generated / cli.ALERTMANAGER_FILE)
    for labels, receiver in (
        (["alertname=GpulensPodLowSmActivity", "severity=critical", "namespace=nlp"], "pages"),
        (["alertname=GpulensPodDataStarvation", "severity=warning", "namespace=nlp"], "tickets"),
    ):
        result = subprocess.run(
            [amtool, "config", "routes", "test", f"--config.file={config}", *labels], capture_output=True, text=True
        )
        assert result.stdout.strip() == receiver, result.stdout + result.stderr


# --- routing: severities and owners are settings -------------------------------------------------

SETTINGS = REPO / "alerts" / "settings.example.yaml"


def routed_to(amtool: str, config, *labels: str) -> str:
    result = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={config}", *labels], capture_output=True, text=True
    )
    return result.stdout.strip()


def test_settings_route_each_alert_to_its_owner(tmp_path):
    """The example settings file: namespace owners get their pods' pages and tickets, the nodes' owner
    hardware faults and exporters, the default owner the rest; a severity changed without a code edit."""
    amtool = require_binary("amtool")
    assert main(["alerts", "--out", str(tmp_path), "--alerting.config", str(SETTINGS)]) == 0
    config = tmp_path / cli.ALERTMANAGER_FILE
    checked = subprocess.run([amtool, "check-config", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0 and "8 receivers" in checked.stdout, checked.stdout + checked.stderr
    # The research cluster's choice: the low-SM alert is a ticket there.
    groups = yaml.safe_load((tmp_path / cli.RULES_FILE).read_text())["groups"]
    alerting = next(g for g in groups if g["name"] == "gpulens.alerts")["rules"]
    page = next(r for r in alerting if r["alert"] == "GpulensPodLowSmActivity")
    assert page["labels"]["severity"] == "warning"
    for labels, receiver in (
        (
            ("alertname=GpulensPodLowSmActivity", "severity=critical", "component=pod", "namespace=nlp-serving"),
            "nlp-pager",
        ),
        (("alertname=GpulensPodApplicationXid", "severity=warning", "component=pod", "namespace=nlp"), "nlp-tickets"),
        (
            ("alertname=GpulensPodLowSmActivity", "severity=critical", "component=pod", "namespace=nlpx"),
            "platform-pager",
        ),
        (
            ("alertname=GpulensPodDataStarvation", "severity=warning", "component=pod", "namespace=vision"),
            "platform-tickets",
        ),
        (("alertname=GpulensGpuXidFault", "severity=critical", "component=gpu", "node=n1"), "hardware-pager"),
        (("alertname=GpulensGpuThrottled", "severity=warning", "component=gpu", "node=n1"), "hardware-tickets"),
        (("alertname=GpulensExporterDown", "severity=critical", "component=exporter", "node=n1"), "hardware-pager"),
        (("alertname=GpulensAnalyzerDown", "severity=warning", "component=analyzer"), "platform-tickets"),
        # An alert that carries a workload's team goes to the team's owner, whatever its namespace; to its
        # namespace's owner where no team owner takes it.
        (
            ("alertname=Workload", "severity=warning", "component=workload", "namespace=nlp", "team=search"),
            "search-tickets",
        ),
        (
            ("alertname=Workload", "severity=critical", "component=workload", "namespace=nlp", "team=search"),
            "search-pager",
        ),
        (("alertname=Workload", "severity=warning", "component=workload", "namespace=nlp", "team=ads"), "nlp-tickets"),
    ):
        assert routed_to(amtool, config, *labels) == receiver, labels


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            "receivers: {a: {webhook_configs: [{url: 'http://x'}]}}\n"
            "owners: {default: {pages: a, tickets: a}, namespaces: [{match: nlp, pages: nlp-pagr, tickets: a}]}\n",
            "owners.namespaces[0].pages: no receiver named 'nlp-pagr'; add it under receivers or use one of a",
        ),
        (
            "receivers: {a: {webhook_configs: [{url: 'http://x'}]}}\n",
            "owners.default missing: say which receivers get what no other owner takes",
        ),
        (
            "severities: {GpulensPodLowSmActivity: page}\n",
            "GpulensPodLowSmActivity: expected one of critical, warning, got 'page'",
        ),
        ("owners: {namespaces: [{match: 'nlp(', pages: pages, tickets: tickets}]}\n", "expected a regular expression"),
        # Python reads them, Alertmanager (Go's RE2) would refuse them after the files are written.
        *(
            (
                f"owners: {{namespaces: [{{match: '{match}', pages: pages, tickets: tickets}}]}}\n",
                "expected a regular expression on the namespace, in the syntax Alertmanager reads (Go's RE2: no "
                "lookaround, backreferences, possessive quantifiers, \\Z or verbose mode)",
            )
            for match in ("nlp(?!-test)", "nlp\\Z", "(?x) nlp", "(nlp)-\\1", "nlp.*+")
        ),
        # What the Prometheus operator's AlertmanagerConfig cannot carry in Alertmanager's form.
        (
            "receivers: {a: {discord_configs: [{webhook_url: 'http://x'}]}}\n"
            "owners: {default: {pages: a, tickets: a}}\n",
            "receivers.a.discord_configs: the Prometheus operator's AlertmanagerConfig is generated for "
            "webhook_configs, slack_configs, pagerduty_configs, email_configs, opsgenie_configs, msteams_configs, "
            "telegram_configs; use one of those or load alertmanager.yml into Alertmanager directly",
        ),
        (
            "receivers: {a: {webhook_configs: [{url: 'http://x', http_config: {proxy_url: 'http://p'}}]}}\n"
            "owners: {default: {pages: a, tickets: a}}\n",
            "receivers.a.webhook_configs[0].http_config: the AlertmanagerConfig takes it in another form",
        ),
        ("budgets: {teams: {search: -5}}\n", "budgets.teams.search: expected a budget in USD a month (30 days)"),
        ("budgets: {teams: {'se\"arch': 5}}\n", "budgets.teams 'se\"arch': a team's name may not hold '\"'"),
        ("budgets: {pools: {a: 5}}\n", "budgets: unknown key(s) pools; the known keys are teams, namespaces"),
    ],
)
def test_bad_settings_are_refused_naming_the_fix(tmp_path, capsys, settings, message):
    path = tmp_path / "settings.yaml"
    path.write_text(settings)
    assert main(["alerts", "--out", str(tmp_path / "out"), "--alerting.config", str(path)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def page(namespace: str, pod: str, cause: str) -> dict:
    return {
        "labels": {
            "alertname": routing.PAGE,
            "severity": "critical",
            "component": "pod",
            "namespace": namespace,
            "pod": pod,
            "node": "n1",
        },
        "annotations": {"summary": f"{namespace}/{pod} is underused: {cause}", "bottleneck": cause},
    }


def ticket(namespace: str, pod: str) -> dict:
    labels = {**page(namespace, pod, "data_starvation")["labels"], "alertname": "GpulensPodDataStarvation"}
    return {"labels": {**labels, "severity": "warning", "bottleneck": "data_starvation"}, "annotations": {}}


@pytest.mark.slow
def test_alertmanager_sends_one_page_per_namespace_and_mutes_the_class_ticket(tmp_path):
    """The generated config in a real Alertmanager: a hundred replicas and a notebook of one namespace are
    one page, whatever their causes (annotations, which a changing verdict may change without splitting
    the group); another namespace is another page; the class ticket of a paged pod is muted while a pod
    without a page still gets its ticket."""
    receiver = AlertReceiver()
    config = routing.alertmanager_config(routing.AlertSettings.load("", f"{receiver.url}/alerts"))
    config["route"]["group_wait"] = "1s"  # the grouping is under test, not the 30 s wait
    path = tmp_path / "alertmanager.yml"
    path.write_text(cli.dump_yaml(config))
    alertmanager = Alertmanager(tmp_path, path)
    try:
        replicas = [page("serving", f"llm-{i}", "overprovisioned_serving") for i in range(100)]
        alertmanager.post([*replicas, page("serving", "notebook", "idle"), page("nlp", "bert", "data_starvation")])
        alertmanager.post([ticket("nlp", "bert"), ticket("nlp", "t5")])
        wait_until(lambda: len(receiver.snapshot()) >= 3, 30, what="three notifications")
        # And no more: a group with an active alert is a notification, and these are every one there is.
        assert alertmanager.groups() == [
            ("pages", {"alertname": "GpulensPodLowSmActivity", "namespace": "nlp"}, 1),
            ("pages", {"alertname": "GpulensPodLowSmActivity", "namespace": "serving"}, 101),
            ("tickets", {"alertname": "GpulensPodDataStarvation", "namespace": "nlp"}, 1),  # bert's muted
        ]
        sent = sorted(
            (n.path, n.group_labels.get("namespace"), n.group_labels.get("alertname"), len(n.alerts))
            for n in receiver.snapshot()
        )
        assert sent == [
            ("/alerts/pages", "nlp", "GpulensPodLowSmActivity", 1),
            ("/alerts/pages", "serving", "GpulensPodLowSmActivity", 101),
            ("/alerts/tickets", "nlp", "GpulensPodDataStarvation", 1),
        ]
        [tickets] = [n for n in receiver.snapshot() if n.path == "/alerts/tickets"]
        assert [a.labels["pod"] for a in tickets.alerts] == ["t5"]
        [muted] = [
            a
            for a in alertmanager.alerts()
            if a["labels"]["alertname"] == "GpulensPodDataStarvation" and a["labels"]["pod"] == "bert"
        ]
        assert muted["status"]["state"] == "suppressed" and muted["status"]["inhibitedBy"]
    finally:
        alertmanager.stop()
        receiver.stop()


def test_muting_names_alerts_that_exist():
    """An inhibition naming a renamed alert would silently mute nothing."""
    names = {a.name for a in rules.alerts(MixinConfig())}
    config = routing.alertmanager_config(routing.AlertSettings())
    for rule in config["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            label, _, value = matcher.partition("=")
            if label == "alertname":
                assert set(value.strip('~"').split("|")) <= names, matcher


def test_the_receiver_reads_the_verdict_of_the_page_from_its_annotations_and_of_a_ticket_from_its_label():
    from gpulens.receiver import Alert, describe

    verdict = {"confidence": "80%", "recommendation": "Save asynchronously.", "summary": "nlp/gpt is underused"}
    page_alert = Alert(
        "firing", {"alertname": routing.PAGE, "namespace": "nlp", "pod": "gpt"}, {**verdict, "bottleneck": "host_stall"}
    )
    ticket_alert = Alert(
        "firing",
        {"alertname": "GpulensPodHostStall", "namespace": "nlp", "pod": "gpt", "bottleneck": "host_stall"},
        verdict,
    )
    assert describe(page_alert, "/alerts/pages") == (
        "[firing] pages: GpulensPodLowSmActivity nlp/gpt | host_stall (80%): Save asynchronously."
    )
    assert describe(ticket_alert, "/alerts/tickets") == (
        "[firing] tickets: GpulensPodHostStall nlp/gpt | host_stall (80%): Save asynchronously."
    )
    unjudged = dataclasses.replace(page_alert, annotations={"summary": "nlp/gpt is underused"})
    assert (
        describe(unjudged, "/alerts/pages") == "[firing] pages: GpulensPodLowSmActivity nlp/gpt | nlp/gpt is underused"
    )


def test_a_settings_files_budgets_become_a_constant_series_each_in_dollars_a_second(tmp_path):
    """The example settings' budgets: $20,000 a month for search is 20000 / (30 x 86400) dollars a second, a series
    labelled with its team; the research namespace's with its namespace."""
    import yaml

    out = tmp_path / "out"
    assert main(["alerts", "--out", str(out), "--alerting.config", str(REPO / "alerts/settings.example.yaml")]) == 0
    groups = yaml.safe_load((out / "gpulens-rules.yaml").read_text())["groups"]
    budgets = next(g for g in groups if g["name"] == "gpulens.budgets")["rules"]
    constant = [(r["record"], r["labels"], r["expr"]) for r in budgets if "labels" in r]
    assert constant == [
        ("team:gpulens_budget_dollars:per_second", {"team": "nlp"}, f"vector({8000 / 2592000!r})"),
        ("team:gpulens_budget_dollars:per_second", {"team": "search"}, f"vector({20000 / 2592000!r})"),
        ("namespace:gpulens_budget_dollars:per_second", {"namespace": "research"}, f"vector({3000 / 2592000!r})"),
    ]
