"""Every page gpulens serves or writes, as a person sees it on a desktop (1400 px) and a laptop's half screen
(800 px): rendered by headless Chromium, nothing runs off its side (the page scrolls down, never across: wide
tables scroll in their own box), and its screenshot is a picture, not a blank. The report's layout in detail
(timelines, numbers under their headers, a phone's cards): tests/test_report_html.py."""

import json
import os
import re
import subprocess

import numpy as np
import pytest
import requests
from PIL import Image

from gpulens.analyzer.runs.livepage import LivePage
from gpulens.analyzer.runs.service import AnalyzerService
from gpulens.core.thresholds import Thresholds
from gpulens.receiver import AlertReceiver
from tests.helpers import gpulens, require_binary
from tests.test_history import MIDNIGHT, Replay, fleet_trace

pytestmark = pytest.mark.slow

WIDTHS = (1400, 800)
#: What the test adds to its copy of a page: the width it was laid out in and the width of what it holds,
#: written into the title, which --dump-dom prints.
MEASURE = (
    "<script>addEventListener('load', () => { document.title = JSON.stringify("
    "{width: innerWidth, scroll: document.documentElement.scrollWidth}); });</script>"
)


def _chromium(chromium: str, folder, page, width: int, *what: str) -> str:
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run"]
    browser += ["--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={folder / 'profile'}"]
    browser += ["--force-device-scale-factor=1", "--virtual-time-budget=2000", f"--window-size={width},900", *what]
    done = subprocess.run([*browser, page.as_uri()], capture_output=True, text=True, timeout=120, env=os.environ)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _seen(chromium: str, folder, name: str, html: str) -> dict[int, dict]:
    """The page at each width: what it measured, and its screenshot's size and the colours it holds."""
    page = folder / f"{name}.html"
    page.write_text(html.replace("</body>", MEASURE + "</body>"))
    out = {}
    for width in WIDTHS:
        dom = _chromium(chromium, folder, page, width, "--dump-dom")
        measured = json.loads(re.search(r"<title>(\{.*?\})</title>", dom)[1])
        shot = folder / f"{name}-{width}.png"
        _chromium(chromium, folder, page, width, f"--screenshot={shot}")
        with Image.open(shot) as image:
            pixels = np.asarray(image.convert("RGB"))
        out[width] = {**measured, "size": image.size, "colours": len(np.unique(pixels.reshape(-1, 3), axis=0))}
    return out


def _fits(seen: dict[int, dict]) -> None:
    for width, measured in seen.items():
        assert measured["width"] == width and measured["size"] == (width, 900)
        assert measured["scroll"] <= width, (width, measured)  # nothing runs off the side
        assert measured["colours"] >= 8, (width, measured)  # text, chips, lines: not a blank page


def test_the_html_report_fits_a_desktop_and_a_half_screen(tmp_path):
    chromium = require_binary("chromium")
    trace = fleet_trace(["training_finished", "serving", "idle_replica", "healthy_training"], 15.0, 3, finish=3600.0)
    from gpulens.analyzer.inputs import frame as fr

    fr.write_trace(trace, tmp_path / "trace.csv")
    done = gpulens("report", str(tmp_path / "trace.csv"), "--format", "html", "--out", str(tmp_path / "r.html"))
    assert done.returncode == 0, done.stderr
    _fits(_seen(chromium, tmp_path, "report", (tmp_path / "r.html").read_text()))


def test_the_analyzers_page_fits_a_desktop_and_a_half_screen(tmp_path):
    chromium = require_binary("chromium")
    trace = fleet_trace(["training_finished", "serving", "healthy_training"], 15.0, 2, finish=3600.0, keeps_memory=1.0)
    now = [MIDNIGHT + 600.0]
    service = AnalyzerService(Replay(trace, 600, lambda: now[0]), Thresholds(), {}, 300, lambda: now[0], 86400)
    for _ in range(20):
        assert service.cycle()
        now[0] += 300
    status, _, body = LivePage(service).page({})
    assert status == 200
    _fits(_seen(chromium, tmp_path, "page", body.decode()))


def test_the_alert_receivers_page_fits_a_desktop_and_a_half_screen(tmp_path):
    chromium = require_binary("chromium")
    receiver = AlertReceiver()
    alert = {
        "status": "firing",
        "labels": {
            "alertname": "GpulensPodHostStall",
            "namespace": "nlp",
            "pod": "gpt-pretrain-0",
            "severity": "warning",
        },
        "annotations": {
            "summary": "nlp/gpt-pretrain-0 waits on its host or a peer: its GPUs stall while utilization looks busy",
            "bottleneck": "host_stall",
            "confidence": "80%",
            "evidence": "checkpoint_stall_fraction: 12% of samples with one rank busy while the others wait; "
            "rank0_busy_seconds: 43 s at a time; power_while_busy: 21% of the limit on the waiting rank",
            "recommendation": "Save asynchronously (torch.distributed.checkpoint.async_save), or from every rank.",
            "runbook_url": "https://runbooks.example/gpulens#gpulenspodhoststall",
            "dashboard_url": "http://127.0.0.1:9849/#nlp/gpt-pretrain-0",
        },
        "startsAt": "2026-11-24T10:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
    }
    try:
        for path in ("/alerts/pages", "/alerts/tickets"):
            payload = {"status": "firing", "groupLabels": {"namespace": "nlp"}, "alerts": [alert]}
            assert requests.post(f"{receiver.url}{path}", json=payload, timeout=5).status_code == 200
        html = requests.get(f"{receiver.url}/", timeout=5).text
    finally:
        receiver.stop()
    _fits(_seen(chromium, tmp_path, "receiver", html))
