"""`gpulens demo` as a user runs it: it starts, says where everything is, and Ctrl-C (SIGINT) stops
it cleanly, leaving no process behind. The stack it runs is tested in tests/test_stack.py."""

import io
import json
import re
import signal
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import pytest
import requests

from tests.helpers import REPO, require_binary, wait_until

#: Every test here starts real servers or gpulens processes (the fast lane skips them: pytest -m "not slow").
pytestmark = pytest.mark.slow


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc (children of children too)."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_ctrl_c_stops_the_demo_and_leaves_nothing_running(tmp_path):
    require_binary("prometheus")
    require_binary("prometheus-alertmanager")
    log = open(tmp_path / "demo.log", "w")
    demo = subprocess.Popen(
        [sys.executable, "-m", "gpulens", "demo", "--demo.dir", str(tmp_path / "demo")],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=REPO,
    )
    try:
        wait_until(
            lambda: "Ctrl-C stops" in (tmp_path / "demo.log").read_text() or demo.poll() is not None,
            60,
            what="the demo to start",
        )
        text = (tmp_path / "demo.log").read_text()
        assert demo.poll() is None, text
        for part in (
            "exporter sim-h100-a",
            "exporter sim-a100-b",
            "exporter sim-l40s-c",
            "exporter sim-h100-d",
            "exporter sim-a100-e",
            "exporter sim-h100-f",
            "exporter sim-h100-g",
            "exporter sim-h100-h",
            "analyzer",
            "prometheus",
            "alertmanager",
            "alert receiver",
            "kube-state-metrics",
        ):
            assert f"  {part} " in text, f"the demo does not say where {part} is:\n{text}"
        # Every link it prints answers on this system (Debian's Prometheus has only its classic UI,
        # Debian's Alertmanager no web UI script).
        links = re.findall(r"^  .{22} (http://\S+)$", text, re.M)
        assert len(links) == 13, text  # eight exporters, the analyzer, Prometheus, Alertmanager, receiver, cluster
        for link in links:
            assert requests.get(link, timeout=5).status_code == 200, link
        children = descendants(demo.pid)
        assert len(children) == 11, children  # eight exporters, the analyzer, Prometheus, Alertmanager
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=30)
        log.close()
    assert code == 0, (tmp_path / "demo.log").read_text()
    assert "stopped, nothing left running" in (tmp_path / "demo.log").read_text()
    assert [pid for pid in children if alive(pid)] == []  # when it says so: it waited for each


def test_without_prometheus_the_demo_runs_the_exporters_and_analyzer(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "demo", "--demo.no-prometheus", "--demo.duration", "3"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "  analyzer " in result.stderr and "  prometheus " not in result.stderr
    assert "stopped, nothing left running" in result.stderr


def test_a_bad_thresholds_file_stops_the_demo_with_the_reason(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "demo", "--thresholds", str(tmp_path / "nope.yaml")],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert result.returncode == 1
    assert (
        f"gpulens demo: --thresholds {tmp_path / 'nope.yaml'}: cannot read it (No such file or directory)"
        in result.stderr
    )


@pytest.mark.slow
def test_the_alert_receiver_shows_each_notification_as_a_person_reads_it(tmp_path):
    """Alertmanager's webhook payloads (version 4) at the receiver, read in headless Chromium: when each
    arrived, its group, each alert's start and resolution, the verdict, and only http(s) links; nothing a
    label carries runs as markup."""
    from gpulens.receiver import AlertReceiver

    chromium = require_binary("chromium")
    receiver = AlertReceiver()
    alert = {
        "labels": {"alertname": "GpulensPodHostStall", "namespace": "nlp", "pod": "gpt<script>x</script>"},
        "annotations": {
            "summary": "nlp/gpt waits on its host or a peer",
            "recommendation": "Save asynchronously.",
            "confidence": "80%",
            "runbook_url": "https://runbooks.example/gpulens#gpulenspodhoststall",
            "dashboard_url": "javascript:alert(1)",
        },
        "startsAt": "2026-11-24T10:00:00.000Z",
        "endsAt": "0001-01-01T00:00:00Z",
    }
    alert["labels"]["bottleneck"] = "host_stall"
    firing = {"status": "firing", "groupLabels": {"namespace": "nlp"}, "alerts": [{**alert, "status": "firing"}]}
    resolved = {
        "status": "resolved",
        "groupLabels": {"namespace": "nlp"},
        "alerts": [{**alert, "status": "resolved", "endsAt": "2026-11-24T10:45:00.000Z"}],
    }
    try:
        for payload in (firing, resolved):
            answer = requests.post(f"{receiver.url}/alerts/tickets", json=payload, timeout=5)
            assert answer.status_code == 200
        browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
        browser += [f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", f"{receiver.url}/"]
        dom = subprocess.run(browser, capture_output=True, text=True, timeout=120).stdout
    finally:
        receiver.stop()
    assert "<h1>Alertmanager notifications</h1>" in dom and "0 alert(s) firing now" in dom
    sections = re.findall(r"<section>.*?</section>", dom, re.S)
    assert [re.search(r"<h2>(\w+): tickets", s)[1] for s in sections] == ["resolved", "firing"]  # newest first
    assert all("group namespace=nlp" in s for s in sections)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", s, re.S) for s in sections]
    assert [c[:5] for c in cells] == [
        [
            "resolved",
            "GpulensPodHostStall",
            "nlp/gpt&lt;script&gt;x&lt;/script&gt;",
            "2026-11-24 10:00:00 UTC",
            "2026-11-24 10:45:00 UTC",
        ],
        ["firing", "GpulensPodHostStall", "nlp/gpt&lt;script&gt;x&lt;/script&gt;", "2026-11-24 10:00:00 UTC", ""],
    ]
    assert "host_stall (80%): Save asynchronously." in cells[0][5]
    assert cells[0][6] == '<a href="https://runbooks.example/gpulens#gpulenspodhoststall">runbook</a>'
    assert "<script>x" not in dom and "javascript:" not in dom


def test_the_live_view_redraws_in_place_on_a_terminal_under_its_addresses(tmp_path):
    """On a terminal the view is drawn on a screen of its own, each frame from the top and cut to the
    terminal's height: nothing of an earlier frame stays behind, and the analyzer's address is on the first
    line of every frame (the addresses printed before it are hidden while it runs). In a log, every row."""
    from rich.console import Console

    from gpulens.demo import Stack, _show_live, _verdicts

    stack = Stack(tmp_path / "demo", with_prometheus=False, scrape_interval=1).start()
    try:
        wait_until(
            lambda: any(not v["pod"] for v in _verdicts(stack)), 120, what="the demo's analyzer to judge the fleet"
        )
        out = io.StringIO()
        # A terminal shorter than the table (32 rows): the pods by class.
        console = Console(file=out, force_terminal=True, width=120, height=16, color_system=None)
        _show_live(stack, threading.Event(), 4.5, console)
        page = stack.endpoints()["analyzer"]
        verdicts, log = _verdicts(stack), io.StringIO()
        _show_live(stack, threading.Event(), 0.1, Console(file=log, force_terminal=False))
    finally:
        stack.stop()
    text = out.getvalue()
    # The alternate screen, entered once and given back at the end.
    assert text.count("\x1b[?1049h") == 1 and text.count("\x1b[?1049l") == 1
    assert text.index("\x1b[?1049h") < text.index("\x1b[?1049l")
    frames = [frame for frame in text.split("\x1b[H") if "gpulens demo" in frame]
    assert len(frames) >= 2  # the first, and a redraw 2 s later
    for frame in frames:
        # Each frame drawn from the top (cursor home), within the terminal's 16 lines, its address first.
        lines = frame.rstrip("\n").split("\n")
        assert len(lines) <= 16 and f"the analyzer's page: {page}" in lines[0]
    # The pods by class, by their names alone, and how tall a terminal the table would need.
    last = frames[-1]
    counts = [int(n) for n in re.findall(r"^[a-z_]+ (\d+): ", last, re.M)]
    said = re.search(r"^(\d+) pods and GPUs: the table needs \d+ lines, this terminal has 16\.", last, re.M)
    assert counts and said and 0 < sum(counts) <= int(said[1]) and "research/" not in last, last
    # In a log, the whole table: every pod by name, then the GPUs no pod holds, one row a node and class: by
    # GPU where the node has one of the class, else counted.
    names = re.findall(r"^(\S+(?: (?:GPU|MIG)-\w+| \d+ GPUs)?) ", log.getvalue().split("─\n", 1)[1], re.M)
    held = sorted(v["unit"] for v in verdicts if v["pod"])
    assert names[: len(held)] == held
    unheld: dict[tuple[str, str], list[str]] = {}
    for v in verdicts:
        if not v["pod"]:
            unheld.setdefault((v["node"], v["bottleneck"]), []).append(v["gpus"][0])
    rows = sorted(
        f"{node} {gpus[0][:12]}" if len(gpus) == 1 else f"{node} {len(gpus)} GPUs" for (node, _), gpus in unheld.items()
    )
    assert names[len(held) :] == rows
    assert "sim-h100-g 7 GPUs" in rows  # its seven free GPUs, one row


GOOD_ALERT = {
    "status": "firing",
    "labels": {"alertname": "GpulensPodIdle", "namespace": "nlp", "pod": "gpt-0"},
    "annotations": {"summary": "nlp/gpt-0 is idle"},
    "startsAt": "2026-11-24T10:00:00.123456789Z",
    "endsAt": "0001-01-01T00:00:00Z",
}


@pytest.mark.parametrize(
    ("alert", "refusal"),
    [
        ({"labels": {**GOOD_ALERT["labels"], "alertname": 7}}, "alerts[0].labels.alertname: expected a string, got 7"),
        ({"annotations": {"summary": ["a", "b"]}}, 'alerts[0].annotations.summary: expected a string, got ["a", "b"]'),
        ({"startsAt": 1e300}, "alerts[0].startsAt: expected an RFC 3339 time, got 1e+300"),
        ({"startsAt": "NaN"}, 'alerts[0].startsAt: expected an RFC 3339 time, got "NaN"'),
        ({"status": "maybe"}, 'alerts[0].status: expected firing or resolved, got "maybe"'),
        ({"labels": None}, "alerts[0].labels: expected an object of strings, got nothing"),
    ],
)
def test_the_alert_receiver_refuses_webhooks_it_could_not_show_and_keeps_serving(alert, refusal):
    from gpulens.receiver import AlertReceiver

    receiver = AlertReceiver()
    try:
        bad = {"status": "firing", "alerts": [{**GOOD_ALERT, **alert}]}
        answer = requests.post(f"{receiver.url}/alerts/pages", json=bad, timeout=5)
        assert (answer.status_code, answer.text) == (400, f"not an Alertmanager webhook payload: {refusal}\n")
        good = {"status": "firing", "alerts": [GOOD_ALERT, {**GOOD_ALERT, "labels": {"alertname": "X", "pod": "p"}}]}
        assert requests.post(f"{receiver.url}/alerts/pages", json=good, timeout=5).status_code == 200
        # Every page answers, the pod without a namespace included.
        for path in ("/", "/text", "/api/v1/notifications"):
            assert requests.get(receiver.url + path, timeout=5).status_code == 200
        assert requests.get(receiver.url + "/text", timeout=5).text == (
            "[firing] pages: GpulensPodIdle nlp/gpt-0 | nlp/gpt-0 is idle\n[firing] pages: X p | nlp/gpt-0 is idle\n"
        )
        [kept] = requests.get(receiver.url + "/api/v1/notifications", timeout=5).json()
        assert kept["alerts"][0]["startsAt"] == "2026-11-24T10:00:00.123456789Z"
    finally:
        receiver.stop()


def test_the_alert_receiver_keeps_megabytes_of_webhooks_not_gigabytes():
    """Webhooks of a MiB each (the largest body the server reads): the oldest are let go past KEEP_BYTES."""
    from gpulens import receiver as module

    receiver = module.AlertReceiver()
    labels = {f"label_{i}": "x" * 100 for i in range(60)}
    body = json.dumps(
        {"status": "firing", "alerts": [{**GOOD_ALERT, "labels": {**GOOD_ALERT["labels"], **labels}}] * 140}
    ).encode()
    assert 1_000_000 < len(body) <= 1 << 20
    tracemalloc.start()
    try:
        with requests.Session() as session:
            for _ in range(40):
                answer = session.post(f"{receiver.url}/alerts/pages", data=body, timeout=30)
                assert answer.status_code == 200
        current, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        receiver.stop()
    kept = receiver.snapshot()
    assert len(kept) == module.KEEP_BYTES // len(body)  # the newest that fit
    assert current < 4 * module.KEEP_BYTES, current  # 40 MiB were sent; 1,000 of them would have kept 9.7 GiB


def test_the_simulated_cluster_serves_kube_state_metrics_and_each_serving_pods_engine(tmp_path):
    """docker-compose.yml's simulated-cluster service: kube-state-metrics for every pod of the demo fleet,
    and the engine metrics of its three serving pods, counting the requests their GPUs serve (their rates:
    test_stack.py); a pod that serves nothing has none."""
    from tests.helpers import GpulensProcess

    process = GpulensProcess(["demo", "--simulate.speed", "5", "--demo.cluster-only", "127.0.0.1:0"])
    try:
        url = process.wait_listening()
        said = requests.get(f"{url}/metrics", timeout=5).text.splitlines()
        owners = [line for line in said if line.startswith("kube_pod_owner{")]
        # The fleet's 29 pods, the serving node's 7 that run from its start (the CronJob's second run starts
        # later), and the two jobs waiting for a node.
        assert len(owners) == 29 + 7 + 2
        assert any('pod="chat-api-6c8f9d7b54-x2k4p"' in o and 'owner_kind="ReplicaSet"' in o for o in owners)
        # The cluster's share: the GPUs each node offers (sim-a100-b's GPU 5 fell off the bus), and the jobs
        # waiting, Pending on no node: 4 H100s of the training pool, 8 of the research pool.
        allocatable = {
            line.split('node="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in said
            if line.startswith("kube_node_status_allocatable{")
        }
        assert allocatable == {
            "sim-h100-a": 8,
            "sim-a100-b": 7,
            "sim-l40s-c": 4,
            "sim-h100-d": 8,
            "sim-a100-e": 8,
            "sim-h100-f": 8,
            "sim-h100-g": 8,
            "sim-h100-h": 7,  # its GPU 7 is MIG-enabled: offered as nvidia_com_mig_3g_40gb, not as a GPU
        }
        waiting = [line for line in said if 'pod="llm-pretrain-0"' in line]
        assert any(
            line.startswith("kube_pod_status_phase{") and 'phase="Pending"' in line and line.endswith(" 1.0")
            for line in waiting
        )
        [request] = [line for line in waiting if line.startswith("kube_pod_container_resource_requests{")]
        assert 'node=""' in request and request.endswith(" 4.0")
        [selector] = [line for line in waiting if line.startswith("kube_pod_nodeselectors{")]
        assert 'nodeselector_karpenter_sh_nodepool="training"' in selector
        assert 'nodeselector_nvidia_com_gpu_product="NVIDIA-H100-80GB-HBM3"' in selector
        finetune = [line for line in said if 'pod="llm-finetune-0"' in line]
        [request] = [line for line in finetune if line.startswith("kube_pod_container_resource_requests{")]
        assert 'node=""' in request and 'namespace="research"' in request and request.endswith(" 8.0")
        [selector] = [line for line in finetune if line.startswith("kube_pod_nodeselectors{")]
        assert 'nodeselector_karpenter_sh_nodepool="research"' in selector

        def finished() -> float:
            text = requests.get(f"{url}/engines/serving/chat-api-6c8f9d7b54-x2k4p/metrics", timeout=5).text
            [line] = [x for x in text.splitlines() if x.startswith("vllm:request_success_total{")]
            return float(line.rsplit(" ", 1)[1])

        first = finished()
        wait_until(lambda: finished() > first, 10, what="the vLLM replica to finish a request")
        engine = requests.get(f"{url}/engines/serving/embedder-0/metrics", timeout=5).text
        assert 'nv_inference_request_success{model="embedder",version="1"}' in engine
        assert requests.get(f"{url}/engines/nlp/bert-finetune-0/metrics", timeout=5).status_code == 404
    finally:
        assert process.stop() == 0


def _fleet_verdicts() -> list[dict]:
    """The analyzer's verdicts on the demo fleet as its API serves them: every pod of its class, and the GPUs
    no pod holds (sim-h100-a's GPU 5 holding memory, its GPU 7, sim-h100-g's GPUs 1-7 and the five sim-h100-h's
    pods left unallocated)."""
    from tests.test_stack import STACK_EXPECTED

    pods = [
        {"namespace": unit.split("/")[0], "pod": unit.split("/")[1], "node": "sim-h100-a", "bottleneck": c}
        for unit, c in STACK_EXPECTED.items()
    ]
    unheld = [
        {"namespace": "", "pod": "", "node": node, "gpu": gpu, "bottleneck": c}
        for node, gpu, c in [
            ("sim-h100-a", 5, "held_without_pod"),
            ("sim-h100-a", 7, "unallocated"),
            *(("sim-h100-g", k, "unallocated") for k in range(1, 8)),
            *(("sim-h100-h", k, "unallocated") for k in (1, 3, 4, 5, 6)),  # left by the pods that ended
        ]
    ]
    return [
        {
            **v,
            "gpus": [f"GPU-{v.get('gpu', 0)}f00d00{v.get('gpu', 0)}-1111-2222"],
            "unit": f"{v['namespace']}/{v['pod']}" if v["pod"] else f"gpu:{v['node']}/GPU-{v['gpu']}",
            "confidence": 0.8,
            "mean_activity": 0.125,
            "wasted_cost": 0.1,
            "window_seconds": 120.0,
        }
        for v in pods + unheld
    ]


ENDPOINTS = {
    "exporter sim-h100-a": "http://127.0.0.1:40001/metrics",
    "analyzer": "http://127.0.0.1:40002/",
    "prometheus": "http://127.0.0.1:40003/classic/alerts",
    "alertmanager": "http://127.0.0.1:40004/api/v2/alerts",
    "alert receiver": "http://127.0.0.1:40005/",
}


@pytest.mark.parametrize(("width", "height"), [(80, 24), (100, 48), (120, 48)])
def test_the_live_view_fits_an_ordinary_terminal_with_every_name_whole(width, height):
    """The demo's 32 pods and 14 GPUs no pod holds at 80x24 (pods by class, one line a class), 100x48 (the
    table, pods by name) and 120x48 (the table with namespaces, nodes, GPUs and alerts by name): within the
    terminal, the addresses on top, no pod's name cut, a node's free GPUs one row."""
    from rich.console import Console

    from gpulens.demo_view import rows_of, view

    verdicts = _fleet_verdicts()
    firing = {"nlp/bert-finetune-0": ["DataStarvation (pages)", "LowSmActivity (pages)"]}
    console = Console(file=io.StringIO(), width=width, height=height, color_system=None)
    console.print(
        view(rows_of(verdicts, firing), ENDPOINTS, ["sim-a100-b/GPU 5: GpuFellOffBus (pages)"], width, height)
    )
    lines = console.file.getvalue().rstrip("\n").split("\n")
    assert len(lines) <= height and max(len(line) for line in lines) <= width
    assert lines[0] == "gpulens demo  the analyzer's page: http://127.0.0.1:40002/  (Ctrl-C stops)"
    assert "alert receiver http://127.0.0.1:40005/" in " ".join(line.strip() for line in lines[1:3])
    assert "40001" not in "\n".join(lines)  # the exporters' addresses are in the page, not on every frame
    text = "\n".join(lines)
    if height < 32 + 6:
        by_class = {line.split(" ")[0]: line for line in lines if re.match(r"^[a-z_]+ \d+: ", line)}
        assert set(by_class) == {v["bottleneck"] for v in verdicts}
        # As many names as fit whole, and how many more.
        assert by_class["overprovisioned_serving"] == "overprovisioned_serving 3: chat-api-6c8f9d7b54-m7q9z, +2 more"
        assert by_class["idle"] == "idle 3: notebook-alice-0, notebook-bob-0, notebook-erin-0"
        # The title, two lines of addresses at 80 columns, the table's header and rule, its rows, a line under it.
        # 32 pods, and four rows of GPUs no pod holds: sim-h100-a's two (of two classes), sim-h100-g's seven,
        # sim-h100-h's five.
        assert lines[-1] == f"36 pods and GPUs: the table needs {1 + 2 + 2 + 36 + 1} lines, this terminal has 24."
        return
    header = next(line for line in lines if line.startswith("pod or GPU"))
    wide = width >= 120
    columns = ["pod or GPU", *(["node", "GPUs"] if wide else []), "class", "conf", "active", "$/h", "alerts"]
    assert header.split() == " ".join(columns).split()
    for v in verdicts:
        if v["pod"]:
            name = v["unit"] if wide else v["pod"]
            assert re.search(rf"^{re.escape(name)} ", text, re.M), name
    assert re.search(r"^sim-h100-a GPU-5f00d005 .*held_without_pod", text, re.M)
    assert re.search(r"^sim-h100-a GPU-7f00d007 .*unallocated", text, re.M)
    # sim-h100-g's seven: one row, their waste summed ($0.10 each in 120 s: $21.00 an hour).
    [free] = [line for line in lines if line.startswith("sim-h100-g")]
    assert free.split()[:3] == ["sim-h100-g", "7", "GPUs"] and "unallocated" in free and "21.00" in free, free
    starved = next(line for line in lines if line.startswith("nlp/bert-finetune-0" if wide else "bert-finetune-0 "))
    if wide:
        # Alerts by name, cut at the terminal's edge: the one column that gives way.
        assert re.search(r"12% +3\.00  DataStarvation \(", starved) and len(starved) == width, starved
    else:
        assert starved.split()[-3:] == ["12%", "3.00", "2"]  # $0.10 in 120 s; 2 alerts
    assert lines[-1] == "GPU and node alerts: sim-a100-b/GPU 5: GpuFellOffBus (pages)"


def test_the_native_demos_alerts_link_to_the_analyzers_page_unless_a_grafana_is_given(tmp_path):
    """The native demo runs no Grafana: each alert's dashboard_url leads to the analyzer's page (a pod's alert
    to its row), as promtool reads the rules; with a Grafana URL (the compose demo's), to its dashboards."""
    import yaml

    from gpulens.core.thresholds import Thresholds
    from gpulens.demo import Plan, configs

    plan = Plan({"n1": "127.0.0.1:40001"}, "127.0.0.1:40002", "http://127.0.0.1:40005")
    links = {}
    for grafana in ("", "http://grafana.example:3000"):
        rules = yaml.safe_load(configs(plan, Thresholds(), grafana)[plan.rules_file])
        links[grafana] = {
            r["alert"]: r["annotations"]["dashboard_url"] for g in rules["groups"] for r in g["rules"] if "alert" in r
        }
    native, grafana = links[""], links["http://grafana.example:3000"]
    assert set(native) == set(grafana) and len(native) == 23
    for alert, url in native.items():
        if "/d/gpulens-pod?" in grafana[alert]:
            assert url == "http://127.0.0.1:40002/#{{ $labels.namespace }}/{{ $labels.pod }}", alert
        else:
            assert url == "http://127.0.0.1:40002/", alert
        assert grafana[alert].startswith("http://grafana.example:3000/d/gpulens-")
    promtool = require_binary("promtool")
    (tmp_path / "rules.yaml").write_text(configs(plan, Thresholds())[plan.rules_file])
    checked = subprocess.run([promtool, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
