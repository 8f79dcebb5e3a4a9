"""What Prometheus pays to reduce a window in the store, against reading its raw samples: the measurements the
design of a report that asks the store for per-window figures rests on (issue 51).

Run: .venv/bin/python benchmarks/store_reductions.py [--data DIR]   (DIR: benchmarks/store_report.py's, reused)

On benchmarks/store_report.py's day of 1,000 GPUs of dcgm-exporter series at 30 s (backfilled into Debian's
Prometheus, or reused from --data), each query below is asked over the first 12 hours, best of two: the raw
series at the scrape interval (the baseline: what a report reads today, field by field), the raw series and
the mean of each step's samples at twice the interval (what a report at --prometheus.step 1m could ask), a
per-window mean and maximum at a 5-minute step, a count of the samples in each window, a count of the
samples over a threshold (a subquery at the scrape interval, as a share of busy samples needs), and a count
of the samples where two fields' conditions hold at once (utilization high while power is low: a rank
waiting in a collective).
Answers are asked plain, as a report asks a store on its own host or the cluster's network
(--prometheus.compression auto): gzip would add a cost that follows the bytes. Prints Prometheus' CPU seconds
(from /proc), the wall time, the bytes of the answer and its points, each as a ratio to the raw field's.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results  # noqa: E402
from benchmarks.store_report import START, STEP, backfill, cpu_seconds, serving  # noqa: E402

HOURS = 12.0
UTIL, POWER = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE"
WINDOW = "5m"
#: (what it is, PromQL, step in seconds); the first is the baseline.
QUERIES = [
    ("raw: a field at the scrape interval", POWER, STEP),
    ("per-window mean (avg_over_time)", f"avg_over_time({POWER}[{WINDOW}])", 300),
    ("per-window maximum (max_over_time)", f"max_over_time({POWER}[{WINDOW}])", 300),
    ("samples per window (count_over_time)", f"count_over_time({UTIL}[{WINDOW}])", 300),
    ("samples over a threshold (subquery)", f"count_over_time(({UTIL} > 90)[{WINDOW}:{STEP}s])", 300),
    (
        "samples where two conditions hold (joined subquery)",
        f"count_over_time(({UTIL} > 90 and on (instance, gpu) {POWER} < 140)[{WINDOW}:{STEP}s])",
        300,
    ),
    # A report at a step of twice the interval (--prometheus.step): every other sample, or the mean of each
    # step's two (a millisecond short of the step, so that no sample is in two steps' ranges).
    ("raw at twice the interval (every other sample)", POWER, 2 * STEP),
    ("mean of each step's samples at twice the interval", f"avg_over_time({POWER}[{2 * STEP * 1000 - 1}ms])", 2 * STEP),
]


def measure(url: str, pid: int, query: str, step: float) -> dict:
    """The best of two runs of `query` (by Prometheus' CPU): CPU seconds, wall seconds, bytes and points."""
    runs = []
    for _ in range(2):
        cpu, started = cpu_seconds(pid), time.perf_counter()
        answer = requests.get(
            f"{url}/api/v1/query_range",
            params={"query": query, "start": START, "end": START + HOURS * 3600, "step": step},
            headers={"Accept-Encoding": "identity"},  # plain, as a report asks a store on its host or network
            timeout=600,
        )
        wall, spent = time.perf_counter() - started, cpu_seconds(pid) - cpu
        answer.raise_for_status()
        points = sum(len(series["values"]) for series in answer.json()["data"]["result"])
        runs.append({"cpu_s": spent, "seconds": wall, "bytes": len(answer.content), "points": points})
    return min(runs, key=lambda run: run["cpu_s"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="", help="benchmarks/store_report.py's --data folder, reused if there")
    args = parser.parse_args()
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if not (promtool and prometheus):
        print("needs Debian's prometheus (promtool and prometheus)", file=sys.stderr)
        return 2
    gpus, hours = 1000, 24.0
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(args.data or scratch)
        tsdb = work / f"tsdb-{gpus}-{hours:g}h-cluster"
        backfill(promtool, work, tsdb, gpus, hours)
        with serving(prometheus, work, tsdb) as (url, pid):
            rows = [(name, query, measure(url, pid, query, step)) for name, query, step in QUERIES]
    base = rows[0][2]
    print(f"\n{gpus:,} GPUs x {HOURS:g} h of dcgm-exporter series at {STEP} s, from Prometheus (best of 2)\n")
    print(f"{'query':<52} {'CPU-s':>6} {'x raw':>6} {'seconds':>8} {'MiB':>6} {'x raw':>6} {'points':>10}")
    for name, _, m in rows:
        print(
            f"{name:<52} {m['cpu_s']:>6.2f} {m['cpu_s'] / base['cpu_s']:>6.2f} {m['seconds']:>8.2f} "
            f"{m['bytes'] / 2**20:>6.1f} {m['bytes'] / base['bytes']:>6.2f} {m['points']:>10,}"
        )
    figures = {
        "gpus": gpus,
        "hours": HOURS,
        "step_s": STEP,
        "queries": [{"name": name, "promql": query, **m} for name, query, m in rows],
    }
    results.save("store-reductions", figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
