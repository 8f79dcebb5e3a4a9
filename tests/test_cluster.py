"""The cluster's share of the waste (analyzer/inputs/cluster.py, analyzer/judging/scheduling.py): a constructed cluster
(tests/cluster_history.py) backfilled into a real Prometheus, read by `gpulens report --prometheus`, against
answers worked by hand from its table; then the reasons a wait can have, on clusters built in memory."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from rich.console import Console

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs.cluster import WAITING, ClusterHistory, Node, PodTrack, Run
from gpulens.analyzer.inputs.kinds import Pools, WorkloadKind
from gpulens.analyzer.inputs.owners import Owner
from gpulens.analyzer.judging.scheduling import judge
from gpulens.analyzer.outputs.plan import make_plan
from gpulens.analyzer.outputs.terminal import _cluster
from gpulens.analyzer.outputs.use import Use
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import rfc3339
from tests import cluster_history as cluster
from tests.helpers import BackfilledPrometheus, VictoriaMetrics
from tests.store_history import families_openmetrics, families_prometheus_text

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
START, STEP = cluster.START, cluster.STEP
MINUTE_GPU = STEP  # GPU-seconds in one GPU for one step


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    directory = tmp_path_factory.mktemp("cluster")
    prometheus = BackfilledPrometheus(directory / "prometheus", families_openmetrics(cluster.families()))
    settings = directory / "settings.yaml"
    settings.write_text(cluster.SETTINGS)
    try:
        yield prometheus.url, str(settings)
    finally:
        prometheus.stop()


#: The GPU series each run reads: gpulens' exporter's, or dcgm-exporter's.
GPULENS = ("--prometheus.selector", 'job="gpulens"', "--prometheus.dcgm-selector", 'job="none"')
DCGM = ("--prometheus.selector", 'job="none"', "--prometheus.dcgm-selector", 'job="dcgm-exported"')


def run_report(store, *args: str, columns: int = 130, family: tuple[str, ...] = GPULENS) -> subprocess.CompletedProcess:
    """`gpulens report` of the store's span (a later --since or --until in `args` overrides it)."""
    url, settings = store
    span = ["--since", rfc3339(START), "--until", rfc3339(START + (cluster.STEPS - 1) * STEP)]
    span += family
    return subprocess.run(
        [sys.executable, "-m", "gpulens", "report", "--prometheus", url, *span, "--analysis.config", settings, *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, "COLUMNS": str(columns)},
    )


def report(store, *args: str, columns: int = 130, family: tuple[str, ...] = GPULENS) -> subprocess.CompletedProcess:
    done = run_report(store, *args, columns=columns, family=family)
    assert done.returncode == 0, done.stderr
    return done


@pytest.fixture(scope="module")
def answer(store):
    return json.loads(report(store, "--format", "json").stdout)


@pytest.mark.slow
def test_each_pod_that_waited_says_how_long_and_why(answer):
    pending = {p["pod"]: p for p in answer["cluster"]["pending"]}
    assert list(pending) == ["train-huge-0", "train-big-0"]  # longest wait first
    big = pending["train-big-0"]
    # Created at step 30, scheduled at step 151 (its pending series ends at step 150): steps 30-150 waited.
    assert big["gpus"] == 8
    assert big["waited_seconds"] == 121 * STEP
    assert big["waiting_since"] == rfc3339(START + 30 * STEP)
    assert big["scheduled_at"] == rfc3339(START + 151 * STEP)
    assert big["judged_against"] == "pool training, model NVIDIA-A100-SXM4-80GB"  # its node selector
    # train-huge-0 has none: a Job's pod, and the settings mean jobs for the training pool.
    assert pending["train-huge-0"]["judged_against"] == "pool training"
    assert answer["cluster"]["missing"] == []  # node-pool is exported, and kube_pod_nodeselectors
    # Steps 30-149: 10 free on four nodes, the largest 3; step 150: trainer-c Succeeded, t2 has 8 free.
    assert big["reason"] == "fragmented"
    assert big["reason_shares"] == {"fragmented": round(120 / 121, 4), "room": round(1 / 121, 4)}
    assert big["evidence"] == (
        "at 2025-12-01 00:30:00 UTC 10 GPUs were free on 4 nodes (3 + 3 + 2 + 2): the largest block, 3, < the 8 asked"
    )
    huge = pending["train-huge-0"]
    assert (huge["gpus"], huge["waited_seconds"], huge["scheduled_at"]) == (16, 180 * STEP, None)
    assert huge["reason"] == "too_large" and huge["reason_shares"] == {"too_large": 1.0}
    assert huge["evidence"] == "no node offers 16 GPUs: the largest offers 8; it cannot be scheduled as asked"


@pytest.mark.slow
def test_stranded_and_unwanted_gpu_hours_by_pool_are_the_hand_worked_ones(answer):
    pools = {p["pool"]: p for p in answer["cluster"]["pools"]}
    training = pools["training"]
    assert (training["gpu_model"], training["nodes"], training["gpus"]) == ("NVIDIA A100-SXM4-80GB", 4, 32)
    # Free in training, per step: 10 (steps 0-149), 16 (150), 8 (151-200: trainer-b's last sample is at 199,
    # and a deleted pod is held while its newest sample is within 1.5 scrape intervals), 10 (201-239).
    assert training["free_gpu_seconds"] == (150 * 10 + 16 + 50 * 8 + 39 * 10) * MINUTE_GPU
    # Stranded: steps 30-149, while train-big-0 waited for 8 with 10 free but 3 at most on a node.
    assert training["stranded_gpu_seconds"] == 120 * 10 * MINUTE_GPU
    assert training["stranded_usd"] == 120 * 10 / 60 * 2.50  # 20 GPU-h at the catalogue's $2.50
    # Nobody waited in steps 0-29 (train-huge-0 waits from 60, but from 30 train-big-0 does).
    assert training["unwanted_gpu_seconds"] == 30 * 10 * MINUTE_GPU
    # Asked by the waiting: 8 (steps 30-59), 8 + 16 (60-150), 16 (151-239).
    assert training["waiting_gpu_seconds"] == (30 * 8 + 91 * 24 + 89 * 16) * MINUTE_GPU
    assert (training["fragmentation_episodes"], training["recurring"]) == (1, False)
    inference = pools["inference"]
    assert inference["free_gpu_seconds"] == inference["unwanted_gpu_seconds"] == 240 * 7 * MINUTE_GPU
    assert inference["stranded_gpu_seconds"] == 0


@pytest.mark.slow
def test_the_consolidation_frees_a_node_for_the_pod_that_waited(answer):
    [found] = answer["cluster"]["consolidations"]
    # At 00:30, t3 (3 free; trainer-d 2, -e 2, -g 1) is the only node whose pods fit the others' free blocks
    # (t1 2, t2 2, t4 3): t1's trainer-a (4), t2's trainer-c (6) and t4's trainer-f (4) fit nowhere.
    assert (found["pod"], found["node"], found["at"]) == ("train-big-0", "t3", "2025-12-01T00:30:00Z")
    assert [(m["pod"], m["gpus"], m["from_node"], m["to_node"]) for m in found["moves"]] == [
        ("trainer-d", 2, "t3", "t1"),
        ("trainer-e", 2, "t3", "t2"),
        ("trainer-g", 1, "t3", "t4"),
    ]
    [action] = [a for a in answer["plan"] if a["action"] == "consolidate"]
    assert action["owner"] == "pool training / NVIDIA A100-SXM4-80GB"
    assert action["saving_usd_span"] == 50.0
    assert action["what"] == (
        "move ml/trainer-d (2 GPUs) to t1, ml/trainer-e (2 GPUs) to t2, ml/trainer-g (1 GPU) to t4: t3 then has "
        "8 GPUs free for research/train-big-0, which waited 2 h 1 min"
    )
    assert action["confidence"] == 0.6  # four hours of history: capped until a week is seen
    # The pods moved still need their GPUs: packed, the pods hold t1's GPUs 0-5, t2's 0-7 (trainer-c's, then
    # train-big-0's), t3's 0-4 and t4's 0-4: 24 of the 32 A100s, so the plan frees 8 (a node), not more.
    [a100] = [p for p in answer["plan_summary"]["fleet"] if p["gpu_model"] == "NVIDIA A100-SXM4-80GB"]
    assert (a100["gpus_needed"], a100["gpus_freed"], a100["nodes_freed"]) == (24, 8, 1)


@pytest.mark.slow
def test_a_serving_pod_on_the_training_pool_is_moved_to_its_own(answer):
    [misplaced] = answer["cluster"]["misplaced"]
    assert (misplaced["pod"], misplaced["kind"], misplaced["pool"], misplaced["meant_pool"]) == (
        "chat-7d9f8-h4k2p",
        "serving",
        "training",
        "inference",
    )
    assert misplaced["seconds"] == misplaced["room_seconds"] == 240 * STEP  # inference had 4 free all along
    [action] = [a for a in answer["plan"] if a["action"] == "re_pool"]
    assert (action["owner"], action["saving_usd_span"]) == ("serve/Deployment/chat", 4 * 2.50)


@pytest.mark.slow
def test_namespaces_without_a_gpu_quota_are_named_and_the_one_that_took_the_cluster_first(answer):
    gaps = answer["cluster"]["quota_gaps"]
    assert [g["namespace"] for g in gaps] == ["ml", "serve"]  # research has its quota
    ml = gaps[0]
    # 21 of the cluster's 40 GPUs until trainer-c ends (step 150), 15 to step 200, 13 after.
    assert (ml["peak_gpus"], ml["peak_share"], ml["peak_at"]) == (21, 21 / 40, rfc3339(START))
    assert ml["gpu_seconds"] == (150 * 21 + 51 * 15 + 39 * 13) * MINUTE_GPU
    # research's pods waited from step 30; ml held over half the cluster until step 149.
    assert ml["others_waited_seconds"] == 120 * STEP
    # A quota is planned where it cost others: ml's; serve's absence is listed, not planned.
    quotas = {a["namespace"]: a for a in answer["plan"] if a["action"] == "add_quota"}
    assert list(quotas) == ["ml"]
    assert quotas["ml"]["what"].startswith("add a ResourceQuota of requests.nvidia.com/gpu: 21 to ml")


@pytest.mark.slow
def test_free_gpus_are_released_from_the_step_their_pod_ended_not_a_lookback_later(store, answer):
    """trainer-b is deleted after step 199 (its series end); the store, backfilled, holds no staleness marker,
    so Prometheus would carry its GPUs' pod for its 5 minute lookback. They are free from step 201."""
    freed = [v for v in answer["verdicts"] if not v["pod"] and v["gpus"][0] in ("GPU-t1-4", "GPU-t1-5")]
    assert [(v["bottleneck"], v["episodes"][0]["start"]) for v in freed] == [
        ("unallocated", START + 201 * STEP),
        ("unallocated", START + 201 * STEP),
    ]
    trainer_b = next(v for v in answer["verdicts"] if v["pod"] == "trainer-b")
    assert trainer_b["window_seconds"] * trainer_b["coverage"] == pytest.approx(201 * STEP, abs=STEP)
    # From dcgm-exporter, whose value series carry the pod: trainer-b's last values (busy) are carried beside the
    # GPUs' next series (no pod, idle) for the lookback; the newer stands, so the GPUs are free, not "held
    # without a pod" by a process the busy values would suggest.
    dcgm = json.loads(report(store, "--format", "json", family=DCGM).stdout)
    freed = [v for v in dcgm["verdicts"] if not v["pod"] and v["gpus"][0] in ("GPU-t1-4", "GPU-t1-5")]
    assert [(v["bottleneck"], v["episodes"][0]["start"]) for v in freed] == [
        ("unallocated", START + 200 * STEP),
        ("unallocated", START + 200 * STEP),
    ]
    assert dcgm["cluster"]["pools"] == answer["cluster"]["pools"]
    # The release of t3's GPUs counts only the GPU-hours nobody waited for: steps 0-29 of 240.
    [t3] = [a for a in answer["plan"] if a["action"] == "release_capacity" and a["owner"].endswith("t3")]
    assert t3["saving_usd_span"] == round(3 * 4 * 2.50 * 30 / 240, 2)


def in_order(verdicts: list[dict]) -> list[dict]:
    """Verdicts in the order a report sorts them (most waste first), ties by unit."""
    return sorted(verdicts, key=lambda v: (-v["wasted_gpu_seconds"], v["unit"]))


@pytest.mark.slow
def test_a_report_judged_in_processes_is_the_report_judged_in_one(store, answer, tmp_path):
    """`--processes 2`: each process reads the nodes whose name hashes to its share (t2 and t4; t1, t3, i1
    and i2), and the merged report is the one process's: the same verdicts, plan and cluster, and the same
    HTML timelines (what each unit used is merged, not read again)."""
    from gpulens.analyzer.inputs.window import hashmod

    assert sorted(node for node in cluster.NODES if hashmod(node, 2) == 0) == ["t2", "t4"]
    merged = json.loads(report(store, "--format", "json", "--processes", "2").stdout)

    assert in_order(merged["verdicts"]) == in_order(answer["verdicts"])
    assert merged["plan"] == answer["plan"] and merged["cluster"] == answer["cluster"]
    one, two = tmp_path / "one.html", tmp_path / "two.html"
    report(store, "--format", "html", "--out", str(one))
    report(store, "--format", "html", "--out", str(two), "--processes", "2")
    assert two.read_text() == one.read_text()
    # A span within one window (judged whole, not in pieces): each process selects all of its nodes at once.
    whole = [
        json.loads(report(store, "--format", "json", "--window", "6h", *more).stdout)
        for more in ((), ("--processes", "2"))
    ]
    assert in_order(whole[1]["verdicts"]) == in_order(whole[0]["verdicts"])
    assert len({v["node"] for v in whole[1]["verdicts"]}) == len(cluster.NODES)


@pytest.mark.slow
def test_a_report_sharded_between_runs_is_the_report_of_one_run(store, answer, tmp_path):
    """`--shard.count 2`: each run (a pod of an indexed Job) writes the verdicts, use and timelines of the nodes
    whose name hashes to its index into a shard file; `--merge` of both is the report one run writes: the
    same verdicts, plan and cluster (read once, at the merge), and the same HTML. A shard read in two
    processes shares its nodes out again (shard 1 of 2 in processes: shards 1 and 3 of 4)."""
    from gpulens.analyzer.inputs.window import hashmod

    files = [tmp_path / f"shard-{index}.zip" for index in range(2)]
    for index, more in ((0, ()), (1, ("--processes", "2"))):
        done = report(store, "--shard.count", "2", "--shard.index", str(index), "--out", str(files[index]), *more)
        assert done.stdout == "" and f"shard {index} of 2" in done.stderr
    with zipfile.ZipFile(files[0]) as archive:
        nodes = {v["node"] for v in json.loads(archive.read("shard.json"))["verdicts"]}
    assert nodes == {node for node in cluster.NODES if hashmod(node, 2) == 0} == {"t2", "t4"}
    merged = json.loads(report(store, "--format", "json", "--merge", *map(str, files)).stdout)

    assert in_order(merged["verdicts"]) == in_order(answer["verdicts"])
    assert merged["plan"] == answer["plan"] and merged["cluster"] == answer["cluster"]
    one, two = tmp_path / "one.html", tmp_path / "two.html"
    report(store, "--format", "html", "--out", str(one))
    report(store, "--format", "html", "--out", str(two), "--merge", *map(str, reversed(files)))
    assert two.read_text() == one.read_text()


@pytest.mark.slow
def test_shards_that_do_not_make_one_report_are_refused(store, tmp_path):
    """A merge names the file and what is wrong: a shard missing or given twice, another span or settings, a
    file that is no shard; and a shard run names the flag it lacks. Nothing is written."""
    url, settings = store
    files = [tmp_path / f"shard-{index}.zip" for index in range(2)]
    for index in range(2):
        report(store, "--shard.count", "2", "--shard.index", str(index), "--out", str(files[index]))
    other, thresholds = tmp_path / "other.zip", tmp_path / "thresholds.yaml"
    thresholds.write_text("min_samples: 12\n")
    report(store, "--shard.count", "2", "--shard.index", "1", "--out", str(other), "--thresholds", str(thresholds))
    not_a_shard = tmp_path / "not-a-shard.zip"
    not_a_shard.write_text("verdicts\n")
    out = tmp_path / "report.json"
    first, second = map(str, files)
    end = rfc3339(START + (cluster.STEPS - 1) * STEP)
    refused = {
        ("--merge", first): "shard 1 of 2 not given: merge every shard",
        ("--merge", first, first, second): f"{first} and {first} are both shard 0 of 2",
        ("--merge", first, str(other)): f"{other} was judged with other thresholds than this merge",
        ("--merge", first, second, "--until", rfc3339(START + 200 * STEP)): f"{first} covers the span "
        f"{rfc3339(START)} to {end} every 60 s, this merge {rfc3339(START)} to "
        f"{rfc3339(START + 200 * STEP)} every 60 s",
        ("--merge", first, str(not_a_shard)): f"{not_a_shard} is not a shard file",
        ("--merge", first, str(tmp_path / "none.zip")): f"{tmp_path / 'none.zip'}: no such file",
        ("--merge", first, second, "--processes", "2"): "--merge reads shards already judged: drop --processes",
        ("--shard.count", "2", "--shard.index", "1"): "--shard.count writes a shard file for --merge: name it with",
        ("--shard.count", "2", "--shard.index", "2", "--out", str(out)): "--shard.index 2 of --shard.count 2",
        ("--shard.count", "2", "--merge", first): "give one of the two",
    }
    for flags, said in refused.items():
        done = run_report(store, "--format", "json", "--out", str(out), *flags)
        assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, (flags, done.stderr)
        assert not out.exists()
    # The span's end is each run's own now unless given: a shard run and a merge need --until.
    for flags in (("--shard.count", "2", "--out", str(out)), ("--merge", first, second)):
        done = subprocess.run(
            [sys.executable, "-m", "gpulens", "report", "--prometheus", url, "--since", "1h", *flags],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        assert done.returncode == 2 and "needs --prometheus and --until" in done.stderr, done.stderr


@pytest.mark.slow
def test_processes_are_for_a_store(store, tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,gpu\n")
    for flags in (("--processes", "0", "--prometheus", store[0], "--since", "1h"), (str(trace), "--processes", "2")):
        done = subprocess.run(
            [sys.executable, "-m", "gpulens", "report", *flags], capture_output=True, text=True, cwd=REPO, timeout=60
        )
        assert done.returncode == 2 and "--processes" in done.stderr and "Traceback" not in done.stderr


def _by_labels(series: tuple[dict, list]) -> list:
    return sorted(series[0].items())


@pytest.mark.parametrize("age", [1.5 * STEP, 600.0])
@pytest.mark.slow
def test_the_clusters_series_read_bare_are_what_promql_answers(store, age):
    """StoreKubeState reads the series bare and joins, sums and freshens them here (Prometheus would spend
    40 times the CPU doing it step by step): what it finds is what the PromQL it replaces answers, evaluated
    by the store, at every step, with fresh() where the age is under the lookback and without. (The store,
    backfilled, holds no staleness marker: with one, fresh() would end a series at it, last_over_time at most
    half a scrape interval later; docs/stores.md.)"""
    from gpulens.analyzer.inputs.kube_state import GPU_REQUESTS, GPUS, LIVE_PHASES, QUOTA_HARD, StoreKubeState
    from gpulens.analyzer.inputs.queries import fresh
    from gpulens.analyzer.inputs.store import Store

    source = StoreKubeState(Store(store[0]))
    end = START + (cluster.STEPS - 1) * STEP

    def promql(expr: str) -> list:
        answer = source.store.query_range(expr, START, end, STEP)
        return sorted(((s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in answer), key=_by_labels)

    def fresh_sel(name: str, *matchers) -> str:
        selector = source._sel(name, *matchers)
        return fresh(selector, age) if age < 300 else selector

    requests = fresh_sel("kube_pod_container_resource_requests", GPU_REQUESTS)
    phase = fresh_sel("kube_pod_status_phase", LIVE_PHASES)
    oracle = {
        "node_gpus": f"max by (node) ({fresh_sel('kube_node_status_allocatable', GPUS)})",
        "cordoned": f"max by (node) ({fresh_sel('kube_node_spec_unschedulable')})",
        "gpu_quota": f"min by (namespace) ({fresh_sel('kube_resourcequota', *QUOTA_HARD)})",
        "gpu_pods": f"sum by (namespace, pod, node, resource) ({requests} * on (namespace, pod) group_left () "
        f"max by (namespace, pod) ({phase} == 1))",
    }
    for method, expr in oracle.items():
        found = sorted(getattr(source, method)(START, end, STEP, age), key=_by_labels)
        assert found == promql(expr), method
        assert found or method == "cordoned", method  # the cluster has nodes, quotas and pods (none cordoned)


@pytest.mark.slow
def test_the_cluster_in_every_format(store, answer):
    text = report(store).stdout
    assert "research/train-big-0 asked 8 GPUs, waited 2 h 1 min (then scheduled): fragmented" in text
    assert re.search(r"training / NVIDIA A100-SXM4-80GB\s+4\s+32\s+38\.4\s+20\.0\s+50\.00\s+5\.0", text), text
    narrow = report(store, columns=80).stdout
    assert all(len(line) <= 80 for line in narrow.splitlines()), narrow
    assert "free 38.4 GPU-h: stranded 20.0 ($50.00), nobody waited 5.0" in narrow
    # The cluster's actions move pods or change settings: no GPUs held "0 -> 0"; counts in their number.
    assert "consolidate: GPUs none held, saves $50.00 in the 4 h seen, confidence 0.60" in narrow
    assert "inference / NVIDIA L4  2 nodes, 8 GPUs" in narrow and " nodes, 1 GPUs" not in narrow
    assert "0 -> 0" not in narrow and "0 -> 0" not in text
    rows = list(csv.DictReader(io.StringIO(report(store, "--format", "csv", "--by", "pending").stdout)))
    assert [(r["pod"], r["reason"], r["waited_seconds"]) for r in rows] == [
        ("train-huge-0", "too_large", "10800.0"),
        ("train-big-0", "fragmented", "7260.0"),
    ]
    pools = list(csv.DictReader(io.StringIO(report(store, "--format", "csv", "--by", "pool").stdout)))
    assert [(r["pool"], r["stranded_usd"]) for r in pools] == [("training", "50.0"), ("inference", "0.0")]
    page = report(store, "--format", "html").stdout
    assert "<h2>The cluster's share: GPUs free while pods waited</h2>" in page
    # The chart of training: its free GPUs (green) drawn from the same steps the JSON counts.
    chart = re.search(r"aria-label='free and asked GPUs of training / NVIDIA A100-SXM4-80GB'>(.*?)</svg>", page)
    assert chart, page
    free = re.search(r"class='free'[^>]*points='([^']*)'", chart[1])
    heights = [100 - float(point.split(",")[1]) for point in free[1].split()]
    assert np.mean(heights) / 100 * 32 * 240 * STEP == pytest.approx(
        answer["cluster"]["pools"][0]["free_gpu_seconds"], rel=0.01
    )


@pytest.mark.slow
def test_victoria_metrics_holding_the_same_cluster_gives_the_same_answer(store, answer, tmp_path):
    """The same samples imported into a real VictoriaMetrics (MetricsQL's timestamp() and lookback are its
    own): every figure of the cluster's share, and the freed GPUs, as from Prometheus."""
    victoria = VictoriaMetrics(tmp_path)
    try:
        victoria.load(families_prometheus_text(cluster.families()))
        same = json.loads(report((victoria.url, store[1]), "--format", "json").stdout)
    finally:
        victoria.stop()
    assert same["cluster"] == answer["cluster"]
    freed = sorted((v["gpus"][0], v["bottleneck"]) for v in same["verdicts"] if not v["pod"])
    assert freed == sorted((v["gpus"][0], v["bottleneck"]) for v in answer["verdicts"] if not v["pod"])


def files_report(*args: str) -> subprocess.CompletedProcess:
    """`gpulens report` on files."""
    return subprocess.run(
        [sys.executable, "-m", "gpulens", "report", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


@pytest.mark.parametrize("form", ["openmetrics", "text"])
@pytest.mark.slow
def test_trace_files_with_kube_state_metrics_recorded_give_the_stores_answer(store, answer, tmp_path, form):
    """The same cluster from files: its GPUs' trace (the recorder's format) and kube-state-metrics' history as
    OpenMetrics (the text promtool backfilled into the store) or in Prometheus' text format with timestamps in
    milliseconds: the cluster's share and every pod's owner and kind as Prometheus' answer says them."""
    trace = tmp_path / "gpus.parquet"
    fr.write_trace(cluster.gpu_trace(), trace)
    history = tmp_path / "kube-state.txt"
    render = families_openmetrics if form == "openmetrics" else families_prometheus_text
    history.write_text(render(cluster.kube_state_metrics()))
    settings = store[1]
    done = files_report(str(trace), "--kube-state", str(history), "--analysis.config", settings, "--format", "json")
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)
    assert files["cluster"] == answer["cluster"]

    def owners(said: dict) -> set[tuple]:
        return {(v["pod"], v["owner_kind"], v["owner"], v["workload_kind"]) for v in said["verdicts"] if v["pod"]}

    assert owners(files) == owners(answer)
    assert ("chat-7d9f8-h4k2p", "Deployment", "chat", "serving") in owners(files)
    cluster_actions = ("consolidate", "bin_pack", "add_quota", "re_pool")
    assert [a for a in files["plan"] if a["action"] in cluster_actions] == [
        a for a in answer["plan"] if a["action"] in cluster_actions
    ]


@pytest.mark.slow
def test_gpu_counts_no_cluster_can_have_are_left_out_and_said_once(store, answer, tmp_path):
    """kube-state-metrics' GPU counts are checked where they enter: a node "offering" 1e18 GPUs (believed, a pool
    of them, and no wait is ever fragmented), one offering +Inf (an overflow in the plan), a pending pod asking
    -5: left out, each family said once, and the cluster is the hand-worked one the store holds without them."""
    families = cluster.kube_state_metrics()
    ksm = {"job": "kube-state-metrics"}

    def add(name: str, labels: dict[str, str], value: float) -> None:
        for i in range(cluster.STEPS):
            families[name].append((cluster._labels({**labels, **ksm}), START + i * STEP, value))

    for node, offered in (("t8", math.inf), ("t9", 1e18)):
        add("kube_node_status_allocatable", {"node": node, "resource": "nvidia_com_gpu", "unit": "integer"}, offered)
        add("kube_node_labels", {"node": node, "label_node_pool": "training"}, 1)
    liar = {"namespace": "research", "pod": "liar-0", "uid": "uid-liar-0"}
    add(
        "kube_pod_container_resource_requests",
        {**liar, "container": "main", "node": "", "resource": "nvidia_com_gpu"},
        -5,
    )
    add("kube_pod_status_phase", {**liar, "phase": "Pending"}, 1)
    trace = tmp_path / "gpus.parquet"
    fr.write_trace(cluster.gpu_trace(), trace)
    history = tmp_path / "kube-state.txt"
    history.write_text(families_openmetrics(families))
    done = files_report(str(trace), "--kube-state", str(history), "--analysis.config", store[1], "--format", "json")
    assert done.returncode == 0, done.stderr
    files = json.loads(done.stdout)
    steps = f"{cluster.STEPS:,} samples"
    assert files["cluster"]["missing"] == [
        f"kube_node_status_allocatable: {2 * cluster.STEPS:,} samples of 2 series left out, not a count of GPUs (a "
        "whole number, at most 4,096 a node or pod), the first inf (node=t8); check the device plugin's or the "
        "pod's spec, and what exports the series",
        f"kube_pod_container_resource_requests: {steps} of 1 series left out, not a count of GPUs (a whole number, "
        "at most 4,096 a node or pod), the first -5 (namespace=research, pod=liar-0); check the device "
        "plugin's or the pod's spec, and what exports the series",
    ]
    assert {**files["cluster"], "missing": []} == answer["cluster"]
    cluster_actions = ("consolidate", "bin_pack", "add_quota", "re_pool")
    assert [a for a in files["plan"] if a["action"] in cluster_actions] == [
        a for a in answer["plan"] if a["action"] in cluster_actions
    ]


def test_good_gpu_counts_are_taken_as_they_came_not_copied():
    """A day of a fleet's requests is millions of (time, count) points a read: where every count is good, the
    check hands back the very list (a copy made each pair anew cost a report 137 MiB more at its peak); where
    some are not, the good points themselves, and the rest tallied."""
    from gpulens.analyzer.inputs.cluster import _Counts

    counts = _Counts()
    good = [(START + i * STEP, 8.0) for i in range(1440)]
    assert counts.checked("kube_node_status_allocatable", {"node": "n1"}, good) is good
    mixed = [*good[:2], (START + 2 * STEP, -5.0), (START + 3 * STEP, 2.5)]
    kept = counts.checked("kube_pod_container_resource_requests", {"pod": "p"}, mixed)
    assert kept == good[:2] and all(a is b for a, b in zip(kept, good[:2], strict=True))
    assert counts.notes() == [
        "kube_pod_container_resource_requests: 2 samples of 1 series left out, not a count of GPUs (a whole number, "
        "at most 4,096 a node or pod), the first -5 (pod=p); check the device plugin's or the pod's spec, and what "
        "exports the series"
    ]


@pytest.mark.slow
def test_recorded_kube_state_metrics_that_cannot_be_read_are_named_with_the_fix(tmp_path):
    trace = tmp_path / "gpus.parquet"
    fr.write_trace(cluster.gpu_trace(), trace)
    absent = files_report(str(trace), "--kube-state", str(tmp_path / "none.txt"))
    assert absent.returncode == 2 and absent.stdout == ""
    assert absent.stderr.startswith(f"gpulens report: --kube-state {tmp_path / 'none.txt'}: cannot be read"), (
        absent.stderr
    )
    garbled = tmp_path / "garbled.txt"
    garbled.write_text('kube_pod_created{namespace="ml",pod="a} 1\n')
    said = files_report(str(trace), "--kube-state", str(garbled))
    assert said.returncode == 2 and said.stdout == ""
    assert said.stderr.startswith(f"gpulens report: --kube-state {garbled}: line 1 is not a sample"), said.stderr
    assert "Traceback" not in said.stderr
    with_store = files_report("--prometheus", "http://127.0.0.1:9", "--since", "1h", "--kube-state", str(garbled))
    assert with_store.returncode == 2 and "--kube-state is for files" in with_store.stderr


def test_saved_scrapes_of_kube_state_metrics_are_taken_at_their_files_times(tmp_path):
    """Scrapes saved without timestamps (curl .../metrics > file): each at its file's modification time, read
    as the store would read the same samples: a pod waiting in the first, on its node in the second."""
    from gpulens.analyzer.inputs.kube_state import RecordedKubeState

    first, second = tmp_path / "ksm-1.prom", tmp_path / "ksm-2.prom"
    node = 'kube_node_status_allocatable{node="n1",resource="nvidia_com_gpu",unit="integer"} 8\n'
    phase = 'kube_pod_status_phase{namespace="ml",pod="a",phase="%s"} 1\n'
    request = 'kube_pod_container_resource_requests{namespace="ml",pod="a",node="%s",resource="nvidia_com_gpu"} 4\n'
    first.write_text(node + phase % "Pending" + request % "")
    second.write_text(node + phase % "Running" + request % "n1")
    os.utime(first, (START, START))
    os.utime(second, (START + 30, START + 30))
    recorded = RecordedKubeState.read([first, second])
    assert recorded.samples_per_series("kube_node_status_allocatable", START + 30, 3600) == 2
    assert recorded.node_gpus(START, START + 90, 30, 45) == [
        ({"node": "n1"}, [(START, 8.0), (START + 30, 8.0), (START + 60, 8.0)])  # 30 s old at START + 60
    ]
    # The wait's series ends with its last sample's freshness (45 s): at START + 30 the pod is on n1 (the
    # reader keeps the node over a wait carried beside it), from START + 60 its series are too old.
    assert sorted(recorded.gpu_pods(START, START + 90, 30, 45), key=lambda s: len(s[0])) == [
        ({"namespace": "ml", "pod": "a", "resource": "nvidia_com_gpu"}, [(START, 4.0), (START + 30, 4.0)]),
        (
            {"namespace": "ml", "pod": "a", "node": "n1", "resource": "nvidia_com_gpu"},
            [(START + 30, 4.0), (START + 60, 4.0)],
        ),
    ]


def test_a_recording_is_held_by_the_families_read_not_by_its_size(tmp_path, monkeypatch):
    """A recording of kube-state-metrics is mostly families no reader asks for (here 17 MiB of ConfigMaps and
    one allocatable series): read a line at a time, it costs what it keeps (it cost twice the file, and 804 MiB
    died under a 1.5 GiB limit). Where what it keeps would pass the memory available, it is refused at the
    line, naming the families read and the fix."""
    import tracemalloc

    from gpulens.analyzer.inputs import kube_state

    path = tmp_path / "ksm.om"
    noise = 'kube_configmap_info{namespace="ns",configmap="settings-%07d"} 1 %d\n'
    with path.open("w") as out:
        for i in range(240_000):
            out.write(noise % (i, START))
            if i % 1000 == 0:
                out.write(f'kube_node_status_allocatable{{node="n1",resource="nvidia_com_gpu"}} 8 {START + i}\n')
        out.write("# EOF\n")
    assert path.stat().st_size > 17 << 20
    tracemalloc.start()
    try:
        recorded = kube_state.RecordedKubeState.read([path])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert recorded.samples_per_series("kube_node_status_allocatable", START + 240_000, 10**6) == 240
    assert peak < 1 << 20, peak

    # 40,000 samples of one series where 1 MiB is left: the sample past it is refused, at its line.
    dense = tmp_path / "dense.om"
    dense.write_text(
        "".join(
            f'kube_node_status_allocatable{{node="n1",resource="nvidia_com_gpu"}} 8 {START + i}\n'
            for i in range(40_000)
        )
        + "# EOF\n"
    )
    monkeypatch.setattr(kube_state, "available_memory", lambda: 1 << 20)
    with pytest.raises(kube_state.KubeStateError) as refused:
        kube_state.RecordedKubeState.read([dense])
    line = ((1 << 20) - kube_state.KEPT_SERIES_BYTES) // kube_state.KEPT_SAMPLE_BYTES + 1
    assert str(refused.value) == (
        f"--kube-state {dense}: line {line}: the series read so far (1 series of kube_node_status_allocatable) would "
        "take more than the 1 MiB of memory available (32 bytes a sample, 2,048 a series): give a shorter span of "
        "kube-state-metrics' history, or backfill it into a Prometheus and report with --prometheus"
    )


@pytest.mark.slow
def test_the_live_analyzer_serves_the_cluster_as_it_is_now(store):
    """At 01:40 (step 100): train-big-0 waits on fragmentation (created 00:30), train-huge-0 for a node of 16
    (created 01:00); training has 10 GPUs free, 3 at most on a node, all stranded; inference 7, 4 on i2."""
    from gpulens.analyzer.inputs.kinds import load_pools
    from gpulens.analyzer.inputs.live import PrometheusInput
    from gpulens.analyzer.runs.service import AnalyzerService
    from tests.helpers import samples

    url, settings = store
    now = START + 100 * STEP
    source = PrometheusInput(
        url,
        600,
        STEP,
        selector='job="gpulens"',
        dcgm_selector='job="none"',
        clock=lambda: now,
        pools=load_pools(settings),
    )
    service = AnalyzerService(source, Thresholds(), {}, interval=STEP, clock=lambda: now)
    try:
        assert service.cycle()
        served = samples(service.render_text().decode())
        from gpulens.analyzer.runs.livepage import LivePage

        status, _, body = LivePage(service).page()
    finally:
        source.close()
    # The page at / says who waits and why, as the report does (it had no section for them).
    page = body.decode()
    assert status == 200 and "<h3>Pods that waited for GPUs</h3>" in page
    waits = re.findall(r"<td>([a-z-]+/[a-z0-9-]+)<div class=small>[^<]*</div></td>.*?<b>([a-z_]+)</b>", page)
    assert ("research/train-big-0", "fragmented") in waits and ("research/train-huge-0", "too_large") in waits

    def of(name: str) -> dict[tuple[str, ...], float]:
        return {
            tuple(value for _, value in sorted(labels)): v
            for (metric, labels), v in served.items()
            if metric == f"gpulens_cluster_{name}"
        }

    a100, l4 = "NVIDIA A100-SXM4-80GB", "NVIDIA L4"
    assert of("free_gpus") == {(a100, "training"): 10, (l4, "inference"): 7}
    assert of("largest_free_gpus") == {(a100, "training"): 3, (l4, "inference"): 4}
    assert of("stranded_gpus") == {(a100, "training"): 10, (l4, "inference"): 0}
    # Labels sorted by name: gpu_model, pool, reason.
    assert of("waiting_pods") == {(a100, "training", "fragmented"): 1, ("", "training", "too_large"): 1}
    assert of("waiting_gpus") == {(a100, "training", "fragmented"): 8, ("", "training", "too_large"): 16}
    assert of("waiting_longest_seconds") == {
        (a100, "training", "fragmented"): (100 - 30) * STEP,
        ("", "training", "too_large"): (100 - 60) * STEP,
    }


# --- the reasons of a wait, on clusters built in memory ----------------------------------------------------


def history(
    nodes: list[tuple[str, str, int]],
    pods: dict[tuple[str, str], list[Run]],
    steps: int = 20,
    cordoned: set[str] = frozenset(),
    wants: dict[str, tuple[str, str]] | None = None,
) -> ClusterHistory:
    alloc = np.array([[gpus] * steps for _, _, gpus in nodes], dtype=float).reshape(len(nodes), steps)
    cordon = np.array([[name in cordoned] * steps for name, _, _ in nodes], dtype=bool).reshape(len(nodes), steps)
    tracks = {}
    for key, runs in pods.items():
        pool, model = (wants or {}).get(key[1], ("", ""))
        tracks[key] = PodTrack(key, runs, None, pool, model)
    return ClusterHistory(
        0.0, 60.0, steps, [Node(name, pool, "NVIDIA L4") for name, pool, _ in nodes], alloc, cordon, tracks
    )


def test_a_full_pool_is_not_fragmentation_and_strands_nothing():
    h = history(
        [("a", "p", 4), ("b", "p", 4)],
        {("ns", "x"): [Run(0, 19, 0, 3)], ("ns", "y"): [Run(0, 19, 1, 3)], ("ns", "w"): [Run(0, 19, WAITING, 4)]},
    )
    s = judge(h, {}, Thresholds())
    [w] = s.pending
    assert (w.reason, w.evidence) == (
        "pool_full",
        "at its most, at 1970-01-01 00:00:00 UTC, 2 GPUs were free on 2 nodes (1 + 1) < the 4 asked: the pool was full",
    )
    assert s.pools[0].stranded_gpu_seconds == 0 and s.pools[0].unwanted_gpu_seconds == 0


def test_a_cordoned_node_frees_nothing_and_a_node_selector_picks_the_pool():
    h = history(
        [("a", "p", 8), ("b", "q", 8)],
        {("ns", "w"): [Run(0, 9, WAITING, 8)]},
        cordoned={"b"},
        wants={"w": ("q", "")},
    )
    [w] = judge(h, {}, Thresholds()).pending
    # Pool q's only node is cordoned: it offers nothing, so no node of q holds 8.
    assert (w.judged_against, w.reason) == ("pool q", "no_node")


def test_fragmentation_in_two_spells_asks_for_bin_packing():
    runs = {
        ("ns", "x"): [Run(0, 19, 0, 2)],
        ("ns", "y"): [Run(0, 19, 1, 2)],
        ("ns", "w1"): [Run(0, 5, WAITING, 4)],
        ("ns", "w2"): [Run(14, 19, WAITING, 4)],
    }
    h = history([("a", "p", 4), ("b", "p", 4)], runs)
    t = Thresholds(schedule_pending_seconds=300)
    s = judge(h, {}, t)
    assert [p.fragmentation_episodes for p in s.pools] == [2]
    plan = make_plan([], Use.over(0, 20 * 60, 60, t), t, scheduling=s)
    [action] = [a for a in plan.actions if a.action == "bin_pack"]
    assert "MostAllocated" in action.what
    # 12 steps stranded of 4 free GPUs at the catalogue's $0.80 for an L4.
    assert action.saving_usd_span == round(12 * 4 / 60 * 0.80, 2)
    # Each wait's consolidation moves x (2 GPUs) to b (2 free): a then has 4 free (a tie with moving y, broken
    # by the node's name).
    assert action.units == ["ns/x"]
    assert action.what.endswith("now: move ns/x (2 GPUs) to b: a then has 4 GPUs free for ns/w1, which waited 6 min")


def test_a_wait_with_room_is_not_blamed_on_gpus():
    h = history([("a", "p", 8)], {("ns", "w"): [Run(0, 9, WAITING, 2)]})
    owners = {("ns", "w"): Owner("Job", "w", "", WorkloadKind("job"))}
    [w] = judge(h, owners, Thresholds(), Pools("", {"job": "p"})).pending
    assert w.reason == "room" and w.evidence == "at 1970-01-01 00:00:00 UTC a node had 8 GPUs free >= the 2 asked"


def test_fragmentation_no_move_can_mend_asks_for_bin_packing_at_once():
    """One spell, but each node's pod (3 GPUs) fits nowhere else (1 free there): no consolidation, bin-pack."""
    runs = {
        ("ns", "x"): [Run(0, 19, 0, 3)],
        ("ns", "y"): [Run(0, 19, 1, 3)],
        ("ns", "w"): [Run(0, 9, WAITING, 2)],
    }
    t = Thresholds()
    s = judge(history([("a", "p", 4), ("b", "p", 4)], runs), {}, t)
    assert [w.reason for w in s.pending] == ["fragmented"] and s.consolidations == []
    plan = make_plan([], Use.over(0, 20 * 60, 60, t), t, scheduling=s)
    assert sorted(a.action for a in plan.actions) == ["bin_pack"]  # one namespace: no quota action
    [action] = [a for a in plan.actions if a.action == "bin_pack"]
    assert action.units == [] and "; now:" not in action.what
    assert action.saving_usd_span == round(10 * 2 / 60 * 0.80, 2)  # 10 steps of 2 free L4s


def test_pods_that_wait_in_a_cluster_with_no_gpu_node_are_said_without_a_crash():
    h = history([], {("ns", "w"): [Run(0, 9, WAITING, 1)]})
    s = judge(h, {}, Thresholds())
    assert [(w.reason, w.judged_against) for w in s.pending] == [("no_node", "every GPU node")]
    assert s.pools == []
    out = io.StringIO()
    Console(file=out, width=80).print(_cluster(s, 80))
    text = out.getvalue()
    assert all(line == line.rstrip() for line in text.splitlines())
    said = "- ns/w asked 1 GPU, waited 10 min (still waiting): no_node, no node of its pool or model;"
    assert said in " ".join(text.split())


def test_the_terminal_lists_the_longest_waits_and_counts_the_rest():
    """A busy month names hundreds of waits: the table lists MAX_WAITS, longest first, and says how many more."""
    from gpulens.analyzer.outputs.terminal import MAX_WAITS

    pods = {("ns", f"w{k:02d}"): [Run(0, 5 + k, WAITING, 1)] for k in range(MAX_WAITS + 3)}
    s = judge(history([], pods, steps=40), {}, Thresholds())
    out = io.StringIO()
    Console(file=out, width=120).print(_cluster(s, 120))
    text = " ".join(out.getvalue().split())
    listed = [k for k in range(MAX_WAITS + 3) if f"ns/w{k:02d} asked" in text]
    assert listed == list(range(3, MAX_WAITS + 3))  # the longest (w22 waited 28 steps) down to w03
    assert "- and 3 more that waited less (every one: --format json or csv)" in text


def test_consolidation_moves_the_one_pod_that_fits_rather_than_every_small_one():
    """a holds s (1 GPU) and t (2), 1 free; b holds u (2), 2 free; w waits for 3. Freeing a needs 2 more: t
    alone, to b's 2 free (s and t together would need 3 elsewhere). Freeing b needs u's 2 on a: 1 free."""
    runs = {
        ("ns", "s"): [Run(0, 19, 0, 1)],
        ("ns", "t"): [Run(0, 19, 0, 2)],
        ("ns", "u"): [Run(0, 19, 1, 2)],
        ("ns", "w"): [Run(0, 9, WAITING, 3)],
    }
    [found] = judge(history([("a", "p", 4), ("b", "p", 4)], runs), {}, Thresholds()).consolidations
    assert (found.node, [(m.pod, m.gpus, m.to_node) for m in found.moves]) == ("a", [("t", 2, "b")])
