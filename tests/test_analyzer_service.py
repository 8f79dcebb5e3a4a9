"""`gpulens analyzer` live: reading simulated exporters directly and through a real Prometheus."""

import re
import subprocess
import sys
import time

import pytest
import requests

from gpulens.core.bottlenecks import POD_CLASSES, STALL_CAUSES
from gpulens.core.thresholds import Thresholds
from gpulens.demo import analyzer_thresholds
from gpulens.simulator.fleet import DEFAULT_FLEET, fleet_from_file
from tests.helpers import REPO, GpulensProcess, Prometheus, free_port, samples, value, wait_until

#: Every test here starts real servers or gpulens processes (the fast lane skips them: pytest -m "not slow").
pytestmark = pytest.mark.slow

NODES = ["sim-h100-a", "sim-a100-b", "sim-l40s-c", "sim-h100-d", "sim-a100-e", "sim-h100-f", "sim-h100-g"]
#: The demo fleet's pods and the class each one's profile must be given.
EXPECTED = {
    "vision/resnet-ddp-0": "healthy",
    "nlp/bert-finetune-0": "data_starvation",
    "science/stencil-solver-0": "memory_bandwidth",
    "research/notebook-alice-0": "idle",
    "serving/embedder-0": "wrong_gpu_type",
    "nlp/llm-sft-0": "memory_fragmentation",
    "vision/allreduce-bench-0": "interconnect",
    "vision/detector-train-0": "throttling",
    "nlp/t5-pretrain-0": "healthy",
    "vision/segmenter-ddp-0": "poor_placement",
    "vision/classifier-0": "healthy",
    "science/md-sim-0": "healthy",  # XID 63 events under a healthy job: an alert, not a bottleneck
    "nlp/llama-ddp-0": "poor_placement",  # NCCL_P2P_DISABLE: its exchange over PCIe, NVLink idle
    "vision/vit-ddp-0": "poor_placement",  # NVLinks down and failing on its first GPU
    "nlp/gpt-pretrain-0": "host_stall",  # its first rank checkpoints while the second waits at low power
    "nlp/llama-pretrain-worker-1": "host_stall",  # waits in collectives on ranks in other pods
    "vision/swin-ddp-0": "host_stall",  # a straggler: the others wait for its second rank every step
    # Two vLLM replicas of a Deployment, 90% of an H100's memory each for a request a second at random (bursts
    # the exporter times: not steps), 15% active (the plan makes them one).
    "serving/chat-api-6c8f9d7b54-x2k4p": "overprovisioned_serving",
    "serving/chat-api-6c8f9d7b54-m7q9z": "overprovisioned_serving",
    # The notebook node: kernels left open, a small model called from a notebook, a notebook's generate() loop.
    "research/notebook-bob-0": "idle",
    "research/notebook-carol-0": "wrong_gpu_type",
    "research/notebook-dave-0": "unexplained",  # a generate() loop from one host thread
    "research/notebook-erin-0": "idle",
    "research/zero-offload-ft-0": "host_stall",  # waits on parameters fetched over PCIe (CPU offload)
    "research/batch-generate-0": "unexplained",  # one process per GPU: no straggler without one job's evidence
    "research/notebook-frank-0": "host_stall",  # a generate() loop, its pod's CPU at one core
    # Pipeline stages: bubbles too large for the schedule (a stall), and bubbles within it (healthy).
    "nlp/gpt-pipeline-0": "host_stall",
    "nlp/llama-pipeline-0": "healthy",
    # The research pool's second node: one GPU of its eight taken (the rest wait for an 8-GPU fine-tune).
    "research/diffusion-ft-0": "healthy",
}
#: Read without the pod's CPU (the exporters alone, and a Prometheus that does not scrape the kubelet's
#: cAdvisor, as here; the demo stack's does, tests/test_stack.py): the generate() loop's cause stays open, its
#: evidence asking for the CPU use that would show the one busy core.
WITHOUT_CPU = {**EXPECTED, "research/notebook-frank-0": "unexplained"}
#: The host stalls' causes, each with its own fix (core/bottlenecks.STALL_CAUSES), judged at the fleet's speed.
CAUSES = {
    "nlp/gpt-pretrain-0": "checkpoint",  # 15-25 s saves from its first rank: 3-5 s at five-fold speed
    "nlp/llama-pretrain-worker-1": "peer",  # a kernel spinning in collectives over PCIe: no host fetch
    "vision/swin-ddp-0": "straggler",
    "research/zero-offload-ft-0": "offload",
    "nlp/gpt-pipeline-0": "pipeline",
}
ANALYSIS = ["--analysis.window", "60", "--analysis.interval", "2"]


@pytest.fixture(scope="module")
def at_speed(tmp_path_factory) -> list[str]:
    """The fleet runs five times faster than real time: judged, as the demo judges it, with the thresholds of
    a workload's own clock scaled to it (Thresholds.at_speed)."""
    path = tmp_path_factory.mktemp("thresholds") / "at-speed.yaml"
    path.write_text(analyzer_thresholds(Thresholds(), 5))
    return ["--thresholds", str(path)]


@pytest.fixture(scope="module")
def fleet():
    """The demo fleet, one simulated exporter per node, five times faster than real time."""
    procs = {
        node: GpulensProcess(
            [
                "exporter",
                "--source",
                "simulated",
                "--simulate.node",
                node,
                "--simulate.speed",
                "5",
                "--sampler.interval",
                "0.5",
                "--web.listen-address",
                "127.0.0.1:0",
            ]
        )
        for node in NODES
    }
    try:
        yield {node: proc.wait_listening() for node, proc in procs.items()}
    finally:
        for proc in procs.values():
            proc.stop()


def start_analyzer(args):
    proc = GpulensProcess(["analyzer", "--web.listen-address", "127.0.0.1:0", *args])
    return proc, proc.wait_listening()


def _get(url):
    try:
        return requests.get(url, timeout=2)
    except requests.RequestException:
        return None


def verdicts(url):
    body = requests.get(url + "/api/v1/verdicts", timeout=5).json()
    return body, {f"{v['namespace']}/{v['pod']}": v for v in body["verdicts"] if v["pod"]}


def matches_truth(url):
    """Every pod's class, and each host stall's cause and the fix it says, as its profile plays them."""
    body, pods = verdicts(url)
    named = {k: v["bottleneck"] for k, v in pods.items()} == WITHOUT_CPU
    causes = {k: (v["cause"], v["recommendation"]) for k, v in pods.items() if k in CAUSES}
    return named and causes == {k: (cause, STALL_CAUSES[cause]) for k, cause in CAUSES.items()} and (body, pods)


def named_as_their_profiles(url, what: str):
    """The verdicts once the analyzer at `url` names every pod's profile (WITHOUT_CPU); past 150 s, the
    failure shows the classes it still gives, with their evidence."""
    try:
        return wait_until(lambda: matches_truth(url), 150, interval=2, what=what)
    except AssertionError:
        _, pods = verdicts(url)
        wrong = {
            k: (v["bottleneck"], v["cause"], v["evidence"])
            for k, v in pods.items()
            if v["bottleneck"] != WITHOUT_CPU.get(k) or v["cause"] != CAUSES.get(k, v["cause"])
        }
        assert wrong == {}
        raise


def test_every_simulated_pod_is_classified_as_its_profile_from_exporters_and_prometheus(fleet, at_speed, tmp_path):
    direct, direct_url = start_analyzer(
        [
            *(f"--input.exporter={node}={url}/metrics" for node, url in fleet.items()),
            "--exporter.scrape-interval",
            "1",
            *ANALYSIS,
            *at_speed,
        ]
    )
    prometheus = Prometheus(tmp_path, [url.removeprefix("http://") for url in fleet.values()], scrape_interval="1s")
    through, through_url = start_analyzer(
        [
            f"--input.prometheus={prometheus.url}",
            "--prometheus.step",
            "1",
            '--prometheus.selector=job="gpulens"',
            *ANALYSIS,
            *at_speed,
        ]
    )
    try:
        body, pods = named_as_their_profiles(direct_url, "the direct analyzer to name every pod's profile")
        assert body["stale"] is False and body["input"] == "exporter"
        starving = pods["nlp/bert-finetune-0"]
        assert starving["node"] == "sim-h100-a" and starving["gpu_model"] == "NVIDIA H100 80GB HBM3"
        # Judged from every driver sample between scrapes: its bursts repeat at the steps' period.
        assert float(starving["evidence"]["steady_burst_fraction"].split("%")[0]) >= 90
        assert "num_workers" in starving["recommendation"]
        # Placement evidence names the GPUs, from the exporters' topology, link states and error counters.
        gpus = {(n.name, g.index): g.uuid for n in fleet_from_file(DEFAULT_FLEET) for g in n.gpus}
        split = pods["vision/segmenter-ddp-0"]["evidence"]["split_placement"]
        # (group numbers are the node's own, in the order of its GPUs' UUIDs; an L40S has no NVLink island)
        where = dict(re.findall(r"(GPU-[0-9a-f-]+) \((socket \d, PCIe root \d)\)", split))
        assert "NVLink" not in split.split(":")[0]
        assert sorted(where.values()) == ["socket 0, PCIe root 0", "socket 1, PCIe root 1"]
        assert set(where) == {gpus["sim-l40s-c", 1], gpus["sim-l40s-c", 2]}
        assert split.endswith("no NVLink between them, so they exchange over PCIe across CPU sockets")
        unused = pods["nlp/llama-ddp-0"]["evidence"]["nvlink_unused"]
        pair = ", ".join(sorted([gpus["sim-h100-d", 0], gpus["sim-h100-d", 1]]))
        # (rates are per real second: five times the simulated ones)
        assert re.fullmatch(
            re.escape(f"{pair} share NVLink, which carried 0% < 1% of its capacity while PCIe carried ")
            + r"1[5-9]\d(\.\d)?% >= 10% both ways: peer traffic goes over PCIe .*",
            unused,
        ), unused
        faults = pods["vision/vit-ddp-0"]["evidence"]["nvlink_faults"]
        assert faults.startswith(f"{gpus['sim-h100-d', 2]}: 4 NVLinks down, CRC ")
        crc = float(faults.split("CRC ")[1].split("/s")[0])
        assert abs(crc - 5 * 150) < 40, faults  # 150 errors per simulated second, five times faster than real time
        assert gpus["sim-h100-d", 3] not in faults
        assert pods["vision/detector-train-0"]["bottleneck"] == "throttling"
        # GPUs no pod holds are rows of their own, named by node and GPU, by the fleet's own definition:
        # sim-h100-a's GPU 7 has no workload, its GPU 5 holds memory with no pod (profile memory_held), and
        # sim-h100-g's GPUs 1-7 have no workload.
        free = [("sim-h100-a", 7), *(("sim-h100-g", k) for k in range(1, 8))]
        unheld = {f"gpu:{node}/{gpus[node, k]}": "unallocated" for node, k in free}
        unheld[f"gpu:sim-h100-a/{gpus['sim-h100-a', 5]}"] = "held_without_pod"
        assert {v["unit"]: v["bottleneck"] for v in body["verdicts"] if not v["pod"]} == unheld
        exposed = samples(requests.get(direct_url + "/metrics").text)
        assert {
            (dict(labels)["gpu"], dict(labels)["bottleneck"])
            for (name, labels), value in exposed.items()
            if name == "gpulens_gpu_without_pod" and value == 1
        } == {(gpus[node, k], "unallocated") for node, k in free} | {(gpus["sim-h100-a", 5], "held_without_pod")}

        named_as_their_profiles(through_url, "the analyzer reading Prometheus to name every pod's profile")
        parsed = samples(requests.get(through_url + "/metrics").text)
        # StateSet: exactly one class is 1 for each pod.
        for pod, name in WITHOUT_CPU.items():
            namespace, pod_name = pod.split("/")
            states = {
                dict(labels)["bottleneck"]: v
                for (n, labels), v in parsed.items()
                if n == "gpulens_pod_bottleneck" and ("pod", pod_name) in labels
            }
            assert set(states) == set(POD_CLASSES) and states[name] == 1 and sum(states.values()) == 1
        info = value(parsed, "gpulens_pod_bottleneck_info", pod="bert-finetune-0", bottleneck="data_starvation")
        assert info == 1
        assert value(parsed, "gpulens_wasted_gpu_seconds_total", namespace="research", bottleneck="idle") > 0
        assert value(parsed, "gpulens_wasted_cost_dollars_total", namespace="research", bottleneck="idle") > 0
        assert requests.get(through_url + "/healthz").status_code == 200
        assert requests.get(through_url + "/readyz").status_code == 200
        prometheus_target = prometheus.url
        assert value(parsed, "gpulens_analyzer_input_up", input="prometheus", target=prometheus_target) == 1
        assert (
            value(parsed, "gpulens_analyzer_input_read_bytes_total", input="prometheus", target=prometheus_target) > 0
        )
        subprocess.run(
            [require_promtool(), "check", "metrics"],
            input=requests.get(through_url + "/metrics").text,
            text=True,
            check=True,
            capture_output=True,
        )

        # Prometheus goes away: the last verdicts stay, marked stale with their age; nothing crashes.
        prometheus.stop()
        wait_until(lambda: verdicts(through_url)[0]["stale"], 60, interval=1, what="the verdicts to turn stale")
        # Stale comes from the verdicts' age; the target is marked down when a query fails, which can come
        # later if a query was in flight when Prometheus stopped.
        wait_until(
            lambda: (
                value(
                    samples(requests.get(through_url + "/metrics").text),
                    "gpulens_analyzer_input_up",
                    input="prometheus",
                    target=prometheus_target,
                )
                == 0
            ),
            60,
            interval=1,
            what="the Prometheus target to be marked down",
        )
        body, pods = verdicts(through_url)
        assert {k: v["bottleneck"] for k, v in pods.items()} == WITHOUT_CPU and body["age_seconds"] > 6
        parsed = samples(requests.get(through_url + "/metrics").text)
        assert value(parsed, "gpulens_analyzer_input_errors_total", input="prometheus") >= 1
        assert value(parsed, "gpulens_analyzer_verdict_age_seconds") > 6
        assert value(parsed, "gpulens_analyzer_input_up", input="prometheus", target=prometheus_target) == 0
        assert (
            value(
                parsed,
                "gpulens_analyzer_input_last_success_timestamp_seconds",
                input="prometheus",
                target=prometheus_target,
            )
            < time.time() - 6
        )
        # Not ready (stale verdicts), but alive: a restart would not bring Prometheus back.
        assert requests.get(through_url + "/readyz").status_code == 503
        assert requests.get(through_url + "/healthz").status_code == 200
        assert through.log.count("cannot reach Prometheus") == 1
        assert through.process.poll() is None
        # It said at start where it serves and what it reads.
        port = direct_url.rsplit(":", 1)[1]
        serving = f"serving on 127.0.0.1:{port} (the page of verdicts at /, /metrics, /api/v1/verdicts, /api/v1/plan); "
        assert serving + f"judging the last 60 s of {len(NODES)} exporter(s) every 2 s" in direct.log
        # Its page lists every pod and GPU it holds a history of; what changed since a cycle is a route of
        # its own (tested in a browser in test_live_page.py).
        page = requests.get(direct_url + "/", timeout=30)
        assert page.headers["Content-Type"] == "text/html; charset=utf-8"
        listed = set(re.findall(r"<tr data-unit='([^']+)'>", page.text))
        assert set(EXPECTED) | set(unheld) <= listed
        cycle = int(re.search(r"<body data-cycle=(\d+)>", page.text)[1])
        everything = requests.get(direct_url + "/api/v1/page", params={"since": "-1"}, timeout=30).json()
        assert everything["full"] is True and set(everything["rows"]) == set(everything["order"]) >= listed
        assert everything["cycle"] >= cycle
        # Its plan over the history it keeps: the Deployment's two replicas become one (its owner inferred
        # from the pods' names: no kube-state-metrics here), and
        # the notebook calling a small model moves to a MIG slice: SM activity 0.55 x 12% + 1% = 7.6% and
        # 3.2-7.2 GB, with 15% headroom, fit 1g.10gb (1/7 of an A100 80GB), which saves 6/7 of $2.50 an
        # hour, more than a T4 ($2.00 less) would.
        plan = requests.get(direct_url + "/api/v1/plan", timeout=30).json()
        actions = {a["owner"]: a for a in plan["plan"]}
        history = requests.get(direct_url + "/api/v1/verdicts", timeout=30).json()["history"]
        headlines = {h["pod"]: (h["headline"], h["by_class"]) for h in history if h["pod"].startswith("chat-api")}
        assert "serving/Deployment/chat-api" in actions, headlines
        chat = actions["serving/Deployment/chat-api"]
        assert (chat["action"], chat["gpus_now"], chat["gpus_after"]) == ("fewer_replicas", 2.0, 1.0)
        assert chat["evidence"]["replicas"] == "2 of Deployment serving/chat-api (inferred from the pods' names)"
        # The idle notebooks: a kernel culler waits an hour (plan_cull_seconds), longer than this history, so
        # culling would have freed nothing yet: no action, and the plan says why.
        not_planned = {n["owner"]: n["reason"] for n in plan["plan_summary"]["not_planned"]}
        for notebook in ("alice", "bob", "erin"):
            assert f"research/notebook-{notebook}-0" not in actions
            assert re.fullmatch(
                r"idle [0-9a-z ]+ at most at a stretch in the [0-9a-z ]+ seen, under the 1 h a culler waits "
                r"\(plan_cull_seconds\): culling would have freed nothing yet",
                not_planned[f"research/notebook-{notebook}-0"],
            )
        # Faults are repaired before anything is resized, in the words of what is wrong.
        assert not_planned["vision/detector-train-0"] == "throttling: The GPU slows itself down; repair first"
        assert not_planned["vision/vit-ddp-0"] == "poor_placement: its GPUs' NVLinks are down or failing; repair first"
        carol = actions["research/notebook-carol-0"]
        assert (carol["action"], carol["gpus_after"]) == ("mig", round(1 / 7, 3))
        assert carol["what"].startswith("a MIG 1g.10gb slice of its")
        # The generate() loop: no cause in the data, so no code fix. Whatever its cause, it is sized; but it holds
        # 60-80% of its A100 80GB (the simulator's memory), which with 15% headroom no slice, no cheaper model
        # and no time-sliced share holds: the history's size is its GPU as it is, and the plan says so, and
        # what would settle the cause.
        assert "research/notebook-dave-0" not in actions
        [dave] = [h["size"] for h in history if h["pod"] == "notebook-dave-0"]
        assert dave["fit"] == "whole" and dave["fits"] == "its NVIDIA A100-SXM4-80GB"
        assert 0.6 * 80e9 <= dave["memory_peak_bytes"] <= 0.8 * 81920 * 2**20
        assert not_planned["research/notebook-dave-0"] == (
            f"no smaller GPU fits: {dave['basis']}; The GPU does little work, and this data does not say why: no "
            "signature of a cause holds (see the evidence for the causes left open and what would tell them apart)"
        )
        bad = requests.get(direct_url + "/api/v1/page", params={"since": "yesterday"}, timeout=30)
        assert (bad.status_code, bad.text) == (400, "since: give the cycle the page shows (an integer)\n")
        assert f"judging the last 60 s of Prometheus at {prometheus.url} every 2 s" in through.log
    finally:
        prometheus.stop()
        direct.stop()
        through.stop()


@pytest.fixture(scope="module")
def fleet_in_prometheus(fleet, tmp_path_factory):
    """A real Prometheus scraping the fleet, labelling each exporter with its node and with the shard
    (of two) that its own hashmod relabelling gives the node; yielded once it holds 40 s of every GPU."""
    targets = "".join(
        f"      - targets: ['{url.removeprefix('http://')}']\n        labels: {{node: {node}}}\n"
        for node, url in fleet.items()
    )
    prometheus = Prometheus(
        tmp_path_factory.mktemp("prometheus"),
        [],
        extra_config=f"""  - job_name: fleet
    static_configs:
{targets}    relabel_configs:
      - {{source_labels: [node], modulus: 2, target_label: prometheus_shard, action: hashmod}}
""",
    )
    try:
        wait_until(
            lambda: (
                [
                    float(r["value"][1])
                    for r in prometheus.query('min(count_over_time(gpulens_gpu_up{job="fleet"}[1m]))')
                ]
                >= [40.0]
            ),
            120,
            interval=2,
            what="40 s of every GPU in Prometheus",
        )
        yield prometheus
    finally:
        prometheus.stop()


def test_two_shards_judge_every_pod_once_as_one_analyzer_does(fleet_in_prometheus):
    """Past one analyzer: two replicas over one Prometheus, each owning the nodes that hash to it,
    give exactly the verdicts of one unsharded analyzer on the same data, none lost or doubled; and
    the hash is Prometheus' own (its hashmod relabelling labels each exporter with its shard)."""
    from gpulens.analyzer.inputs.live import PrometheusInput
    from gpulens.analyzer.inputs.window import Shard, hashmod
    from gpulens.analyzer.judging.classify import classify

    prometheus = fleet_in_prometheus
    shards = {r["metric"]["node"]: r["metric"]["prometheus_shard"] for r in prometheus.query("gpulens_gpu_up")}
    assert shards == {node: str(hashmod(node, 2)) for node in NODES}
    end = time.time()

    def judged(shard):
        source = PrometheusInput(
            prometheus.url, window=40, step=1, selector='job="fleet"', clock=lambda: end, shard=shard
        )
        return {f"{v.namespace}/{v.pod}": (v.node, v.bottleneck) for v in classify(source.window_frame()) if v.pod}

    whole, first, second = judged(None), judged(Shard(0, 2)), judged(Shard(1, 2))
    assert set(whole) == set(EXPECTED)
    assert first.keys() & second.keys() == set()
    assert first | second == whole
    assert {node for node, _ in first.values()} == {"sim-l40s-c", "sim-a100-e"}
    assert {node for node, _ in second.values()} == {
        "sim-h100-a",
        "sim-a100-b",
        "sim-h100-d",
        "sim-h100-f",
        "sim-h100-g",
    }


def test_each_cycle_reads_only_the_steps_it_has_not_read(fleet_in_prometheus):
    """A cycle asks the store for the steps since the last cycle and the newest REREAD_STEPS again, not
    the whole window; in turns, a part of the queries a cycle (four parts), and
    still holds exactly the window a fresh analyzer reads whole, up to the step every part has read."""
    import pandas as pd

    from gpulens.analyzer.inputs.live import PrometheusInput
    from gpulens.analyzer.inputs.window import REREAD_STEPS

    prometheus = fleet_in_prometheus
    end = float(int(time.time()) - 5)  # steps whose scrapes have all landed: both readers see the same data
    now = [end - 6]
    ranges: list[tuple[float, float, int]] = []  # each range query's start, end and most points in a series

    incremental = PrometheusInput(
        prometheus.url, window=20, step=1, selector='job="fleet"', clock=lambda: now[0], parts=4
    )
    query_range = incremental.store.query_range

    def recorded(expr, start, end, step):
        result = query_range(expr, start, end, step)
        ranges.append((start, end, max((len(s["values"]) for s in result), default=0)))
        return result

    incremental.store.query_range = recorded  # type: ignore[method-assign]
    incremental.window_frame()
    # The whole window (20 s at 1 s, both ends): its newest three steps, then (a small fleet) the rest at once.
    assert {(start, stop) for start, stop, _ in ranges} == {(end - 8, end - 6), (end - 26, end - 9)}
    assert max(points for _, _, points in ranges) == 18
    asked = len(ranges)
    for now[0] in (end - 5, end - 4, end - 3, end - 2, end - 1, end):
        ranges.clear()
        held = incremental.window_frame()
        assert 0 < len(ranges) < asked / 2  # a part of the queries (a quarter, by what they cost Prometheus)
    # The last cycle's part was read to end - 4: four new steps and two read again, six points a series.
    assert REREAD_STEPS == 2
    assert {(start, stop) for start, stop, _ in ranges} == {(end - 5, end)}
    assert max(points for _, _, points in ranges) == 6
    whole = PrometheusInput(prometheus.url, window=20, step=1, selector='job="fleet"', clock=lambda: end).window_frame()
    # The parts were read last to end - 1, end, end - 3 and end - 2: the frame ends at end - 3.
    upto = whole[whole["timestamp"] <= end - 3].reset_index(drop=True)
    pd.testing.assert_frame_equal(held, upto)
    assert len(held) == 18 * held["gpu"].nunique() > 0  # every GPU at every step


def require_promtool():
    from tests.helpers import require_binary

    return require_binary("promtool")


def test_prometheus_down_from_the_start():
    # With credentials in the URL: they reach neither the start-up line nor the errors.
    store = f"127.0.0.1:{free_port()}"
    proc, url = start_analyzer([f"--input.prometheus=http://admin:S3cretPass@{store}", "--analysis.interval", "0.5"])
    try:
        wait_until(
            lambda: value(
                samples(requests.get(url + "/metrics").text), "gpulens_analyzer_input_errors_total", input="prometheus"
            ),
            10,
            what="an input error to be counted",
        )
        response = requests.get(url + "/readyz")
        assert (response.status_code, response.text) == (503, "no analysis cycle has succeeded yet\n")
        assert (requests.get(url + "/healthz").status_code, requests.get(url + "/healthz").text) == (200, "ok\n")
        assert verdicts(url)[0] == {
            "stale": True,
            "age_seconds": None,
            "input": "prometheus",
            "verdicts": [],
            "history_seconds": 86400.0,
            "history": [],
        }
        wait_until(
            lambda: (
                value(
                    samples(requests.get(url + "/metrics").text),
                    "gpulens_analyzer_input_errors_total",
                    input="prometheus",
                )
                >= 3
            ),
            10,
            what="three failed cycles",
        )
        assert proc.log.count("cannot reach Prometheus") == 1  # logged once, however many cycles fail
        assert f"judging the last 600 s of Prometheus at http://<redacted>@{store} every 0.5 s" in proc.log
    finally:
        proc.stop()
    assert "S3cretPass" not in proc.log


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "give exactly one input"),
        (["--input.prometheus=http://p:9090", "--input.exporter=http://e:9848/metrics"], "give exactly one input"),
        (["--input.exporter=e:9848/metrics"], "--input.exporter 'e:9848/metrics' is not an http(s) URL"),
        (["--input.prometheus=prom:9090"], "--input.prometheus 'prom:9090' is not an http(s) URL"),
        (
            ["--input.prometheus=http://p:9090", "--analysis.window=0"],
            "argument --analysis.window: must be a positive, finite duration, got '0'",
        ),
        (
            ["--input.prometheus=http://p:9090", "--analysis.history=a day"],
            "--analysis.history 'a day' is not a duration: give seconds (900) or 30s, 10m, 1h30m, 1d",
        ),
        (
            ["--input.prometheus=http://p:9090", "--shard.count=2", "--shard.index=2"],
            "--shard.index 2 of --shard.count 2: give a count of 1 or more and an index from 0 to count - 1",
        ),
        (
            ["--input.prometheus=http://p:9090", "--prometheus.read-parts=0"],
            "--prometheus.read-parts 0: give 1 (every query every cycle) to 16",
        ),
        (
            ["--input.prometheus=http://p:9090", "--prometheus.read-parts=10000000000"],
            "--prometheus.read-parts 10000000000: give 1 (every query every cycle) to 16",
        ),
        (
            ["--input.exporter=http://e:9848/metrics", "--shard.count=2"],
            "--shard.count needs --input.prometheus: with --input.exporter, give each replica its own exporters",
        ),
    ],
)
def test_bad_flags(args, message):
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "analyzer", *args], capture_output=True, text=True, cwd=REPO, timeout=30
    )
    assert result.returncode == 2 and message in result.stderr


#: What OpenCost's /metrics says about GPU prices (its node_gpu_hourly_cost: USD per GPU per hour);
#: a node OpenCost cannot price reads 0.
OPENCOST_METRICS = (
    "# HELP node_gpu_hourly_cost node_gpu_hourly_cost hourly cost for each gpu on this node\n"
    "# TYPE node_gpu_hourly_cost gauge\n"
    'node_gpu_hourly_cost{arch="amd64",instance="gpu-a",instance_type="p5.48xlarge",node="gpu-a",'
    'provider_id="aws:///us-east-1a/i-0a",region="us-east-1"} 12.29\n'
    'node_gpu_hourly_cost{arch="amd64",instance="gpu-b",instance_type="custom",node="gpu-b",provider_id="",'
    'region=""} 0\n'
)


def test_gpu_prices_are_read_from_opencost_through_prometheus(tmp_path):
    """A real Prometheus scraping OpenCost's metric: the analyzer's input prices gpu-a at OpenCost's
    12.29 USD per GPU-hour and leaves gpu-b (priced 0, unknown) to the price file; with the metric
    switched off, none."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from gpulens.analyzer.inputs.live import PrometheusInput

    class OpenCost(BaseHTTPRequestHandler):
        def do_GET(self):
            body = OPENCOST_METRICS.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    opencost = ThreadingHTTPServer(("127.0.0.1", 0), OpenCost)
    threading.Thread(target=opencost.serve_forever, daemon=True).start()
    prometheus = Prometheus(tmp_path, [f"127.0.0.1:{opencost.server_address[1]}"], extra_config="")
    try:
        wait_until(lambda: prometheus.query("node_gpu_hourly_cost"), 30, what="Prometheus to scrape OpenCost")
        assert PrometheusInput(prometheus.url).node_prices() == {"gpu-a": 12.29}
        assert PrometheusInput(prometheus.url, price_metric="").node_prices() == {}
    finally:
        prometheus.stop()
        opencost.shutdown()


def test_gpu_prices_survive_prometheus_going_away(caplog):
    """Prometheus down when prices are due: the last prices stay, a warning says why."""
    from gpulens.analyzer.inputs import live

    source = live.PrometheusInput(f"http://127.0.0.1:{free_port()}")
    source._prices = {"gpu-a": 12.29}
    assert source.node_prices() == {"gpu-a": 12.29}
    assert "cannot read GPU prices (max by (node) (node_gpu_hourly_cost)) from Prometheus" in caplog.text
