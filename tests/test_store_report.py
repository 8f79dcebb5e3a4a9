"""`gpulens report --prometheus`: a week of history in a real Prometheus (backfilled with promtool) and a
real VictoriaMetrics (imported over its API) gives the verdicts a report of the same samples as a file
gives, in every series layout a fleet scrapes: gpulens' exporter, dcgm-exporter through the GPU Operator's
ServiceMonitor (exported_pod), dcgm-exporter with honorLabels (pod), and gpulens beside dcgm-exporter."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
import subprocess
import sys
import zipfile

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs.store import Store, StoreAuth, StoreError
from gpulens.analyzer.judging.evidence import percent
from gpulens.analyzer.judging.history import analyze
from gpulens.analyzer.outputs import report as html_report
from gpulens.analyzer.outputs.plan import sized
from gpulens.analyzer.outputs.use import Use
from gpulens.core.catalog import MIB, model_info
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import rfc3339
from tests import store_history as week
from tests.helpers import REPO, BackfilledPrometheus, ServerProcess, VictoriaMetrics

pytestmark = pytest.mark.slow

#: The last sample of the week: a store answers a step after it from the sample before (Prometheus'
#: 5-minute lookback), so a span that ends later reads a sample that was never taken.
LAST = week.START + week.DAYS * 86400 - week.STEP
#: (gpulens selector, dcgm-exporter selector) of each layout: a selector that matches nothing leaves a
#: family out.
LAYOUTS = {
    "gpulens": ('job="gpulens"', 'job="none"'),
    "dcgm-exported": ('job="none"', 'job="dcgm-exported"'),
    "dcgm-plain": ('job="none"', 'job="dcgm-plain"'),
    "dcgm-basic": ('job="none"', 'job="dcgm-basic"'),
    "gpulens-and-dcgm": ('job="gpulens"', 'job="dcgm-exported"'),
}


@pytest.fixture(scope="module")
def trace():
    return week.week_trace()


@pytest.fixture(scope="module")
def stores(trace, tmp_path_factory):
    """Both stores, holding the week in every layout."""
    prometheus = BackfilledPrometheus(tmp_path_factory.mktemp("prometheus"), week.openmetrics(trace))
    victoria = VictoriaMetrics(tmp_path_factory.mktemp("victoria-metrics"))
    try:
        victoria.load(week.prometheus_text(trace))
        yield {"prometheus": prometheus.url, "victoria-metrics": victoria.url}
    finally:
        prometheus.stop()
        victoria.stop()


def report(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gpulens", "report", "--prometheus", url, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def week_report(url: str, layout: str, *args: str) -> list[dict]:
    gpulens, dcgm = LAYOUTS[layout]
    done = report(
        url,
        "--since",
        "2025-11-09T00:00:00Z",
        "--until",
        str(LAST),
        "--prometheus.step",
        "5m",
        "--prometheus.selector",
        gpulens,
        "--prometheus.dcgm-selector",
        dcgm,
        "--format",
        "json",
        *args,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["verdicts"]


@pytest.mark.parametrize("store", ["prometheus", "victoria-metrics"])
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_week_from_a_store_gives_the_verdicts_of_the_same_samples_in_a_file(stores, trace, store, layout):
    if layout == "dcgm-basic":  # no profiling fields: the file has none either
        trace = trace.assign(sm_active=float("nan"))
    # Each sized from what it used, as a report of the file sizes it (plan.sized()).
    t = Thresholds()
    judged = sized(analyze(trace), Use.of_trace(trace, week.STEP, t), t)
    from_file = sorted(
        (v.to_dict() for v in judged), key=lambda v: (-v["wasted_gpu_seconds"], v["namespace"], v["pod"])
    )
    from_store = week_report(stores[store], layout)
    if layout == "dcgm-basic":
        # Utilization says a kernel ran, not how much of the GPU worked: said, and the confidence capped.
        assert all("profiling_fields" in v["evidence"] for v in from_store if v["pod"] and v["bottleneck"] != "idle")
        assert max(v["confidence"] for v in from_store if v["pod"] and v["bottleneck"] != "idle") <= 0.5
    # From utilization alone every 5 minutes, nothing shows the replica's requests between its quiet spells
    # (its activity a mean 0.024, its model held): serving is one of the causes left open, not the class.
    serving = "unexplained" if layout == "dcgm-basic" else "overprovisioned_serving"
    assert [(v["namespace"], v["pod"], v["bottleneck"]) for v in from_file] == [
        ("", "", "unallocated"),  # GPU 3: no workload, and no pod holds it
        ("serve", "llm-0", serving),
        # Its notebooks work 1-3 hours every morning and rest between: in use, their nights pauses that work
        # followed. From their GPU alone (no kind) their bursts are requests: serving, the evidence saying what
        # would tell a replica's quiet hours from a notebook's kernel left open.
        ("research", "notebook-b", "overprovisioned_serving"),
        ("research", "notebook-a", "overprovisioned_serving"),
        ("ml", "trainer-0", "healthy"),
    ]
    # What 5-minute samples without gpulens' activity shape (and without DRAM activity, or any profiling
    # field) cannot show, said in every verdict.
    lacking = (
        "no profiling fields: SM, DRAM and pipe activity" if layout == "dcgm-basic" else "no DRAM or pipe activity"
    )
    assert {v["evidence"]["not_judged"] for v in from_store if v["pod"]} == {
        "stalls and bursts shorter than the 300 s between samples (each sample is one instant; gpulens' "
        f"exporter counts every driver sample between scrapes); memory_bandwidth (the input has {lacking})"
    }
    # The GPU, node and model of each, its class, confidence, waste, time by class and episodes; owners and
    # kinds are the store's alone (kube-state-metrics), and tested below.
    assert [_without_kubernetes(verdict) for verdict in from_store] == [
        _without_kubernetes(verdict) for verdict in from_file
    ]
    # A GPU no pod held all week was held each of its 7 UTC days whole, though the history's 75-minute slots
    # cross midnight (a slot across it is split there), and wasted all of each.
    [free] = [v for v in from_store if v["bottleneck"] == "unallocated"]
    assert [(d["gpu_seconds"], d["wasted_gpu_seconds"]) for d in free["days"]] == [(86400.0, 86400.0)] * 7


def _without_kubernetes(verdict: dict) -> dict:
    """A verdict without what kube-state-metrics says: its owner, team and kind, and the kind's evidence."""
    said = {"owner_kind", "owner", "team", "workload_kind", "engine", "kind_source"}
    kept = {k: v for k, v in verdict.items() if k not in said}
    kept["evidence"] = {k: v for k, v in verdict["evidence"].items() if k != "workload"}
    return kept


@pytest.mark.parametrize("store", ["prometheus", "victoria-metrics"])
def test_waste_is_summed_by_workload_and_team_from_kube_state_metrics(stores, store):
    """Owners resolved through ReplicaSets and Jobs, teams from the pod label or else the namespace's,
    and the sums by owner and team those of the verdicts."""
    gpulens, dcgm = LAYOUTS["dcgm-exported"]
    done = report(
        stores[store],
        *("--since", "2025-11-09T00:00:00Z", "--until", str(LAST), "--prometheus.step", "5m"),
        *("--prometheus.selector", gpulens, "--prometheus.dcgm-selector", dcgm, "--team-label", "team"),
        *("--format", "json"),
    )
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    owners = {(v["namespace"], v["pod"]): (v["owner_kind"], v["owner"], v["team"]) for v in document["verdicts"]}
    assert owners == {
        ("ml", "trainer-0"): ("CronJob", "nightly-train", "vision"),
        ("research", "notebook-a"): ("StatefulSet", "jupyter", "research-lab"),
        ("research", "notebook-b"): ("StatefulSet", "jupyter", "research-lab"),
        ("serve", "llm-0"): ("Deployment", "llm", "platform"),
        ("", ""): ("", "", ""),
    }
    # What each is, from its owner: the notebooks' StatefulSet says nothing without JupyterHub's label (which
    # kube-state-metrics exports only where its allow-list names it), so their evidence says what would.
    kinds = {(v["namespace"], v["pod"]): (v["workload_kind"], v["kind_source"]) for v in document["verdicts"]}
    assert kinds == {
        ("ml", "trainer-0"): ("job", "owner CronJob"),
        ("research", "notebook-a"): ("unknown", ""),
        ("research", "notebook-b"): ("unknown", ""),
        ("serve", "llm-0"): ("serving", "owner Deployment"),
        ("", ""): ("unknown", ""),
    }
    [notebook] = [v for v in document["verdicts"] if v["pod"] == "notebook-a"]
    assert notebook["evidence"]["workload"].startswith("unknown: what the pod is (kube-state-metrics' kube_pod_owner")
    wasted = {(v["namespace"], v["pod"]): v["wasted_gpu_seconds"] / 3600 for v in document["verdicts"]}
    by_owner = {s["key"]: (s["pods"], s["wasted_gpu_hours"]) for s in document["waste"]["owner"]}
    notebooks = wasted[("research", "notebook-a")] + wasted[("research", "notebook-b")]
    assert by_owner["research/StatefulSet/jupyter"] == (2, pytest.approx(notebooks, abs=1e-3))
    assert by_owner["serve/Deployment/llm"] == (1, pytest.approx(wasted[("serve", "llm-0")], abs=1e-3))
    assert by_owner["(no pod)"] == (1, pytest.approx(wasted[("", "")], abs=1e-3))
    by_team = {s["key"]: s["wasted_gpu_hours"] for s in document["waste"]["team"]}
    assert by_team == {
        "research-lab": pytest.approx(notebooks, abs=1e-3),
        "platform": pytest.approx(wasted[("serve", "llm-0")], abs=1e-3),
        "vision": pytest.approx(wasted[("ml", "trainer-0")], abs=1e-3),
        "(no pod)": pytest.approx(wasted[("", "")], abs=1e-3),
    }


def test_a_week_read_in_pieces_is_the_week_read_whole(stores, monkeypatch):
    """Pieces of the span, each with a window of samples around it, give the verdicts of one read."""
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.store import Store
    from gpulens.analyzer.runs import span
    from gpulens.core.thresholds import Thresholds

    gpulens, dcgm = LAYOUTS["dcgm-exported"]
    week_span = span.Span.aligned(week.START, LAST, week.STEP)

    def verdicts(progress: list) -> list[dict]:
        reader = SeriesReader(Store(stores["prometheus"]), week.STEP, gpulens_selector=gpulens, dcgm_selector=dcgm)
        found = span.report(reader, week_span, Thresholds(), on_progress=progress.append)
        return sorted((v.to_dict() for v in found), key=lambda v: (v["namespace"], v["pod"], v["gpus"]))

    whole_progress: list = []
    monkeypatch.setattr(span, "PIECE_ROWS", 4 * 3000)  # 4 GPUs x 3,000 steps of 5 minutes: 10.4 days
    whole = verdicts(whole_progress)
    assert len(whole_progress) == 1
    pieces_progress: list = []
    monkeypatch.setattr(span, "PIECE_ROWS", 4 * 720)  # 4 GPUs x 720 steps of 5 minutes: 2.5 days
    ranges: list[tuple[float, float]] = []
    query_range = Store.query_range

    def recorded(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        if "DCGM_FI_DEV_GPU_UTIL" in expr:
            ranges.append((start, end))
        return query_range(self, expr, start, end, step)

    monkeypatch.setattr(Store, "query_range", recorded)
    assert verdicts(pieces_progress) == whole
    # Each step read once: the rows a piece shares with the next (a window before the next one's slots) are
    # kept, not read again, and the reads tile the week.
    assert ranges[0][0] == week.START and ranges[-1][1] == LAST
    assert all(later[0] == earlier[1] + week.STEP for earlier, later in itertools.pairwise(ranges))
    # The four GPUs named by the store's index from the first piece on: 39 slides of 75 minutes (2.03 days)
    # with a 5-hour window read on each side, 706 steps, three times; then the last 21.7 h.
    assert len(pieces_progress) == 4
    assert pieces_progress[-1].largest_piece_rows == 4 * 706
    assert pieces_progress[-1].seconds_done == pieces_progress[-1].span_seconds == LAST - week.START


def test_a_store_that_will_not_name_its_series_is_read_from_the_shortest_piece_on(stores, tmp_path, monkeypatch):
    """Behind a proxy that lets only queries through (vmauth routing /api/v1/query and query_range, as
    read-only front ends are configured), the GPUs are not known before the first piece: it is the
    shortest (a window counted), the pieces after it are sized from the GPUs it found, and the verdicts
    are those of the store read directly."""
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.window import Shard
    from gpulens.analyzer.runs import span
    from gpulens.core.thresholds import Thresholds

    config = tmp_path / "auth.yml"
    victoria = stores["victoria-metrics"]
    config.write_text(
        f'users:\n- bearer_token: "tok-5e1d"\n  url_map:\n'
        f'  - src_paths: ["/api/v1/query", "/api/v1/query_range"]\n    url_prefix: "{victoria}"\n'
    )
    token = tmp_path / "token"
    token.write_text("tok-5e1d")
    auth = StoreAuth(bearer_token_file=str(token))
    proxy = ServerProcess("vmauth", tmp_path, lambda a: [f"-auth.config={config}", f"-httpListenAddr={a}"], "/health")
    gpulens, dcgm = LAYOUTS["dcgm-exported"]
    week_span = span.Span.aligned(week.START, LAST, week.STEP)
    monkeypatch.setattr(span, "PIECE_ROWS", 4 * 720)

    def verdicts(store: Store, progress: list) -> list[dict]:
        reader = SeriesReader(store, week.STEP, gpulens_selector=gpulens, dcgm_selector=dcgm)

        def seen(p: span.Progress) -> None:
            progress.append((p.seconds_done, p.largest_piece_rows))

        found = span.report(reader, week_span, Thresholds(), on_progress=seen)
        return sorted((v.to_dict() for v in found), key=lambda v: (v["namespace"], v["pod"], v["gpus"]))

    try:
        with pytest.raises(StoreError):
            Store(proxy.url, auth).series("DCGM_FI_DEV_FB_USED", week.START, LAST)
        behind: list = []
        assert verdicts(Store(proxy.url, auth), behind) == verdicts(Store(victoria), [])
        # A report shared out by node (--processes, --shard.count) needs the index: the error says so.
        reader = SeriesReader(Store(proxy.url, auth), week.STEP, gpulens_selector=gpulens, dcgm_selector=dcgm)
        with pytest.raises(StoreError, match=r"shares the nodes out from the store's index \(/api/v1/series\)"):
            span.report(reader, week_span, Thresholds(), shard=Shard(0, 2))
    finally:
        proxy.stop()
    # 5 hours (the shortest piece: a window, read with the window after it), then 39 slides of 75 minutes
    # three times, then the last 16.7 h.
    assert behind == [
        (18_000, 4 * 121),
        (193_500, 4 * 706),
        (369_000, 4 * 706),
        (544_500, 4 * 706),
        (LAST - week.START, 4 * 706),
    ]


def test_a_fleet_too_large_for_one_piece_is_read_in_groups_of_nodes_with_the_verdicts_of_one_read(
    tmp_path, monkeypatch
):
    """Where even the shortest piece (three windows) of every GPU would hold more than PIECE_ROWS, the span
    is read a group of nodes at a time: each query selects one group's exporters (gpulens' and
    dcgm-exporter's of a node, joined by the GPUs they both name), no piece holds more than PIECE_ROWS,
    and the verdicts are a file's of the same samples."""
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.store import Store
    from gpulens.analyzer.runs import span
    from gpulens.core.thresholds import Thresholds

    trace = week.week_trace()
    gpus = set(trace["gpu"].astype(str))
    held = set(trace.loc[trace["pod"] != "", "gpu"].astype(str))
    # The serving replica's GPU and the GPU no pod holds on a second node.
    node_b = set(trace.loc[trace["pod"] == "llm-0", "gpu"].astype(str)) | (gpus - held)
    trace["node"] = trace["node"].astype(str).where(~trace["gpu"].astype(str).isin(node_b), "gpu-node-b")
    trace = fr.normalize(trace)
    prometheus = BackfilledPrometheus(tmp_path, week.openmetrics(trace))
    try:
        asked: list[str] = []

        class Recorded(Store):
            def _api(self, endpoint: str, params: dict[str, str], what: str = "") -> list:
                if endpoint == "query_range":
                    asked.append(params["query"])
                return super()._api(endpoint, params, what)

        gpulens, dcgm = LAYOUTS["gpulens-and-dcgm"]
        reader = SeriesReader(Recorded(prometheus.url), week.STEP, gpulens_selector=gpulens, dcgm_selector=dcgm)
        progress: list = []
        # A window of 5 hours is 61 steps of 5 minutes, the shortest piece 181: four GPUs of it hold more.
        monkeypatch.setattr(span, "PIECE_ROWS", 700)
        found = span.report(
            reader, span.Span.aligned(week.START, LAST, week.STEP), Thresholds(), on_progress=progress.append
        )
    finally:
        prometheus.stop()
    by_pod = sorted((v.to_dict() for v in found), key=lambda v: (v["namespace"], v["pod"], v["gpus"]))
    from_file = sorted((v.to_dict() for v in analyze(trace)), key=lambda v: (v["namespace"], v["pod"], v["gpus"]))
    assert [(v["node"], v["pod"], v["bottleneck"]) for v in by_pod] == [
        ("gpu-node-b", "", "unallocated"),
        ("gpu-node-a", "trainer-0", "healthy"),
        ("gpu-node-a", "notebook-a", "overprovisioned_serving"),
        ("gpu-node-a", "notebook-b", "overprovisioned_serving"),
        ("gpu-node-b", "llm-0", "overprovisioned_serving"),
    ]
    assert by_pod == from_file
    node_a = 'instance=~"10\\\\.0\\\\.0\\\\.1:9835|10\\\\.0\\\\.0\\\\.2:9400"'
    node_b_matcher = 'instance=~"10\\\\.0\\\\.1\\\\.1:9835|10\\\\.0\\\\.1\\\\.2:9400"'
    # Each query of the exporters' series selects one group; the pods' CPU and restarts (cAdvisor,
    # kube-state-metrics) have no exporter to select.
    exporters = [query for query in asked if "kube_pod_container" not in query and "container_cpu" not in query]
    assert {(node_a in query, node_b_matcher in query) for query in exporters} == {(True, False), (False, True)}
    # Two groups of two GPUs: 700 / 2 x 5 minutes less a window each side is 15 slides of 75 minutes, so
    # each group reads the week in 9 pieces; none holds more than PIECE_ROWS.
    assert progress[-1].pieces_done == 18
    assert progress[-1].largest_piece_rows <= 700
    assert progress[-1].seconds_done == progress[-1].span_seconds == 2 * (LAST - week.START)


@pytest.mark.parametrize("layout", ["dcgm-exported", "dcgm-plain"])
def test_the_live_analyzer_judges_a_fleet_that_runs_only_dcgm_exporter(stores, layout):
    """The service on dcgm-exporter's series alone: the GPU's pod from either label layout, never the
    dcgm-exporter pod, and its waste counted by workload and team."""
    from gpulens.analyzer.inputs.live import PrometheusInput
    from gpulens.analyzer.runs.service import AnalyzerService
    from gpulens.core.thresholds import Thresholds
    from tests.helpers import samples

    gpulens, dcgm = LAYOUTS[layout]
    now = [LAST - 3 * 3600]
    source = PrometheusInput(
        stores["prometheus"],
        window=3 * 3600,
        step=week.STEP,
        selector=gpulens,
        dcgm_selector=dcgm,
        clock=lambda: now[0],
        team_label="team",
    )
    service = AnalyzerService(source, Thresholds(), {"H100": 2.5}, interval=week.STEP, clock=lambda: now[0])
    assert service.cycle()
    now[0] = LAST
    assert service.cycle()
    pods = {(v.namespace, v.pod, v.owner_kind, v.owner, v.team, v.gpu_model) for v in service.state.verdicts}
    model = "NVIDIA H100 80GB HBM3"
    assert pods == {
        ("ml", "trainer-0", "CronJob", "nightly-train", "vision", model),
        ("research", "notebook-b", "StatefulSet", "jupyter", "research-lab", model),
        ("serve", "llm-0", "Deployment", "llm", "platform", model),
        ("", "", "", "", "", model),
    }
    exposition = samples(service.render_text().decode())
    counters = {
        labels: value
        for (name, labels), value in exposition.items()
        if name == "gpulens_workload_wasted_gpu_seconds_total"
    }
    # The notebook did nothing: its GPU wasted a second every second since the first cycle's interval began.
    [(labels, notebook)] = [(ls, v) for ls, v in counters.items() if ("owner", "jupyter") in ls]
    assert dict(labels) == {
        "namespace": "research",
        "owner_kind": "StatefulSet",
        "owner": "jupyter",
        "team": "research-lab",
        "bottleneck": "idle",
    }
    [verdict] = [v for v in service.state.verdicts if v.pod == "notebook-b"]
    assert verdict.mean_activity == 0.0
    assert notebook == pytest.approx(week.STEP + 3 * 3600, rel=1e-9)
    # Showback's counters: the notebook held its GPU as long, at $2.50 an hour, and worked none of it.
    held = {
        name.removeprefix("gpulens_workload_"): value
        for (name, labels), value in exposition.items()
        if ("owner", "jupyter") in labels and name.startswith("gpulens_workload_") and "wasted" not in name
    }
    assert held == pytest.approx(
        {
            "allocated_gpu_seconds_total": notebook,
            "allocated_cost_dollars_total": notebook / 3600 * 2.5,
            "judged_gpu_seconds_total": notebook,
            "worked_gpu_seconds_total": 0.0,
        },
        rel=1e-9,
    )


def test_every_format_of_a_store_report_says_the_same(stores, tmp_path):
    """Table, CSV (by pod and by workload) and HTML from the store carry the JSON report's figures."""
    span = ("--since", "2025-11-09T00:00:00Z", "--until", str(LAST), "--prometheus.step", "5m")
    layout = ("--prometheus.selector", 'job="gpulens"', "--prometheus.dcgm-selector", 'job="none"')
    url = stores["victoria-metrics"]
    document = json.loads(report(url, *span, *layout, "--format", "json").stdout)
    llm = next(s for s in document["waste"]["owner"] if s["key"] == "serve/Deployment/llm")
    by_owner = report(url, *span, *layout, "--format", "csv", "--by", "owner").stdout.splitlines()
    assert by_owner[0] == "owner,pods,gpu_hours,wasted_gpu_hours,wasted_cost"
    assert f"serve/Deployment/llm,1,{llm['gpu_hours']},{llm['wasted_gpu_hours']},{llm['wasted_cost']}" in by_owner
    pods = report(url, *span, *layout, "--format", "csv").stdout.splitlines()
    assert len(pods) == 1 + len(document["verdicts"])
    table = report(url, *span, *layout).stdout
    assert "Deployment llm" in table and "Waste by owner" in table
    out = tmp_path / "week.html"
    assert report(url, *span, *layout, "--format", "html", "--out", str(out)).returncode == 0
    html = out.read_text()
    assert "<h2>Waste by workload</h2>" in html and "serve/Deployment/llm" in html


def _timelines(html: str) -> list[str]:
    return re.findall(r"<div class=pod>.*?</div>", html)


@pytest.mark.parametrize("layout", ["gpulens", "dcgm-exported"])
def test_the_html_report_from_a_store_draws_the_timelines_a_file_of_the_same_samples_draws(stores, trace, layout):
    """Read in pieces, the week's timelines (activity and memory lines, class bands) are those of the same
    samples read from a file: every drawn unit, every point."""
    gpulens, dcgm = LAYOUTS[layout]
    done = report(
        stores["prometheus"],
        *("--since", "2025-11-09T00:00:00Z", "--until", str(LAST), "--prometheus.step", "5m"),
        *("--prometheus.selector", gpulens, "--prometheus.dcgm-selector", dcgm, "--format", "html"),
    )
    assert done.returncode == 0, done.stderr
    verdicts = analyze(trace)
    from_file = _timelines(html_report.render(verdicts, html_report.trace_timelines(trace, verdicts)))
    assert len(from_file) == 5
    for drawn in from_file:  # the idle GPU's and notebooks' lines are flat; the others move
        assert drawn.count("<polyline class=activity") == drawn.count("<polyline class=memory") == 1
        assert len(re.search(r"class=activity [^>]*points='([^']*)'", drawn)[1].split()) >= 150
    assert _timelines(done.stdout) == from_file


def test_the_stored_week_uses_the_names_the_exporter_exposes():
    """A signal stored under a name the exporter does not expose would be read as absent (power was)."""
    from gpulens.core import metrics

    assert {s.gpulens for s in week.SIGNALS} <= {spec.name for spec in metrics.ALL}


def test_the_plan_from_a_store_is_the_plan_from_a_file_of_the_same_samples(stores, trace, tmp_path):
    """Read from Prometheus in pieces, the week's plan proposes what a file of the same samples does: the
    same actions on the same units, with the same GPUs and savings."""
    gpulens, dcgm = LAYOUTS["gpulens"]
    done = report(
        stores["prometheus"],
        *("--since", "2025-11-09T00:00:00Z", "--until", str(LAST), "--prometheus.step", "5m"),
        *("--prometheus.selector", gpulens, "--prometheus.dcgm-selector", dcgm, "--format", "json"),
    )
    assert done.returncode == 0, done.stderr
    fr.write_trace(trace, tmp_path / "week.csv")
    from_file = subprocess.run(
        [sys.executable, "-m", "gpulens", "report", str(tmp_path / "week.csv"), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert from_file.returncode == 0, from_file.stderr

    def changes(document: dict) -> list[tuple]:
        return sorted(
            (a["units"], a["action"], a["what"], a["gpus_now"], a["gpus_after"], a["saving_usd_per_30d"])
            for a in document["plan"]
        )

    planned = changes(json.loads(done.stdout))
    assert planned == changes(json.loads(from_file.stdout))
    # Judged in two processes (the node is one's share, the other finds none), what each unit used comes back
    # with its verdicts: the same plan, evidence and all.
    in_two = report(stores["prometheus"], *done.args[done.args.index("--since") :], "--processes", "2")
    assert in_two.returncode == 0, in_two.stderr
    assert json.loads(in_two.stdout)["plan"] == json.loads(done.stdout)["plan"]
    # So does a report sharded between two runs and merged (shards.py), the one with no node of its own too.
    shards = [str(tmp_path / f"shard-{index}.zip") for index in range(2)]
    for index, shard in enumerate(shards):
        wrote = report(
            stores["prometheus"],
            *done.args[done.args.index("--since") : done.args.index("--format")],
            *("--shard.count", "2", "--shard.index", str(index), "--out", shard),
        )
        assert wrote.returncode == 0, wrote.stderr
    merged = report(stores["prometheus"], *done.args[done.args.index("--since") :], "--merge", *shards)
    assert merged.returncode == 0, merged.stderr
    assert json.loads(merged.stdout)["plan"] == json.loads(done.stdout)["plan"]
    assert sorted(len(json.loads(zipfile.ZipFile(s).read("shard.json"))["verdicts"]) for s in shards) == [0, 5]
    # The CSV of the plan: the JSON's actions, a row each.
    as_csv = subprocess.run(
        [sys.executable, "-m", "gpulens", "report", str(tmp_path / "week.csv"), "--format", "csv", "--by", "plan"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert [(r["owner"], r["action"], float(r["saving_usd_per_30d"])) for r in rows] == [
        (a["owner"], a["action"], a["saving_usd_per_30d"]) for a in json.loads(from_file.stdout)["plan"]
    ]
    fleet = json.loads(done.stdout)["plan_summary"]["fleet"]
    assert fleet == json.loads(from_file.stdout)["plan_summary"]["fleet"]
    # Packed: the trainer keeps its H100, and so do the notebooks, which held one GPU in turn; the GPU no
    # pod holds and the replica's (moving to an L40S, which the fleet does not have: its busiest bins need
    # more memory bandwidth than an L4's 300 GB/s) are freed.
    assert [(p["gpu_model"], p["gpus_present"], p["gpus_needed"], p["gpus_freed"]) for p in fleet] == [
        ("NVIDIA H100 80GB HBM3", 4, 2, 2),
        ("NVIDIA L40S", 0, 1, -1),
    ]
    # The week: the GPU no pod holds, the notebooks culled after an hour idle, and the serving replica.
    assert {(units[0].split("/")[0], action) for units, action, *_ in planned} == {
        ("gpu:gpu-node-a", "release_capacity"),
        ("research", "release"),
        ("serve", "cheaper_gpu"),
    }


def test_a_span_naming_more_pods_than_a_report_judges_is_refused_before_a_sample_is_read(stores, monkeypatch):
    """Heavy churn (a pod a job) was refused only once the pieces read had judged that many: the store's
    index names the span's pods at once. The week names four pods (a notebook is replaced halfway)."""
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.store import Store
    from gpulens.analyzer.runs import span
    from gpulens.core.thresholds import Thresholds

    for url, layout in itertools.product(stores.values(), ("gpulens", "dcgm-exported", "dcgm-plain")):
        gpulens, dcgm = LAYOUTS[layout]
        store = Store(url)
        reader = SeriesReader(store, week.STEP, gpulens_selector=gpulens, dcgm_selector=dcgm)
        assert reader.pods_named(week.START, LAST) == 4, layout
        monkeypatch.setattr(fr, "MAX_UNITS", 3)
        with pytest.raises(ValueError) as refused:
            span.report(reader, span.Span.aligned(week.START, LAST, week.STEP), Thresholds())
        monkeypatch.undo()
        assert str(refused.value) == (
            f"4 pods named in the span by Prometheus at {url}: one report judges at most 3 (about "
            "20 KB each); report a shorter span (files: fewer at a time, or split by time; a store: --since, --until)"
        )
        assert store.read_bytes < 1000  # three lists of names


def test_memory_capacity_comes_from_the_catalogue_where_dcgm_exporter_leaves_out_fb_free(tmp_path):
    """A counters file without DCGM_FI_DEV_FB_FREE leaves the store no capacity. The catalogue gives the
    H100's (81559 MiB, as NVML reports it), so a trainer whose memory climbs to 97% and drops at each OOM
    restart is memory_fragmentation read from a real Prometheus, with the evidence of the same samples read
    from a file that has their totals, and says where its capacity came from."""
    model = model_info("H100")
    minutes = np.arange(240)
    used_share = 0.5 + 0.47 * (minutes % 80) / 79  # climbs to 0.97 over 80 minutes, then the OOM
    trace = fr.normalize(
        pd.DataFrame(
            {
                "timestamp": week.START + 60.0 * minutes,
                "gpu": "GPU-6b0c2a1e-frag",
                "node": week.NODE,
                "gpu_model": model.name,
                "namespace": "ml",
                "pod": "trainer-0",
                "container": "train",
                "gpu_util": 0.9,
                "sm_active": 0.85,
                "memory_used_bytes": np.round(used_share * model.memory_total_bytes / MIB) * MIB,
                "memory_total_bytes": float(model.memory_total_bytes),
                "power_watts": 560.0,
            }
        )
    )
    prometheus = BackfilledPrometheus(tmp_path, week.openmetrics(trace, ("dcgm-no-free",)))
    try:
        done = report(
            prometheus.url,
            *("--since", rfc3339(week.START), "--until", str(week.START + 60 * 239)),
            *("--prometheus.step", "1m"),
            *("--prometheus.selector", 'job="none"', "--prometheus.dcgm-selector", 'job="dcgm-no-free"'),
            *("--format", "json"),
        )
    finally:
        prometheus.stop()
    assert done.returncode == 0, done.stderr
    [from_store] = [v for v in json.loads(done.stdout)["verdicts"] if v["pod"]]
    [from_file] = [v.to_dict() for v in analyze(trace)]
    assert from_store["bottleneck"] == from_file["bottleneck"] == "memory_fragmentation"
    assert from_store["evidence"].pop("memory_capacity") == (
        "the catalogue's for the NVIDIA H100 80GB HBM3 (or the most used, where more): the input has no memory "
        "total (dcgm-exporter without DCGM_FI_DEV_FB_FREE)"
    )
    assert "memory_capacity" not in from_file["evidence"]
    # The store's kube-state-metrics says what the pod is; the file does not.
    assert from_store["evidence"].pop("workload") == "job (owner CronJob)"
    assert from_store["evidence"] == from_file["evidence"]
    # The evidence of the latest window, the last hour (minutes 180-239): from 20 minutes into a climb.
    assert from_file["evidence"]["memory_range"] == f"{percent(0.5 + 0.47 * 20 / 79)}..97% (grew >= 5%)"


@pytest.mark.parametrize("store", ["prometheus", "victoria-metrics"])
def test_a_store_that_answers_without_a_gpu_series_is_an_error_that_says_what_to_check(stores, store):
    """Selectors that match none of the week's series (a wrong job name): the store answers every query, and
    an empty report would read as a fleet without GPUs. It is an error (exit 2) naming the store, the span, the
    series looked for and what to check, and nothing on stdout."""
    url = stores[store]
    done = report(
        url,
        *("--since", "2025-11-09T00:00:00Z", "--until", "2025-11-10T00:00:00Z", "--prometheus.step", "5m"),
        *("--exporter.job", "gpu-exporter", "--dcgm.job", "dcgm"),
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"gpulens report: Prometheus at {url} answered, but holds no GPU's series from 2025-11-09T00:00:00Z to "
        "2025-11-10T00:00:00Z: neither gpulens' gpulens_gpu_info{job=\"gpu-exporter\"} nor dcgm-exporter's "
        'DCGM_FI_DEV_GPU_UTIL{job="dcgm"}. Check the URL\'s path (Mimir and Cortex serve the API under /prometheus), '
        "the tenant (--prometheus.header 'X-Scope-OrgID: ...'), that the jobs (--exporter.job, --dcgm.job) and "
        "--prometheus.selector and --prometheus.dcgm-selector match the series' labels, and that the exporters "
        "ran in the span (--since, --until)\n"
    )


def test_the_step_is_the_stores_scrape_interval_unless_given_and_a_coarser_one_is_said(stores):
    """The week is stored every 5 minutes: without --prometheus.step the report reads every sample (the same
    verdicts as at 5m, where a default of 30 s read the demo's 2 s scrapes as too few samples); a step of 15
    minutes reads a third of them, and says so."""
    span = ("--since", "2025-11-09T00:00:00Z", "--until", str(LAST), "--format", "json")
    url = stores["prometheus"]
    read = report(url, *span)
    assert (read.returncode, read.stderr) == (0, ""), read.stderr
    assert json.loads(read.stdout) == json.loads(report(url, *span, "--prometheus.step", "5m").stdout)
    assert {v["sample_seconds"] for v in json.loads(read.stdout)["verdicts"]} == {300.0}
    coarse = report(url, *span, "--prometheus.step", "15m")
    assert coarse.returncode == 0
    assert coarse.stderr == (
        "gpulens report: reading a point every 900 s (--prometheus.step), coarser than the 300 s the store holds "
        "the GPUs' samples at: bursts and stalls between points are not seen; drop --prometheus.step to read every "
        "sample\n"
    )
