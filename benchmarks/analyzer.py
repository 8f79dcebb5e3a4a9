"""One analysis cycle over a large fleet, against the floor of a plain pandas groupby-mean.

Run: .venv/bin/python benchmarks/analyzer.py [--gpus 10000] [--seconds 600]

Builds a trace of GPUS x SECONDS rows at 1 s (10,000 x 600 = 6 million by default) with every
signal column filled, pods of one or two GPUs, and classifies it, timing the cycle next to a
groupby-mean of the same frame by pod. Prints rows per second, peak memory and the ratio.
"""

from __future__ import annotations

import argparse
import gc
import resource
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gpulens.analyzer import frame as fr  # noqa: E402
from gpulens.analyzer.classify import classify  # noqa: E402
from gpulens.core import trace as tr  # noqa: E402


def make_trace(gpus: int, seconds: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    n = gpus * seconds
    gpu = np.repeat(np.arange(gpus), seconds)
    ts = np.tile(np.arange(seconds, dtype="float64"), gpus) + 1.8e9
    # Each GPU gets a level of activity and, for a third of them, a duty cycle of bursts and gaps.
    level = rng.uniform(0, 1, gpus)[gpu]
    period = rng.integers(2, 6, gpus)[gpu]
    bursty = (rng.random(gpus) < 0.33)[gpu]
    act = np.where(bursty, np.where(ts.astype(np.int64) % period == 0, 0.9, 0.02), level)
    act = np.clip(act + rng.normal(0, 0.03, n), 0, 1)
    total = 85.0e9
    frame = pd.DataFrame(
        {
            "timestamp": ts,
            "gpu": pd.Categorical(gpu).astype(str),
            "node": (gpu // 8).astype(str),
            "gpu_model": "NVIDIA H100 80GB HBM3",
            "namespace": "ns" + (gpu // 100).astype(str),
            "pod": "pod" + (gpu // 2).astype(str),
            "container": "main",
            "gpu_util": np.minimum(1, act * 1.2),
            "sm_active": act,
            "sm_occupancy": act * 0.5,
            "tensor_active": act * 0.6,
            "dram_active": act * 0.4,
            "gr_engine_active": np.minimum(1, act * 1.1),
            "fp16_active": act * 0.3,
            "fp32_active": act * 0.1,
            "fp64_active": 0.0,
            "memory_used_bytes": total * rng.uniform(0.1, 0.95, gpus)[gpu],
            "memory_total_bytes": total,
            "pcie_tx_bytes_per_second": 1e8,
            "pcie_rx_bytes_per_second": 5e8 * act,
            "nvlink_tx_bytes_per_second": 1e9,
            "nvlink_rx_bytes_per_second": 1e9,
            "power_watts": 100 + 500 * act,
            "temperature_celsius": 40 + 30 * act,
            "sm_clock_hertz": 1.98e9,
            "sm_clock_max_hertz": 1.98e9,
            "clock_event_reasons": 0.0,
            "cpu_usage_cores": 4.0,
            "cpu_limit_cores": 8.0,
            "restarts_total": 0.0,
            "numa_node": (gpu % 8 >= 4) * 1.0,
        }
    )
    return fr.normalize(frame)


def timed(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--seconds", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs each")
    args = parser.parse_args()

    frame = make_trace(args.gpus, args.seconds)
    rows = len(frame)
    numeric = [c for c in tr.SIGNALS]

    def floor():
        return frame.groupby(["namespace", "pod"], sort=False)[numeric].mean()

    floor_seconds, _ = timed(floor, args.repeat)
    cycle_seconds, verdicts = timed(lambda: classify(frame), args.repeat)
    # As a recording is written: all GPUs' samples of one second, then the next second.
    by_time = frame.sort_values("timestamp", kind="stable", ignore_index=True)
    shuffled_seconds, _ = timed(lambda: classify(by_time), args.repeat)
    tracemalloc.start()
    classify(frame)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    classes = pd.Series([v.bottleneck for v in verdicts]).value_counts()

    print(
        f"analyzer cycle: {args.gpus} GPUs x {args.seconds} s at 1 s = {rows:,} rows, "
        f"{len(verdicts):,} pods (best of {args.repeat})\n"
    )
    print(f"{'':<28} {'seconds':>8} {'rows/s':>14} {'x floor':>8}")
    print(f"{'floor: groupby-mean by pod':<28} {floor_seconds:>8.2f} {rows / floor_seconds:>14,.0f} {1.0:>8.2f}")
    print(
        f"{'classify, rows by GPU':<28} {cycle_seconds:>8.2f} {rows / cycle_seconds:>14,.0f} "
        f"{cycle_seconds / floor_seconds:>8.2f}"
    )
    print(
        f"{'classify, rows by time':<28} {shuffled_seconds:>8.2f} {rows / shuffled_seconds:>14,.0f} "
        f"{shuffled_seconds / floor_seconds:>8.2f}"
    )
    print(
        f"\npeak memory allocated by one cycle: {peak / 2**20:,.0f} MiB; "
        f"process peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB"
    )
    print("classes found:", ", ".join(f"{k} {v}" for k, v in classes.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
