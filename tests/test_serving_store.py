"""A day of a serving fleet read from a real Prometheus and a real VictoriaMetrics, as a GPU Operator fleet
keeps it: dcgm-exporter's GPU series, kube-state-metrics' pods, and the serving engines' own metrics (vLLM), all
played by the simulator (the demo's code: simulator/cluster.py, simulator/engines.py).

The fleet (one H100 node, sampled every minute for a day):
- chat: a Deployment of 4 vLLM replicas (llm_serving) whose KV cache, not their SMs, bounds them: at the 14:00
  peak 80-95% of each KV cache is in use while the SMs are under 40% active. From the GPUs alone one or two
  replicas would carry the activity; the engines say all 4 are needed.
- summarize: a Deployment's vLLM replica that loaded its model and never served a request.
- two notebooks left open all day, running a short cell every 10-40 minutes: JupyterHub's (its label) and
  Kubeflow's (its notebook-name label, a StatefulSet).
- a Job's training run that finished in the morning and kept its GPU.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.inputs import frame as fr
from gpulens.core.thresholds import Thresholds
from gpulens.simulator.cluster import kube_state_metrics
from gpulens.simulator.engines import engine_text
from gpulens.simulator.fleet import load_fleet
from gpulens.simulator.workloads import PROFILES, LlmEngine, engine_load
from tests import store_history as week
from tests.helpers import REPO, BackfilledPrometheus, VictoriaMetrics

START = 1_762_646_400.0  # 2025-11-09 00:00 UTC
STEP = 60.0
SAMPLES = 24 * 60
NODE = "gpu-node-a"
VLLM = "vllm/vllm-openai:v0.6.3"
CHAT = [f"chat/chat-7c9d5b6f48-{suffix}" for suffix in ("b4k2x", "d7m9q", "h2p5w", "t8v3z")]
CHAT_PODS = {pod.split("/")[1] for pod in CHAT}
FLEET = {
    "seed": 11,
    "nodes": [
        {
            "name": NODE,
            "model": "H100-SXM5-80GB",
            "gpus": 8,
            "workloads": [
                *(
                    {"profile": "llm_serving", "gpus": [k], "pod": pod, "owner": "Deployment/chat", "image": VLLM}
                    | {"labels": {"app": "chat"}, "engine": "vllm"}
                    for k, pod in enumerate(CHAT)
                ),
                {
                    "profile": "never_served",
                    "gpus": [4],
                    "pod": "chat/summarize-5f6b8d9c7-q2w3e",
                    "owner": "Deployment/summarize",
                    "image": VLLM,
                    "engine": "vllm",
                },
                {
                    "profile": "sparse_notebook",
                    "gpus": [5],
                    "pod": "research/jupyter-alice",
                    "labels": {"app": "jupyterhub", "component": "singleuser-server"},
                    "image": "quay.io/jupyter/pytorch-notebook:cuda12-python-3.11",
                },
                {
                    "profile": "sparse_notebook",
                    "gpus": [6],
                    "pod": "research/notebook-bob-0",
                    "owner": "StatefulSet/notebook-bob",
                    "labels": {"notebook-name": "notebook-bob"},
                    "image": "kubeflownotebookswg/jupyter-pytorch-cuda-full:v1.9.0",
                },
                {
                    "profile": "training_finished",
                    "gpus": [7],
                    "pod": "ml/finetune-20251109-x7k2p",
                    "owner": "Job/finetune-20251109",
                    "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
                },
            ],
        }
    ],
}


def _day():
    """The node, its GPU samples as a trace (every minute, the last second's activity as DCGM averages it),
    and every other series the store holds: kube-state-metrics' and the engines', as name -> samples."""
    [node] = load_fleet(FLEET)
    times = START + STEP * np.arange(SAMPLES)
    rows = []
    for gpu in node.gpus:
        gpu.params.update(finish=9 * 3600.0)  # the Job's run ends at 09:00
        rows += [week.day_row(gpu, NODE, t, PROFILES[gpu.profile](gpu, float(t), STEP), 400) for t in times]
    trace = fr.normalize(pd.DataFrame(rows))
    others: dict[str, list[tuple[str, float, float]]] = {}
    cluster = week.exposition_samples(
        kube_state_metrics(node.pods), {"job": "kube-state-metrics", "instance": "10.0.0.3:8080"}
    )
    for t in times:
        for name, labels, value in cluster:
            others.setdefault(name, []).append((labels, float(t), value))
    for gpu in node.gpus:
        pod = next(p for p in node.pods if (p.namespace, p.pod) == (gpu.pod.namespace, gpu.pod.pod))
        if not pod.engine:
            continue
        target = {"job": "serving-engines", "namespace": pod.namespace, "pod": pod.pod, "instance": f"{pod.pod}:8000"}
        for t in times:
            text = engine_text(pod.engine, engine_load(gpu, float(t), START), "llm")
            for name, labels, value in week.exposition_samples(text, target):
                others.setdefault(name, []).append((labels, float(t), value))
    return node, trace, others


@pytest.fixture(scope="module")
def day():
    return _day()


@pytest.fixture(scope="module")
def stores(day, tmp_path_factory):
    _, trace, others = day
    families = {**week.series_lines(trace, "dcgm-exported"), **others}
    prometheus = BackfilledPrometheus(tmp_path_factory.mktemp("prometheus"), week.families_openmetrics(families))
    victoria = VictoriaMetrics(tmp_path_factory.mktemp("victoria-metrics"))
    try:
        victoria.load(week.families_prometheus_text(families))
        yield {"prometheus": prometheus.url, "victoria-metrics": victoria.url}
    finally:
        prometheus.stop()
        victoria.stop()


def _report(url: str, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "gpulens", "report", "--prometheus", url]
        + ["--since", "2025-11-09T00:00:00Z", "--until", str(START + STEP * (SAMPLES - 1))]
        + ["--prometheus.step", "1m", "--prometheus.dcgm-selector", 'job="dcgm-exported"', "--format", "json"]
        + list(args),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


#: Each pod's kind, engine and verdict over the day, as its data shows it.
EXPECTED = {
    **{pod: ("serving", "vllm", "overprovisioned_serving") for pod in CHAT},
    # It loaded its model and its engine finished no request: idle whatever its GPU showed.
    "chat/summarize-5f6b8d9c7-q2w3e": ("serving", "vllm", "idle"),
    "research/jupyter-alice": ("notebook", "", "idle"),
    "research/notebook-bob-0": ("notebook", "", "idle"),
    "ml/finetune-20251109-x7k2p": ("job", "", "idle"),
}


@pytest.mark.parametrize("store", ["prometheus", "victoria-metrics"])
@pytest.mark.slow
def test_each_pod_is_judged_by_what_kubernetes_and_its_engine_say(stores, store):
    document = _report(stores[store])
    found = {
        f"{v['namespace']}/{v['pod']}": (v["workload_kind"], v["engine"], v["bottleneck"])
        for v in document["verdicts"]
        if v["pod"]
    }
    assert found == EXPECTED
    by_pod = {f"{v['namespace']}/{v['pod']}": v for v in document["verdicts"]}
    assert by_pod["chat/summarize-5f6b8d9c7-q2w3e"]["evidence"]["engine"] == (
        "vllm: no request finished over the span; idle whatever its GPU showed (a model load, health checks)"
    )
    assert by_pod["research/jupyter-alice"]["kind_source"] == "label component=singleuser-server"
    assert by_pod["research/notebook-bob-0"]["kind_source"] == "label notebook-name=notebook-bob"
    assert by_pod["ml/finetune-20251109-x7k2p"]["kind_source"] == "owner Job"
    assert by_pod[CHAT[0]]["kind_source"] == f"image {VLLM}"


def _oracle(node) -> tuple[int, float, float, int]:
    """What the chat replicas need, from the simulator's own engines at each minute (not from a store): the
    replicas' running requests summed at p95 and at their peaks, over what one replica holds at 90% of its KV
    cache (Thresholds.plan_kv_cache_bound); never fewer than carried the summed peaks. And the requests one
    KV cache holds: the Deployment's replicas run one configuration."""
    t = Thresholds()
    times = START + STEP * np.arange(SAMPLES)
    gpus = [g for g in node.gpus if f"{g.pod.namespace}/{g.pod.pod}" in CHAT]
    running = np.array([[engine_load(g, float(s), START).running for s in times] for g in gpus], dtype=float)
    [held] = {LlmEngine.of(g).capacity for g in gpus}
    capacity = held * t.plan_kv_cache_bound
    at_p95 = float(np.quantile(running, t.plan_load_percentile, axis=1, method="linear").sum())
    peaks = float(running.max(axis=1).sum())
    needed = max(1, math.ceil(at_p95 / capacity - 1e-9), math.ceil(peaks / capacity - 1e-9))
    return needed, at_p95, peaks, held


@pytest.mark.parametrize("store", ["prometheus", "victoria-metrics"])
@pytest.mark.slow
def test_the_kv_cache_bound_deployment_keeps_the_replicas_its_engines_needed(stores, day, store):
    """From the GPUs alone the 4 chat replicas' summed activity fits in fewer; their engines ran as many
    requests at once as their KV caches held, so the plan keeps what carried the peak. The replica that never
    served is released; the notebooks are culled; the finished Job's GPU is released."""
    node, trace, _ = day
    needed, at_p95, peaks, held = _oracle(node)
    bound = Thresholds().plan_kv_cache_bound
    # The day's peak needs every replica: 3 would not hold it.
    assert needed >= len(CHAT) and peaks > (len(CHAT) - 1) * bound * held
    document = _report(stores[store])
    actions, not_planned = document["plan"], document["plan_summary"]["not_planned"]
    chat = [a for a in actions if a["owner"] == "chat/Deployment/chat"]
    assert chat == []  # no fewer replicas: each replica's own fix (a smaller GPU) is refused for its KV cache
    skipped = {tuple(sorted(n["units"])): n["reason"] for n in not_planned}
    assert skipped[tuple(sorted(CHAT))] == (
        f"its engines' load needs all 4 replicas ({needed} by it): vllm's requests running, summed over the "
        f"replicas: p95 {at_p95:.3g}, peaks {peaks:.3g}; {bound * held:.3g} running requests a replica: its peak "
        f"of {held} running filled 100% of its KV cache; 90% of it holds {bound * held:.3g}"
    )
    for pod in CHAT:
        assert skipped[(pod,)].startswith("its engine (vllm) takes most of its GPU's memory for its KV cache")
    released = {(a["owner"], a["action"]) for a in actions}
    assert released == {
        ("chat/Deployment/summarize", "release"),
        ("research/Pod/jupyter-alice", "release"),
        ("research/StatefulSet/notebook-bob", "release"),
        ("ml/Job/finetune-20251109", "release"),
    }
    # The same GPU samples without the engines and the cluster (a file of them) leave the cause open at 60 s
    # (unexplained: nothing to plan). Had they been judged serving from their GPUs alone, sizing by summed
    # activity would cut the Deployment below what its peak ran: what the engines' load prevents.
    from gpulens.analyzer.judging.history import analyze
    from gpulens.analyzer.outputs.plan import make_plan
    from gpulens.analyzer.outputs.use import Use

    t = Thresholds()
    alone = [v for v in analyze(trace, t) if v.pod in {p.split("/")[1] for p in CHAT}]
    assert {v.bottleneck for v in alone} == {"unexplained"}
    as_serving = [replace(v, bottleneck="overprovisioned_serving", served=True) for v in alone]
    [cut] = make_plan(as_serving, Use.of_trace(trace, STEP, t), t).actions
    assert cut.action == "fewer_replicas" and cut.gpus_after < len(CHAT) <= needed


@pytest.mark.slow
def test_the_live_analyzer_reads_the_engines_once_a_replica_is_judged_and_again_for_each_new_one(stores, day):
    """The live analyzer reads the engines' load over its history for the pods its cycle judged, and keeps it
    for OWNER_REFRESH_SECONDS unless a pod is judged that the read was not made for. Before any pod is judged
    it reads nothing: a read from a replica's first seconds would size its Deployment for five minutes."""
    from gpulens.analyzer.inputs.live import PrometheusInput

    node, _, _ = day
    gpu_of = {f"{g.pod.namespace}/{g.pod.pod}": g for g in node.gpus}
    history = 24 * 3600.0
    now = [START + 600]
    source = PrometheusInput(stores["prometheus"], window=600, step=STEP, clock=lambda: now[0])

    def peak(pod: str) -> float:
        """Its engine's most requests running at once over the history up to now, from the simulator."""
        times = START + STEP * np.arange(SAMPLES)
        seen = times[(times > now[0] - history) & (times <= now[0])]
        return float(max(engine_load(gpu_of[pod], float(t), START).running for t in seen))

    def loads(*pods: str) -> dict[str, float]:
        read = source.engine_loads({(p.partition("/")[0], p.partition("/")[2]) for p in pods}, history, 0.95)
        return {f"{namespace}/{pod}": load.running_peak for (namespace, pod), load in read.items() if pod in CHAT_PODS}

    assert loads() == {} and source.store.read_bytes == 0  # nothing judged: nothing asked of the store
    first = loads(CHAT[0])
    assert first == {pod: peak(pod) for pod in CHAT}  # one read holds every pod the store has
    read = source.store.read_bytes
    now[0] = START + 15 * 3600  # past the 14:00 peak
    assert loads(CHAT[0]) == first and source.store.read_bytes == read  # the same pods: the same read
    assert loads(CHAT[0], CHAT[1]) == {pod: peak(pod) for pod in CHAT} != first  # a pod newly judged: read again
    assert source.store.read_bytes > read
