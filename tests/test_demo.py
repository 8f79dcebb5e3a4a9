"""`gpulens demo` as a user runs it: it starts, says where everything is, and Ctrl-C (SIGINT) stops
it cleanly, leaving no process behind. The stack it runs is tested in tests/test_stack.py."""

import re
import signal
import subprocess
import sys
import time
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
            "analyzer",
            "prometheus",
            "alertmanager",
            "alert receiver",
        ):
            assert f"  {part} " in text, f"the demo does not say where {part} is:\n{text}"
        # Every link it prints answers on this system (Debian's Prometheus has only its classic UI,
        # Debian's Alertmanager no web UI script).
        links = re.findall(r"^  .{22} (http://\S+)$", text, re.M)
        assert len(links) == 8, text
        for link in links:
            assert requests.get(link, timeout=5).status_code == 200, link
        children = descendants(demo.pid)
        assert len(children) == 7, children  # four exporters, the analyzer, Prometheus, Alertmanager
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
