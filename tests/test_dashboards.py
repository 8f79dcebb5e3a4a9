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


def test_committed_dashboards_are_current():
    for name, text in GENERATED.items():
        assert (REPO / "dashboards" / "generated" / name).read_text() == text, (
            f"dashboards/generated/{name} is stale: run `gpulens dashboards --out dashboards/generated`"
        )


def test_generation_is_deterministic_and_the_cli_writes_the_same(tmp_path):
    assert dashboards.generate(mixin.MixinConfig()) == GENERATED
    assert main(["dashboards", "--out", str(tmp_path)]) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == GENERATED


def test_stable_uids_titles_and_variables():
    assert {b["uid"]: b["title"] for b in BOARDS.values()} == {
        "gpulens-fleet": "gpulens / Fleet overview",
        "gpulens-pod": "gpulens / Pod bottlenecks",
        "gpulens-node": "gpulens / Node and GPU health",
    }
    variables = {b["uid"]: [(v["name"], v["multi"]) for v in b["templating"]["list"]] for b in BOARDS.values()}
    assert variables == {
        "gpulens-fleet": [("datasource", False), ("job", True), ("node", True), ("namespace", True)],
        "gpulens-pod": [("datasource", False), ("job", True), ("namespace", False), ("pod", False)],
        "gpulens-node": [("datasource", False), ("job", True), ("node", True), ("gpu", True)],
    }


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


def test_each_alert_links_to_a_dashboard_that_exists():
    uids = {b["uid"] for b in BOARDS.values()}
    for alert in rules.alerts(mixin.MixinConfig()):
        uid = re.search(r"/d/([\w-]+)", alert.dashboard_url)[1]
        assert uid in uids, alert.name
    pod_board = BOARDS["gpulens-pod.json"]
    assert {v["name"] for v in pod_board["templating"]["list"]} >= {"namespace", "pod"}


def test_top_wasting_pods_link_to_the_pod_dashboard():
    [table] = [p for p in panels(BOARDS["gpulens-fleet.json"]) if p["title"] == "Top wasting pods"]
    [link] = table["fieldConfig"]["overrides"][0]["properties"][0]["value"]
    assert link["url"].startswith(
        "/d/gpulens-pod?var-namespace=${__data.fields.namespace}&var-pod=${__data.fields.pod}"
    )


def test_a_panel_without_a_unit_is_refused():
    with pytest.raises(ValueError, match="names its unit"):
        style.timeseries("x", "y", [style.target("up")], unit="")
