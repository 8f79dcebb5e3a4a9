"""The README's picture: the analyzer's page on the demo fleet, as headless Chromium draws it at 1400 px.

Run: .venv/bin/python docs/images/capture.py   (needs Debian's chromium; about four minutes)

It starts the demo's exporters and analyzer (gpulens.demo.Stack, without Prometheus), waits until the
analyzer has judged every pod of the fleet from a full window and kept `--minutes` of history, and
screenshots its page into docs/images/analyzer-page.png. The picture is of the real page on the real
demo, so rerun this when the page's look changes.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from gpulens.demo import Stack, _verdicts  # noqa: E402

OUT = REPO / "docs" / "images" / "analyzer-page.png"


def _judged(stack: Stack) -> bool:
    """Every pod has a verdict other than insufficient_data."""
    pods = [v for v in _verdicts(stack) if v["pod"]]
    return bool(pods) and all(v["bottleneck"] != "insufficient_data" for v in pods)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="history to keep before the picture")
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1000)
    args = parser.parse_args()
    chromium = shutil.which("chromium")
    if not chromium:
        print("capture.py: needs Debian's chromium (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        stack = Stack(Path(folder) / "demo", with_prometheus=False).start()
        try:
            assert stack.plan is not None
            analyzer = stack.plan.analyzer
            started = time.monotonic()
            while not (_judged(stack) and time.monotonic() - started >= args.minutes * 60):
                if time.monotonic() - started > args.minutes * 60 + 600:
                    print(f"capture.py: the analyzer at {analyzer} judged no full fleet in time", file=sys.stderr)
                    return 1
                time.sleep(5)
            browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
            browser += ["--no-first-run", f"--user-data-dir={Path(folder) / 'profile'}"]
            browser += ["--force-device-scale-factor=1", "--virtual-time-budget=5000"]
            browser += [f"--window-size={args.width},{args.height}", f"--screenshot={OUT}", f"http://{analyzer}/"]
            subprocess.run(browser, check=True, capture_output=True, timeout=120)
        finally:
            stack.stop()
    print(f"wrote {OUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
