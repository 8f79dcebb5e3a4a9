"""The analyzer over hours and days, on the data production fleets have: serving replicas sampled every
57 s with duty cycle and memory only, jobs that finish and keep their GPUs, coarse samples that cannot
show a training step; episodes, shares and headline verdicts, in every output format."""

import csv
import io
import json
import os
import re
import subprocess
from dataclasses import asdict, replace

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics_latest

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs.live import ValueChecks
from gpulens.analyzer.judging.evidence import duration, percent
from gpulens.analyzer.judging.history import analyze
from gpulens.core.bottlenecks import RECOMMENDATIONS
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import for_people
from gpulens.simulator.fleet import load_fleet
from gpulens.simulator.workloads import DAY, PROFILES
from tests.helpers import gpulens, require_binary, serve_analyzer

#: A day (UTC midnight) for the simulated recordings.
MIDNIGHT = 20_800 * DAY


def fleet_trace(profiles: list[str], step: float, hours: float, seed: int = 3, **params) -> pd.DataFrame:
    """What nvidia-smi --query-gpu=utilization.gpu,memory.used logs every `step` seconds from midnight
    on one node running `profiles` (one pod each): point samples of the last second, duty and memory only."""
    node = load_fleet(
        {
            "seed": seed,
            "nodes": [
                {
                    "name": "node-a",
                    "model": "H100-SXM5-80GB",
                    "gpus": len(profiles),
                    "workloads": [{"profile": p, "gpus": [i], "pod": f"sd/{p}-{i}"} for i, p in enumerate(profiles)],
                }
            ],
        }
    )[0]
    rows = []
    for g in node.gpus:
        g.params.update(params)
        usable = g.model.memory_total_bytes - g.model.memory_reserved_bytes
        for k in range(int(hours * 3600 / step)):
            t = MIDNIGHT + k * step
            a = PROFILES[g.profile](g, t, min(step, 1.0))
            rows.append((t, g.uuid, "sd", g.pod.pod, round(a.busy, 2), a.memory_fraction * usable, a.cpu_fraction * 4))
    frame = pd.DataFrame(
        rows, columns=["timestamp", "gpu", "namespace", "pod", "gpu_util", "memory_used_bytes", "cpu_usage_cores"]
    )
    frame["node"], frame["gpu_model"], frame["memory_total_bytes"] = "node-a", g.model.name, g.model.memory_total_bytes
    frame["cpu_limit_cores"] = 4.0
    return fr.normalize(frame)


@pytest.fixture(scope="module")
def serving_day():
    """23 hours at 57 s of six serving replicas and two replicas nobody calls, quiet for the last 10 minutes."""
    trace = fleet_trace(["serving"] * 6 + ["idle_replica"] * 2, 57.0, 23)
    trace[["cpu_usage_cores", "cpu_limit_cores"]] = np.nan  # nvidia-smi knows nothing of the pod's CPU
    last = trace["timestamp"] > trace["timestamp"].max() - 600
    trace.loc[last, "gpu_util"] = 0.0
    return trace


def test_a_piece_joined_from_carried_and_new_rows_is_judged_in_its_read_order(serving_day):
    """A report's piece is the rows it carried (the window before its slots) and then those it read, each in
    (GPU, time) order, their categories numbered apart: joined, each GPU's rows are together in time order
    again, so that every window pass reads them as they lie (no sort, no gather of a column), rows past the
    last window included, and the verdicts are the day's read at once."""
    from gpulens.analyzer.judging.features import UnitKeys, _Rows

    split = MIDNIGHT + 12 * 3600
    carried = serving_day[serving_day["timestamp"] < split]
    # The read names its GPUs and pods in another order, as a store's answer may.
    read = serving_day[serving_day["timestamp"] >= split].iloc[::-1]
    read = fr.normalize(read.astype({c: str for c in ("gpu", "node", "namespace", "pod")}))
    read = read.sort_values(["gpu", "timestamp"], kind="stable")
    joined = fr.concat(carried, read)

    assert len(joined) == len(serving_day)
    gpu = joined["gpu"].astype(str).to_numpy()
    runs = gpu[np.r_[True, gpu[1:] != gpu[:-1]]]
    assert len(runs) == len(set(runs)) == 8  # each GPU's rows together
    for _, rows in joined.groupby("gpu", observed=True):
        assert np.all(np.diff(rows["timestamp"].to_numpy()) > 0)
    keys = UnitKeys.of(joined)
    assert keys.order is None
    # The windows of an hour ending every 15 minutes, offset by one slot: the rows after the last window
    # ending within the data are in none (-1), and still no pass sorts.
    ts = joined["timestamp"].to_numpy()
    slot = ((ts - ts.min()) // 900).astype(np.int64)
    end_slot = slot + (1 - slot) % 4
    end_slot[end_slot > slot.max()] = -1
    assert (end_slot == -1).any()
    assert _Rows(joined, end_slot, keys).order is None

    def verdicts(trace: pd.DataFrame) -> list[dict]:
        found = analyze(trace, Thresholds())
        return sorted((v.to_dict() for v in found), key=lambda v: v["pod"])

    assert verdicts(joined) == verdicts(serving_day)


def test_a_day_of_serving_replicas_is_overprovisioned_serving_not_idle(serving_day):
    verdicts = {v.pod: v for v in analyze(serving_day)}
    serving = [v for pod, v in verdicts.items() if pod.startswith("serving")]
    assert [v.bottleneck for v in serving] == ["overprovisioned_serving"] * 6
    for v in serving:
        assert "Run fewer replicas" in v.recommendation and "Release" not in v.recommendation
        assert v.evidence["sample_interval_seconds"] == "57: too coarse to time single bursts"
        assert "data_starvation" not in v.by_class  # 57 s samples cannot show a training step
        assert set(v.by_class) <= {"overprovisioned_serving", "idle"}
        assert sum(part.share for part in v.by_class.values()) == pytest.approx(1.0, abs=1e-3)
        assert v.window_seconds == pytest.approx(23 * 3600, abs=60) and v.coverage == 1.0
        assert v.sample_seconds == 57.0
    idle_replicas = [v for pod, v in verdicts.items() if pod.startswith("idle_replica")]
    assert [(v.bottleneck, list(v.by_class)) for v in idle_replicas] == [("idle", ["idle"])] * 2
    # 17-20 GiB held all day, and the whole day wasted.
    assert all(17 * 2**30 <= int(v.evidence["memory_held_bytes"]) <= 20.5 * 2**30 for v in idle_replicas)
    assert [round(v.wasted_gpu_seconds / 3600, 1) for v in idle_replicas] == [23.0, 23.0]


def test_episodes_tile_the_span_and_add_up_to_the_waste(serving_day):
    for v in analyze(serving_day):
        first, last = v.episodes[0], v.episodes[-1]
        assert first.start == serving_day["timestamp"].min() and last.end == serving_day["timestamp"].max() + 57
        assert all(a.end == b.start for a, b in zip(v.episodes, v.episodes[1:], strict=False))
        assert all(a.bottleneck != b.bottleneck for a, b in zip(v.episodes, v.episodes[1:], strict=False))
        assert sum(e.wasted_gpu_seconds for e in v.episodes) == pytest.approx(v.wasted_gpu_seconds, abs=1)
        by_episode: dict[str, float] = {}
        for e in v.episodes:
            by_episode[e.bottleneck] = by_episode.get(e.bottleneck, 0.0) + e.wasted_gpu_seconds
        assert by_episode == pytest.approx({k: c.wasted_gpu_seconds for k, c in v.by_class.items()}, abs=1)


def test_a_span_writes_out_only_the_window_verdicts_its_headlines_read(serving_day, monkeypatch):
    """Every window of the span is judged, and booked by its class; its evidence, fix and waste are written
    out only for the newest window of each class, which a headline reads (and a window with a hardware XID,
    whose evidence the ledger keeps)."""
    from gpulens.analyzer.judging import classify

    judged, written, frames = [], [], {}

    def judging(features, *args):
        judged.extend(found := classify.judgements(features, *args))
        frames.update((id(judgement), features) for judgement in found)
        return found

    def writing_out(judgement, features):
        written.append(judgement)
        return write_out(judgement, features)

    write_out = classify._written_out
    monkeypatch.setattr("gpulens.analyzer.judging.history.judgements", judging)
    monkeypatch.setattr(classify, "_written_out", writing_out)
    verdicts = analyze(serving_day)
    monkeypatch.undo()
    assert len(judged) == 8 * 92  # 8 pods, a window ending at each 15-minute slot of 23 hours
    # Written out: the newest window of each class a pod was judged, once each.
    newest = {(judgement.verdict().pod, judgement.bottleneck): judgement for judgement in written}
    assert len(newest) == len(written) == 14
    for verdict in verdicts:
        # A replica's quiet hours are booked as serving's: its idle windows were written out, and read for nothing.
        assert {name for pod, name in newest if pod == verdict.pod} >= set(verdict.by_class)
        headline = newest[verdict.pod, verdict.bottleneck]
        assert headline.verdict().recommendation == verdict.recommendation
        # Written out from its frame's columns, as judge() writes the row out from the record it judged.
        assert (
            headline.verdict() == classify.judge(frames[id(headline)].iloc[[headline.position]], Thresholds(), None)[0]
        )


def test_a_job_that_finished_keeps_its_gpu_is_idle_from_when_it_stopped():
    # Healthy training until 06:00, then nothing for 18 hours, sampled every 60 s.
    trace = fleet_trace(["training_finished"], 60.0, 24, finish=6 * 3600.0, keeps_memory=1.0)
    [v] = analyze(trace)
    assert v.bottleneck == "idle"
    assert [e.bottleneck for e in v.episodes] == ["healthy", "idle"]
    # The idle episode starts at the first 15-minute step after 06:00, not a window later.
    assert v.episodes[1].start == MIDNIGHT + 6 * 3600
    assert v.by_class["idle"].share == 0.75 and v.by_class["healthy"].share == 0.25
    assert v.by_class["idle"].wasted_gpu_seconds == 18 * 3600
    assert v.evidence["history"] == "75% of 1 d sampled, wasting 18.0 GPU-h; latest: idle since 2026-12-13 06:00:00 UTC"


def test_a_starved_training_job_at_coarse_sampling_needs_the_cpu_to_say_so():
    # Input-bound training (1.1-1.4 s bursts every 5-6.5 s), sampled every 30 s for 2 hours.
    with_cpu = fleet_trace(["data_starvation"], 30.0, 2)
    [v] = analyze(with_cpu)
    assert (v.bottleneck, v.confidence) == ("data_starvation", 0.5)  # 0.6, capped at 0.5 without profiling
    assert v.evidence["sample_interval_seconds"] == (
        "30 > 5: too coarse to see the bursts and gaps of training steps; judged on the CPU alone"
    )
    blind = with_cpu.assign(cpu_usage_cores=np.nan, cpu_limit_cores=np.nan)
    [v] = analyze(blind)
    assert "data_starvation" not in v.by_class
    # The same job sampled every second shows its steps: regular bursts, the classic signature.
    [v] = analyze(fleet_trace(["data_starvation"], 1.0, 0.25).assign(cpu_usage_cores=np.nan))
    assert v.bottleneck == "data_starvation" and "steady, like training steps" in v.evidence["burst_period_seconds"]


def test_window_and_step_set_the_episodes_resolution():
    trace = fleet_trace(["training_finished"], 60.0, 12, finish=5.5 * 3600, keeps_memory=0.0)
    [v] = analyze(trace, window=7200, step=3600)
    assert [(e.bottleneck, (e.start - MIDNIGHT) / 3600) for e in v.episodes] == [("healthy", 0.0), ("idle", 5.0)]
    [v] = analyze(trace, window=3600, step=600)
    assert [(e.bottleneck, (e.start - MIDNIGHT) / 3600) for e in v.episodes] == [("healthy", 0.0), ("idle", 5.5)]
    with pytest.raises(ValueError, match="must be positive and at most --window"):
        analyze(trace, window=600, step=1200)


def test_a_problem_of_a_few_minutes_does_not_name_a_healthy_day():
    trace = fleet_trace(["training_finished"], 60.0, 24, finish=23.75 * 3600, keeps_memory=1.0)
    [v] = analyze(trace, Thresholds())
    assert v.bottleneck == "healthy" and v.episodes[-1].bottleneck == "idle"
    assert v.by_class["idle"].share < Thresholds().headline_min_share


@pytest.mark.slow
def test_report_writes_episodes_to_json_and_csv_and_checks_its_flags(tmp_path, serving_day):
    path = tmp_path / "day.csv"
    fr.write_trace(serving_day, path)
    result = gpulens("report", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    verdicts = json.loads(result.stdout)["verdicts"]
    first = verdicts[0]
    assert set(first["by_class"][first["bottleneck"]]) == {"share", "wasted_gpu_seconds", "wasted_cost"}
    assert set(first["episodes"][0]) == {"bottleneck", "start", "end", "confidence", "wasted_gpu_seconds"}
    rows = list(csv.DictReader(io.StringIO(gpulens("report", str(path), "--format", "csv").stdout)))
    by_pod = {row["pod"]: row for row in rows}
    assert by_pod["idle_replica-6"]["time_share"] == "idle 1.0"
    episodes = by_pod["idle_replica-6"]["episodes"].split(" ")
    assert episodes[0] == "2026-12-13T00:00:00Z/2026-12-13T22:59:24Z" and episodes[1] == "idle"
    table = gpulens("report", str(path), "--window", "2h", "--step", "30m").stdout
    assert re.search(r"sd/idle_replica-6 +idle +0\.\d\d ", table), table  # a table row, or a block (narrow)
    bad = gpulens("report", str(path), "--window", "1h", "--step", "2h")
    assert bad.returncode == 2
    assert bad.stderr == (
        "gpulens report: --step (7200 s) must be positive and at most --window (3600 s): windows would skip data\n"
    )
    bad = gpulens("report", str(path), "--window", "an hour")
    assert (
        bad.stderr
        == "gpulens report: --window 'an hour' is not a duration: give seconds (900) or 30s, 10m, 1h30m, 1d\n"
    )


@pytest.mark.slow
def test_the_html_report_renders_offline_in_chromium(tmp_path, serving_day):
    chromium = require_binary("chromium")
    path, report = tmp_path / "day.csv", tmp_path / "report.html"
    fr.write_trace(serving_day, path)
    result = gpulens("report", str(path), "--format", "html", "--out", str(report))
    assert result.returncode == 0, result.stderr
    text = report.read_text()
    assert "http://" not in text and "https://" not in text and "<script" not in text  # nothing to fetch
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    # No network at all: any request would fail to resolve.
    browser += ["--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*browser, "--dump-dom", report.as_uri()], capture_output=True, text=True, timeout=120, env=os.environ
    ).stdout
    verdicts = analyze(serving_day)
    assert dom.count("<svg") == len(verdicts) == 8
    assert dom.count('class="band"') == sum(len(v.episodes) for v in verdicts)
    assert dom.count('class="activity"') == dom.count('class="memory"') == 8
    assert "<b>8</b>pods</span>" in dom and "sd/serving-0" in dom
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*browser, "--window-size=1100,4000", f"--screenshot={shot}", report.as_uri()],
        capture_output=True,
        timeout=120,
        env=os.environ,
    )
    with Image.open(shot) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.int16)
    # The idle band (#e41a1c at 35% over #fafafa) and the serving band (#ff7f00) are painted.
    for band in ((242, 172, 172), (252, 207, 163)):
        near = np.all(np.abs(pixels - np.array(band)) <= 3, axis=2)
        assert near.sum() > 10_000, band


class Replay:
    """An analyzer input that serves the last `window` seconds of a recorded trace up to the clock's time
    (the real inputs, Prometheus and exporters, are tested in test_analyzer_service.py)."""

    name = "replay"

    def __init__(self, trace: pd.DataFrame, window: float, clock):
        self.trace, self.window, self.clock = trace, window, clock
        self.checks = ValueChecks("the replay")

    def start(self) -> None: ...

    def close(self) -> None: ...

    def window_frame(self) -> pd.DataFrame:
        now, ts = self.clock(), self.trace["timestamp"]
        return self.trace[(ts > now - self.window) & (ts <= now)]

    def target_status(self) -> dict:
        return {}

    def node_prices(self) -> dict[str, float]:
        return {}

    def owners(self, pods: set) -> dict:
        return {}

    def engine_loads(self, pods: set, history: float, percentile: float) -> dict:
        return {}

    def cluster(self) -> None:
        return None  # a trace holds no kube-state-metrics

    def workloads(self, history: float) -> None:
        return None  # nor its workloads' replicas

    def workload_health(self, namespace: str, pods: list, start: float, end: float, percentile: float) -> None:
        return None  # nor any engine's series

    def proposal(self, owner: str, at: float, lookback: float) -> None:
        return None


def run_service(trace: pd.DataFrame, until_hour: float, history: float):
    from gpulens.analyzer.runs.service import AnalyzerService

    now = [MIDNIGHT + 600.0]
    service = AnalyzerService(Replay(trace, 600, lambda: now[0]), Thresholds(), {}, 300, lambda: now[0], history)
    while now[0] <= MIDNIGHT + until_hour * 3600:
        assert service.cycle()
        now[0] += 300
    return service


@pytest.mark.slow
def test_the_live_service_keeps_each_pods_day_with_bounded_memory():
    # A job that finishes at 01:00 and keeps its GPU, sampled every 15 s; a verdict every 5 minutes.
    trace = fleet_trace(["training_finished"], 15.0, 3, finish=3600.0, keeps_memory=1.0)
    service = run_service(trace, 3, history=86400)
    [(unit, past)] = service.history.items()
    assert unit == ("sd", "training_finished-0", "node-a")
    # The first cycle (00:10) counts from 00:05; the window ending at 01:05 is the first with 5 idle minutes.
    assert [(e.bottleneck, (e.start - MIDNIGHT) / 60, (e.end - MIDNIGHT) / 60) for e in past.episodes] == [
        ("healthy", 5.0, 60.0),
        ("idle", 60.0, 180.0),
    ]
    # Shares of the time seen: the job's last sample (at 01:00, as it finishes) is missing, so the cycle at
    # 01:05 saw 285 s, not 300 (11 healthy cycles of 300 s, 23 idle ones and that one).
    assert {name: part.share for name, part in past.by_class().items()} == {
        "idle": round((23 * 300 + 285) / (34 * 300 + 285), 4),
        "healthy": round(11 * 300 / (34 * 300 + 285), 4),
    }
    assert past.headline(Thresholds()) == "idle"
    # Waste is counted for the idle hours only: the hour of healthy training left headroom, not waste.
    assert set(service.state.wasted_seconds) == {("sd", "idle")}
    assert past.by_class()["healthy"].wasted_gpu_seconds == 0.0
    body = json.loads(service.verdicts_json()[2])
    [pod] = body["history"]
    assert (pod["headline"], [e["bottleneck"] for e in pod["episodes"]]) == ("idle", ["healthy", "idle"])
    # Two idle hours, less half of the first five minutes and the 15 s not seen: the cycle that first sees
    # idle wastes at its window's rate, and that window was half busy (the waste counters work the same way).
    assert pod["by_class"]["idle"] == {
        "share": 0.6853,
        "wasted_gpu_seconds": 7200.0 - 142.5 - 15,
        "wasted_cost": 7.8254,
    }
    assert service.state.wasted_seconds == {("sd", "idle"): 7200.0 - 142.5 - 15}
    assert (
        'gpulens_pod_bottleneck_time_ratio{bottleneck="idle",namespace="sd",node="node-a",pod="training_finished-0"} '
        "0.6853" in service.render_text().decode().splitlines()
    )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(service)  # the fast renderers write what prometheus_client's encoders would
    assert (service.render_text(), service.render_text(openmetrics=True)) == (
        generate_latest(registry),
        openmetrics_latest(registry),
    )
    # With an hour of history, the healthy episode (ended at 01:00) is forgotten by 03:00.
    [past] = run_service(trace, 3, history=3600).history.values()
    assert [e.bottleneck for e in past.episodes] == ["idle"]


def _series(exposition: bytes, openmetrics: bool) -> list[tuple[str, tuple]]:
    """Every sample of an exposition as (name, sorted labels), by prometheus_client's own parsers."""
    if openmetrics:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse
    else:
        from prometheus_client.parser import text_string_to_metric_families as parse
    return [(s.name, tuple(sorted(s.labels.items()))) for f in parse(exposition.decode()) for s in f.samples]


def test_the_analyzers_metrics_are_rendered_once_a_cycle_however_often_scraped():
    """At 10,000 pods the analyzer's /metrics holds hundreds of thousands of series: rendered at every scrape
    (once a second, for the age of its verdicts), it took the cycles' CPU (benchmarks/live_prometheus.py).
    Through the real server: scrapes of one cycle share one rendering of the verdicts, and the age still moves."""
    import gzip

    import requests

    service = run_service(fleet_trace(["idle", "healthy_training"], 15.0, 1), 1, history=86400)
    rendered = []
    cycle_families = service._cycle_families

    def counted(*args):
        rendered.append(service.cycles)
        return cycle_families(*args)

    service.exposition.gather = counted
    now = [service.clock()]
    service.clock = service.exposition.clock = lambda: now[0]
    server = serve_analyzer(exposition=service.exposition)
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    openmetrics = {"Accept": "application/openmetrics-text; version=1.0.0"}
    try:

        def scrape(headers: dict[str, str]) -> tuple[str, dict[str, float]]:
            answer = requests.get(url, headers=headers, timeout=10)
            assert answer.status_code == 200
            return answer.text, {
                name: float(value)
                for name, value in re.findall(r"^(gpulens_analyzer_verdict_age_seconds) (\S+)$", answer.text, re.M)
            }

        cycle = service.cycles
        text, first = scrape({"Accept-Encoding": "identity"})
        now[0] += 42.0  # no cycle since
        om_gzipped = requests.get(url, headers={**openmetrics, "Accept-Encoding": "gzip"}, timeout=10, stream=True)
        raw = om_gzipped.raw.read(decode_content=False)
        _, later = scrape({"Accept-Encoding": "gzip"})
    finally:
        server.shutdown()
    assert rendered == [cycle, cycle]  # the text and OpenMetrics bodies, each once for the cycle
    assert later["gpulens_analyzer_verdict_age_seconds"] == first["gpulens_analyzer_verdict_age_seconds"] + 42.0
    # The shared body and the live families are two gzip members: read whole, by prometheus_client's parser.
    assert raw[:2] == b"\x1f\x8b" and raw.count(b"\x1f\x8b\x08") >= 2
    body = gzip.decompress(raw)
    assert body.endswith(b"# EOF\n") and body.count(b"# EOF") == 1
    # Every series the service renders, and the server's own counter.
    server_own = {"gpulens_http_connections_shed_total"}
    for openmetrics_body, served in ((True, body), (False, text.encode())):
        series = _series(served, openmetrics_body)
        assert {name for name, _ in series} & server_own == server_own
        assert sorted(s for s in series if s[0] not in server_own) == sorted(
            _series(service.render_text(openmetrics_body), openmetrics_body)
        )


@pytest.mark.parametrize("openmetrics", [False, True])
def test_the_analyzers_metrics_never_carry_a_series_twice(openmetrics):
    """Two GPUs no pod holds on one node, beside a pod: each was exposed as the pod series of namespace ""
    and pod "" with its own values, which Prometheus drops as duplicates. A GPU no pod holds is not a pod:
    no pod series names it; its own series are keyed by node and GPU."""
    trace = fleet_trace(["idle", "idle", "healthy_training"], 15.0, 1).astype({"namespace": str, "pod": str})
    unheld = trace["pod"] != "healthy_training-2"
    trace.loc[unheld, ["namespace", "pod"]] = ""
    service = run_service(fr.normalize(trace), 1, history=86400)
    series = _series(service.render_text(openmetrics=openmetrics), openmetrics)
    assert sorted({s for s in series if series.count(s) > 1}) == []
    pods = {dict(labels).get("pod") for _, labels in series if "pod" in dict(labels)}
    assert pods == {"healthy_training-2"}
    body = json.loads(service.verdicts_json()[2])
    assert sorted(len(v["gpus"]) for v in body["verdicts"] if not v["pod"]) == [1, 1]
    unheld_gpus = {v["gpus"][0] for v in body["verdicts"] if not v["pod"]}
    states = [dict(labels) for name, labels in series if name == "gpulens_gpu_without_pod"]
    # Each GPU no pod holds: one series per state of its StateSet, on its own node and GPU.
    assert sorted((s["gpu"], s["bottleneck"]) for s in states) == sorted(
        (gpu, state) for gpu in unheld_gpus for state in ("unallocated", "held_without_pod")
    )


def test_a_ledger_keeps_at_most_its_newest_episodes_and_its_totals_follow():
    """The live service's ledger: episodes dropped by age or count leave its totals by class."""
    from gpulens.analyzer.judging.classify import Verdict
    from gpulens.analyzer.judging.history import Ledger

    def judged(name: str, confidence: float) -> Verdict:
        return Verdict("ns", "p", "n1", ["GPU-0"], "H100", name, confidence, {}, "", 0.0, 0.0)

    ledger = Ledger()
    for i in range(10):  # healthy at 0.9 and idle at 0.7, one second each, alternating
        idle = i % 2 == 1
        ledger.record(judged("idle" if idle else "healthy", 0.7 if idle else 0.9), i, i + 1, 1.0, 1.0 * idle, 0.5, True)
    ledger.prune(oldest=2.5, keep=5)
    assert [e.start for e in ledger.episodes] == [5, 6, 7, 8, 9]
    seconds, wasted, cost, confidence = ledger.totals()
    assert (seconds, wasted, cost) == (
        {"idle": 3.0, "healthy": 2.0},
        {"idle": 3.0, "healthy": 0.0},
        {"idle": 1.5, "healthy": 1.0},
    )
    assert confidence == {"idle": pytest.approx(0.7), "healthy": pytest.approx(0.9)}
    assert {name: share.share for name, share in ledger.by_class().items()} == {"idle": 0.6, "healthy": 0.4}
    ledger.prune(oldest=8.5, keep=5)
    assert [e.start for e in ledger.episodes] == [8, 9]
    assert len(ledger.episode_seconds) == len(ledger.episode_cost) == len(ledger.episode_weight) == 2


@pytest.mark.parametrize(("blips", "idle"), [(5, True), (12, False)])
def test_sparse_use_over_a_span_is_idle_even_where_no_window_saw_an_hour_of_it(blips, idle):
    """Ninety minutes of a held GPU with a few busy samples, read from 30 minutes into a slot: no window
    of the sliding hour holds the whole span, so each alone cannot tell sparse use from serving; the
    span can. 5 busy samples of 540 are 0.9%: idle; 12 are 2.2%: a replica with some requests."""
    from tests.test_analyzer import _held_with_blips

    frame = _held_with_blips(5400.0, blips)
    frame["timestamp"] += 1800.0  # slots counted from the hour: the data starts mid-window
    origin = pd.DataFrame(frame.iloc[:1]).assign(timestamp=1_800_000_000.0, pod="other", gpu="GPU-9")
    [v] = [v for v in analyze(fr.normalize(pd.concat([origin, frame], ignore_index=True))) if v.pod == "p"]
    assert (v.bottleneck == "idle") is idle, v
    if idle:
        worked = f"{percent(blips / 540)} of 1 h 30 min worked ({duration(blips * 10)}) < 1%"
        assert v.evidence["busy_fraction"].startswith(worked)
        assert v.recommendation.startswith("Release the GPU")
        # The span's evidence, not the serving windows' it overrules ("work comes in bursts").
        assert v.evidence["history"].startswith("windows of the span, each too short to tell, were judged ")
        assert "quiet_fraction" not in v.evidence and "mean_activity" not in v.evidence


class Outage(Replay):
    """The replay, with the store down (an input error) from `down` to `up` (unix seconds of the clock), and
    no samples taken meanwhile: what an hour's outage of Prometheus leaves."""

    def __init__(self, trace: pd.DataFrame, window: float, clock, down: float, up: float):
        ts = trace["timestamp"]
        super().__init__(trace[(ts < down) | (ts >= up)], window, clock)
        self.down, self.up = down, up

    def window_frame(self) -> pd.DataFrame:
        from gpulens.analyzer.inputs.live import InputError

        if self.down <= self.clock() < self.up:
            raise InputError("Prometheus at http://prom:9090 is down")
        return super().window_frame()


@pytest.mark.slow
def test_waste_and_history_count_only_the_time_the_samples_cover_across_an_outage():
    from gpulens.analyzer.runs.service import AnalyzerService

    trace = fleet_trace(["idle"], 15.0, 3)
    now = [MIDNIGHT + 600.0]
    down, up = MIDNIGHT + 3600.0, MIDNIGHT + 7200.0
    service = AnalyzerService(Outage(trace, 600, lambda: now[0], down, up), Thresholds(), {}, 60, lambda: now[0])
    wasted = []
    while now[0] <= MIDNIGHT + 9000:
        assert service.cycle() == (not down <= now[0] < up)
        wasted.append(service.state.wasted_seconds.get(("sd", "idle"), 0.0))
        now[0] += 60
    per_cycle = np.diff(wasted)
    # An idle GPU wastes each second seen, 60 s a cycle. The store went down at 01:00 (the last cycle that
    # read it ran at 00:59); back at 02:00 with no samples of the hour, the cycles count nothing until the
    # window holds enough samples to judge (02:07), then 60 s a cycle again: never the hour not seen.
    assert set(per_cycle[:49]) == {60.0} and per_cycle.max() == 60.0
    assert wasted[-1] == 60 + 49 * 60 + 23 * 60  # the first cycle counts its own interval
    [(_, past)] = service.history.items()
    assert [(e.bottleneck, e.start - MIDNIGHT, e.end - MIDNIGHT) for e in past.episodes] == [
        ("idle", 540.0, 3540.0),
        # A gap for the hour not seen; one sample (a second's worth: its interval is not known yet) is too
        # little to judge, and the window is judged again from 02:07.
        ("insufficient_data", 7199.0, 7620.0),
        ("idle", 7620.0, 9000.0),
    ]


class Advancing(Replay):
    """The replay of the newest window of data as of its own time, which moves on by one interval a call
    whatever the service's clock says: a host whose clock jumps while Prometheus scrapes on."""

    def __init__(self, trace: pd.DataFrame, window: float, start: float, interval: float):
        super().__init__(trace, window, lambda: self.at)
        self.at, self.interval = start, interval

    def window_frame(self) -> pd.DataFrame:
        frame = super().window_frame()
        self.at += self.interval
        return frame


def test_a_clock_that_jumps_a_day_counts_no_day_of_waste():
    from gpulens.analyzer.runs.service import AnalyzerService

    trace = fleet_trace(["idle"], 15.0, 2)
    now = [MIDNIGHT + 600.0]
    service = AnalyzerService(Advancing(trace, 600, now[0], 60), Thresholds(), {}, 60, lambda: now[0])
    wasted = []
    for cycle in range(10):
        now[0] += 86400 if cycle == 5 else 60  # NTP steps the host's clock a day ahead
        assert service.cycle()
        wasted.append(service.state.wasted_seconds[("sd", "idle")])
    assert set(np.diff(wasted).round(6)) == {60.0}  # each cycle the minute it saw, the jump's too


def _replica_day(night_util: float, hours: tuple[int, int] = (8, 18)) -> pd.DataFrame:
    """A replica's day at 60 s (nvidia-smi: utilization, and 40 GB of 80 held): in its working `hours` (08:00
    to 18:00) three rows an hour catch a request at 100% (5% of the hour's work); through the rest one row an
    hour catches one at `night_util` (0.83% at 0.5: under the 1% bar, sparse use, each hour idle)."""
    minutes = np.arange(24 * 60)
    hour, minute = minutes // 60, minutes % 60
    day = (hour >= hours[0]) & (hour < hours[1])
    util = np.where(day, np.where(minute % 20 == 7, 1.0, 0.0), np.where(minute == 31, night_util, 0.0))
    return fr.normalize(
        pd.DataFrame(
            {
                "timestamp": MIDNIGHT + 60.0 * minutes,
                "gpu": "GPU-r",
                "node": "node-a",
                "gpu_model": "NVIDIA H100 80GB HBM3",
                "namespace": "sd",
                "pod": "replica",
                "gpu_util": util,
                "memory_used_bytes": 40e9,
                "memory_total_bytes": 80e9,
            }
        )
    )


@pytest.mark.parametrize("night_util", [0.5, 0.0])
def test_a_replica_resting_at_night_is_serving_over_its_day(night_util):
    """Its nights (14 of 24 hours) are idle hour by hour, with a request every hour (0.5) or none (0.0): a rest
    before the work the span saw (the night before 08:00), and one no longer after it (after 18:00). Whatever its
    nights outweigh, the span's verdict is the serving fix, not "release the GPU": the evening booked as its quiet
    hours, the night before its work as idle where no request came (nothing in the span says what it rested
    from)."""
    [v] = analyze(_replica_day(night_util))
    assert v.bottleneck == "overprovisioned_serving", v
    # A night with a request every hour still served (Verdict.served): its quiet hours, all of it.
    booked = [("overprovisioned_serving", 24.0)] if night_util else [("idle", 8.0), ("overprovisioned_serving", 16.0)]
    assert [(e.bottleneck, (e.end - e.start) / 3600) for e in v.episodes] == booked
    assert {name: part.share for name, part in v.by_class.items()} == {name: round(h / 24, 4) for name, h in booked}
    # The windows that see the first and last requests of the day are serving's: the rests are 00:00-08:00 and
    # 18:45-24:00, every minute of them wasted but the one a night request used.
    wasted = 13.25 * (1 - night_util / 60)
    assert v.evidence["pauses"] == (
        f"2 rests of 5 h 15 min to 8 h, each followed by work or no longer than one that was: a workload in use, "
        f"not work that stopped ({wasted:.2f} GPU-h wasted, its pauses booked as its quiet hours)"
    )


def test_a_replica_whose_work_stopped_is_idle():
    """Requests from 00:00 to 10:00, then none for 14 hours, with no rest before to say it is a night: the work
    stopped, and idle (the rest's waste, the larger) is the span's verdict."""
    [v] = analyze(_replica_day(0.0, hours=(0, 10)))
    assert v.bottleneck == "idle", v
    # The windows that see the last request (09:47) are serving's: idle from 10:45.
    assert v.evidence["stopped"] == (
        f"no work since {for_people(MIDNIGHT + 10.75 * 3600)}: the work stopped and did not come back"
    )
    assert "pauses" not in v.evidence


def test_the_span_judgement_is_one_for_the_api_the_page_and_the_plan():
    """Two hours of windows each judged overprovisioned_serving, at 0.4% of the time worked over the span:
    sparse use, idle. The live service's history[].headline is that verdict, not the windows' class."""
    from gpulens.analyzer.judging.classify import Verdict
    from gpulens.analyzer.judging.history import Ledger

    ledger = Ledger()
    window = Verdict("ns", "p", "n1", ["GPU-0"], "H100", "overprovisioned_serving", 0.6, {}, "", 0.0, 0.0)
    for k in range(24):  # 24 cycles of 300 s
        ledger.record(window, 300.0 * k, 300.0 * (k + 1), 300.0, 0.0, 0.0, True)
        ledger.account(300.0, 0.004, 0.99, 0.004)
    t = Thresholds()
    assert ledger.verdict(t).bottleneck == ledger.headline(t) == "idle"
    assert ledger.verdict(t).evidence["busy_fraction"].startswith("0.4% of 2 h worked (29 s) < 1%")
    # The live service with that history: its API's shares and episodes, and its metric of time by class, are
    # the span verdict's (all of it idle), not the windows' (all of it serving).
    from gpulens.analyzer.runs.service import AnalyzerService

    service = AnalyzerService(Replay(fleet_trace(["idle"], 60.0, 1), 600, lambda: 7200.0), t, {}, 300, lambda: 7200.0)
    service.history[("ns", "p", "n1")] = ledger
    [history] = json.loads(service.verdicts_json()[2])["history"]
    assert (history["headline"], list(history["by_class"])) == ("idle", ["idle"])
    assert history["by_class"]["idle"]["share"] == 1
    assert [e["bottleneck"] for e in history["episodes"]] == ["idle"]
    assert [line for line in service.render_text().decode().splitlines() if "bottleneck_time_ratio{" in line] == [
        'gpulens_pod_bottleneck_time_ratio{bottleneck="idle",namespace="ns",node="n1",pod="p"} 1.0'
    ]


def test_a_jobs_start_up_does_not_give_it_its_verdict():
    """A data-parallel job whose data begins with its process, sampled every 10 s for an hour in windows of 10
    minutes: a CUDA context, then its model (30% of memory) warming up at SM 0.2 for 400 s (NCCL set-up,
    compilation, the first steps), then its working set (60%) at SM 0.9. Its start-up is left out of what it is
    judged on, which leaves its first window 20 samples: insufficient_data, not the unexplained low activity of
    its warm-up, which at a sixth of the span would name the healthy job."""
    k = np.arange(360)
    warming = k < 40
    frame = pd.DataFrame(
        {
            "timestamp": MIDNIGHT + 10.0 * k,
            "gpu": "GPU-0",
            "node": "node-a",
            "gpu_model": "NVIDIA L40S",
            "namespace": "ml",
            "pod": "ddp-0",
            "gpu_util": np.where(warming, 0.4, 0.95),
            "sm_active": np.where(warming, 0.2, 0.9),
            "memory_used_bytes": np.where(k == 0, 0.01, np.where(warming, 0.3, 0.6)) * 48e9,
            "memory_total_bytes": 48e9,
        }
    )
    [v] = analyze(fr.normalize(frame), window=600, step=600)
    assert v.bottleneck == "healthy", v
    assert [(e.bottleneck, e.start - MIDNIGHT, e.end - MIDNIGHT) for e in v.episodes] == [
        ("insufficient_data", 0.0, 600.0),
        ("healthy", 600.0, 3600.0),
    ]
    assert v.wasted_gpu_seconds == 0.0


def test_a_serving_replica_quiet_all_night_is_serving_where_kubernetes_says_it_serves():
    """The replica's day with no request after 10:00: from its GPU alone the work stopped (idle, the test
    above); a vLLM Deployment's replica quiet for the rest of the day is still a replica: serving, its evidence
    naming what said so."""
    from gpulens.analyzer.inputs.kinds import WorkloadKind

    [alone] = analyze(_replica_day(0.0, hours=(0, 10)))
    assert alone.bottleneck == "idle"
    assert alone.evidence["workload"].startswith("unknown: what the pod is (kube-state-metrics'")
    said = {"sd/replica": WorkloadKind("serving", "vllm", "image *vllm*")}
    [served] = analyze(_replica_day(0.0, hours=(0, 10)), workloads=said)
    assert served.bottleneck == "overprovisioned_serving"
    assert served.evidence["workload"] == "serving, its engine vllm (image *vllm*)"
    assert served.wasted_gpu_seconds == alone.wasted_gpu_seconds


@pytest.mark.parametrize(("mean", "idle", "headline"), [(0.05, 0.93, "healthy"), (0.02, 0.9, "unexplained")])
def test_a_notebooks_cells_are_never_serving(mean, idle, headline):
    """Two hours of windows each judged overprovisioned_serving, at 5% or 2% mean activity (not sparse): from the
    GPU alone a replica with few requests. A JupyterHub user's server is a notebook, its bursts cells and the
    pauses between them: in use, never "release". Active 71% of the time its cells ran (5% over 7% not idle),
    its work is healthy; at 20% (2% over 10%) the light cells' cause is left open. Its waste is the same
    GPU-seconds either way, booked under the class it now has."""
    from gpulens.analyzer.inputs.kinds import WorkloadKind
    from gpulens.analyzer.judging.classify import ClassShare, Episode, Verdict
    from gpulens.analyzer.judging.history import Ledger

    ledger = Ledger()
    window = Verdict("ns", "p", "n1", ["GPU-0"], "H100", "overprovisioned_serving", 0.6, {}, "", 0.0, 0.0)
    for k in range(24):  # 24 cycles of 300 s, each wasting 285 GPU-s
        ledger.record(window, 300.0 * k, 300.0 * (k + 1), 300.0, 285.0, 0.5, True)
        ledger.account(300.0, mean, idle, mean)
    t = Thresholds()
    assert ledger.verdict(t).bottleneck == "overprovisioned_serving"
    notebook = ledger.verdict(t, WorkloadKind("notebook", "", "label component=singleuser-server"))
    assert notebook.bottleneck == headline
    assert notebook.evidence["workload"] == "notebook (label component=singleuser-server)"
    assert notebook.wasted_gpu_seconds == 24 * 285.0
    assert notebook.episodes == [Episode(headline, 0.0, 7200.0, 0.6, 6840.0)]
    assert notebook.by_class == {headline: ClassShare(1.0, 6840.0, 12.0)}
    assert notebook.recommendation == RECOMMENDATIONS[headline]


def test_the_live_service_says_what_each_pod_is_and_judges_a_notebooks_windows_by_it():
    """Two pods serving a few requests at noon, judged every 5 minutes over 10-minute windows: from their GPUs
    alone replicas with few requests (4-16% active). Kubernetes says the first is a JupyterHub user's server:
    its windows are notebook cells at full activity with pauses between, so /metrics, the alerts on it and the
    API call it healthy (in use) with what said so, and its gpulens_pod_workload_info says notebook; the second,
    which nothing names, stays serving."""
    from gpulens.analyzer.inputs.kinds import WorkloadKind
    from gpulens.analyzer.inputs.owners import Owner
    from gpulens.analyzer.runs.service import AnalyzerService

    notebook = WorkloadKind("notebook", "", "label component=singleuser-server")

    class Kubernetes(Replay):
        def owners(self, pods: set) -> dict:
            return {("sd", "serving-0"): Owner("Pod", "serving-0", workload=notebook)}

    now = [MIDNIGHT + 12 * 3600.0]
    trace = fleet_trace(["serving", "serving"], 15.0, 13)
    service = AnalyzerService(Kubernetes(trace, 600, lambda: now[0]), Thresholds(), {}, 300, lambda: now[0])
    for _ in range(3):
        assert service.cycle()
        now[0] += 300
    by_pod = {v.pod: v for v in service.state.verdicts}
    assert {pod: (v.bottleneck, v.workload_kind) for pod, v in by_pod.items()} == {
        "serving-0": ("healthy", "notebook"),
        "serving-1": ("overprovisioned_serving", "unknown"),
    }
    assert by_pod["serving-0"].evidence["workload"] == "notebook (label component=singleuser-server)"
    assert by_pod["serving-0"].recommendation == RECOMMENDATIONS["healthy"]
    assert by_pod["serving-1"].evidence["workload"].startswith("unknown: what the pod is (kube-state-metrics'")
    lines = service.render_text().decode().splitlines()
    assert [line.removeprefix("gpulens_pod_workload_info") for line in lines if "_workload_info{" in line] == [
        '{engine="",namespace="sd",node="node-a",pod="serving-0",workload_kind="notebook"} 1.0',
        '{engine="",namespace="sd",node="node-a",pod="serving-1",workload_kind="unknown"} 1.0',
    ]
    assert 'gpulens_pod_bottleneck{bottleneck="healthy",namespace="sd",node="node-a",pod="serving-0"} 1.0' in lines
    headlines = {p["pod"]: p["headline"] for p in json.loads(service.verdicts_json()[2])["history"]}
    assert headlines == {"serving-0": "healthy", "serving-1": "overprovisioned_serving"}
    # Every output tells the span verdict's story of the notebook: the API's shares and episodes, the metric of
    # its time by class, the page's and the plan's verdict; none the windows' raw class (serving).
    [over] = [v for v in service.over_history().verdicts.values() if v.pod == "serving-0"]
    [history] = [p for p in json.loads(service.verdicts_json()[2])["history"] if p["pod"] == "serving-0"]
    assert history["by_class"] == {"healthy": asdict(over.by_class["healthy"])} and len(over.by_class) == 1
    assert [e["bottleneck"] for e in history["episodes"]] == [e.bottleneck for e in over.episodes] == ["healthy"]
    assert [line for line in lines if line.startswith("gpulens_pod_bottleneck_time") and "serving-0" in line] == [
        'gpulens_pod_bottleneck_time_ratio{bottleneck="healthy",namespace="sd",node="node-a",pod="serving-0"} 1.0'
    ]
    assert over.wasted_gpu_seconds == history["by_class"]["healthy"]["wasted_gpu_seconds"] > 0


@pytest.mark.parametrize(("requests", "headline"), [(1843.0, "overprovisioned_serving"), (0.0, "idle")])
def test_what_the_engine_counted_decides_serving_against_idle(requests, headline):
    """The replica's day with nights of one request an hour (serving from its GPU alone, above): its vLLM
    finished 1,843 requests, so it served; a replica whose engine finished none is idle whatever its GPU
    showed (a model load, health checks). Its waste is the same GPU-seconds either way."""
    from gpulens.analyzer.inputs.engines import EngineLoad

    [alone] = analyze(_replica_day(0.5))
    load = EngineLoad("vllm", requests, 0.95, 3.0, 7.0, 0.0, 1.0, 0.12, 0.3)
    [v] = analyze(_replica_day(0.5), engines={"sd/replica": load})
    assert v.bottleneck == headline
    assert v.wasted_gpu_seconds == alone.wasted_gpu_seconds
    assert v.evidence["engine"] == (
        "vllm: 1,843 requests finished over the span; running 3 at p95, 7 at peak; waiting 0 at p95, 1 at peak; "
        "KV cache in use 12% at p95, 30% at peak"
        if requests
        else "vllm: no request finished over the span; idle whatever its GPU showed (a model load, health checks)"
    )


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_trace_files_workload_columns_say_what_its_pods_are(tmp_path, suffix):
    """The replica's day with no request after 10:00 (idle from its GPU alone) in a file whose rows say it is a
    vLLM replica: serving, as Kubernetes would have said, with the file named as the source. The same day of a
    pod the file calls a job keeps its GPU's verdict."""
    from gpulens.analyzer.inputs.readers import read_trace

    day = _replica_day(0.0, hours=(0, 10))
    path = tmp_path / f"day{suffix}"
    fr.write_trace(day.assign(workload_kind="serving", engine="vllm"), path)
    [v] = analyze(read_trace(path))
    assert (v.bottleneck, v.workload_kind, v.engine, v.kind_source) == (
        "overprovisioned_serving",
        "serving",
        "vllm",
        "the trace's workload_kind column",
    )
    assert v.evidence["workload"] == "serving, its engine vllm (the trace's workload_kind column)"
    fr.write_trace(day.assign(workload_kind="job", engine=""), path)
    [job] = analyze(read_trace(path))
    assert (job.bottleneck, job.workload_kind, job.evidence["workload"]) == (
        "idle",
        "job",
        "job (the trace's workload_kind column)",
    )


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        ("workload_kind", "training", "'training' is not a workload kind: notebook, serving, job, unknown (or empty)"),
        ("engine", "ollama", "'ollama' is not a serving engine gpulens reads: vllm, tgi, triton, sglang (or empty)"),
    ],
)
def test_a_workload_column_holding_what_gpulens_does_not_know_is_refused(tmp_path, column, value, message):
    from gpulens.analyzer.inputs.readers import TraceError, read_trace

    path = tmp_path / "day.csv"
    rows = _replica_day(0.0).head(3).assign(workload_kind="serving", engine="vllm")
    rows[column] = ["serving" if column == "workload_kind" else "vllm", value, ""]
    fr.write_trace(rows, path)
    with pytest.raises(TraceError) as error:
        read_trace(path)
    place = f"line 3, column {list(rows.columns).index(column) + 1} ({column})"
    assert str(error.value) == f"{path}, {place}: {message}"


@pytest.mark.parametrize(("start", "headline", "worked"), [(9 * 60, "healthy", 2), (17 * 60 + 30, "idle", 1)])
def test_a_notebook_judged_in_one_window_is_in_use_not_serving(start, headline, worked):
    """Forty minutes of the replica's day, one window: from the GPU alone a replica with few requests
    (overprovisioned_serving). The same rows of a JupyterHub user's server are cells at full activity: from
    09:00 to 09:40, cells at :07 and :27, quiet for the last 13 minutes, under four times the 20 minutes between
    them (idle_pause_factor): a notebook in use, healthy while it works, its pauses' waste counted all the same.
    From 17:30 to 18:10, one cell at 17:47 and quiet for 23 minutes after it, over idle_seconds (5) with no pause
    while it worked to measure against: its kernel is idle now, the live analyzer's word for the window's end."""
    from gpulens.analyzer.inputs.kinds import WorkloadKind

    morning = _replica_day(0.0)
    morning = morning[morning["timestamp"].between(MIDNIGHT + start * 60, MIDNIGHT + (start + 40) * 60)]
    [alone] = analyze(morning)
    assert alone.bottleneck == "overprovisioned_serving" and len(alone.episodes) == 1  # one window: classify()'s
    assert alone.facts == (["quiet_at_end"] if headline == "idle" else [])
    notebook = WorkloadKind("notebook", "", "label component=singleuser-server")
    [v] = analyze(morning, workloads={"sd/replica": notebook})
    assert (v.bottleneck, v.recommendation, v.served) == (headline, RECOMMENDATIONS[headline], False)
    assert v.evidence["workload"] == "notebook (label component=singleuser-server)"
    assert (v.workload_kind, v.kind_source) == ("notebook", "label component=singleuser-server")
    assert v.wasted_gpu_seconds == alone.wasted_gpu_seconds == (41 - worked) * 60.0  # 41 rows, each a minute
    assert v.episodes == [replace(alone.episodes[0], bottleneck=headline)]
    assert v.by_class == {headline: alone.by_class["overprovisioned_serving"]}


@pytest.mark.parametrize(("waiting", "headline"), [(0.0, "overprovisioned_serving"), (3.0, "unexplained")])
def test_an_engine_that_served_with_room_settles_low_activity_as_serving(waiting, headline):
    """Low activity with no signature leaves its causes open (unexplained); a vLLM replica that finished
    requests with nobody waiting at p95 had room: serving with headroom, its open causes settled. With
    requests queued at p95 it had none, and what held it back (its KV cache, a CPU-bound loop) stays open."""
    from gpulens.analyzer.inputs.engines import EngineLoad
    from gpulens.analyzer.inputs.kinds import WorkloadKind
    from gpulens.analyzer.judging.classify import Verdict
    from gpulens.analyzer.judging.history import with_workload

    open_causes = {
        "mean_activity": "13% < 50% with no signature of a cause",
        "causes_open": "...",
        "would_tell_them_apart": "...",
    }
    v = Verdict("chat", "chat-0", "n1", ["GPU-0"], "H100", "unexplained", 0.3, open_causes, "", 0.0, 0.0)
    load = EngineLoad("vllm", 120238.0, 0.95, 31.0, 32.0, waiting, 14.0, 0.97, 1.0)
    judged = with_workload(v, WorkloadKind("serving", "vllm", "image vllm/vllm-openai:v0.6.3"), load, Thresholds())
    assert judged.bottleneck == headline
    settled = headline == "overprovisioned_serving"
    assert ("causes_open" in judged.evidence) is not settled
    assert judged.evidence["mean_activity"] == open_causes["mean_activity"]
    assert judged.evidence["engine"].startswith("vllm: 120,238 requests finished over the span; running 31 at p95")


def test_a_replicas_quiet_hours_lend_its_verdict_none_of_their_confidence():
    """A replica's windows judged serving at 0.5 (no profiling fields: the cap) and its night idle at 0.85 (idle
    needs none): the night is booked as its quiet hours, and the verdict is as sure as its serving windows were."""
    from gpulens.analyzer.judging.classify import Verdict
    from gpulens.analyzer.judging.history import Ledger

    ledger = Ledger()
    serving = Verdict("ns", "p", "n1", ["GPU-0"], "H100", "overprovisioned_serving", 0.5, {}, "", 0.0, 0.0, served=True)
    idle = replace(serving, bottleneck="idle", confidence=0.85, served=False)
    for k, window in enumerate([serving] * 4 + [idle] * 8 + [serving] * 4):  # 16 cycles of an hour
        ledger.record(window, 3600.0 * k, 3600.0 * (k + 1), 3600.0, 3000.0, 1.0, True)
        ledger.account(3600.0, 0.05, 0.9, 0.05)
    v = ledger.verdict(Thresholds())
    assert (v.bottleneck, v.confidence) == ("overprovisioned_serving", 0.5)
    assert [(e.bottleneck, e.end - e.start) for e in v.episodes] == [("overprovisioned_serving", 16 * 3600.0)]
    assert [(e.bottleneck, e.start, e.end) for e in v.pauses] == [("idle", 4 * 3600.0, 12 * 3600.0)]


@pytest.mark.parametrize("exporter", [False, True])
def test_window_passes_sharing_the_samples_signals_find_what_each_pass_alone_finds(exporter):
    """history.ledgers makes each sample's signals once (features.PerSample) for its four window passes. Every pass
    must find the same features as one that makes them itself: pods of two GPUs, whose windows each pass sorts
    again (the signals reordered), with and without the exporter's activity shape."""
    from benchmarks.analyzer import make_trace
    from gpulens.analyzer.judging.features import PerSample, UnitKeys, pod_features

    trace, t = make_trace(40, 7200, seed=3, step=15.0, exporter=exporter), Thresholds()
    assert set(trace.groupby("pod", observed=True)["gpu"].nunique()) == {2}
    keys = UnitKeys.of(trace)
    per_sample = PerSample.of(trace, t, keys)
    ts = trace["timestamp"].to_numpy()
    slot = ((ts - ts.min()) // 900).astype(np.int64)
    for offset in range(4):
        end_slot = slot + (offset - slot) % 4
        end_slot[end_slot > slot.max()] = -1
        alone = pod_features(trace, t, window=end_slot, keys=keys)
        shared = pod_features(trace, t, window=end_slot, keys=keys, per_sample=per_sample)
        assert len(alone) == 40  # 20 pods, each in two windows of the two hours
        pd.testing.assert_frame_equal(shared, alone)
