"""Did the change work? Eight hours of a fleet whose GPU workloads go through each kind of change, as a real
Prometheus keeps it (backfilled with promtool: the GPUs as dcgm-exporter's series, kube-state-metrics, the vLLM
engines' counters, gauges and latency histograms, gpulens' own plan series), and as files (a trace with
kube-state-metrics recorded beside it): each change found once at the step it was first seen, its windows, its
figures before and after, its saving and its word (issue 74).

The world, on sixteen H100s at $2.50 a GPU-hour (--prices):
- ranker, a Deployment scaled 4 -> 3 -> 2 a minute apart: the same 120 requests a minute served without a queue
  after; it held, and saved two GPUs a day, as gpulens' plan had proposed;
- chat, a Deployment cut from 4 replicas to 1: its queue and latency rose past their spread; it regressed, and
  at least 3 replicas would have held the 90 requests a minute finished after;
- summarize, autoscaled by KEDA, its most replicas cut from 10 to 6 as its traffic doubled: the autoscaler's
  replicas (2 -> 4) are no change, and the cost that doubled with the work saved nothing and lost nothing;
- notebook-bob culled by Kubeflow's culler and not back: held, a GPU a day saved;
- notebook-amy culled and back 20 minutes later: a cull shorter than its user's pauses;
- quiet, a Deployment whose traffic halved with no change: nothing claimed;
- web, a Deployment without GPUs scaled up: none of a GPU fleet's changes.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpulens.analyzer.inputs import frame as fr
from gpulens.core.thresholds import Thresholds
from gpulens.simulator.cluster import kube_state_metrics
from gpulens.simulator.fleet import load_fleet
from tests import store_history as history
from tests.helpers import BackfilledPrometheus, gpulens, report_json, require_binary
from tests.test_report_html import layout

pytestmark = pytest.mark.slow

STEP = 60.0
HOURS = 8
START = history.START
TIMES = START + STEP * np.arange(HOURS * 60)
END = float(TIMES[-1])
PRICE = 2.5  # USD per H100-hour
DAY_COST = PRICE * 24  # one GPU held a day
KSM = {"job": "kube-state-metrics", "instance": "10.0.0.3:8080"}
VLLM = "vllm/vllm-openai:v0.6.3"
SETTLE = 600.0  # change_settle_seconds: the after window starts this long after a change's last step
#: When each change was made (kube-state-metrics shows it from its next scrape: these minutes).
SCALED = START + 3 * 3600  # ranker: 4 -> 3 -> 2, a minute apart
CUT = START + 3.5 * 3600  # chat: 4 -> 1
PEAK = START + 4 * 3600  # summarize's autoscaler: at most 10 replicas, then 6, as its traffic doubles
CULLED = START + 4.5 * 3600  # notebook-bob's StatefulSet stopped by its culler: 1 -> 0
CULLED_AMY = START + 5 * 3600  # notebook-amy's: 1 -> 0, and back 20 minutes later
BACK_AMY = CULLED_AMY + 20 * 60
MOVED = START + 2 * 3600  # the embed CronJob's next run, 5 minutes on, on a MIG 3g.40gb slice, not a whole H100
MOVED_BACK = MOVED + 300
ENDED = START + 6 * 3600  # JupyterHub's culler deletes carol's server: no controller says so, its GPU does
EMBED = ("embed-29380000-x1", "embed-29380120-x2")


def _pod(namespace: str, name: str, gpu: int, owner: str = "", **extra) -> dict:
    """A fleet file's workload: a pod on one GPU, its controller `owner` ("" for a bare pod)."""
    pod = {"profile": "llm_serving", "gpus": [gpu], "pod": f"{namespace}/{name}/main"}
    return pod | ({"owner": owner} if owner else {}) | extra


def _serving(deployment: str, suffixes: str, first_gpu: int) -> list[dict]:
    return [
        _pod("serve", f"{deployment}-6f7d9c8b5-{s}", first_gpu + k, f"Deployment/{deployment}", image=VLLM)
        for k, s in enumerate(suffixes.split())
    ]


def _notebook(name: str, gpu: int) -> dict:
    labels = {"notebook-name": name}
    return _pod("research", f"{name}-0", gpu, f"StatefulSet/{name}", profile="sparse_notebook", labels=labels)


GPUS = 19


FLEET = {
    "seed": 3,
    "nodes": [
        {
            "name": history.NODE,
            "model": "H100-SXM5-80GB",
            "gpus": GPUS,
            "workloads": [
                *_serving("ranker", "r0 r1 r2 r3", 0),
                *_serving("chat", "c0 c1 c2 c3", 4),
                *_serving("summarize", "s0 s1 s2 s3", 8),
                _notebook("notebook-bob", 12),
                _notebook("notebook-amy", 13),
                *_serving("quiet", "q0 q1", 14),
                *(
                    _pod("ml", pod, 16 + k, "CronJob/embed", profile="healthy_training", image="pytorch/pytorch:2.4.0")
                    for k, pod in enumerate(EMBED)
                ),
                _pod(
                    "research",
                    "jupyter-carol",
                    18,
                    profile="sparse_notebook",
                    labels={"app": "jupyterhub", "component": "singleuser-server"},
                ),
            ],
        }
    ],
}


def _alive(pod: str, t: np.ndarray) -> np.ndarray:
    """Whether `pod` runs at each of `t`."""
    ends = {
        "ranker-6f7d9c8b5-r3": SCALED,
        "ranker-6f7d9c8b5-r2": SCALED + STEP,
        **{f"chat-6f7d9c8b5-c{k}": CUT for k in (1, 2, 3)},
        "notebook-bob-0": CULLED,
    }
    ends |= {EMBED[0]: MOVED, "jupyter-carol": ENDED}
    starts = {f"summarize-6f7d9c8b5-s{k}": PEAK for k in (2, 3)} | {EMBED[1]: MOVED_BACK}
    alive = (t >= starts.get(pod, -np.inf)) & (t < ends.get(pod, np.inf))
    if pod == "notebook-amy-0":
        alive &= (t < CULLED_AMY) | (t >= BACK_AMY)
    return alive


def _trace() -> pd.DataFrame:
    """Each GPU pod's samples while it runs (the GPU of a pod that ended holds no pod: it is left out)."""
    workloads = FLEET["nodes"][0]["workloads"]
    trace = history.simulated_trace(workloads, GPUS, START, HOURS * 3600, STEP)
    keep = np.zeros(len(trace), dtype=bool)
    for pod in trace["pod"].astype(str).unique():
        rows = (trace["pod"] == pod).to_numpy()
        keep[rows] = _alive(pod, trace.loc[rows, "timestamp"].to_numpy())
    trace = trace[keep].reset_index(drop=True)
    # The embed job's second run holds a MIG 3g.40gb instance of its H100 (as NVML names one), not the whole GPU.
    sliced = (trace["pod"] == EMBED[1]).to_numpy()
    trace["gpu"] = trace["gpu"].astype(str).where(~sliced, trace["gpu"].astype(str) + "/gi2")
    trace["gpu_model"] = trace["gpu_model"].astype(str).where(~sliced, trace["gpu_model"].astype(str) + " MIG 3g.40gb")
    trace.loc[sliced, "memory_total_bytes"] = 40 * 2**30
    trace.loc[sliced, "memory_used_bytes"] = trace.loc[sliced, "memory_used_bytes"].clip(upper=30 * 2**30)
    return fr.normalize(trace)


def _series(name: str, labels: dict[str, str], values: np.ndarray, where: np.ndarray | None = None) -> list:
    text = "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"
    kept = np.ones(len(TIMES), dtype=bool) if where is None else where
    return [(text, float(t), float(v)) for t, v, k in zip(TIMES, values, kept, strict=True) if k]


#: vLLM's latency buckets (seconds) and where each minute's requests fall: under a second, or 2-5 s in a queue.
BUCKETS = (0.5, 1.0, 2.0, 5.0, 10.0)


def _engine(pod: str, per_minute: np.ndarray, waiting: np.ndarray, slow: np.ndarray) -> dict[str, list]:
    """A vLLM pod's series while it runs: `per_minute` requests finished each minute, `waiting` requests
    waiting, and `slow`: whether that minute's requests took 2-5 s (else 0.5-1 s)."""
    alive = _alive(pod, TIMES)
    target = {"job": "serving-engines", "namespace": "serve", "pod": pod, "model_name": "llm"}
    done = np.cumsum(np.where(alive, per_minute, 0.0))
    out: dict[str, list] = {
        "vllm:request_success_total": _series("vllm:request_success_total", target, done, alive),
        "vllm:num_requests_waiting": _series("vllm:num_requests_waiting", target, waiting, alive),
        "vllm:kv_cache_usage_perc": _series("vllm:kv_cache_usage_perc", target, 0.3 + 0.1 * (waiting > 0), alive),
    }
    buckets = []
    for le in (*BUCKETS, float("inf")):
        fast, late = le >= 1.0, le >= 5.0
        per = np.where(alive, per_minute * np.where(slow, late, fast), 0.0)
        label = "+Inf" if le == float("inf") else f"{le:g}"
        buckets += _series("vllm:e2e_request_latency_seconds_bucket", {**target, "le": label}, np.cumsum(per), alive)
    out["vllm:e2e_request_latency_seconds_bucket"] = buckets
    out["vllm:e2e_request_latency_seconds_count"] = _series(
        "vllm:e2e_request_latency_seconds_count", target, done, alive
    )
    return out


def _engines() -> dict[str, list]:
    """The serving pods' vLLM series: ranker's 120 a minute, 30 a pod then 60; chat's 120, 30 a pod, then the 90
    left to its one pod, queued and slow; summarize's 60 a pod, its traffic doubled with its pods."""
    ones = np.ones(len(TIMES))
    none = np.zeros(len(TIMES), dtype=bool)
    after_cut = TIMES >= CUT
    pods = {
        **{f"ranker-6f7d9c8b5-r{k}": (np.where(TIMES >= SCALED, 60.0, 30.0) * ones, 0 * ones, none) for k in range(4)},
        "chat-6f7d9c8b5-c0": (np.where(after_cut, 90.0, 30.0), np.where(after_cut, 8.0, 0.0), after_cut),
        **{f"chat-6f7d9c8b5-c{k}": (30.0 * ones, 0 * ones, none) for k in (1, 2, 3)},
        **{f"summarize-6f7d9c8b5-s{k}": (60.0 * ones, 0 * ones, none) for k in range(4)},
        # Half the traffic from midday, and no change: a quieter afternoon, not a saving.
        **{f"quiet-6f7d9c8b5-q{k}": (np.where(TIMES < START + 4 * 3600, 30.0, 15.0), 0 * ones, none) for k in (0, 1)},
    }
    families: dict[str, list] = {}
    for pod, (per_minute, waiting, slow) in pods.items():
        for name, samples in _engine(pod, per_minute, waiting, slow).items():
            families.setdefault(name, []).extend(samples)
    return families


def _kube_state() -> dict[str, list]:
    """kube-state-metrics' series: the pods (owners, labels, images, GPU requests) while they run, and the
    workloads' replicas and autoscaler."""
    [node] = load_fleet(FLEET)
    families: dict[str, list] = {}
    alive = {pod.pod: _alive(pod.pod, TIMES) for pod in node.pods}
    for k, t in enumerate(TIMES):
        running = [pod for pod in node.pods if alive[pod.pod][k]]
        for name, labels, value in history.exposition_samples(kube_state_metrics(running), KSM):
            families.setdefault(name, []).append((labels, float(t), value))
    ranker = np.select([TIMES < SCALED, TIMES < SCALED + STEP], [4, 3], 2)
    amy = np.where((TIMES >= CULLED_AMY) & (TIMES < BACK_AMY), 0.0, 1.0)
    replicas = {
        "kube_deployment_spec_replicas": [
            ({"namespace": "serve", "deployment": "ranker"}, ranker),
            ({"namespace": "serve", "deployment": "chat"}, np.where(TIMES < CUT, 4.0, 1.0)),
            # The autoscaler's doing: its replicas follow the traffic.
            ({"namespace": "serve", "deployment": "summarize"}, np.where(TIMES < PEAK, 2.0, 4.0)),
            ({"namespace": "serve", "deployment": "quiet"}, np.full(len(TIMES), 2.0)),
            ({"namespace": "serve", "deployment": "web"}, np.where(TIMES < CUT, 2.0, 5.0)),
        ],
        "kube_statefulset_replicas": [
            ({"namespace": "research", "statefulset": "notebook-bob"}, np.where(TIMES < CULLED, 1.0, 0.0)),
            ({"namespace": "research", "statefulset": "notebook-amy"}, amy),
        ],
    }
    hpa = {"namespace": "serve", "horizontalpodautoscaler": "keda-hpa-summarize"}
    target = {"scaletargetref_api_version": "apps/v1", "scaletargetref_kind": "Deployment"}
    replicas |= {
        "kube_horizontalpodautoscaler_spec_min_replicas": [(hpa, np.ones(len(TIMES)))],
        "kube_horizontalpodautoscaler_spec_max_replicas": [(hpa, np.where(TIMES < PEAK, 10.0, 6.0))],
        "kube_horizontalpodautoscaler_info": [
            (hpa | target | {"scaletargetref_name": "summarize"}, np.ones(len(TIMES)))
        ],
    }
    for name, rows in replicas.items():
        families[name] = [sample for labels, values in rows for sample in _series(name, labels | KSM, values)]
    return families


def _plan_series() -> dict[str, list]:
    """What the live analyzer's plan served for ranker before its change: 4 GPUs now, 2 after, $3,600 a month."""
    plan = {"namespace": "serve", "owner": "serve/Deployment/ranker", "team": "", "action": "fewer_replicas"}
    plan |= {"job": "gpulens-analyzer", "instance": "10.0.0.9:9400"}
    before = TIMES < SCALED
    ones = np.ones(len(TIMES))
    return {
        "gpulens_plan_gpus": _series("gpulens_plan_gpus", plan | {"state": "now"}, 4 * ones, before)
        + _series("gpulens_plan_gpus", plan | {"state": "after"}, 2 * ones, before),
        "gpulens_plan_monthly_saving_dollars": _series(
            "gpulens_plan_monthly_saving_dollars", plan, 3600 * ones, before
        ),
    }


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The trace, the store holding everything, and the files holding what files can."""
    trace = _trace()
    ksm = _kube_state()
    families = {**history.series_lines(trace, "dcgm-exported"), **ksm, **_engines(), **_plan_series()}
    tmp = tmp_path_factory.mktemp("changes")
    prices = tmp / "prices.yaml"
    prices.write_text(f"H100: {PRICE}\n")
    fr.write_trace(trace, tmp / "trace.csv")
    (tmp / "kube-state.om").write_text(history.families_openmetrics(ksm))
    prometheus = BackfilledPrometheus(tmp / "prometheus", history.families_openmetrics(families))
    try:
        yield {"prometheus": prometheus.url, "files": tmp, "prices": str(prices)}
    finally:
        prometheus.stop()


def _from_store(world) -> dict:
    return report_json(
        "--prometheus",
        world["prometheus"],
        *("--since", "2025-11-09T00:00:00Z", "--until", str(END), "--prometheus.step", "1m"),
        *("--prometheus.dcgm-selector", 'job="dcgm-exported"', "--prices", world["prices"]),
    )


def _from_files(world) -> dict:
    files = world["files"]
    return report_json(
        str(files / "trace.csv"), "--kube-state", str(files / "kube-state.om"), "--prices", world["prices"]
    )


#: Each change as found: (workload, what, before, after, first step, last step, source series).
H100 = "1 x NVIDIA H100 80GB HBM3"
FOUND = [
    ("ml/CronJob/embed", "gpus_per_pod", H100, f"{H100} MIG 3g.40gb", "MOVED", MOVED_BACK, "the GPUs each pod held"),
    ("serve/Deployment/ranker", "replicas", 4.0, 2.0, SCALED, SCALED + STEP, "kube_deployment_spec_replicas"),
    ("serve/Deployment/chat", "replicas", 4.0, 1.0, CUT, CUT, "kube_deployment_spec_replicas"),
    (
        "serve/Deployment/summarize",
        "autoscaler_max_replicas",
        10.0,
        6.0,
        PEAK,
        PEAK,
        "kube_horizontalpodautoscaler_spec_max_replicas",
    ),
    ("research/StatefulSet/notebook-bob", "replicas", 1.0, 0.0, CULLED, CULLED, "kube_statefulset_replicas"),
    ("research/StatefulSet/notebook-amy", "replicas", 1.0, 0.0, CULLED_AMY, CULLED_AMY, "kube_statefulset_replicas"),
    ("research/StatefulSet/notebook-amy", "replicas", 0.0, 1.0, BACK_AMY, BACK_AMY, "kube_statefulset_replicas"),
    ("research/Pod/jupyter-carol", "ended", H100, "none", "ENDED", "ENDED", "the GPUs each pod held"),
]


def _window(first: float, last: float, earliest: float = START, latest: float = END) -> float:
    """The windows' length (seconds) of a change first seen at `first` and last at `last`, by their rule: before
    ends a step before `first`, after starts SETTLE after `last`, each as long as the other's room allows."""
    return min(first - STEP - earliest, latest - (last + SETTLE))


def _check_found(document: dict, late: float = 0.0) -> dict[tuple[str, float], dict]:
    """The changes found are FOUND, a pod's end seen `late` (a backfilled store, without the staleness marker a
    scrape leaves, shows a pod's last sample for a step more)."""
    found = [
        (c["workload"], c["what"], c["before"], c["after"], c["start"], c["end"], c["source"].split(": ")[1])
        for c in document["changes"]
    ]
    ends = {"MOVED": MOVED + late, "ENDED": ENDED + late}
    assert found == [tuple(ends.get(v, v) if isinstance(v, str) else v for v in change) for change in FOUND]
    return {(c["workload"], c["start"]): c for c in document["changes"]}


def _check_figures(changes: dict[tuple[str, float], dict], late: float = 0.0) -> None:
    """What the GPU samples say of each change, the same from a store and from files: GPUs held and their cost
    a day, before and after, the saving of a fixed size, and the windows they were measured over (a pod's end
    seen `late`, as _check_found says)."""
    # The embed job moved to a MIG 3g.40gb slice: half an H100 (4 of its 8 memory slices), and half its cost.
    embed = changes[("ml/CronJob/embed", MOVED + late)]
    assert embed["workload_kind"] == "job"
    assert (embed["measured_before"]["gpus_held"], embed["measured_after"]["gpus_held"]) == (1.0, 0.5)
    assert embed["saving_usd_per_day"] == DAY_COST / 2
    assert embed["word"] == "held"
    assert re.fullmatch(r"held: its work per GPU-hour went from \d+% to \d+%", embed["reason"])
    # JupyterHub culled carol's server: no controller says so, its GPU does.
    carol = changes[("research/Pod/jupyter-carol", ENDED + late)]
    assert (carol["workload_kind"], carol["word"], carol["saving_usd_per_day"]) == ("notebook", "held", DAY_COST)
    ranker = changes[("serve/Deployment/ranker", SCALED)]
    assert ranker["window_seconds"] == _window(SCALED, SCALED + STEP) == 3 * 3600 - STEP
    assert ranker["measured_before"]["start"] == START
    assert ranker["measured_after"]["start"] == SCALED + STEP + SETTLE
    assert (ranker["measured_before"]["gpus_held"], ranker["measured_after"]["gpus_held"]) == (4.0, 2.0)
    before, after = ranker["measured_before"]["cost_usd_per_day"], ranker["measured_after"]["cost_usd_per_day"]
    assert (before, after) == pytest.approx((4 * DAY_COST, 2 * DAY_COST))
    # A fixed size costs the same whatever its load: two GPUs a day saved.
    assert ranker["saving_usd_per_day"] == 2 * DAY_COST
    assert ranker["saving_basis"].startswith("a fixed size costs the same whatever work it holds")

    chat = changes[("serve/Deployment/chat", CUT)]
    assert chat["window_seconds"] == _window(CUT, CUT)
    assert (chat["measured_before"]["gpus_held"], chat["measured_after"]["gpus_held"]) == (4.0, 1.0)
    assert chat["saving_usd_per_day"] == 3 * DAY_COST

    bob = changes[("research/StatefulSet/notebook-bob", CULLED)]
    assert bob["workload_kind"] == "notebook"
    assert (bob["measured_before"]["gpus_held"], bob["measured_after"]["gpus_held"]) == (1.0, 0.0)
    assert bob["measured_after"]["bottleneck"] == ""  # it held no GPU
    assert (bob["word"], bob["saving_usd_per_day"]) == ("held", DAY_COST)
    assert bob["reason"] == "held: no user came back to it within the span"

    amy = changes[("research/StatefulSet/notebook-amy", CULLED_AMY)]
    assert amy["word"] == "regressed"
    # Away, its pod wasted nothing: waste follows the GPU time held, not the clock of its verdict's episode.
    assert (amy["measured_after"]["gpus_held"], amy["measured_after"]["waste_gpu_hours_per_day"]) == (0.0, 0.0)
    assert amy["reason"].startswith("regressed: the notebook was back 20 min after its cull, within the 1 h")
    back = changes[("research/StatefulSet/notebook-amy", BACK_AMY)]
    assert back["word"] == "too_early"
    assert back["measured_before"] is None and back["saving_usd_per_day"] is None
    assert back["reason"].startswith("too little history before it in the span (9 min of the 1 h a window needs)")

    for change in changes.values():
        if change["word"] != "too_early":
            # Windows under a day: the day's pattern is not seen.
            assert change["confidence"] == 0.6
            assert change["evidence"]["windows"].endswith(
                "under a day: the day's pattern is not seen; report again after a day"
            )


def test_each_change_its_figures_saving_and_word_from_a_store(world):
    document = _from_store(world)
    changes = _check_found(document, late=STEP)
    _check_figures(changes, late=STEP)

    ranker = changes[("serve/Deployment/ranker", SCALED)]
    # The same 120 requests a minute, before on 4 replicas and after on 2, with no queue and the same latency.
    assert ranker["measured_before"]["requests_per_day"] == pytest.approx(120 * 1440, rel=1e-3)
    assert ranker["measured_after"]["requests_per_day"] == pytest.approx(120 * 1440, rel=1e-3)
    assert ranker["measured_after"]["health"]["waiting"]["median"] == 0
    assert ranker["word"] == "held"
    assert ranker["reason"] == "held: its queue and latency stayed within their spread before the change"
    # Proposed by the live analyzer's plan, from its series in the store: realised as proposed.
    assert ranker["proposed"]["action"] == "fewer_replicas"
    assert (ranker["proposed"]["gpus_now"], ranker["proposed"]["gpus_after"]) == (4.0, 2.0)
    assert ranker["proposed"]["saving_usd_per_30d"] == 3600.0
    assert ranker["saving_usd_per_30d"] == 2 * DAY_COST * 30
    # The report's own plan, over the whole span, marks its action on ranker as done, and how it went.
    [action] = [a for a in document["plan"] if a["owner"] == "serve/Deployment/ranker"]
    assert action["done"] == "replicas 4 -> 2 at 2025-11-09T03:00:00Z: held, saves $120.00 a day ($3,600 / 30 d)"

    chat = changes[("serve/Deployment/chat", CUT)]
    assert chat["word"] == "regressed"
    waiting = chat["measured_after"]["health"]["waiting"]
    assert (waiting["median"], chat["measured_before"]["health"]["waiting"]["at_percentile"]) == (8.0, 0.0)
    # The regression first, then what got worse past the before's spread, then the replicas that would have held.
    assert chat["reason"] == (
        "regressed: requests waiting rose to a median of 8, past its p95 of 0 before; request latency (p95) rose to "
        "a median of 4.85 s, past its p95 of 0.97 s before; at least 3 replicas would have held it: before, 4 served "
        "172,800 requests a day within that spread, and 129,600 requests a day were finished after, and more waited"
    )
    assert chat["proposed"] is None  # the plan proposed nothing for it

    summarize = changes[("serve/Deployment/summarize", PEAK)]
    # Its autoscaler doubled its pods with its traffic: a cost that doubled with the work saved nothing and lost
    # nothing, where a bill would show $120 a day more.
    before, after = summarize["measured_before"], summarize["measured_after"]
    assert (before["gpus_held"], after["gpus_held"]) == (2.0, 4.0)
    assert after["requests_per_day"] == pytest.approx(2 * before["requests_per_day"], rel=1e-9)
    assert summarize["saving_usd_per_day"] == pytest.approx(0.0, abs=0.01)
    assert summarize["saving_basis"].startswith("an autoscaler sizes it to its load: before, $120.00 a day for ")
    assert summarize["word"] == "held"

    # The quiet Deployment whose traffic halved changed nothing: no change, no saving claimed; nor the web tier.
    assert not {c["workload"] for c in document["changes"]} & {"serve/Deployment/quiet", "serve/Deployment/web"}


def test_the_same_changes_and_figures_from_files(world):
    document = _from_files(world)
    changes = _check_found(document)
    _check_figures(changes)
    # Files carry no engine series: the queue a cut may have raised is not seen, and said.
    chat = changes[("serve/Deployment/chat", CUT)]
    assert chat["measured_after"]["health"] is None
    assert chat["word"] == "held" and chat["confidence"] == 0.6
    assert chat["evidence"]["health"].startswith("no engine series")
    # Without kube-state-metrics nothing is known of changes: null, not "none found".
    assert report_json(str(world["files"] / "trace.csv"))["changes"] is None


def test_a_plan_kept_as_a_file_is_shown_against_the_change_made_after_it(world, tmp_path):
    """A plan kept from a report of the store before ranker's scale-down (its first three hours, as JSON), given to
    the report of the files that hold the whole span: the change is shown against the kept plan's action on its
    workload, the file and when the plan was made named; a change made before the plan is not. A file that holds
    no plan is refused before anything is read, naming the file and how to keep one."""
    kept = tmp_path / "plan-before-the-scale.json"
    made = gpulens(
        "report",
        "--prometheus",
        world["prometheus"],
        *("--since", "2025-11-09T00:00:00Z", "--until", str(SCALED - STEP), "--prometheus.step", "1m"),
        *("--prometheus.dcgm-selector", 'job="dcgm-exported"', "--prices", world["prices"]),
        *("--format", "json", "--out", str(kept)),
        timeout=300,
    )
    assert made.returncode == 0, made.stderr
    plan = json.loads(kept.read_text())
    made_at = plan["plan_summary"]["made_at"]
    assert made_at == SCALED - STEP  # the newest minute it read
    [action] = [a for a in plan["plan"] if a["owner"] == "serve/Deployment/ranker"]
    files = world["files"]
    document = report_json(
        str(files / "trace.csv"),
        *("--kube-state", str(files / "kube-state.om"), "--prices", world["prices"], "--plan", str(kept)),
    )
    changes = {(c["workload"], c["start"]): c for c in document["changes"]}
    proposed = changes[("serve/Deployment/ranker", SCALED)]["proposed"]
    when = datetime.fromtimestamp(made_at, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert proposed == {
        "action": action["action"],
        "gpus_now": action["gpus_now"],
        "gpus_after": action["gpus_after"],
        "saving_usd_per_30d": action["saving_usd_per_30d"],
        "source": f"the plan in {kept}, made at {when}",
    }
    assert action["action"] == "fewer_replicas" and action["gpus_after"] < action["gpus_now"] == 4
    # The embed job moved before the plan was made: the plan came after it, so it is no proposal for it.
    assert changes[("ml/CronJob/embed", MOVED)]["proposed"] is None

    (tmp_path / "not-a-plan.json").write_text('{"verdicts": []}')
    for bad, said in (
        ("not-a-plan.json", "no plan with the time it was made (plan_summary.made_at) in it"),
        ("missing.json", "cannot read it (No such file or directory)"),
    ):
        refused = gpulens(
            "report",
            str(files / "trace.csv"),
            "--kube-state",
            str(files / "kube-state.om"),
            "--plan",
            str(tmp_path / bad),
        )
        assert refused.returncode == 2 and refused.stdout == ""
        assert refused.stderr.startswith(f"gpulens report: --plan {tmp_path / bad}: {said}"), refused.stderr
        assert refused.stderr.endswith("--out plan.json`, or the live analyzer's /api/v1/plan, and give that file\n")


def _store_report(world, *args: str, columns: int = 100) -> str:
    """`gpulens report` of the store in a format `args` name, piped (`columns` wide where it is text)."""
    done = gpulens(
        "report",
        "--prometheus",
        world["prometheus"],
        *("--since", "2025-11-09T00:00:00Z", "--until", str(END), "--prometheus.step", "1m"),
        *("--prometheus.dcgm-selector", 'job="dcgm-exported"', "--prices", world["prices"]),
        *args,
        env={**os.environ, "COLUMNS": str(columns)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_format_shows_the_changes_regressions_first(world, tmp_path):
    document = _from_store(world)
    by_key = {(c["workload"], c["start"]): c for c in document["changes"]}

    # CSV: a row a change, the same figures as the JSON's.
    rows = list(csv.DictReader(io.StringIO(_store_report(world, "--format", "csv", "--by", "change"))))
    assert [(r["workload"], r["what"], r["word"]) for r in rows] == [
        (c["workload"], c["what"], c["word"]) for c in document["changes"]
    ]
    for row in rows:
        change = by_key[(row["workload"], datetime.fromisoformat(row["start"]).timestamp())]
        if change["word"] == "too_early":
            assert row["gpus_held_before"] == row["saving_usd_per_day"] == ""
            continue
        assert float(row["gpus_held_before"]) == change["measured_before"]["gpus_held"]
        assert float(row["saving_usd_per_day"]) == change["saving_usd_per_day"]
    [ranker] = [row for row in rows if row["workload"] == "serve/Deployment/ranker"]
    assert (ranker["proposed_action"], ranker["proposed_saving_usd_per_30d"]) == ("fewer_replicas", "3600.0")

    # Text: its own section, the regression first, its figures under it.
    text = _store_report(world, columns=110)
    section = text[text.index("What changed: 8 changes, 2 regressed") :].splitlines()
    assert section[2].startswith(
        "serve/Deployment/chat  replicas 4 -> 1 at 2025-11-09T03:30:00Z: regressed, confidence"
    )
    assert section[3] == "  saves $180.00 a day ($5,400 / 30 d)"
    assert section[4] == "  GPUs 4.00 -> 1.00, $240.00 -> $60.00 a day, over 3 h 29 min each"
    assert section[5].startswith("  regressed: requests waiting rose to a median of 8")

    # HTML, as Chromium shows it on a desktop and a phone: nothing runs off the page; a row a change, the
    # regressions first; each measured change drawn, before and after on one axis, GPUs held and work.
    chromium = require_binary("chromium")
    page = tmp_path / "report.html"
    _store_report(world, "--format", "html", "--out", str(page))
    for width in (1280, 390):
        assert layout(chromium, page, width, tmp_path)["scroll"] <= width
    shown = _dom(chromium, page, tmp_path)
    changes = shown[shown.index('<div id="changes">') : shown.index('<div id="waste">')]
    words = re.findall(r'<tr class="(regressed|held|too_early)">', changes)
    assert words == ["regressed", "regressed", "held", "held", "held", "held", "held", "too_early"]
    charts = re.findall(r"<svg[^>]*aria-label=\"GPUs held and work before and after the change of ([^\"]+)\"", changes)
    assert sorted(charts) == sorted(c["workload"] for c in document["changes"] if c["word"] != "too_early")
    assert len(re.findall(r"<polyline class=\"(before|after)-(held|work)\"", changes)) == 4 * len(charts)


def _dom(chromium: str, page, folder) -> str:
    """The page's DOM as headless Chromium built it."""
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--dump-dom"]
    browser += ["--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={folder / 'profile'}"]
    return subprocess.run([*browser, page.as_uri()], capture_output=True, text=True, timeout=120, check=True).stdout


def test_the_live_analyzer_serves_each_workloads_latest_change_and_its_outcome(world):
    """The live analyzer, cycling through the eight hours from the same store, serves each workload's latest
    change as metrics (when, its outcome, its saving a day) and in full at /api/v1/changes."""
    from gpulens.analyzer.inputs.live import PrometheusInput
    from gpulens.analyzer.runs.livepage import LivePage
    from gpulens.analyzer.runs.service import AnalyzerService

    now = [START + 600]
    source = PrometheusInput(
        world["prometheus"], window=600, step=STEP, clock=lambda: now[0], dcgm_selector='job="dcgm-exported"'
    )
    service = AnalyzerService(source, Thresholds(), {"H100": PRICE}, 600, lambda: now[0], HOURS * 3600.0)
    try:
        while now[0] <= END:
            assert service.cycle()
            now[0] += 600
        families = {f.name: f for f in text_string_to_metric_families(service.render_text().decode())}
    finally:
        source.close()

    def by(family: str) -> dict[tuple, float]:
        return {
            tuple(s.labels[k] for k in ("owner", "what", *(("outcome",) if "outcome" in s.labels else ()))): s.value
            for s in families[family].samples
        }

    outcomes = {key[:2]: key[2] for key, value in by("gpulens_change_outcome").items() if value == 1}
    assert outcomes == {
        ("ml/CronJob/embed", "gpus_per_pod"): "held",
        ("serve/Deployment/ranker", "replicas"): "held",
        ("serve/Deployment/chat", "replicas"): "regressed",
        ("serve/Deployment/summarize", "autoscaler_max_replicas"): "held",
        ("research/StatefulSet/notebook-bob", "replicas"): "held",
        # Its latest change is its return, too soon after its cull to judge.
        ("research/StatefulSet/notebook-amy", "replicas"): "too_early",
        ("research/Pod/jupyter-carol", "ended"): "held",
    }
    times = by("gpulens_change_timestamp_seconds")
    assert times[("serve/Deployment/chat", "replicas")] == CUT
    assert times[("research/StatefulSet/notebook-amy", "replicas")] == BACK_AMY
    saving = by("gpulens_change_daily_saving_dollars")
    assert saving[("serve/Deployment/chat", "replicas")] == pytest.approx(3 * DAY_COST, rel=0.02)
    assert ("research/StatefulSet/notebook-amy", "replicas") not in saving  # too early: no saving claimed
    status, _, body = service.changes_json()
    chat = [c for c in json.loads(body)["changes"] if c["workload"] == "serve/Deployment/chat"]
    assert status == 200 and chat[0]["reason"].startswith("regressed: requests waiting rose to a median of 8")
    # Its page shows them, regressions first, as a report's HTML does.
    page = LivePage(service).page()[2].decode()
    shown = page[page.index("<div id=changes>") : page.index("<div id=waste>")]
    assert re.findall(r"<tr class='(\w+)'><td>([^<]+)<", shown)[:2] == [
        ("regressed", "serve/Deployment/chat"),
        ("regressed", "research/StatefulSet/notebook-amy"),
    ]
