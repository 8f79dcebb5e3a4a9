"""`gpulens report --prometheus` on a day of a fleet that runs only dcgm-exporter, read from a real Prometheus,
against a bare transfer of the same queries (HTTP and JSON decoding alone).

Run: .venv/bin/python benchmarks/store_report.py [--gpus 1000] [--hours 24] [--data DIR]

A day of 1,000 GPUs at dcgm-exporter's 30 s interval: ten series a GPU (the default counter set's
utilization, memory used and free, power, temperature, SM and memory clocks, and the graphics, tensor and
DRAM activity of its profiling fields), about 29 million samples, with the labels the GPU Operator's
ServiceMonitor gives them (exported_pod), and kube-state-metrics' owners (ten replicas a Deployment), each
node's allocatable GPUs, each pod's GPU request and phase (Pending and Running: the phases the report asks
for), and a pod of every hundredth Deployment waiting for 8 GPUs all day (the cluster's share). They
are written as OpenMetrics, backfilled with `promtool tsdb create-blocks-from openmetrics` into a real
Prometheus (Debian's), and read back:
- store: every range and instant query the report made, sent again and each answer read and thrown away:
  the store's own cost of answering them (its CPU measured from /proc), the floor no client can go under;
  asked plain, as the report asks a store on its own host or the cluster's network, and again gzipped, as
  it asks a store elsewhere (--prometheus.compression): what compressing costs the store, and saves the wire;
- bare: the same queries, each answer decoded with orjson, nothing else: the floor of reading through the
  HTTP API;
- counted: each GPU's exact per-slot reductions (15 minutes: samples, mean, extremes, last value; of the activity
  signal the samples at or under idle and at or over high, and its switches), asked of the store and decoded:
  what a report would read if the store counted for it (issue 76), against reading every sample;
- report: the report as a user runs it (a process of its own), reading in pieces and judging, with the CPU
  seconds Prometheus spent answering it;
- the report again at --prometheus.step 60 and 120 s (one sample in two, in four: what a long span can be
  read at), with the share of pods whose class is the one every sample gave.
Prints seconds, the ratios to both floors, Prometheus' CPU per GPU-day (for sizing a store), peak resident
memory and bytes read per GPU-day, and a month of 1,000 GPUs and a quarter of 10,000 extrapolated from the
measured rates. (A month of 1,000 GPUs is about 1.2 billion samples: about 540 GB of OpenMetrics to backfill,
more than this machine holds; the rate per GPU-day is measured on a day and the pieces a month is read in
are the day's, so memory does not grow with the span.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import TextIO

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import results  # noqa: E402
from gpulens.analyzer.runs.span import PIECE_ROWS  # noqa: E402

#: The day: 2025-11-10 00:00 UTC, sampled every 30 s (dcgm-exporter's interval under the GPU Operator).
START = 1_762_732_800
STEP = 30
#: The coarser steps the report is also run at (--prometheus.step): every other sample, every fourth.
COARSE_STEPS = (60, 120)
GPUS_PER_NODE = 8
REPLICAS_PER_DEPLOYMENT = 10
#: dcgm-exporter's series of each GPU: name -> (low, high) of its values, in dcgm-exporter's units.
SERIES = {
    "DCGM_FI_DEV_GPU_UTIL": (0, 100),
    "DCGM_FI_DEV_FB_USED": (0, 81_000),
    "DCGM_FI_DEV_FB_FREE": (0, 81_000),
    "DCGM_FI_DEV_POWER_USAGE": (70, 700),
    "DCGM_FI_DEV_GPU_TEMP": (30, 80),
    "DCGM_FI_DEV_SM_CLOCK": (345, 1980),
    "DCGM_FI_DEV_MEM_CLOCK": (2619, 2619),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (0, 1),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (0, 1),
    "DCGM_FI_PROF_DRAM_ACTIVE": (0, 1),
}


def _namespace(deployment: int) -> str:
    return f"team-{deployment % 17:02d}"


def _replicaset(deployment: int) -> str:
    return f"svc-{deployment:04d}-7d9f8c6b5"


def _pod(g: int) -> str:
    """The pod on GPU g: a replica of Deployment g // REPLICAS_PER_DEPLOYMENT."""
    return f"{_replicaset(g // REPLICAS_PER_DEPLOYMENT)}-{g:05d}"


def write_openmetrics(path: Path, gpus: int, hours: float, seed: int = 0) -> int:
    """The fleet's day as OpenMetrics in `path`; the samples written."""
    rng = np.random.default_rng(seed)
    steps = int(hours * 3600 / STEP)
    times = [str(START + STEP * k) for k in range(steps)]
    # Each GPU: a level of activity, bursts for a third of them, memory held; a tenth hold no pod.
    level = rng.uniform(0, 1, gpus)
    bursty = rng.random(gpus) < 0.33
    held = rng.random(gpus) >= 0.1
    memory = rng.uniform(0.1, 0.9, gpus)
    samples = 0
    with path.open("w") as out:
        for name, (low, high) in SERIES.items():
            out.write(f"# TYPE {name} gauge\n")
            for g in range(gpus):
                node, deployment = g // GPUS_PER_NODE, g // REPLICAS_PER_DEPLOYMENT
                labels = ",".join(
                    [
                        f'gpu="{g % GPUS_PER_NODE}"',
                        f'UUID="GPU-{g:08x}-1c2d-4e5f-8a9b-0c1d2e3f4a5b"',
                        f'device="nvidia{g % GPUS_PER_NODE}"',
                        'modelName="NVIDIA H100 80GB HBM3"',
                        f'Hostname="gpu-node-{node:04d}"',
                        'DCGM_FI_DRIVER_VERSION="550.54.15"',
                        'container="nvidia-dcgm-exporter"',
                        'endpoint="gpu-metrics"',
                        f'instance="10.1.{node // 250}.{node % 250}:9400"',
                        'job="nvidia-dcgm-exporter"',
                        'namespace="gpu-operator"',
                        f'pod="nvidia-dcgm-exporter-{node:05d}"',
                        'service="nvidia-dcgm-exporter"',
                    ]
                    + (
                        [
                            f'exported_namespace="{_namespace(deployment)}"',
                            f'exported_pod="{_pod(g)}"',
                            'exported_container="main"',
                        ]
                        if held[g]
                        else []
                    )
                )
                activity = np.full(steps, level[g] if held[g] else 0.0)
                if bursty[g]:
                    activity = activity * (rng.random(steps) < 0.4)
                if name in ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"):
                    used = np.round(memory[g] * 81_000 if held[g] else 0.0)
                    values = np.full(steps, used if name.endswith("USED") else 81_000 - used)
                elif high <= 1:
                    values = np.round(activity * rng.uniform(0.5, 1.0), 3)
                else:
                    values = np.round(low + (high - low) * activity)
                text = [f"{name}{{{labels}}} {v:g} {t}\n" for v, t in zip(values, times, strict=True)]
                out.writelines(text)
                samples += steps
        pods = [g for g in range(gpus) if held[g]]
        out.write("# TYPE kube_pod_owner gauge\n")
        for g in pods:
            deployment = g // REPLICAS_PER_DEPLOYMENT
            labels = (
                f'namespace="{_namespace(deployment)}",pod="{_pod(g)}",owner_kind="ReplicaSet",'
                f'owner_name="{_replicaset(deployment)}",owner_is_controller="true",job="kube-state-metrics"'
            )
            out.writelines(f"kube_pod_owner{{{labels}}} 1 {t}\n" for t in times)
            samples += steps
        _cluster(out, gpus, pods, times)
        samples += steps * (gpus // GPUS_PER_NODE + 3 * len(pods) + 4 * len(_waiting(gpus)))
        out.write("# TYPE kube_replicaset_owner gauge\n")
        for deployment in sorted({g // REPLICAS_PER_DEPLOYMENT for g in pods}):
            labels = (
                f'namespace="{_namespace(deployment)}",replicaset="{_replicaset(deployment)}",'
                f'owner_kind="Deployment",owner_name="svc-{deployment:04d}",job="kube-state-metrics"'
            )
            out.writelines(f"kube_replicaset_owner{{{labels}}} 1 {t}\n" for t in times)
            samples += steps
        out.write("# EOF\n")
    return samples


def _waiting(gpus: int) -> list[int]:
    """The Deployments (every hundredth) with a replica waiting all day for 8 GPUs."""
    return list(range(0, gpus // REPLICAS_PER_DEPLOYMENT, 100))


def _cluster(out: TextIO, gpus: int, pods: list[int], times: list[str]) -> None:
    """kube-state-metrics' GPU series: each node's allocatable GPUs, each pod's request and phase, and the
    waiting pods (no node, Pending, created at the start)."""
    ksm = 'job="kube-state-metrics"'
    out.write("# TYPE kube_node_status_allocatable gauge\n")
    for node in range(gpus // GPUS_PER_NODE):
        labels = f'node="gpu-node-{node:04d}",resource="nvidia_com_gpu",unit="integer",{ksm}'
        out.writelines(f"kube_node_status_allocatable{{{labels}}} {GPUS_PER_NODE} {t}\n" for t in times)
    out.write("# TYPE kube_pod_container_resource_requests gauge\n")
    waiting = [(_namespace(d), f"{_replicaset(d)}-wait{d:04d}") for d in _waiting(gpus)]
    for g in pods:
        labels = (
            f'namespace="{_namespace(g // REPLICAS_PER_DEPLOYMENT)}",pod="{_pod(g)}",container="main",'
            f'node="gpu-node-{g // GPUS_PER_NODE:04d}",resource="nvidia_com_gpu",unit="integer",{ksm}'
        )
        out.writelines(f"kube_pod_container_resource_requests{{{labels}}} 1 {t}\n" for t in times)
    for namespace, pod in waiting:
        labels = f'namespace="{namespace}",pod="{pod}",container="main",resource="nvidia_com_gpu",unit="integer",{ksm}'
        out.writelines(f"kube_pod_container_resource_requests{{{labels}}} 8 {t}\n" for t in times)
    out.write("# TYPE kube_pod_status_phase gauge\n")
    running = [(_namespace(g // REPLICAS_PER_DEPLOYMENT), _pod(g)) for g in pods]
    for phases, members in (({"Running": 1, "Pending": 0}, running), ({"Running": 0, "Pending": 1}, waiting)):
        for namespace, pod in members:
            for phase, value in phases.items():
                labels = f'namespace="{namespace}",pod="{pod}",phase="{phase}",{ksm}'
                out.writelines(f"kube_pod_status_phase{{{labels}}} {value} {t}\n" for t in times)
    out.write("# TYPE kube_pod_created gauge\n")
    for namespace, pod in waiting:
        labels = f'namespace="{namespace}",pod="{pod}",{ksm}'
        out.writelines(f"kube_pod_created{{{labels}}} {START} {t}\n" for t in times)


def backfill(promtool: str, work: Path, tsdb: Path, gpus: int, hours: float) -> int:
    """The fleet's day in a Prometheus data folder `tsdb` (kept if it is there); the samples it holds."""
    count = tsdb / "samples"
    if count.exists():
        print(f"using the data backfilled before in {tsdb}")
        return int(count.read_text())
    work.mkdir(parents=True, exist_ok=True)
    source = work / "day.om"
    started = time.perf_counter()
    samples = write_openmetrics(source, gpus, hours)
    size = source.stat().st_size
    print(f"wrote {samples:,} samples ({size / 2**30:.1f} GiB) in {time.perf_counter() - started:.0f} s")
    started = time.perf_counter()
    tsdb.mkdir(parents=True, exist_ok=True)
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(source), str(tsdb)], check=True)
    source.unlink()
    count.write_text(str(samples))
    print(f"backfilled with promtool in {time.perf_counter() - started:.0f} s")
    return samples


def run_report(url: str, hours: float, queries_out: str, step: float = STEP) -> dict:
    """The report in this process at `step` (--prometheus.step), its queries written to `queries_out` (where
    given): seconds, bytes, verdicts and each unit's class, peak RSS."""
    from gpulens import cli
    from gpulens.analyzer.cli.common import attribution
    from gpulens.analyzer.inputs.owners import OwnerReader
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.store import Store
    from gpulens.analyzer.runs import span
    from gpulens.analyzer.runs.report import Judging, cluster_share
    from gpulens.core.thresholds import Thresholds

    asked: list[tuple[str, dict]] = []

    class Recorded(Store):
        def _api(self, endpoint: str, params: dict[str, str], what: str = "", kind: str = "") -> list:
            asked.append((endpoint, params))
            return super()._api(endpoint, params, what, kind)

    started = time.perf_counter()
    store = Recorded(url, timeout=300)
    reader = SeriesReader(store, step)
    end = START + hours * 3600 - STEP
    # As `gpulens report` does: the scrape interval read first (it sets how old a sample may be and still
    # stand), the cluster's share after the verdicts.
    reader.scrape_interval(end, min(end - START, 3600.0))
    progress: list[span.Progress] = []
    the_span = span.Span.aligned(START, end, step)
    owners = OwnerReader(store)
    verdicts = span.report(reader, the_span, Thresholds(), on_progress=progress.append, owners=owners)
    grid = (the_span.start, the_span.end, the_span.step)
    # The report's own flags at their defaults, as `gpulens report --prometheus URL` has them.
    args = cli.build_parser().parse_args(["report", "--prometheus", url])
    cluster = cluster_share(attribution(args, Thresholds()), store, owners, grid, verdicts, Judging(Thresholds(), {}))
    seconds = time.perf_counter() - started
    if queries_out:
        Path(queries_out).write_text(json.dumps(asked))
    return {
        "seconds": seconds,
        "bytes": store.read_bytes,
        "wire_bytes": store.wire_bytes,
        "verdicts": len(verdicts),
        "pods_waited": len(cluster.pending) if cluster else 0,
        "workloads": len({v.workload for v in verdicts}),
        "queries": len(asked),
        "pieces": progress[-1].pieces_done,
        "groups": progress[-1].groups,
        "largest_piece_rows": progress[-1].largest_piece_rows,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "classes": {verdict.unit: verdict.bottleneck for verdict in verdicts},
    }


def bare(url: str, queries: list[tuple[str, dict]], decode: bool = True, gzipped: bool = False) -> tuple[float, int]:
    """Seconds to send `queries` again and read their answers, decoded with orjson (or, `decode` False, thrown
    away: the store's own cost), nothing else; and the bytes that crossed the wire. The answers are asked
    plain, as the report asks a store on this host, or `gzipped`, as it asks one elsewhere (store.accept_encoding)."""
    import orjson
    import requests

    session = requests.Session()
    session.headers["Accept-Encoding"] = "gzip, deflate" if gzipped else "identity"
    started, wire = time.perf_counter(), 0
    for endpoint, params in queries:
        get = endpoint.startswith("label/") or endpoint == "series"  # GET only, as the store client asks them
        with session.request(
            "GET" if get else "POST",
            f"{url}/api/v1/{endpoint}",
            **({"params": params} if get else {"data": params}),
            timeout=300,
            stream=True,
        ) as response:
            body = response.raw.read(decode_content=False)  # as it came over the wire
        wire += len(body)
        if decode:
            orjson.loads(zlib.decompress(body, 32 + zlib.MAX_WBITS) if gzipped else body)
    return time.perf_counter() - started, wire


#: The slot the store would count in: the history's (a window of an hour slid by a quarter of it).
SLOT = 900
#: The activity thresholds counted below and above (utilization in dcgm-exporter's percent): gpulens' idle and
#: high activity (core/thresholds.py).
IDLE_PERCENT, HIGH_PERCENT = 5, 80


def counted_queries(hours: float) -> list[tuple[str, dict]]:
    """What a report that the store counts for (issue 76) would ask instead of the samples: each GPU's series'
    exact per-slot reductions (samples, mean, extremes, the last value), and of the activity signal the samples
    at or under idle, at or over high (a comparison counted at the scrape step: a subquery), and the switches."""
    selector = '{job="nvidia-dcgm-exporter"}'
    window = f"[{SLOT}s]"
    expressions = [
        f"{function}({name}{selector}{window})"
        for name in SERIES
        for function in ("count_over_time", "avg_over_time", "max_over_time", "min_over_time", "last_over_time")
    ]
    activity = f"DCGM_FI_DEV_GPU_UTIL{selector}"
    expressions += [
        f"count_over_time(({activity} <= {IDLE_PERCENT})[{SLOT}s:{STEP}s])",
        f"count_over_time(({activity} >= {HIGH_PERCENT})[{SLOT}s:{STEP}s])",
        f"changes({activity}{window})",
    ]
    span = {"start": START + SLOT, "end": START + hours * 3600, "step": SLOT}
    return [("query_range", {"query": expr, **span}) for expr in expressions]


def as_gpulens_runs() -> dict[str, str]:
    """This environment with what `gpulens` sets for numpy in its own processes (cli.NUMPY_ENVIRONMENT): a child
    that measures the report in-process runs it as the command would."""
    from gpulens.cli import NUMPY_ENVIRONMENT

    return {**NUMPY_ENVIRONMENT, **os.environ}


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) process `pid` has used, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def with_cpu(run, pid: int) -> tuple[float, object]:
    """Prometheus' CPU seconds over `run`(), and what it returned."""
    before = cpu_seconds(pid)
    out = run()
    return cpu_seconds(pid) - before, out


@contextlib.contextmanager
def serving(prometheus: str, work: Path, tsdb: Path) -> Iterator[tuple[str, int]]:
    """Debian's Prometheus over the backfilled `tsdb` (its config written in `work`), once it has loaded the
    blocks: its URL and process id, until the block ends."""
    import requests

    from tests.helpers import free_port, wait_until

    address = f"127.0.0.1:{free_port()}"
    config = work / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\n")
    server = subprocess.Popen(
        [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tsdb}"]
        + ["--storage.tsdb.retention.time=100y", f"--web.listen-address={address}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://{address}"

    def ready() -> bool:
        try:
            return requests.get(url + "/-/ready", timeout=1).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(ready, 120, what="Prometheus to load the blocks")
        yield url, server.pid
    finally:
        server.terminate()
        server.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument(
        "--data",
        default="",
        help="keep the backfilled Prometheus data in this folder, and use it again when it is there (the "
        "day of 1,000 GPUs takes 6 minutes to write and backfill)",
    )
    parser.add_argument(
        "--name",
        default="report-store",
        choices=("report-store", "report-store-wide"),
        help="the results file: report-store for a day of 1,000 GPUs (the rate), report-store-wide for a wide "
        "fleet (--gpus 8000 --hours 6: memory when the span is read in groups of nodes)",
    )
    parser.add_argument("--report", default="", help=argparse.SUPPRESS)  # a child: the report against this URL
    parser.add_argument("--queries-out", default="", help=argparse.SUPPRESS)
    parser.add_argument("--step", type=float, default=STEP, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.report:
        print(json.dumps(run_report(args.report, args.hours, args.queries_out, args.step)))
        return 0
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if not (promtool and prometheus):
        print("needs Debian's prometheus (promtool and prometheus)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(args.data or scratch)
        tsdb = work / f"tsdb-{args.gpus}-{args.hours:g}h-cluster"
        samples = backfill(promtool, work, tsdb, args.gpus, args.hours)
        with serving(prometheus, work, tsdb) as (url, pid):
            queries_file = work / "queries.json"

            def report(step: float = STEP) -> dict:
                recorded = ["--queries-out", str(queries_file)] if step == STEP else []
                child = subprocess.run(
                    [sys.executable, __file__, "--report", url, "--hours", str(args.hours), "--step", str(step)]
                    + recorded,
                    capture_output=True,
                    text=True,
                    env=as_gpulens_runs(),
                )
                if child.returncode:  # what the report said, not a bare CalledProcessError
                    raise SystemExit(f"the report at a {step:g} s step failed:\n{child.stderr}")
                return json.loads(child.stdout)

            report()  # warms the page cache the blocks are read through, and records the queries
            queries = [tuple(q) for q in json.loads(queries_file.read_text())]
            # The faster of two runs, as the report's (min of the pairs would pick the one of less CPU).
            store_cpu, (store_seconds, _) = min(
                (with_cpu(lambda: bare(url, queries, decode=False), pid) for _ in range(2)), key=lambda r: r[1]
            )
            gzip_cpu, (gzip_seconds, gzip_wire) = min(
                (with_cpu(lambda: bare(url, queries, decode=False, gzipped=True), pid) for _ in range(2)),
                key=lambda r: r[1],
            )
            bare_seconds = min(bare(url, queries)[0] for _ in range(2))
            counts = counted_queries(args.hours)
            counted_cpu, (counted_seconds, counted_wire) = min(
                (with_cpu(lambda: bare(url, counts), pid) for _ in range(2)), key=lambda r: r[1]
            )
            runs = [with_cpu(report, pid) for _ in range(2)]
            prometheus_cpu, best = min(runs, key=lambda r: r[1]["seconds"])
            coarse = {
                step: min((with_cpu(partial(report, step), pid) for _ in range(2)), key=lambda r: r[1]["seconds"])
                for step in COARSE_STEPS
            }
    measured = best
    gpu_days = args.gpus * args.hours / 24
    classes = measured.pop("classes")
    coarser = [
        {
            "step_s": step,
            "report_s": run["seconds"],
            "report_prometheus_cpu_s": cpu,
            "seconds_per_gpu_day": run["seconds"] / gpu_days,
            "report_peak_rss_mib": run["peak_rss_mib"],
            "bytes": run["bytes"],
            # The units whose class (the headline, over the span) is the one every sample gave.
            "same_class_share": sum(run["classes"].get(unit) == judged for unit, judged in classes.items())
            / len(classes),
        }
        for step, (cpu, run) in coarse.items()
    ]
    rate = measured["seconds"] / gpu_days  # seconds per GPU-day
    figures = {
        "gpus": args.gpus,
        "hours": args.hours,
        "step_s": STEP,
        "samples": samples,
        "store_s": store_seconds,
        "store_prometheus_cpu_s": store_cpu,
        "store_gzip_s": gzip_seconds,
        "store_gzip_prometheus_cpu_s": gzip_cpu,
        "gzip_wire_bytes": gzip_wire,
        "bare_s": bare_seconds,
        "counted_s": counted_seconds,
        "counted_prometheus_cpu_s": counted_cpu,
        "counted_queries": len(counts),
        "counted_wire_bytes": counted_wire,
        "report_s": measured["seconds"],
        "report_prometheus_cpu_s": prometheus_cpu,
        "prometheus_cpu_s_per_gpu_day": prometheus_cpu / gpu_days,
        "report_peak_rss_mib": measured["peak_rss_mib"],
        "pieces": measured["pieces"],
        "groups": measured["groups"],
        "largest_piece_rows": measured["largest_piece_rows"],
        "piece_rows_limit": PIECE_ROWS,
        "bytes": measured["bytes"],
        "wire_bytes": measured["wire_bytes"],
        "bytes_per_gpu_day": measured["bytes"] / gpu_days,
        "queries": measured["queries"],
        "verdicts": measured["verdicts"],
        "workloads": measured["workloads"],
        "pods_waited": measured["pods_waited"],
        "seconds_per_gpu_day": rate,
        "coarser": coarser,
    }
    results.save(args.name, figures)
    print(
        f"\n{args.gpus:,} GPUs x {args.hours:g} h at {STEP} s of dcgm-exporter series ({samples:,} samples), "
        f"read from Prometheus\n"
    )
    print(f"{'':<46} {'seconds':>8} {'x store':>8} {'x bare':>7} {'Prometheus CPU-s':>17}")
    rows = (
        ("store: the same queries, answers thrown away", store_seconds, f"{store_cpu:.1f}"),
        ("store, answers gzipped (a store elsewhere)", gzip_seconds, f"{gzip_cpu:.1f}"),
        ("bare: the same queries, HTTP and JSON only", bare_seconds, ""),
        (f"counted: per-{SLOT // 60}-min counts by the store (issue 76)", counted_seconds, f"{counted_cpu:.1f}"),
        ("gpulens report --prometheus", measured["seconds"], f"{prometheus_cpu:.1f}"),
    )
    for name, seconds, cpu in rows:
        print(f"{name:<46} {seconds:>8.1f} {seconds / store_seconds:>8.2f} {seconds / bare_seconds:>7.2f} {cpu:>17}")
    for run in coarser:
        name = f"  at --prometheus.step {run['step_s']:g} s"
        print(
            f"{name:<46} {run['report_s']:>8.1f} "
            f"{run['report_s'] / store_seconds:>8.2f} {run['report_s'] / bare_seconds:>7.2f} "
            f"{run['report_prometheus_cpu_s']:>17.1f}   the class of {run['same_class_share']:.1%} of the pods"
        )
    print(
        f"\npeak resident memory {measured['peak_rss_mib']:,.0f} MiB, reading {measured['pieces']} pieces in "
        f"{measured['groups']} groups of nodes, the "
        f"largest {measured['largest_piece_rows']:,} rows (at most {PIECE_ROWS:,} GPU-steps, whatever the span); "
        f"{measured['queries']} queries; "
        f"{measured['bytes'] / gpu_days / 2**20:.2f} MiB read per GPU-day; {measured['verdicts']:,} verdicts, "
        f"{measured['workloads']:,} workloads"
    )
    cpu_rate = prometheus_cpu / gpu_days
    for gpus, days, span in ((1000, 30, "month"), (10_000, 91, "quarter")):
        print(
            f"a {span} of {gpus:,} GPUs: about {rate * gpus * days / 60:,.0f} minutes in one process at the "
            f"measured rate, and {cpu_rate * gpus * days / 3600:,.1f} CPU-hours of Prometheus; "
            + ", ".join(
                f"{run['seconds_per_gpu_day'] * gpus * days / 60:,.0f} minutes at a step of {run['step_s']:g} s"
                for run in coarser
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
