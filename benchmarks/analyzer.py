"""The analyzer on large fleets, against the floor of a plain pandas groupby-mean of the same frame.

Run: .venv/bin/python benchmarks/analyzer.py [--only cycle|day|input]

- cycle: one analysis cycle (the live service's): 10,000 GPUs x 10 minutes at 1 s = 6 million rows, with
  the columns gpulens exporters add (topology, NVLink health, activity shape), as the service reads them.
- day: `gpulens report` on a day of history: 1,000 GPUs x 24 hours at 15 s = 5.76 million rows of the
  columns every tool's recordings have, with sliding windows (1 h, every 15 min: four passes over the
  rows), episodes and headlines.

- input: what the live service reads from Prometheus each cycle at 10,000 GPUs (10-minute window, 15 s
  step): a store in another process answers the HTTP API as Prometheus does (JSON, the same series and
  labels as gpulens exporters give), and the service's input reads the window whole (its first cycle),
  then one interval later only the steps it has not read. Bytes, points and seconds per cycle.

Every signal column is filled, pods hold one or two GPUs; the floor averages every signal column the
frame has. Prints the time, rows per second, the ratio
to the floor and peak memory, and writes the figures to benchmarks/results/analyzer-cycle.json and
analyzer-day.json with the machine they were measured on.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import resource
import socket
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results  # noqa: E402
from benchmarks.store_report import as_gpulens_runs  # noqa: E402
from gpulens.analyzer.inputs import frame as fr  # noqa: E402
from gpulens.analyzer.inputs import readers  # noqa: E402
from gpulens.analyzer.judging.classify import classify  # noqa: E402
from gpulens.analyzer.judging.history import analyze  # noqa: E402


def make_trace(gpus: int, seconds: int, seed: int = 0, step: float = 1.0, exporter: bool = False) -> pd.DataFrame:
    """A trace of `gpus` GPUs over `seconds`; `exporter`: with the columns only gpulens exporters give
    (trace.LINKS and trace.SHAPE), as the live service's window always has them."""
    rng = np.random.default_rng(seed)
    samples = int(seconds / step)
    n = gpus * samples
    gpu = np.repeat(np.arange(gpus), samples)
    ts = np.tile(np.arange(samples, dtype="float64") * step, gpus) + 1.8e9
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
    if exporter:
        # Six driver samples a second; bursty GPUs cross the busy level twice a row, half of it steady.
        busy_share = np.clip(act, 0, 1)
        frame = frame.assign(
            pcie_root=(gpu % 8) // 2 * 1.0,
            nvlink_group=0.0,
            nvlink_links_down=0.0,
            nvlink_crc_errors_per_second=0.0,
            nvlink_replay_errors_per_second=0.0,
            nvlink_recovery_errors_per_second=0.0,
            activity_samples=6.0 * step,
            activity_idle_ratio=np.round((1 - busy_share) * 6) / 6,
            activity_low_ratio=np.round((1 - busy_share) * 6) / 6,
            activity_high_ratio=np.round(busy_share * 6) / 6 * (act > 0.7),
            activity_transitions=np.where(bursty, 2.0, 0.0),
            steady_bursts=np.where(bursty, 1.0, 0.0),
        )
    return fr.normalize(frame)


def floor(frame: pd.DataFrame) -> pd.DataFrame:
    """The floor: a plain groupby-mean by pod of every signal column of `frame`."""
    signals = [c for c in frame.columns if frame[c].dtype == np.float64 and c != "timestamp"]
    return frame.groupby(["namespace", "pod"], sort=False)[signals].mean()


def timed(fn, repeat: int) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        gc.collect()
        started = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - started)
    return best, result


def cycle(gpus: int, seconds: int, repeat: int) -> None:
    frame = make_trace(gpus, seconds, exporter=True)
    rows = len(frame)
    floor_seconds = timed(lambda: floor(frame), repeat)[0]
    cycle_seconds, verdicts = timed(lambda: classify(frame), repeat)
    # As a recording is written: all GPUs' samples of one second, then the next second.
    by_time = frame.sort_values("timestamp", kind="stable", ignore_index=True)
    shuffled_seconds, _ = timed(lambda: classify(by_time), repeat)
    peak = traced_peak(lambda: classify(frame))
    results.save(
        "analyzer-cycle",
        {
            "gpus": gpus,
            "seconds": seconds,
            "rows": rows,
            "pods": len(verdicts),
            "floor_s": floor_seconds,
            "classify_s": cycle_seconds,
            "classify_by_time_s": shuffled_seconds,
            "peak_allocated_mib": peak / 2**20,
        },
    )
    print(
        f"analyzer cycle: {gpus} GPUs x {seconds} s at 1 s = {rows:,} rows, {len(verdicts):,} pods (best of {repeat})\n"
    )
    table(
        rows,
        floor_seconds,
        [("classify, rows by GPU", cycle_seconds), ("classify, rows by time", shuffled_seconds)],
    )
    print(f"\npeak memory allocated by one cycle: {peak / 2**20:,.0f} MiB")
    print("classes found:", ", ".join(f"{k} {v}" for k, v in count(verdicts).items()))


def day(gpus: int, hours: float, step: float, repeat: int) -> None:
    frame = make_trace(gpus, int(hours * 3600), step=step)
    rows = len(frame)
    floor_seconds = timed(lambda: floor(frame), repeat)[0]
    history_seconds, verdicts = timed(lambda: analyze(frame), repeat)
    print(
        f"\nanalyze with history: {gpus} GPUs x {hours:g} h at {step:g} s = {rows:,} rows, {len(verdicts):,} pods, "
        f"{sum(len(v.episodes) for v in verdicts):,} episodes (best of {repeat})\n"
    )
    table(rows, floor_seconds, [("report: 1 h windows, 15 min", history_seconds)])
    # Peak memory as `gpulens report day.parquet` sees it: a fresh process that reads the file and analyses it.
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / "day.parquet"
        frame.to_parquet(path, index=False)
        child = subprocess.run(
            [sys.executable, __file__, "--only", "file", "--file", str(path)],
            capture_output=True,
            text=True,
            check=True,
        )
    summary, figures = child.stdout.strip().splitlines()
    print(f"\n{summary}")
    results.save(
        "analyzer-day",
        {
            "gpus": gpus,
            "hours": hours,
            "step_s": step,
            "rows": rows,
            "pods": len(verdicts),
            "episodes": sum(len(v.episodes) for v in verdicts),
            "floor_s": floor_seconds,
            "history_s": history_seconds,
            **json.loads(figures),
        },
    )
    print("headlines:", ", ".join(f"{k} {v}" for k, v in count(verdicts).items()))


def input_cycle(gpus: int, repeat: int) -> None:
    """Seconds, bytes and points of the live input's first cycle (the window whole) and of the next."""
    from gpulens.analyzer.inputs import live
    from gpulens.analyzer.inputs.live import PrometheusInput

    # The client's cost of a whole window in one cycle, as before a first cycle was cut into pieces
    # (benchmarks/live_prometheus.py measures the pieces against a real Prometheus).
    live.READ_POINTS_PER_CYCLE = 10**15

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = subprocess.Popen([sys.executable, __file__, "--only", "store", "--port", str(port), "--gpus", str(gpus)])
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        end = STORE_END
        best = {"first": (math.inf, 0, 0), "next": (math.inf, 0, 0)}
        frame = pd.DataFrame()
        asked: dict[str, int] = {}  # queries of a next cycle, by endpoint
        # The store renders each answer once: from the second round on, a cycle costs what it reads.
        now = [0.0]
        for _ in range(repeat + 1):
            now[0] = end - STORE_STEP
            source = PrometheusInput(url, window=600, step=STORE_STEP, clock=lambda: now[0])
            api = source.store._api

            def counted(endpoint: str, params: dict[str, str], api=api) -> list[dict]:
                asked[endpoint] = asked.get(endpoint, 0) + 1
                return api(endpoint, params)

            source.store._api = counted  # type: ignore[method-assign]
            for name in ("first", "next"):
                asked.clear()
                before = source.target_status()[url].read_bytes
                started = time.perf_counter()
                frame = source.window_frame()
                seconds = time.perf_counter() - started
                read = source.target_status()[url].read_bytes - before
                if seconds < best[name][0]:
                    best[name] = (seconds, read, source.last_cycle_points)
                now[0] = end
    finally:
        store.terminate()
        store.wait()
    classify_seconds = timed(lambda: classify(frame), repeat)[0]
    figures = {
        "gpus": gpus,
        "step_s": STORE_STEP,
        "window_s": 600,
        "rows": len(frame),
        "classify_s": classify_seconds,
        "peak_rss_mib": peak_resident_bytes() / 2**20,
        "range_queries": asked.get("query_range", 0),
        "instant_queries": asked.get("query", 0),
    }
    for name, (seconds, read, points) in best.items():
        figures |= {f"{name}_s": seconds, f"{name}_bytes": read, f"{name}_points": points}
    results.save("analyzer-input", figures)
    print(f"\nlive input: {gpus:,} GPUs, 10-minute window at a {STORE_STEP:g} s step (best of {repeat})\n")
    print(f"{'cycle':<40} {'seconds':>8} {'MiB read':>9} {'points':>11}")
    for name, label in (("first", "first: the window whole"), ("next", "next: the steps not read yet")):
        seconds, read, points = (figures[f"{name}_{part}"] for part in ("s", "bytes", "points"))
        print(f"{label:<40} {seconds:>8.2f} {read / 2**20:>9.1f} {points:>11,}")
    print(f"then classify the window's {len(frame):,} rows: {classify_seconds:.2f} s")
    print(f"peak resident memory of the service's side: {figures['peak_rss_mib']:,.0f} MiB")


#: The store's newest step (unix seconds) and its step, as the service's defaults ask.
STORE_END, STORE_STEP = 1_800_000_000.0, 15.0


def serve_store(port: int, gpus: int) -> None:
    """Prometheus' HTTP API over a fleet of `gpus` GPUs, 8 a node: every range query answers one series a
    GPU, instant queries the GPUs' identity, NVLink topology and the pods' CPU; values cycle through a
    fixed set, as JSON Prometheus writes (timestamps as numbers, values as strings). A series carries the
    labels a kube-prometheus ServiceMonitor scrape gives it, or only those of the query's `by (...)`, as
    PromQL's aggregation leaves. Each answer is rendered once and kept."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import parse_qs

    from gpulens.core import metrics as m

    node = [f"node-{g // 8}" for g in range(gpus)]
    labels = [f'"instance":"10.0.{g // 8 // 250}.{g // 8 % 250}:9835","uuid":"GPU-{g:08d}"' for g in range(gpus)]
    scraped = [
        f'{labels[g]},"gpu":"{g % 8}","job":"gpulens-exporter","namespace":"gpulens",'
        f'"pod":"gpulens-exporter-{g // 8:05x}","container":"exporter","endpoint":"metrics",'
        f'"service":"gpulens-exporter","node":"{node[g]}"'
        for g in range(gpus)
    ]
    pool = [f'"{v:.4g}"' for v in np.random.default_rng(0).uniform(0, 1, 97)]
    # The memory gauges in bytes, as an H100 reports them (its total and the driver's reserve), so that the
    # value checks keep them: a reserve the size of the total, or more, is refused as no GPU's.
    total, reserved = 85_520_809_984, 556_793_856
    in_bytes = {
        m.MEMORY_TOTAL.name: [f'"{total}"'] * 97,
        m.MEMORY_RESERVED.name: [f'"{reserved}"'] * 97,
        m.MEMORY_USED.name: [f'"{v * (total - reserved):.0f}"' for v in np.random.default_rng(1).uniform(0, 1, 97)],
    }

    def series(extra: str, values: str, g: int, of: list[str] = labels) -> str:
        return f'{{"metric":{{{of[g]}{extra}}},{values}}}'

    def range_answer(query: str, start: float, end: float) -> str:
        steps = [f"{t:.0f}" for t in np.arange(start, end + STORE_STEP / 2, STORE_STEP)]
        if "DCGM_FI_" in query:
            return ""  # a fleet of gpulens exporters: no dcgm-exporter series
        if m.GPU_POD_INFO.name in query:  # the pod that holds each GPU, at every step
            ones = '"values":[' + ",".join(f'[{t},"1"]' for t in steps) + "]"
            return ",".join(
                series(f',"namespace":"ns{g // 100}","pod":"pod{g // 2}","container":"main"', ones, g)
                for g in range(gpus)
            )
        if "container_" in query or "kube_pod" in query:  # the pods' CPU use, limits and restarts
            fours = '"values":[' + ",".join(f'[{t},"4"]' for t in steps) + "]"
            return ",".join(
                f'{{"metric":{{"namespace":"ns{g // 100}","pod":"pod{g // 2}"}},{fours}}}' for g in range(0, gpus, 2)
            )
        extra = ',"type":"crc"' if m.NVLINK_ERRORS.name in query else ""
        extra = ',"reason":"sw_thermal_slowdown"' if m.CLOCK_EVENT_ACTIVE.name in query else extra
        of = labels if query.startswith(("max by (", "sum by (")) else scraped
        cycled = next((kept for name, kept in in_bytes.items() if name in query), pool)
        return ",".join(
            series(
                extra,
                '"values":[' + ",".join(f"[{t},{cycled[(g + k) % 97]}]" for k, t in enumerate(steps)) + "]",
                g,
                of,
            )
            for g in range(gpus)
        )

    def instant_answer(query: str, time_: str) -> str:
        value = f'"value":[{time_},"1"]'
        if m.GPU_INFO.name in query:
            return ",".join(
                series(f',"model":"NVIDIA H100 80GB HBM3","node":"{node[g]}"', value, g) for g in range(gpus)
            )
        if m.TOPOLOGY.name in query:  # every ordered pair of a node's GPUs, as the exporter gives them
            return ",".join(
                series(f',"peer_uuid":"GPU-{p:08d}","level":"NV18","p2p":"ok"', value, g)
                for g in range(gpus)
                for p in range(g // 8 * 8, g // 8 * 8 + 8)
                if p != g
            )
        return ""  # kube-state-metrics' owners: none in this fleet

    answers: dict[tuple, bytes] = {}

    class Store(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode()).items()}
            endpoint = self.path.rsplit("/", 1)[1]
            key = (endpoint, form["query"], form.get("start"), form.get("end"), form.get("time"))
            if key not in answers:
                if endpoint == "query_range":
                    kind, result = "matrix", range_answer(form["query"], float(form["start"]), float(form["end"]))
                else:
                    kind, result = "vector", instant_answer(form["query"], form["time"])
                answers[key] = f'{{"status":"success","data":{{"resultType":"{kind}","result":[{result}]}}}}'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answers[key])))
            self.end_headers()
            self.wfile.write(answers[key])

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer(("127.0.0.1", port), Store).serve_forever()


def peak_resident_bytes() -> int:
    """This process's peak resident memory (Linux VmHWM; unlike ru_maxrss, not inherited from the parent
    across fork and exec)."""
    with open("/proc/self/status") as f:
        line = next(x for x in f if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def analyse_file(path: str) -> None:
    """Read a trace file and analyse it with history, as `gpulens report` does; print time and peak RSS."""
    started = time.perf_counter()
    frame = readers.read_trace(path)
    read = time.perf_counter() - started
    analyze(frame)
    total = time.perf_counter() - started
    peak = peak_resident_bytes()
    del frame
    gc.collect()
    # The reader's floor: the same file read by pandas alone, without gpulens' column and range checks.
    bare = timed(lambda: pd.read_parquet(path), 1)[0]
    print(
        f"a fresh process reading the day from Parquet ({read:.1f} s, {read / bare:.2f}x a bare pd.read_parquet) "
        f"and analysing it ({total - read:.1f} s): peak RSS {peak / 2**30:.2f} GiB"
    )
    print(
        json.dumps({"file_read_s": read, "bare_read_s": bare, "file_total_s": total, "file_peak_rss_gib": peak / 2**30})
    )


def table(rows: int, floor_seconds: float, runs: list[tuple[str, float]]) -> None:
    print(f"{'':<30} {'seconds':>8} {'rows/s':>14} {'x floor':>8}")
    print(f"{'floor: groupby-mean by pod':<30} {floor_seconds:>8.2f} {rows / floor_seconds:>14,.0f} {1.0:>8.2f}")
    for name, seconds in runs:
        print(f"{name:<30} {seconds:>8.2f} {rows / seconds:>14,.0f} {seconds / floor_seconds:>8.2f}")


def traced_peak(fn) -> int:
    tracemalloc.start()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def count(verdicts) -> pd.Series:
    return pd.Series([v.bottleneck for v in verdicts]).value_counts()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", choices=["cycle", "day", "input", "file", "store"], default="", help="run one of the benchmarks"
    )
    parser.add_argument("--file", default="", help="with --only file: the trace file to analyse")
    parser.add_argument("--port", type=int, default=0, help="with --only store: the port to serve on")
    parser.add_argument("--gpus", type=int, default=10_000, help="with --only store: the GPUs of the fleet")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs each")
    args = parser.parse_args()
    if not args.only:  # each in a process of its own, so that one's memory does not count in the other's
        for only in ("cycle", "day", "input"):
            child = [sys.executable, __file__, "--only", only, "--repeat", str(args.repeat)]
            subprocess.run(child, check=True, env=as_gpulens_runs())
        return 0
    if args.only == "file":
        analyse_file(args.file)
        return 0
    if args.only == "store":
        serve_store(args.port, args.gpus)
        return 0
    if args.only == "cycle":
        cycle(10_000, 600, args.repeat)
    elif args.only == "input":
        input_cycle(10_000, args.repeat)
    else:
        day(1_000, 24, 15.0, args.repeat)
    print(
        f"\nprocess peak RSS, building the test frames included: "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
