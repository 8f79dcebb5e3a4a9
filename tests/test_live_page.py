"""The analyzer's page at /, as a person sees it in headless Chromium: every pod's headline over the
history and its class now, and, after cycles pass, the page patched in place (one load of /, then only
what changed) to what a fresh load shows."""

import json
import os
import re
import subprocess

import pytest

from gpulens.analyzer.runs.livepage import LivePage
from gpulens.analyzer.runs.service import AnalyzerService
from gpulens.core.thresholds import Thresholds
from tests.helpers import require_binary, serve_analyzer
from tests.test_history import MIDNIGHT, Replay, fleet_trace

TRAINING, SERVING, HEALTHY = "sd/training_finished-0", "sd/serving-1", "sd/healthy_training-2"


def rows(dom: str) -> dict[str, str]:
    """unit -> its row's HTML, as the browser holds it."""
    return dict(re.findall(r'<tr data-unit="([^"]+)">(.*?)</tr>', dom, re.S))


@pytest.mark.slow
def test_the_analyzers_page_shows_each_pod_and_patches_itself_in_chromium(tmp_path):
    chromium = require_binary("chromium")
    # A job that finishes at 01:00 and keeps its GPU, a serving replica and a healthy job, every 15 s; a
    # verdict every 5 minutes from 00:10.
    trace = fleet_trace(["training_finished", "serving", "healthy_training"], 15.0, 2, finish=3600.0, keeps_memory=1.0)
    now = [MIDNIGHT + 600.0]
    service = AnalyzerService(Replay(trace, 600, lambda: now[0]), Thresholds(), {}, 300, lambda: now[0], 86400)

    def advance(cycles: int) -> None:
        for _ in range(cycles):
            assert service.cycle()
            now[0] += 300

    advance(11)  # to 01:00: the job still works
    live = LivePage(service, refresh_seconds=0.2)
    served, answers = [], []

    def page(query):
        served.append("/")
        answer = live.page(query)
        if len(served) == 1:
            advance(2)  # 01:05 and 01:10 pass while the page is open: the job's GPU has been idle since 01:00
        return answer

    def changes(query):
        answer = live.changes(query)
        answers.append((query.get("since"), json.loads(answer[2])))
        return answer

    server = serve_analyzer(routes={"/": page, "/api/v1/page": changes})
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/"
        browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--dump-dom"]
        browser += [f"--user-data-dir={tmp_path / 'profile'}"]

        def load(*flags: str) -> str:
            done = subprocess.run([*browser, *flags, url], capture_output=True, text=True, timeout=120, env=os.environ)
            assert done.returncode == 0, done.stderr
            return done.stdout

        dom = load("--virtual-time-budget=5000")  # open long enough for the page to poll
        assert served == ["/"]  # patched in place, never reloaded
        fresh = load()  # a new load of the page, at the same cycle
    finally:
        server.shutdown()
    # The first poll asked for the changes since the cycle the page showed, and got the two cycles since.
    since, first = answers[0]
    assert (since, first["cycle"], first["full"]) == ("11", 13, False)
    # Only the rows that changed came: the job is idle now, the replica wasted more; the healthy job's row
    # is as it was.
    assert set(first["rows"]) == {TRAINING, SERVING}
    assert f'data-cycle="{service.cycles}"' in dom
    shown = rows(dom)
    assert "now: idle" in shown[TRAINING] and "now: healthy" in shown[HEALTHY]
    # What the patched page shows is what a fresh load shows, in the same order.
    assert list(shown.items()) == list(rows(fresh).items())
    for section in ("status", "summary", "waste", "timelines"):
        assert (
            re.search(f'id="{section}".*?</div>', dom, re.S)[0] == re.search(f'id="{section}".*?</div>', fresh, re.S)[0]
        )
