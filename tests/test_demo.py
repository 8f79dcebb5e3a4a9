"""`gpulens demo` as a user runs it: it starts, says where everything is, and Ctrl-C (SIGINT) stops
it cleanly, leaving no process behind. The stack it runs is tested in tests/test_stack.py."""

import io
import json
import re
import signal
import subprocess
import sys
import threading
import time
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
        assert len(links) == 11, text
        for link in links:
            assert requests.get(link, timeout=5).status_code == 200, link
        children = descendants(demo.pid)
        assert len(children) == 9, children  # six exporters, the analyzer, Prometheus, Alertmanager
    finally:
        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=30)
        log.close()
    assert code == 0, (tmp_path / "demo.log").read_text()
    assert "stopped, nothing left running" in (tmp_path / "demo.log").read_text()
    time.sleep(0.2)
    assert [pid for pid in children if alive(pid)] == []


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


def test_the_live_table_redraws_in_place_on_a_terminal(tmp_path):
    """On a terminal the table is drawn on a screen of its own, each frame from the top and cut to the
    terminal's height: nothing of an earlier frame stays behind. Pods and GPUs no pod holds, by name."""
    from rich.console import Console

    from gpulens.demo import Stack, _show_live, _table, _verdicts

    stack = Stack(tmp_path / "demo", with_prometheus=False, scrape_interval=1).start()
    try:
        wait_until(
            lambda: any(not v["pod"] for v in _verdicts(stack)), 120, what="the demo's analyzer to judge the fleet"
        )
        out = io.StringIO()
        # A terminal shorter than the table (19 rows): the frames are cut, not scrolled.
        console = Console(file=out, force_terminal=True, width=120, height=16, color_system=None)
        _show_live(stack, threading.Event(), 4.5, console)
        verdicts, whole = _verdicts(stack), io.StringIO()
        Console(file=whole, width=200).print(_table(stack))
    finally:
        stack.stop()
    text = out.getvalue()
    # The alternate screen, entered once and given back at the end.
    assert text.count("\x1b[?1049h") == 1 and text.count("\x1b[?1049l") == 1
    assert text.index("\x1b[?1049h") < text.index("\x1b[?1049l")
    frames = [frame for frame in text.split("\x1b[H") if "gpulens demo" in frame]
    assert len(frames) >= 2  # the first, and a redraw 2 s later
    for frame in frames:
        # Each frame drawn from the top (cursor home), within the terminal's 16 lines.
        assert frame.startswith(" ") and len(frame.rstrip("\n").split("\n")) <= 16
    assert "pod or GPU" in frames[0] and "research/notebook-alice-0" in frames[0]
    # Its rows, whole: every pod, then the GPUs no pod holds by their one name.
    names = re.findall(r"^│ (\S+)", whole.getvalue(), re.M)
    assert names[-2:] == [u for u in sorted(v["unit"] for v in verdicts if not v["pod"])]
    assert names[:-2] == sorted(v["unit"] for v in verdicts if v["pod"])


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
        owners = [
            line
            for line in requests.get(f"{url}/metrics", timeout=5).text.splitlines()
            if line.startswith("kube_pod_owner{")
        ]
        assert len(owners) == 28
        assert any('pod="chat-api-6c8f9d7b54-x2k4p"' in o and 'owner_kind="ReplicaSet"' in o for o in owners)

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
