"""The generated Grafana dashboards: committed copies current, house style kept (units, uids,
variables, layout, links). Their PromQL is run against a real Prometheus in tests/test_stack.py."""

import json
import re

import pytest

from gpulens.alerts import rules
from gpulens.cli import main
from gpulens.core import mixin
from gpulens.core.metrics import BY_NAME
from gpulens.dashboards import gpulens as dashboards
from gpulens.dashboards import style
from tests.helpers import REPO

GENERATED = dashboards.generate(mixin.MixinConfig())
BOARDS = {name: json.loads(text) for name, text in GENERATED.items()}


def panels(board):
    return [p for p in board["panels"] if p["type"] != "row"]


#: What `gpulens dashboards --out DIR` writes: the dashboards and the kustomization for Grafana's sidecar.
WRITTEN = {**GENERATED, "kustomization.yaml": dashboards.sidecar_kustomization(list(GENERATED))}


def test_committed_dashboards_are_current():
    for name, text in WRITTEN.items():
        assert (REPO / "dashboards" / "generated" / name).read_text() == text, (
            f"dashboards/generated/{name} is stale: run `gpulens dashboards --out dashboards/generated`"
        )


def test_generation_is_deterministic_and_the_cli_writes_the_same(tmp_path):
    assert dashboards.generate(mixin.MixinConfig()) == GENERATED
    assert main(["dashboards", "--out", str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == WRITTEN


def test_stable_uids_titles_and_variables():
    assert {b["uid"]: b["title"] for b in BOARDS.values()} == {
        "gpulens-fleet": "gpulens / Fleet overview",
        "gpulens-pod": "gpulens / Pod bottlenecks",
        "gpulens-node": "gpulens / Node and GPU health",
    }
    variables = {b["uid"]: [(v["name"], v["multi"]) for v in b["templating"]["list"]] for b in BOARDS.values()}
    assert variables == {
        "gpulens-fleet": [("datasource", False), ("cluster", True), ("job", True), ("node", True), ("namespace", True)],
        "gpulens-pod": [("datasource", False), ("cluster", True), ("job", True), ("namespace", False), ("pod", False)],
        "gpulens-node": [("datasource", False), ("cluster", True), ("job", True), ("node", True), ("gpu", True)],
    }


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_dashboards_are_on_the_schema_of_the_grafana_they_run_on(name):
    """schemaVersion 39 is what the compose file's Grafana (11.2) writes: it loads them unmigrated."""
    assert BOARDS[name]["schemaVersion"] == 39
    assert "grafana/grafana:11.2." in (REPO / "docker-compose.yml").read_text()


#: A series selector, named or by __name__ (not Grafana's ${...} variables).
SELECTOR = re.compile(r"(?<!\$)([\w:]*)\{([^}]*)\}")


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_variable_is_applied(name):
    """Every selector of every query and variable is narrowed by the cluster; every variable of the
    dashboard narrows some query; in the fleet overview, every per-pod series by the namespace."""
    board = BOARDS[name]
    queries = [t["expr"] for p in panels(board) for t in p["targets"]]
    variables = {v["name"]: v["query"] for v in board["templating"]["list"] if v["type"] == "query"}
    queries += [query for variable, query in variables.items() if variable != "cluster"]  # it lists them
    pod_series = rf"gpulens_(gpu_pod_info|pod_|wasted_)|{re.escape(mixin.POD_GPU_ACTIVITY)}"
    for query in queries:
        for series, matchers in SELECTOR.findall(query):
            assert 'cluster=~"$cluster"' in matchers, f"{name}: {series}{{{matchers}}} ignores $cluster"
            own_list = query.endswith(", namespace)")  # the namespace variable lists the namespaces
            if name == "gpulens-fleet.json" and re.search(pod_series, series + matchers) and not own_list:
                assert 'namespace=~"$namespace"' in matchers, f"{series}{{{matchers}}} ignores $namespace"
    for variable in board["templating"]["list"][1:]:
        assert any(f"${variable['name']}" in q for q in queries), f"{name}: ${variable['name']} narrows nothing"


def test_thresholds_only_where_they_mean_something():
    """Panels carry one neutral band (no Grafana default green/red at 80) unless a threshold of the
    analyzer applies: SM activity's 50% and 80%, the throttling alert's share, memory full."""
    t = mixin.MixinConfig().thresholds
    banded = {}
    for name, board in BOARDS.items():
        for panel in panels(board):
            steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
            if steps != [{"color": "text", "value": None}]:
                banded[(name, panel["title"])] = [step["value"] for step in steps]
    sm = [None, t.ineffective_sm, t.healthy_sm]
    assert banded == {
        ("gpulens-fleet.json", "SM activity of allocated GPUs"): sm,
        ("gpulens-pod.json", "Activity (analyzer window)"): sm,
        ("gpulens-pod.json", "SM activity and occupancy"): sm,
        ("gpulens-pod.json", "Activity per GPU"): sm,
        ("gpulens-pod.json", "Throttled share of time"): [None, t.alert_throttled_fraction],
        ("gpulens-node.json", "Memory used"): [None, t.memory_full],
    }


def test_each_alert_opens_the_panel_that_shows_its_signal():
    """Every alert links a dashboard that exists; where it names a panel (viewPanel), the panel with that
    id is the one mixin.py names for it."""
    by_uid = {b["uid"]: b for b in BOARDS.values()}
    for panel_ref in mixin.PANELS:
        uid, _ = panel_ref.dashboard
        [panel] = [p for p in panels(by_uid[uid]) if p["id"] == panel_ref.id]
        assert panel["title"] == panel_ref.title
    opened = {}
    for alert in rules.alerts(mixin.MixinConfig()):
        link = re.fullmatch(r"http://localhost:3000/d/([\w-]+)\?(.*)", alert.dashboard_url)
        assert link and link[1] in by_uid, alert.name
        view = re.search(r"viewPanel=(\d+)", link[2])
        if view:
            [panel] = [p for p in panels(by_uid[link[1]]) if p["id"] == int(view[1])]
            opened[alert.name] = panel["title"]
    assert opened["GpulensPodLowSmActivity"] == "SM activity and occupancy"
    assert opened["GpulensGpuXidFault"] == opened["GpulensPodApplicationXid"] == "XID errors"
    assert opened["GpulensGpuNvlinkDegraded"] == "NVLink links down and errors"
    assert len(opened) == len(rules.alerts(mixin.MixinConfig())) - 1  # all but the fleet-wide ExporterAbsent


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_every_panel_has_a_unit_a_description_and_the_datasource_variable(name):
    for panel in panels(BOARDS[name]):
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["description"], panel["title"]
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert ref_ids == [chr(ord("A") + i) for i in range(len(ref_ids))], panel["title"]


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_layout_fits_the_grid_without_overlap(name):
    taken = set()
    for panel in BOARDS[name]["panels"]:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & taken, f"{panel['title']} overlaps another panel"
        taken |= cells
    ids = [p["id"] for p in BOARDS[name]["panels"]]
    assert len(ids) == len(set(ids))


def test_every_gpulens_metric_named_in_a_dashboard_exists():
    names = set()
    for board in BOARDS.values():
        for panel in panels(board):
            for target in panel["targets"]:
                names |= set(re.findall(r"(?<![:\w])gpulens_[a-z_]+(?![:\w])", target["expr"]))
    recorded = {r["record"] for r in mixin.recording_rules(mixin.MixinConfig())}
    assert names - set(BY_NAME) == set()
    assert names & set(BY_NAME), "the dashboards read no gpulens metric"
    used_rules = {
        r for r in recorded if any(r in t["expr"] for b in BOARDS.values() for p in panels(b) for t in p["targets"])
    }
    assert used_rules, "the dashboards read no recording rule"


def test_top_wasting_pods_link_to_the_pod_dashboard():
    [table] = [p for p in panels(BOARDS["gpulens-fleet.json"]) if p["title"] == "Top wasting pods"]
    [link] = table["fieldConfig"]["overrides"][0]["properties"][0]["value"]
    assert link["url"] == (
        "/d/gpulens-pod?${cluster:queryparam}&var-namespace=${__data.fields.namespace}"
        "&var-pod=${__data.fields.pod}&${__url_time_range}"
    )


def test_a_panel_without_a_unit_is_refused():
    with pytest.raises(ValueError, match="names its unit"):
        style.timeseries("x", "y", [style.target("up")], unit="")


def test_cadvisor_and_kube_state_metrics_are_read_from_the_jobs_named_as_the_analyzer_reads_them():
    """--cadvisor.job and --kube-state-metrics.job narrow every cAdvisor and kube-state-metrics series of
    every dashboard (kubernetes-mixin's cadvisorSelector, kubeStateMetricsSelector); unset, any job (the
    committed dashboards). The analyzer reads them the same way: tests/test_store.py."""
    config = mixin.MixinConfig(cadvisor_job="kubelet", kube_state_metrics_job="kube-state-metrics")
    boards = {name: json.loads(text) for name, text in dashboards.generate(config).items()}
    jobs = {"container_": 'job="kubelet"', "kube_": 'job="kube-state-metrics"'}
    found: dict[str, int] = {}
    for name, board in boards.items():
        for query in (t["expr"] for p in panels(board) for t in p["targets"]):
            for series, matchers in SELECTOR.findall(query):
                for prefix, job in jobs.items():
                    if series.startswith(prefix):
                        assert job in matchers, f"{name}: {series}{{{matchers}}} reads every job"
                        found[series] = found.get(series, 0) + 1
    assert found == {
        "container_cpu_usage_seconds_total": 1,
        "container_spec_cpu_period": 1,
        "container_spec_cpu_quota": 1,
        "kube_pod_container_resource_limits": 1,
        "kube_pod_owner": 2,  # the fleet board's requests and waste by Deployment
        "kube_replicaset_owner": 2,
    }
