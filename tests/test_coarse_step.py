"""A day of eight workloads as dcgm-exporter reports them every 30 s (through the GPU Operator's
ServiceMonitor), in a real Prometheus, reported from every sample and from every other one
(`--prometheus.step 1m`, what a long span is read at to halve the rows a report decodes and judges,
benchmarks/store_report.py). Each difference between the two is asserted and explained here, so that a
change that makes a coarse read say more or less than it does now is seen (docs/stores.md, "A coarser step")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests import store_history as history
from tests.helpers import REPO, BackfilledPrometheus

pytestmark = pytest.mark.slow

STEP = 30.0
WORKLOADS = [
    {"profile": "healthy_training", "gpus": [0], "pod": "ml/trainer-0/train"},
    {"profile": "data_starvation", "gpus": [1], "pod": "ml/starved-0/train"},
    {"profile": "checkpointing", "gpus": [2], "pod": "ml/ckpt-0/train"},
    {"profile": "collective_wait", "gpus": [3], "pod": "ml/nccl-0/train"},
    {"profile": "serving", "gpus": [4], "pod": "serve/llm-0/server"},
    {"profile": "notebook", "gpus": [5], "pod": "research/nb-0/jupyter"},
    {"profile": "idle_replica", "gpus": [6], "pod": "serve/idle-0/server"},
    {"profile": "memory_held", "gpus": [7], "pod": "research/held-0/jupyter"},
]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, dict]:
    """The day's report read at the store's 30 s ("raw") and at a minute ("1m"), as JSON."""
    trace = history.simulated_trace(WORKLOADS, len(WORKLOADS), history.START, 86400, STEP)
    samples = history.series_lines(trace, "dcgm-exported")
    prometheus = BackfilledPrometheus(tmp_path_factory.mktemp("prometheus"), history.families_openmetrics(samples))
    span = ["--since", "2025-11-09T00:00:00Z", "--until", str(history.START + 86400 - STEP), "--format", "json"]
    try:
        out = {}
        for name, step in (("raw", []), ("1m", ["--prometheus.step", "1m"])):
            done = subprocess.run(
                [sys.executable, "-m", "gpulens", "report", "--prometheus", prometheus.url, *span, *step],
                capture_output=True,
                text=True,
                cwd=REPO,
                timeout=300,
            )
            assert done.returncode == 0, done.stderr
            out[name] = json.loads(done.stdout) | {"stderr": done.stderr}
        return out
    finally:
        prometheus.stop()


def by_pod(report: dict) -> dict[str, dict]:
    return {verdict["pod"]: verdict for verdict in report["verdicts"]}


def test_a_coarse_step_is_said_and_reads_every_other_sample(reports):
    assert reports["raw"]["stderr"] == ""
    assert reports["1m"]["stderr"].startswith("gpulens report: reading a point every 60 s (--prometheus.step), coarser")
    assert {v["sample_seconds"] for v in reports["raw"]["verdicts"]} == {30.0}
    assert {v["sample_seconds"] for v in reports["1m"]["verdicts"]} == {60.0}


def test_every_pod_keeps_its_class_and_confidence(reports):
    raw, coarse = by_pod(reports["raw"]), by_pod(reports["1m"])
    assert sorted(raw) == sorted(coarse) == sorted(w["pod"].split("/")[1] for w in WORKLOADS)
    assert {pod: (v["bottleneck"], v["confidence"]) for pod, v in coarse.items()} == {
        pod: (v["bottleneck"], v["confidence"]) for pod, v in raw.items()
    }


def test_the_episodes_differ_only_where_a_replica_serves_requests_that_come_and_go(reports):
    """Each hour-long window's class is a share of its samples; a replica serving sparse requests sits near
    the shares its classes part at (quiet 30% of samples or more: serving; less: unexplained), so every other
    sample moves a few of its windows across: the same classes, in other proportions. Every other pod's
    windows are far from a boundary and keep their episodes, window for window."""
    raw, coarse = by_pod(reports["raw"]), by_pod(reports["1m"])

    def episodes(verdict: dict) -> list[tuple]:  # their waste is compared below
        return [(e["bottleneck"], e["start"], e["end"], e["confidence"]) for e in verdict["episodes"]]

    changed = {pod for pod in raw if episodes(raw[pod]) != episodes(coarse[pod])}
    assert changed == {"llm-0"}
    assert (
        set(raw["llm-0"]["by_class"])
        == set(coarse["llm-0"]["by_class"])
        == {
            "overprovisioned_serving",
            "unexplained",
            "wrong_gpu_type",
        }
    )
    # Its idle spells, each followed by requests, are booked as its quiet hours: serving's share is what its
    # serving and idle windows held (0.49 + 0.385 and 0.542 + 0.375), the others' as their windows.
    shares = {name: round(v["share"], 3) for name, v in coarse["llm-0"]["by_class"].items()}
    assert shares == {"overprovisioned_serving": 0.875, "wrong_gpu_type": 0.073, "unexplained": 0.052}
    raw_shares = {name: round(v["share"], 3) for name, v in raw["llm-0"]["by_class"].items()}
    assert raw_shares == {"overprovisioned_serving": 0.917, "unexplained": 0.073, "wrong_gpu_type": 0.01}


def test_each_pods_waste_is_the_raw_reads_within_a_thousandth_and_each_episodes_within_3_percent(reports):
    """A day's mean from every other sample: each pod's waste within 0.1% of every sample's. An episode is
    shorter and its mean rests on fewer samples: the notebook's hour of cells differs most, by 2.6% (2,627
    GPU-seconds against 2,558)."""
    raw, coarse = by_pod(reports["raw"]), by_pod(reports["1m"])
    for pod, verdict in raw.items():
        assert coarse[pod]["wasted_gpu_seconds"] == pytest.approx(verdict["wasted_gpu_seconds"], rel=1e-3), pod
        if pod != "llm-0":  # its episodes differ (above)
            wasted = [e["wasted_gpu_seconds"] for e in coarse[pod]["episodes"]]
            assert wasted == pytest.approx([e["wasted_gpu_seconds"] for e in verdict["episodes"]], rel=0.03), pod
    # The notebook's second episode: its hour of cells, every sample's waste and every other sample's.
    notebook_hour = [round(r["nb-0"]["episodes"][1]["wasted_gpu_seconds"], 1) for r in (raw, coarse)]
    assert notebook_hour == [2558.0, 2626.6]


def test_the_plan_differs_only_in_the_sizes_the_peaks_give(reports):
    """The plan sizes a unit by its peak: its highest mean over short spans (84 s bins: a day in 1,024). From
    every other sample the spans hold half the samples and the peaks read higher. The replica's, 30.2% against
    21.5%, needs 34.7% with the plan's headroom, past a 2g.20gb slice's 2/7 of the GPU: a 3g.40gb instead. The
    rank waiting on its collectives (unexplained from these samples, and sized whatever its cause) needs 30.5% of
    its H100 from every sample, which an A100 80GB's 312 TFLOPS carry (302 needed); from every other sample
    33.0%, which they do not (326): no smaller GPU, and the plan says so."""
    raw = {action["owner"]: action for action in reports["raw"]["plan"]}
    coarse = {action["owner"]: action for action in reports["1m"]["plan"]}
    sized = {"serve/llm-0", "ml/nccl-0"}
    assert sorted(raw) == sorted(coarse.keys() | {"ml/nccl-0"})
    assert {o: a["action"] for o, a in coarse.items() if o not in sized} == {
        o: a["action"] for o, a in raw.items() if o not in sized
    }
    assert (raw["serve/llm-0"]["action"], raw["serve/llm-0"]["what"]) == (
        "mig",
        "a MIG 2g.20gb slice of its NVIDIA H100 80GB HBM3",
    )
    assert (coarse["serve/llm-0"]["action"], coarse["serve/llm-0"]["what"]) == (
        "mig",
        "a MIG 3g.40gb slice of its NVIDIA H100 80GB HBM3",
    )
    assert raw["serve/llm-0"]["evidence"]["peak"].startswith("activity 21.5% of its GPU (the highest 84 s mean)")
    assert coarse["serve/llm-0"]["evidence"]["peak"].startswith("activity 30.2% of its GPU (the highest 84 s mean)")
    assert (raw["ml/nccl-0"]["action"], raw["ml/nccl-0"]["what"]) == (
        "cheaper_gpu",
        "move to NVIDIA A100-SXM4-80GB ($1.50/GPU-h less)",
    )
    [unsized] = [n["reason"] for n in reports["1m"]["plan_summary"]["not_planned"] if n["owner"] == "ml/nccl-0"]
    assert unsized.startswith("no smaller GPU fits: no MIG profile, cheaper model or time-sliced share")
    assert "33.0% of its GPU's compute and 55.5 GiB" in unsized
