"""The whole system, as `gpulens demo` runs it: simulated exporters, the analyzer, a real Prometheus
loading the generated rules and a real Alertmanager delivering to the demo's webhook receiver.

Proves what the generated artefacts promise: every PromQL expression of every dashboard panel,
variable and recording rule returns data from the simulated fleet; the alert rules fire for exactly
the simulated sick GPUs and pods; the low-SM page for the data-starved pod reaches the webhook with the
analyzer's class and recommendation; no healthy pod pages. Alert timings are shortened (the
thresholds file below), the rules are otherwise the ones `gpulens alerts` writes.
"""

import re
import time

import pytest
import requests
import yaml

from gpulens.core import mixin
from gpulens.core.bottlenecks import RECOMMENDATIONS, STALL_CAUSES
from gpulens.core.catalog import model_info
from gpulens.dashboards import gpulens as dashboards
from gpulens.simulator.fleet import DEFAULT_FLEET
from tests.helpers import samples, start_demo_stack, wait_until
from tests.test_analyzer_service import CAUSES, EXPECTED

#: Every test here starts real servers or gpulens processes (the fast lane skips them: pytest -m "not slow").
pytestmark = pytest.mark.slow

#: The pods of the serving node whose workloads change while the demo runs (sim-h100-h, docs/changes.md) that
#: outlast the changes, as the stack judges them with their engines' series: the ranker's replica left with the
#: load of two, its queue empty (its quiet spells are headroom); the summarizer's left with the load of three,
#: its queue never empty while its SMs stay near 30% (the cause open: its engine's limit on requests at once, or
#: its loop); the CronJob's run on a MIG 3g.40gb slice, at 18% of the slice (a smaller one would do). The
#: replicas scaled away, the notebook culled and the CronJob's first run leave the analyzer's window once gone.
CHANGED = {
    "serving/ranker-7d4b9c6f58-h3k8p": "overprovisioned_serving",
    "serving/summarize-5c8f7b9d64-b2m6r": "unexplained",
    "ml/embed-29380326-w4x7k": "wrong_gpu_type",
}
STACK_EXPECTED = {**EXPECTED, **CHANGED}

FAST_ALERTS = """alert_rate_window: 20s
alert_low_sm_for: 90s
alert_idle_for: 60s
alert_verdict_for: 20s
alert_memory_held_for: 20s
alert_nvlink_for: 20s
alert_target_down_for: 30s
throttle_seconds: 20
change_settle_seconds: 10
change_window_min_seconds: 30
change_judge_seconds: 10
alert_change_regressed_for: 20s
"""

#: (alert, subject) for every simulated problem: pods by namespace/name, GPUs by node/index.
EXPECTED_ALERTS = {
    # SM activity under 30 %: data starvation (15-24 %), idle, light inference on an H100 (the embedder and
    # the chat-api Deployment's two replicas), interconnect.
    ("GpulensPodLowSmActivity", "nlp/bert-finetune-0"),
    ("GpulensPodLowSmActivity", "research/notebook-alice-0"),
    ("GpulensPodLowSmActivity", "serving/embedder-0"),
    ("GpulensPodLowSmActivity", "serving/chat-api-6c8f9d7b54-x2k4p"),
    ("GpulensPodLowSmActivity", "serving/chat-api-6c8f9d7b54-m7q9z"),
    # The serving node's ranker replica left with the load of two (SMs a fifth active); its summarizer replica
    # left with the load of three is busier (no page), but its queue grew: its Deployment's cut regressed,
    # ticketed to its owners.
    ("GpulensPodLowSmActivity", "serving/ranker-7d4b9c6f58-h3k8p"),
    # The CronJob's run on a MIG 3g.40gb slice keeps its SMs under 30% of the slice: a smaller slice would do.
    ("GpulensPodLowSmActivity", "ml/embed-29380326-w4x7k"),
    ("GpulensWorkloadChangeRegressed", "serving/Deployment/summarize"),
    ("GpulensPodLowSmActivity", "vision/allreduce-bench-0"),
    ("GpulensPodGpuIdle", "research/notebook-alice-0"),
    # The notebook node: two kernels left open on idle GPUs, one calling a small model on an A100, one
    # generating text token by token from one host thread (its page says the cause is unexplained).
    ("GpulensPodLowSmActivity", "research/notebook-bob-0"),
    ("GpulensPodLowSmActivity", "research/notebook-carol-0"),
    ("GpulensPodLowSmActivity", "research/notebook-dave-0"),
    ("GpulensPodLowSmActivity", "research/notebook-erin-0"),
    ("GpulensPodGpuIdle", "research/notebook-bob-0"),
    ("GpulensPodGpuIdle", "research/notebook-erin-0"),
    ("GpulensPodDataStarvation", "nlp/bert-finetune-0"),
    ("GpulensPodMemoryFragmentation", "nlp/llm-sft-0"),
    # Host stalls: ranks waiting at low power. The one waiting on other pods 75% of the time has SMs busy
    # under 30% too (paged; its ticket is muted by the page in Alertmanager, not in Prometheus).
    ("GpulensPodHostStall", "nlp/gpt-pretrain-0"),
    ("GpulensPodHostStall", "nlp/llama-pretrain-worker-1"),
    ("GpulensPodHostStall", "vision/swin-ddp-0"),
    ("GpulensPodLowSmActivity", "nlp/llama-pretrain-worker-1"),
    ("GpulensGpuMemoryHeldWithoutPod", "sim-h100-a/5"),
    ("GpulensGpuThrottled", "sim-a100-b/2 hw_thermal"),
    ("GpulensGpuThrottled", "sim-a100-b/2 sw_thermal"),
    ("GpulensGpuXidFault", "sim-a100-b/4 xid 63"),
    # The first GPU of the job on failing NVLinks: 4 links down, CRC errors above DCGM's limit.
    ("GpulensGpuNvlinkDegraded", "sim-h100-d/2"),
    # The notebook node's fine-tuning job waiting on parameters offloaded to host memory (SMs 16% busy), and
    # its generate() loop driven by one Python thread (SMs about 10% busy): host stalls with their causes.
    ("GpulensPodLowSmActivity", "research/zero-offload-ft-0"),
    ("GpulensPodHostStall", "research/zero-offload-ft-0"),
    ("GpulensPodLowSmActivity", "research/notebook-frank-0"),
    ("GpulensPodHostStall", "research/notebook-frank-0"),
    ("GpulensGpuLost", "sim-a100-b/5"),
    # Pipeline stages waiting in bubbles too large for their schedule (SMs about half busy: no low-SM page);
    # the pipeline whose bubbles are what its schedule costs pages nobody.
    ("GpulensPodHostStall", "nlp/gpt-pipeline-0"),
    # The research pool's fine-tune, waiting (since an hour before the demo began) for 8 H100s on one node
    # while 9 are free on two.
    ("GpulensGpuPodWaitingWhileGpusFree", "pool research NVIDIA H100 80GB HBM3"),
}
HEALTHY = {pod for pod, bottleneck in STACK_EXPECTED.items() if bottleneck == "healthy"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    stack = start_demo_stack(tmp_path_factory.mktemp("stack"), FAST_ALERTS, speed=5, window=60, interval=2)
    yield stack
    stack.stop()


def query(stack, expr: str) -> list[dict]:
    response = requests.get(f"http://{stack.plan.prometheus}/api/v1/query", params={"query": expr}, timeout=10)
    body = response.json()
    assert body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def firing_alerts(stack) -> set[tuple[str, str]]:
    alerts = requests.get(f"http://{stack.plan.prometheus}/api/v1/alerts", timeout=5).json()["data"]["alerts"]
    out = set()
    for a in alerts:
        if a["state"] != "firing":
            continue
        labels = a["labels"]
        if labels.get("pod"):
            subject = f"{labels['namespace']}/{labels['pod']}"
        elif "owner" in labels:  # a workload's change
            subject = labels["owner"]
        elif "pool" in labels:
            subject = f"pool {labels['pool']} {labels['gpu_model']}"
        else:
            subject = f"{labels.get('node', '')}/{labels.get('gpu', '')}"
            subject += f" {labels['reason']}" if "reason" in labels else ""
            subject += f" xid {labels['xid']}" if "xid" in labels else ""
        out.add((labels["alertname"], subject))
    return out


def eventually(observe, expected, timeout: float, what: str):
    """Poll observe() until it equals `expected`; on timeout, fail showing the difference."""
    deadline = time.monotonic() + timeout
    while True:
        seen = observe()
        if seen == expected or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert seen == expected, (
        f"{what} after {timeout} s: missing {expected - seen}, unexpected {seen - expected}"
        if isinstance(seen, set)
        else f"{what}: {seen} != {expected}"
    )


def classes(stack) -> dict[str, str]:
    verdicts = requests.get(f"http://{stack.plan.analyzer}/api/v1/verdicts", timeout=5).json()["verdicts"]
    return {f"{v['namespace']}/{v['pod']}": v["bottleneck"] for v in verdicts if v["pod"]}


def causes(stack) -> dict[str, tuple[str, str]]:
    """Each host stall's cause and the fix its verdict says."""
    verdicts = requests.get(f"http://{stack.plan.analyzer}/api/v1/verdicts", timeout=5).json()["verdicts"]
    return {f"{v['namespace']}/{v['pod']}": (v["cause"], v["recommendation"]) for v in verdicts if v["cause"]}


def test_every_simulated_pod_is_classified_as_its_profile(stack):
    """Every pod's class, and each host stall's cause and fix, at the speed the demo runs (five-fold: its
    checkpoints' 15-25 s saves last 3-5 s, judged at thresholds scaled to that clock)."""
    eventually(lambda: classes(stack), STACK_EXPECTED, 240, "the analyzer's classes")
    truth = {**CAUSES, "research/notebook-frank-0": "host_thread"}  # its pod's CPU, from the stack's cAdvisor
    eventually(lambda: causes(stack), {k: (c, STALL_CAUSES[c]) for k, c in truth.items()}, 60, "the stalls' causes")


def workloads(stack) -> dict[str, tuple[str, str]]:
    verdicts = requests.get(f"http://{stack.plan.analyzer}/api/v1/verdicts", timeout=5).json()["verdicts"]
    return {f"{v['namespace']}/{v['pod']}": (v["owner_kind"], v["owner"]) for v in verdicts if v["pod"]}


def test_the_analyzer_names_each_pods_workload_from_the_simulated_kube_state_metrics(stack):
    """The demo plays kube-state-metrics for its fleet; the analyzer reads each pod's controller from it
    through a real Prometheus (a Deployment's pods through their ReplicaSet): what the fleet file names."""
    fleet = yaml.safe_load(DEFAULT_FLEET.read_text())
    expected = {
        w["pod"]: tuple(w["owner"].split("/")) if "owner" in w else ("Pod", w["pod"].split("/")[1])
        for node in fleet["nodes"]
        for w in node["workloads"]
        if "pod" in w and "until" not in w  # a pod that ended has left the analyzer's window
    }
    eventually(lambda: workloads(stack), expected, 240, "the pods' workloads")


#: What each demo pod is, by the stack its fleet file gives it (labels, image, owner: docs/workloads.md).
KINDS = {
    **{pod: ("notebook", "") for pod in STACK_EXPECTED if "/notebook-" in pod},  # JupyterHub's and Kubeflow's
    "serving/chat-api-6c8f9d7b54-x2k4p": ("serving", "vllm"),
    "serving/chat-api-6c8f9d7b54-m7q9z": ("serving", "vllm"),
    "serving/ranker-7d4b9c6f58-h3k8p": ("serving", "vllm"),
    "serving/summarize-5c8f7b9d64-b2m6r": ("serving", "vllm"),
    "serving/embedder-0": ("serving", "triton"),
}


def test_the_analyzer_knows_what_each_pod_is_from_kubernetes(stack):
    """JupyterHub's and Kubeflow's notebooks by their labels, the vLLM replicas and the Triton server by their
    images, the PyTorchJobs and Jobs by their owners: read from the simulated kube-state-metrics through a real
    Prometheus, in every verdict the API serves."""

    def kinds() -> dict[str, tuple[str, str]]:
        verdicts = requests.get(f"http://{stack.plan.analyzer}/api/v1/verdicts", timeout=5).json()["verdicts"]
        return {f"{v['namespace']}/{v['pod']}": (v["workload_kind"], v["engine"]) for v in verdicts if v["pod"]}

    expected = {pod: KINDS.get(pod, ("job", "")) for pod in STACK_EXPECTED}
    eventually(kinds, expected, 240, "the pods' kinds")

    def scraped() -> dict[str, tuple[str, str]]:
        """The same, as the Prometheus scraping the analyzer has them (one series a pod; no engine, no label)."""
        return {
            f"{r['metric']['namespace']}/{r['metric']['pod']}": (
                r["metric"]["workload_kind"],
                r["metric"].get("engine", ""),
            )
            for r in query(stack, "gpulens_pod_workload_info == 1")
        }

    eventually(scraped, expected, 120, "gpulens_pod_workload_info")


def test_the_serving_engines_metrics_reach_prometheus_as_their_pods(stack):
    """The demo plays the engines of its serving pods, each scraped as its pod (its namespace and pod labels):
    vLLM for the chat-api Deployment's two replicas and the serving node's replicas left by its changes, Triton for
    the embedder. They count the requests their GPUs serve (vllm_replica: one a simulated second at random, so 5 a
    real second at 5x speed, the ranker's left twice that, the summarizer's left as many as it can finish, 8 a
    simulated second; light_inference: one every 0.5 simulated seconds, so 10)."""
    from gpulens.simulator.workloads import LIGHT_REQUEST_PERIOD, REPLICA_CAPACITY, REPLICA_REQUESTS_PER_SECOND

    chat = REPLICA_REQUESTS_PER_SECOND * stack.speed  # requests a real second, each replica

    def rates() -> dict[str, float]:
        out = {}
        for expr in ("rate(vllm:request_success_total[20s])", "rate(nv_inference_request_success[20s])"):
            out |= {
                f"{r['metric']['namespace']}/{r['metric']['pod']}": float(r["value"][1]) for r in query(stack, expr)
            }
        return out

    expected = {
        "serving/chat-api-6c8f9d7b54-x2k4p": chat,
        "serving/chat-api-6c8f9d7b54-m7q9z": chat,
        "serving/embedder-0": stack.speed / LIGHT_REQUEST_PERIOD,
        "serving/ranker-7d4b9c6f58-h3k8p": 2 * chat,
        "serving/summarize-5c8f7b9d64-b2m6r": REPLICA_CAPACITY * stack.speed,
    }
    # Until a series is 20 s old, rate() spreads what it counted over all 20 s: awaited, not slept on.
    eventually(rates, pytest.approx(expected, rel=0.05), 120, "the engines' rates")
    [kv] = query(stack, 'max(vllm:kv_cache_usage_perc{pod="chat-api-6c8f9d7b54-x2k4p"})')
    blocks = float(kv["value"][1]) / 0.03  # 3% of the KV cache for each request running
    assert blocks == pytest.approx(round(blocks)), kv
    # The fleet dashboard's serving panel: the chat-api Deployment (its pods' ReplicaSet, from the simulated
    # kube-state-metrics) carries both replicas' requests, the ranker and summarizer theirs on the one replica each
    # kept; the embedder is a StatefulSet's, no Deployment's.
    [(_, _, load), (_, _, replicas)] = [q for q in dashboard_queries() if q[1] == "Serving load against replicas"]
    by_deployment = {
        (r["metric"]["namespace"], r["metric"]["deployment"]): float(r["value"][1])
        for r in query(stack, substitute(load, "serving/chat-api"))
    }
    assert by_deployment == pytest.approx(
        {
            ("serving", "chat-api"): 2 * chat,
            ("serving", "ranker"): 2 * chat,
            ("serving", "summarize"): REPLICA_CAPACITY * stack.speed,
        },
        rel=0.05,
    )
    counted = query(stack, substitute(replicas, "serving/chat-api"))
    assert sorted((r["metric"]["deployment"], r["value"][1]) for r in counted) == [
        ("chat-api", "2"),
        ("ranker", "1"),
        ("summarize", "1"),
    ]


def test_the_chat_deployment_is_sized_by_its_engines_load(stack):
    """The chat-api replicas (vllm_replica: a request a simulated second at random, 3% of the KV cache for each
    one running) are overprovisioned_serving from their GPUs; the plan sizes the Deployment from what vLLM
    counted through the real Prometheus: a few requests running at once at peak, summed over the replicas,
    against 30 a replica at 90% of its KV cache (each running request fills 3%): one replica carries them."""

    def sized() -> dict | None:
        """The chat-api Deployment's action, once its engines' load sizes it."""
        plan = requests.get(f"http://{stack.plan.analyzer}/api/v1/plan", timeout=10).json()["plan"]
        action = next((a for a in plan if a["owner"] == "serving/Deployment/chat-api"), None)
        return action if action and "load" in action["evidence"] else None

    found = wait_until(sized, 240, interval=2, what="a plan sizing chat-api by its engines' load")
    assert (found["action"], found["gpus_now"], found["gpus_after"]) == ("fewer_replicas", 2.0, 1.0)
    said = re.fullmatch(
        r"vllm's requests running, summed over the replicas: p95 ([\d.]+), peaks (\d+)", found["evidence"]["load"]
    )
    assert said and 0 < float(said[1]) <= int(said[2]) < 26, found["evidence"]["load"]  # 26: 30 less 15%
    sizing = re.fullmatch(
        r"30 running requests a replica: its peak of (\d+) running filled (\d+)% of its KV cache; 90% of it holds 30",
        found["evidence"]["sizing"],
    )
    assert sizing and int(sizing[2]) == 3 * int(sizing[1]), found["evidence"]["sizing"]


def test_the_research_pools_free_gpus_are_stranded_while_its_whole_node_job_waits(stack):
    """The demo's cluster as the analyzer reads it from kube-state-metrics in Prometheus (demo.yaml): the
    research pool's 9 free H100s, 2 on sim-h100-a (GPU 7, and GPU 5, whose memory a process holds but no pod
    asks for: Kubernetes offers it) and 7 on sim-h100-g, stranded while a fine-tune waits for 8 on one node
    (fragmented); the training pool has no H100 free for its pre-training job's 4 (pool_full)."""
    h100 = "NVIDIA H100 80GB HBM3"
    expected = {
        ("gpulens_cluster_free_gpus", "research", ""): 9,
        ("gpulens_cluster_largest_free_gpus", "research", ""): 7,
        ("gpulens_cluster_stranded_gpus", "research", ""): 9,
        ("gpulens_cluster_waiting_pods", "research", "fragmented"): 1,
        ("gpulens_cluster_waiting_gpus", "research", "fragmented"): 8,
        ("gpulens_cluster_free_gpus", "training", ""): 0,
        ("gpulens_cluster_stranded_gpus", "training", ""): 0,
        ("gpulens_cluster_waiting_pods", "training", "pool_full"): 1,
        ("gpulens_cluster_waiting_gpus", "training", "pool_full"): 4,
    }

    def said() -> dict[tuple[str, str, str], float]:
        exposed = samples(requests.get(f"http://{stack.plan.analyzer}/metrics", timeout=5).text)
        found = {}
        for (name, labels), value in exposed.items():
            label = dict(labels)
            if name.startswith("gpulens_cluster_") and label.get("gpu_model") == h100:
                found[name, label["pool"], label.get("reason", "")] = value
        return {key: found[key] for key in expected if key in found}

    eventually(said, expected, 120, "the research pool's stranded GPUs")


def test_rules_fire_for_exactly_the_simulated_sick_gpus(stack):
    # The last of them needs its pod's class held for its rule's `for` (2 minutes in the demo) after the
    # analyzer's window has filled: about 3 minutes alone, longer while other tests load the machine.
    try:
        eventually(lambda: firing_alerts(stack), EXPECTED_ALERTS, 420, "the firing alerts")
    except AssertionError as failed:
        # Each pod whose alert is missing or unexpected, as the analyzer's history booked it: a class that came
        # late, or one that flapped and kept restarting the rule's `for`.
        pods = {pod for _, pod in EXPECTED_ALERTS ^ firing_alerts(stack)}
        body = requests.get(f"http://{stack.plan.analyzer}/api/v1/verdicts", timeout=5).json()
        booked = {
            f"{h['namespace']}/{h['pod']}": [(e["bottleneck"], round(e["end"] - e["start"])) for e in h["episodes"]]
            for h in body["history"]
            if f"{h['namespace']}/{h['pod']}" in pods
        }
        raise AssertionError(f"{failed}\nthe analyzer's history of those pods (class, seconds): {booked}") from None


#: The demo's changes (gpulens/simulator/fleets/demo.yaml, node sim-h100-h) as the analyzer must find and judge
#: them: (workload, what) -> (before, after, word), and the GPUs held before and after (a MIG 3g.40gb slice is
#: half an H100: four of its eight memory slices, NVIDIA's MIG user guide).
DEMO_CHANGES = {
    ("research/StatefulSet/notebook-gina", "replicas"): (1.0, 0.0, "held", 1.0, 0.0),
    ("serving/Deployment/ranker", "replicas"): (2.0, 1.0, "held", 2.0, 1.0),
    ("serving/Deployment/summarize", "replicas"): (3.0, 1.0, "regressed", 3.0, 1.0),
    ("ml/CronJob/embed", "gpus_per_pod"): (
        "1 x NVIDIA H100 80GB HBM3",
        "1 x NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "held",
        1.0,
        0.5,
    ),
}


def test_the_demos_changes_are_found_judged_ticketed_and_shown(stack):
    """Each change the demo makes while it runs, found in the simulated kube-state-metrics and GPU series through
    a real Prometheus and judged over equal windows: a scale-down that held, a cut too far whose queue grew (its
    ticket names the workload and what it saves; the reason, the replicas that would have held), a notebook
    culled and a CronJob moved to a MIG slice; on the analyzer's page, regressions first."""

    def judged() -> dict[tuple[str, str], tuple]:
        body = requests.get(f"http://{stack.plan.analyzer}/api/v1/changes", timeout=5).json()
        return {
            (c["workload"], c["what"]): (
                c["before"],
                c["after"],
                c["word"],
                round(c["measured_before"]["gpus_held"], 1),
                round(c["measured_after"]["gpus_held"], 1),
            )
            for c in body["changes"]
        }

    eventually(judged, DEMO_CHANGES, 300, "the demo's changes judged")
    changes = {
        (c["workload"], c["what"]): c
        for c in requests.get(f"http://{stack.plan.analyzer}/api/v1/changes", timeout=5).json()["changes"]
    }
    summarize = changes["serving/Deployment/summarize", "replicas"]
    # Three replicas at 4.5 requests a second each held with a request or two waiting at most; the one left, given
    # their 13.5, finishes the 8 it can and queues the rest: 5.5 a second, to a minute of them (330) once its clients
    # give up as fast as they come. What it finished after, 8 a second, is what fewer than two of the before's
    # replicas finished: at least 2 would have held it (what waited, or gave up, comes on top).
    health_before, health_after = summarize["measured_before"]["health"], summarize["measured_after"]["health"]
    assert health_before["waiting"]["at_percentile"] <= 4 and health_after["waiting"]["median"] >= 270
    assert summarize["reason"].startswith("regressed: requests waiting rose to a median of "), summarize["reason"]
    assert "; at least 2 replicas would have held it: before, 3 served " in summarize["reason"], summarize["reason"]
    # Scaled by hand, a fixed size: each saves what the GPUs it no longer holds cost a day at the catalogue's
    # H100 price (the demo gives no --prices), a MIG slice its share.
    price = model_info("NVIDIA H100 80GB HBM3").price_per_hour
    for key, (_, _, _, held_before, held_after) in DEMO_CHANGES.items():
        assert changes[key]["saving_usd_per_day"] == pytest.approx((held_before - held_after) * price * 24, rel=0.05)

    # The regression tickets the workload's owners, saying which workload and what it saves.
    def ticket():
        for (name, subject, path), alert in stack.receiver.firing().items():
            if (name, subject, path) == (
                "GpulensWorkloadChangeRegressed",
                "serving/Deployment/summarize",
                "/alerts/tickets",
            ):
                return alert
        return None

    alert = wait_until(ticket, 180, interval=2, what="a ticket for the summarize Deployment's cut")
    assert alert.annotations["summary"] == "serving/Deployment/summarize's latest change (replicas) regressed"
    assert alert.annotations["description"].startswith(
        "gpulens compared serving/Deployment/summarize over equal windows before and after its latest replicas change"
    )
    saves = re.search(r"The change saves \$(-?[\d.]+) a day", alert.annotations["description"])
    assert saves and float(saves[1]) == pytest.approx(2 * price * 24, rel=0.05)
    # The CronJob's run is judged on its slice, named as NVML names it; the H100 in MIG mode that holds the slice
    # is no unit of its own: the GPUs no pod holds are the five the pods that ended left (GPUs 1 and 3-6).
    verdicts = requests.get(f"http://{stack.plan.analyzer}/api/v1/verdicts", timeout=5).json()["verdicts"]
    [embed] = [v for v in verdicts if v["pod"] == "embed-29380326-w4x7k"]
    assert embed["gpu_model"] == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    left = [v for v in verdicts if v["node"] == "sim-h100-h" and not v["pod"]]
    assert [v["bottleneck"] for v in left] == ["unallocated"] * 5  # no kernels of the pods that left them
    # The analyzer's page shows them, the regression first.
    page = requests.get(f"http://{stack.plan.analyzer}/", timeout=10).text
    shown = page[page.index("<div id=changes>") : page.index("<div id=waste>")]
    rows = re.findall(r"<tr class='(\w+)'><td>([^<]+)<", shown)
    assert rows[0] == ("regressed", "serving/Deployment/summarize")
    assert {workload for _, workload in rows} == {workload for workload, _ in DEMO_CHANGES}


def test_the_low_sm_page_for_the_starved_pod_reaches_the_webhook_with_why_and_what_to_do(stack):
    def page():
        for key, alert in stack.receiver.firing().items():
            if key == ("GpulensPodLowSmActivity", "nlp/bert-finetune-0", "/alerts/pages"):
                return alert
        return None

    alert = wait_until(page, 300, interval=2, what="a page for nlp/bert-finetune-0")
    annotations = alert.annotations
    assert annotations["recommendation"] == RECOMMENDATIONS["data_starvation"]
    assert "busy_idle_switches_per_minute" in annotations["evidence"]
    assert re.fullmatch(r"\d+(\.\d+)?%", annotations["confidence"])
    assert alert.labels["severity"] == "critical"
    # The native demo runs no Grafana: the link leads to the analyzer's page, at the pod's row.
    assert annotations["dashboard_url"] == f"http://{stack.plan.analyzer}/#nlp/bert-finetune-0"
    assert requests.get(annotations["dashboard_url"], timeout=10).status_code == 200
    assert annotations["bottleneck"] == "data_starvation" and "bottleneck" not in alert.labels
    # The pod's class ticket fires in Prometheus too, and Alertmanager mutes it while the page fires.
    am_alerts = requests.get(f"http://{stack.plan.alertmanager}/api/v2/alerts", timeout=5).json()
    [ticket] = [
        a
        for a in am_alerts
        if a["labels"]["alertname"] == "GpulensPodDataStarvation" and a["labels"]["pod"] == "bert-finetune-0"
    ]
    assert ticket["status"]["state"] == "suppressed" and ticket["status"]["inhibitedBy"], ticket["status"]
    # Healthy pods never page: not now, not in any notification so far.
    paged = {
        f"{a.labels.get('namespace')}/{a.labels.get('pod')}"
        for n in stack.receiver.snapshot()
        for a in n.alerts
        if n.path == "/alerts/pages"
    }
    assert not paged & HEALTHY, f"healthy pods paged: {paged & HEALTHY}"


# --- every PromQL expression the dashboards and rules contain returns data ------------------------


def dashboard_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel or variable, expr) for every target and query variable of every dashboard."""
    import json

    out = []
    for name, text in dashboards.generate(mixin.MixinConfig()).items():
        board = json.loads(text)
        for variable in board["templating"]["list"]:
            match = (
                re.fullmatch(r"label_values\((.*), (\w+)\)", variable["query"]) if variable["type"] == "query" else None
            )
            if variable["type"] == "query":
                assert match, f"{name} variable {variable['name']}: {variable['query']}"
                out.append((name, f"variable {variable['name']}", f"count by ({match[2]}) ({match[1]})"))
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                out.append((name, panel["title"], target["expr"]))
    return out


def substitute(expr: str, pod: str) -> str:
    namespace, name = pod.split("/")
    for variable, value in (
        ("$__rate_interval", "20s"),
        ("$__range_s", "60"),
        ("$__range", "60s"),
        ("$namespace", namespace),
        ("$pod", name),
        ("$cluster", ".*"),
        ("$job", ".*"),
        ("$node", ".*"),
        ("$gpu", ".*"),
    ):
        expr = expr.replace(variable, value)
    # "$1" is a label_replace group, which Grafana leaves alone (it has no variable named 1).
    assert not re.search(r"\$[A-Za-z_{]", expr), f"unsubstituted variable in {expr}"
    return expr


#: The fleet panels of the plan's month: empty until the analyzer's history holds a day
#: (plan_projection_min_seconds), which the demo's minutes never do, where a month projected from minutes
#: would multiply them by thousands.
UNTIL_A_DAY = ("Could save per 30 days", "Could save per 30 days, by team")


def test_every_dashboard_query_returns_data(stack):
    """A panel that would be empty in the demo fails here, but the plan's month, which must be. Pod-dashboard
    panels are tried on every demo pod (a throttling panel has data only for the throttled one); the
    data-starved pod must show every panel its problem is read from, CPU against its limit included."""
    eventually(lambda: classes(stack), STACK_EXPECTED, 240, "the analyzer's classes")  # waste counters have grown
    queries = dashboard_queries()
    assert len(queries) >= 60
    empty = []
    for name, title, expr in queries:
        # A fleet panel in the data-starved pod's namespace, or the serving one's (the Deployment's load).
        pods = sorted(STACK_EXPECTED) if "$pod" in expr else ["nlp/bert-finetune-0", "serving/chat-api"]
        with_data = [pod for pod in pods if query(stack, substitute(expr, pod))]
        if title in UNTIL_A_DAY:
            assert not with_data, f"{title}: a month projected from the demo's minutes"
        elif mixin.budget_rule("team") in expr:
            # The demo's pods carry no team label and its settings no budgets: the budget line must be empty.
            assert not with_data, f"{title}: a budget the demo never set"
        elif not with_data:
            empty.append(f"{name} / {title}: {expr}")
        if name == "gpulens-pod.json" and title in (
            "SM activity and occupancy",
            "Tensor and DRAM activity",
            "PCIe throughput",
            "CPU use against limit",
            "Bottleneck over time",
        ):
            assert "nlp/bert-finetune-0" in with_data, f"{title} is empty for the data-starved pod"
    assert not empty, "queries with no data in the demo:\n" + "\n".join(empty)


def test_the_starved_pods_cpu_sits_at_its_limit(stack):
    [used] = query(stack, 'sum(rate(container_cpu_usage_seconds_total{namespace="nlp",pod="bert-finetune-0"}[20s]))')
    [limit] = query(
        stack,
        'sum(container_spec_cpu_quota{namespace="nlp",pod="bert-finetune-0"} / '
        'container_spec_cpu_period{namespace="nlp",pod="bert-finetune-0"})',
    )
    assert float(limit["value"][1]) == 4.0
    assert 0.93 * 4 <= float(used["value"][1]) <= 1.0 * 4


def test_every_recording_rule_has_data(stack):
    eventually(lambda: classes(stack), STACK_EXPECTED, 240, "the analyzer's classes")
    for rule in mixin.recording_rules(mixin.MixinConfig()):
        assert query(stack, rule["record"]), f"recording rule {rule['record']} has no data"
    # The pod-level rule has one series per allocated pod: the 12 demo pods.
    pods = {(r["metric"]["namespace"], r["metric"]["pod"]) for r in query(stack, mixin.POD_ACTIVITY_AVG)}
    assert {f"{ns}/{pod}" for ns, pod in pods} == set(STACK_EXPECTED)
