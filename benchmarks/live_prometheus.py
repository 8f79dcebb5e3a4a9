"""The live analyzer against a real Prometheus holding a 10,000-GPU fleet: what a cycle costs both sides.

Run: .venv/bin/python benchmarks/live_prometheus.py [--gpus 10000] [--cycles 14]   (needs Debian's prometheus)

The path production takes, end to end:
- a fleet of gpulens exporters, one target a node of 8 GPUs, each answering what the real exporter
  answers for the simulator's H100 node (every series it serves: GPUs, processes, pods, topology), with
  its own GPUs, pods and node, counters rising and gauges moving as that node's did between two samples
  a minute apart (a server of this script, in its own process);
- a real Prometheus scraping every target every 15 s, as the GPU Operator's ServiceMonitors do;
- the real `gpulens analyzer` service reading it (`--input.prometheus`), its default 10-minute window at
  a 15 s step and a 15 s cycle, started once the store holds a whole window, with a state file
  (`--analysis.state-file`); stopped with SIGTERM after its steady cycles and started again, then once
  more at a 60 s interval (`--analysis.interval 60s`). Its cycles are timed from the line it logs for each
  at debug, not from /metrics (tens of megabytes at 10,000 pods); /metrics is asked once after each cycle,
  as a ServiceMonitor's scrape asks it (the verdicts' history and plan, then the body).

Printed per cycle: the analyzer's seconds (its own gpulens_analyzer_cycle_duration_seconds; the first to
/readyz, from the start of the process), the CPU-seconds Prometheus spent meanwhile beyond what it spends
ingesting (its own process_cpu_seconds_total, less its rate over a minute without the analyzer), the bytes
read, and the analyzer's peak resident memory. Two floors in the same run:
- the client's: the same queries (Prometheus' query log) sent again and decoded, nothing else;
- Prometheus': each steady cycle's series selectors only counted, a cycle each 15 s (select_only).

Ratios, not absolute times, carry across machines. The figures are written to
benchmarks/results/live-prometheus.json.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import results  # noqa: E402
from tests.helpers import GpulensProcess, free_port  # noqa: E402

GPUS_PER_NODE = 8
SCRAPE_SECONDS = 15
#: Seconds the analyzer is given from SIGTERM to exit (Kubernetes gives a pod 30 by default).
STOP_TIMEOUT_SECONDS = 30.0
#: A series selector with its matchers in a query (every one the analyzer asks has matchers: its selector).
SELECTOR = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\{[^{}]*\}|\{__name__[^{}]*\}")
#: Seconds between the two samples of the node the fleet plays.
TEMPLATE_SPAN = 60.0


# --- the fleet ------------------------------------------------------------------------------------------
@dataclass
class Template:
    """One node's /metrics as format strings (a "%r" where each value goes), and each value at two
    instants TEMPLATE_SPAN apart; counters (cumulative series) rise at their rate between the two."""

    skeleton: str
    first: np.ndarray
    second: np.ndarray
    counter: np.ndarray  # bool per value

    @classmethod
    def of_simulated_node(cls) -> Template:
        from gpulens.exporter.collector import ExporterCollector
        from gpulens.exporter.sampler import Sampler
        from gpulens.exporter.sources import simulated
        from gpulens.simulator import fleet

        node = next(n for n in fleet.fleet_from_file(fleet.DEFAULT_FLEET) if len(n.gpus) == GPUS_PER_NODE)
        now = [5000.0]
        sampler = Sampler(simulated.SimulatedSource(node, clock=lambda: now[0]), interval=1.0, clock=lambda: now[0])
        collector = ExporterCollector(sampler, "bench", "simulated", clock=lambda: now[0])
        snapshots = []
        for _ in range(2):
            for _ in range(int(TEMPLATE_SPAN)):
                sampler.tick()
                now[0] += 1.0
            snapshots.append(collector.render_text().decode())
        second = dict(line.rsplit(" ", 1) for line in snapshots[1].splitlines() if line and line[0] != "#")
        lines, firsts, seconds, counters = [], [], [], []
        for line in snapshots[0].splitlines():
            if line.startswith("#"):
                lines.append(line.replace("%", "%%"))
                continue
            prefix, value = line.rsplit(" ", 1)
            if prefix not in second:  # a series of the first sample only (a process that ended)
                continue
            name = prefix.split("{", 1)[0]
            lines.append(prefix.replace("%", "%%") + " %r")
            firsts.append(float(value))
            seconds.append(float(second[prefix]))
            counters.append(name.endswith(("_total", "_bucket", "_count", "_sum")))
        return cls("\n".join(lines) + "\n", np.array(firsts), np.array(seconds), np.array(counters))

    def for_node(self, index: int) -> str:
        """The skeleton with node `index`'s own GPUs and pods."""
        return self.skeleton.replace('uuid="GPU-', f'uuid="GPU-{index:05d}-').replace('pod="', f'pod="n{index:05d}-')

    def values(self, index: int, seconds: float) -> tuple:
        """Node `index`'s values `seconds` after the fleet started: counters at their rate, gauges at one
        sample or the other, a minute each; nodes are out of step with each other."""
        t = seconds + 37.0 * index
        rising = np.maximum(self.second - self.first, 0.0) / TEMPLATE_SPAN
        gauges = self.second if int(t // TEMPLATE_SPAN) % 2 else self.first
        return tuple(np.where(self.counter, self.first + rising * t, gauges).tolist())


def serve_fleet(port: int, gpus: int) -> None:
    """/node/<i> answers node i's /metrics (text 0.0.4, uncompressed), until killed."""
    template = Template.of_simulated_node()
    nodes = gpus // GPUS_PER_NODE
    skeletons: dict[int, str] = {}
    started = time.monotonic()

    class Node(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            index = int(self.path.rsplit("/", 1)[1])
            if not 0 <= index < nodes:
                self.send_error(404)
                return
            skeleton = skeletons.get(index) or skeletons.setdefault(index, template.for_node(index))
            body = (skeleton % template.values(index, time.monotonic() - started)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    ThreadingHTTPServer.daemon_threads = True
    ThreadingHTTPServer(("127.0.0.1", port), Node).serve_forever()


def prometheus_config(fleet_port: int, nodes: int, prometheus_port: int, query_log: Path) -> str:
    """One target a node, with its instance and node labels as a ServiceMonitor's relabelling gives them."""
    targets = [
        {
            "targets": [f"127.0.0.1:{fleet_port}"],
            "labels": {
                "__metrics_path__": f"/node/{i}",
                "instance": f"10.1.{i // 250}.{i % 250}:9835",
                "node": f"node-{i:05d}",
            },
        }
        for i in range(nodes)
    ]  # fmt: skip
    return json.dumps(
        {
            "global": {
                "scrape_interval": f"{SCRAPE_SECONDS}s",
                "scrape_timeout": "10s",
                "query_log_file": str(query_log),
            },
            "scrape_configs": [
                {"job_name": "gpulens-exporter", "static_configs": targets},
                {"job_name": "prometheus", "static_configs": [{"targets": [f"127.0.0.1:{prometheus_port}"]}]},
            ],
        }
    )


# --- measuring ------------------------------------------------------------------------------------------
def scalar(url: str, name: str) -> float:
    """The value of the one sample `name` in a /metrics answer (NaN if absent)."""
    return scalars(url, (name,))[0]


def scalars(url: str, names: tuple[str, ...]) -> tuple[float, ...]:
    """The values of the samples `names` (one each, labelled or not) in one /metrics answer (NaN if absent)."""
    found = dict.fromkeys(names, math.nan)
    for line in requests.get(url, timeout=10).text.splitlines():
        name = line.partition("{")[0].partition(" ")[0]
        if name in found and math.isnan(found[name]):
            found[name] = float(line.rsplit(" ", 1)[1])
    return tuple(found[name] for name in names)


def resident_peak_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def wait(condition, timeout: float, what: str, every: float = 0.5):
    """`condition()` once truthy, polled every `every` seconds for at most `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"timed out after {timeout:g} s waiting for {what}")


class Analyzer(GpulensProcess):
    """A `gpulens analyzer` process reading the Prometheus at `prometheus`, its log in `workdir`."""

    def __init__(self, prometheus: str, extra: list[str], workdir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.started = time.monotonic()
        super().__init__(
            [
                "--log.level", "debug", "analyzer", "--input.prometheus", prometheus,
                "--exporter.job", "gpulens-exporter", "--prometheus.timeout", "120s",
                "--web.listen-address", f"127.0.0.1:{self.port}", *extra,
            ],
            workdir=workdir,
        )  # fmt: skip

    def cycles(self) -> list[Logged]:
        """The cycles the analyzer has logged (at debug, one line each): read from its log, not /metrics, whose
        body at 10,000 pods is tens of megabytes (asked four times a second, it took the cycles' CPU)."""
        return [
            Logged(int(number), float(_unix(at)), float(seconds), float(read))
            for number, at, seconds, read in CYCLE_LINE.findall(self.log_path.read_text())
        ]

    def scrape(self) -> None:
        """/metrics asked once, as Prometheus asks it (OpenMetrics, gzipped), and thrown away: the analyzer's cost
        of the scrape a ServiceMonitor makes every interval (its verdicts' history and plan, then the body)."""
        headers = {"Accept": "application/openmetrics-text; version=1.0.0", "Accept-Encoding": "gzip"}
        with requests.get(self.url + "/metrics", headers=headers, timeout=60, stream=True) as answer:
            answer.raw.read(decode_content=False)

    def ready(self) -> bool:
        if self.process.poll() is not None:
            raise SystemExit(f"the analyzer exited with {self.process.returncode}; see {self.log_path}")
        try:
            return requests.get(self.url + "/readyz", timeout=5).status_code == 200
        except requests.RequestException:
            return False


#: The line the analyzer logs at debug after each cycle (analyzer/runs/service.py, cycle()).
CYCLE_LINE = re.compile(r"cycle (\d+): verdicts of (\S+) in ([\d.]+) s, \d+ units, (\d+) bytes read in all")


@dataclass(frozen=True)
class Logged:
    """A cycle as the analyzer logged it: its number, the unix time of its verdicts, its seconds, and the bytes
    read from the store since the process started."""

    number: int
    produced_at: float
    seconds: float
    read_bytes: float


@dataclass
class Cycle:
    seconds: float
    prometheus_cpu_s: float
    read_bytes: float
    peak_rss_mib: float
    #: Unix seconds the cycle started (its verdicts' time, less its duration): the query log's entries from
    #: one cycle's start to the next are that cycle's.
    started_at: float | None = None
    #: Prometheus' garbage collections and TSDB reloads (its once-a-minute loop) since the cycle before: what
    #: else it did while the cycle ran.
    prometheus_gcs: float | None = None
    prometheus_reloads: float | None = None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000, help="GPUs in the fleet, 8 a node")
    parser.add_argument("--cycles", type=int, default=14, help="cycles to measure after the first")
    parser.add_argument("--minute-cycles", type=int, default=4, help="cycles to measure at a 60 s interval")
    parser.add_argument("--window", type=float, default=600, help="the analysis window in seconds (shorter: a trial)")
    parser.add_argument("--only", choices=["fleet"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.only == "fleet":
        serve_fleet(args.port, args.gpus)
        return 0
    if not 8 <= args.gpus <= 200_000 or not 1 <= args.cycles <= 100 or not 1 <= args.minute_cycles <= 100:
        parser.error("--gpus must be within 8..200000, --cycles and --minute-cycles within 1..100")
    prometheus_binary = shutil.which("prometheus")
    if prometheus_binary is None:
        raise SystemExit("needs Prometheus on the PATH (Debian: apt install prometheus)")
    nodes = args.gpus // GPUS_PER_NODE

    with tempfile.TemporaryDirectory(prefix="gpulens-live-") as tmp:
        work = Path(tmp)
        fleet_port, prometheus_port = free_port(), free_port()
        prometheus = f"http://127.0.0.1:{prometheus_port}"
        query_log = work / "queries.log"
        (work / "prometheus.yml").write_text(prometheus_config(fleet_port, nodes, prometheus_port, query_log))
        processes = [
            subprocess.Popen(
                [sys.executable, __file__, "--only", "fleet", "--port", str(fleet_port), "--gpus", str(args.gpus)]
            ),
            subprocess.Popen(
                [
                    prometheus_binary, f"--config.file={work / 'prometheus.yml'}",
                    f"--storage.tsdb.path={work / 'data'}", f"--web.listen-address=127.0.0.1:{prometheus_port}",
                    "--log.level=warn",
                ],
                stdout=subprocess.DEVNULL,
                stderr=(work / "prometheus.log").open("wb"),
            ),
        ]  # fmt: skip
        analyzers: list[Analyzer] = []
        try:
            figures = measure(args, prometheus, query_log, work, analyzers, nodes)
        finally:
            for analyzer in analyzers:
                if analyzer.process.poll() is None:
                    analyzer.stop()
            for process in processes:
                process.terminate()
                process.wait(timeout=60)
    report(figures)
    results.save("live-prometheus", figures)
    return 0


def prometheus_cpu(prometheus: str) -> float:
    return scalar(prometheus + "/metrics", "process_cpu_seconds_total")


def prometheus_state(prometheus: str) -> tuple[float, tuple[float, float]]:
    """Prometheus' CPU seconds, and its garbage collections and TSDB reloads (its Go runtime's and its TSDB's
    counters) so far, from one /metrics answer: all three at one instant."""
    cpu, gcs, reloads = scalars(
        prometheus + "/metrics",
        ("process_cpu_seconds_total", "go_gc_duration_seconds_count", "prometheus_tsdb_reloads_total"),
    )
    return cpu, (gcs, reloads)


def query(prometheus: str, expr: str) -> list:
    answer = requests.get(prometheus + "/api/v1/query", params={"query": expr}, timeout=60).json()
    return answer["data"]["result"]


def measure(args, prometheus: str, query_log: Path, work: Path, analyzers: list[Analyzer], nodes: int) -> dict:
    wait(lambda: _answers(prometheus), 120, "Prometheus")
    wait(lambda: (r := query(prometheus, 'count(up{job="gpulens-exporter"} == 1)')) and int(r[0]["value"][1]) == nodes,
         180, "every target scraped", every=5)  # fmt: skip
    filled_at = time.monotonic() + args.window + 2 * SCRAPE_SECONDS
    print(f"{nodes:,} targets up; filling a {args.window / 60:g}-minute window", flush=True)
    while (left := filled_at - time.monotonic()) > 60:
        series = query(prometheus, "prometheus_tsdb_head_series")[0]["value"][1]
        print(f"  {left / 60:4.1f} min to go, {int(series):,} series in the head", flush=True)
        time.sleep(min(60.0, left - 60))
    # Ingestion alone, over the last minute of the filling.
    before, started = prometheus_cpu(prometheus), time.monotonic()
    time.sleep(max(0.0, filled_at - time.monotonic()))
    ingest_rate = (prometheus_cpu(prometheus) - before) / (time.monotonic() - started)
    head_series = int(query(prometheus, "prometheus_tsdb_head_series")[0]["value"][1])
    print(f"Prometheus ingesting alone: {ingest_rate:.2f} CPU-seconds a second; {head_series:,} series", flush=True)

    query_log.write_text("")  # from here on: the analyzer's queries only
    cycles: dict[str, list[Cycle]] = {"first": [], "filling": [], "steady": [], "restart": [], "minute": []}
    stops: list[float] = []  # seconds from SIGTERM to exit, each start

    def run(first: str, steady: int, extra: list[str], then: str = "steady") -> None:
        """An analyzer started: its first cycle into cycles[first], the `steady` cycles after into cycles[then]."""
        analyzer = Analyzer(prometheus, ["--analysis.window", f"{args.window:g}s", *extra], work)
        analyzers.append(analyzer)
        cpu = prometheus_cpu(prometheus)
        wait(analyzer.ready, 600, "the analyzer's first verdicts", every=0.2)
        now = time.monotonic()
        spent = prometheus_cpu(prometheus) - cpu - ingest_rate * (now - analyzer.started)
        logged = wait(analyzer.cycles, 60, "the first cycle's log line")[0]
        cycles[first].append(
            Cycle(now - analyzer.started, spent, logged.read_bytes, resident_peak_mib(analyzer.process.pid))
        )
        analyzer.scrape()
        at = now
        cpu, chores = prometheus_state(prometheus)
        for _ in range(steady):
            newer = wait(
                lambda seen=logged.number: [c for c in analyzer.cycles() if c.number > seen],
                120,
                "the next cycle",
                every=0.25,
            )[0]
            now, (cpu_now, chores_now) = time.monotonic(), prometheus_state(prometheus)
            analyzer.scrape()
            cycles[then].append(
                Cycle(
                    newer.seconds,
                    cpu_now - cpu - ingest_rate * (now - at),
                    newer.read_bytes - logged.read_bytes,
                    resident_peak_mib(analyzer.process.pid),
                    newer.produced_at - newer.seconds,
                    chores_now[0] - chores[0],
                    chores_now[1] - chores[1],
                )
            )
            logged, cpu, at, chores = newer, cpu_now, now, chores_now
        # SIGTERM: the cycle under way ends and the window is written to the state file, then the process
        # exits; a kill before that would leave the next start an older file.
        stopping = time.monotonic()
        if analyzer.stop(timeout=STOP_TIMEOUT_SECONDS) != 0:
            raise SystemExit(f"the analyzer did not exit cleanly on SIGTERM; see {analyzer.log_path}")
        stops.append(time.monotonic() - stopping)

    kept = ["--analysis.state-file", str(work / "analyzer.state")]
    run("first", args.cycles, kept)  # no file yet: the window read from the store, newest steps first
    cycles["filling"], cycles["steady"] = filling_and_steady(cycles["steady"])
    asked = [json.loads(line) for line in query_log.read_text().splitlines() if line.strip()]
    steady_asked = in_cycles(asked, [c.started_at or 0.0 for c in cycles["steady"]])
    floor = select_only(prometheus, steady_asked, ingest_rate)
    run("restart", 0, kept)  # the file the first wrote at SIGTERM: only the steps missed meanwhile
    # Verdicts each minute instead of each 15 s: what a cycle and Prometheus' cores cost then.
    run("restart", args.minute_cycles, [*kept, "--analysis.interval", "60s"], then="minute")
    return {
        "gpus": nodes * GPUS_PER_NODE,
        "nodes": nodes,
        "head_series": head_series,
        "window_s": args.window,
        "ingest_cpu_per_s": ingest_rate,
        "cycles": {name: [c.__dict__ for c in each] for name, each in cycles.items()},
        "queries_per_cycle": len(asked) / (1 + args.cycles),
        "interval_s": 15.0,
        "minute_interval_s": 60.0,
        "bare": bare(prometheus, asked),
        "select_only": floor,
        "steady_queries": [evaluated(entries) for entries in steady_asked],
        "stop_seconds": stops,
    }


def filling_and_steady(after: list[Cycle]) -> tuple[list[Cycle], list[Cycle]]:
    """The cycles after the first, split where the window became whole: at the first cycle that read no
    more than 1.5x the median bytes of the run's second half (a whole window's cycle reads only its new
    steps of a part of the queries; one now and then reads more, when the hardware or the owners are read)."""
    whole = statistics.median(c.read_bytes for c in after[len(after) // 2 :])
    filling = next((i for i, c in enumerate(after) if c.read_bytes <= 1.5 * whole), len(after))
    return after[:filling], after[filling:]


def in_cycles(asked: list[dict], starts: list[float]) -> list[list[dict]]:
    """The query log's entries of each cycle started at `starts` (unix seconds, in order): those logged from
    its start to the next one's (the last: to the end of the log). A cycle asks its queries one after the
    other, so none is logged before it starts or after the next starts."""
    cycles: list[list[dict]] = [[] for _ in starts]
    for entry in asked:
        at = float(_unix(entry["ts"]))
        index = bisect.bisect_right(starts, at) - 1
        if index >= 0:
            cycles[index].append(entry)
    return cycles


def select_only(prometheus: str, cycles: list[list[dict]], ingest_rate: float) -> dict:
    """The floor of Prometheus' side: each steady cycle's queries asked again, one a 15 s interval, each
    series selector in them only counted (`count(selector)` over the same steps): Prometheus selects and
    reads the same series, evaluates nothing and answers one number. Its CPU-seconds a cycle, as the
    analyzer's are measured (from one cycle's start to the next's, less ingesting)."""
    session = requests.Session()
    spent: list[float] = []
    gcs: list[float] = []  # Prometheus' garbage collections during each
    selected = 0
    for entries in cycles:
        time.sleep(SCRAPE_SECONDS - time.time() % SCRAPE_SECONDS + 3)  # where the analyzer's cycles start
        (cpu, chores), at = prometheus_state(prometheus), time.monotonic()
        for entry in entries:
            params = entry["params"]
            start, end = _unix(params["start"]), _unix(params["end"])
            for selector in SELECTOR.findall(params["query"]):
                if params.get("step"):
                    form = {"query": f"count({selector})", "start": start, "end": end, "step": params["step"]}
                    answer = session.post(prometheus + "/api/v1/query_range", data=form, timeout=300).json()
                    counts = [float(s["values"][-1][1]) for s in answer["data"]["result"]]
                else:  # an instant query (the hardware, the owners)
                    form = {"query": f"count({selector})", "time": end}
                    answer = session.post(prometheus + "/api/v1/query", data=form, timeout=300).json()
                    counts = [float(s["value"][1]) for s in answer["data"]["result"]]
                selected += int(sum(counts))
        time.sleep(max(0.0, SCRAPE_SECONDS - 1 - (time.monotonic() - at)))  # the GC the cycle set off, too
        cpu_now, chores_now = prometheus_state(prometheus)
        spent.append(cpu_now - cpu - ingest_rate * (time.monotonic() - at))
        gcs.append(chores_now[0] - chores[0])
    return {"prometheus_cpu_s": spent, "prometheus_gcs": gcs, "series_per_cycle": selected / max(1, len(cycles))}


def evaluated(entries: list[dict]) -> dict:
    """One cycle's queries as Prometheus' query log times them: their count, the seconds it spent evaluating
    them (execTotalTime, summed), and the costliest three with theirs: which reads make a cycle heavy."""
    seconds = [(e.get("stats", {}).get("timings", {}).get("execTotalTime", 0.0), e["params"]["query"]) for e in entries]
    seconds.sort(key=lambda pair: -pair[0])
    return {"queries": len(entries), "exec_s": sum(s for s, _ in seconds), "costliest": seconds[:3]}


def _answers(prometheus: str) -> bool:
    try:
        return requests.get(prometheus + "/-/ready", timeout=5).ok
    except requests.RequestException:
        return False


def bare(prometheus: str, asked: list[dict]) -> dict:
    """Every query the analyzer sent, sent again over one connection and decoded (orjson), nothing else;
    and Prometheus' own evaluation time by query, from its query log. Asked plain, as the analyzer asks a
    store on its host (store.accept_encoding)."""
    import orjson

    session = requests.Session()
    session.headers["Accept-Encoding"] = "identity"
    started, received = time.perf_counter(), 0
    for entry in asked:
        params = entry["params"]
        start, end = (_unix(params[k]) for k in ("start", "end"))
        if params.get("step"):
            form = {"query": params["query"], "start": start, "end": end, "step": params["step"]}
            content = session.post(prometheus + "/api/v1/query_range", data=form, timeout=300).content
        else:
            content = session.post(
                prometheus + "/api/v1/query", data={"query": params["query"], "time": end}, timeout=300
            ).content
        received += len(content)
        orjson.loads(content)
    seconds = time.perf_counter() - started
    by_query: dict[str, float] = {}
    for entry in asked:
        key = entry["params"]["query"]
        by_query[key] = by_query.get(key, 0.0) + entry.get("stats", {}).get("timings", {}).get("execTotalTime", 0.0)
    costliest = sorted(by_query.items(), key=lambda kv: -kv[1])[:8]
    return {"seconds": seconds, "bytes": received, "queries": len(asked), "costliest": costliest}


def _unix(rfc3339: str) -> str:
    """Prometheus' query log times (RFC 3339, UTC) as unix seconds, as the API takes them."""
    import datetime

    return f"{datetime.datetime.fromisoformat(rfc3339.replace('Z', '+00:00')).timestamp():.3f}"


def report(figures: dict) -> None:
    cycles = figures["cycles"]
    print(
        f"\nThe live analyzer on a real Prometheus: {figures['gpus']:,} GPUs on {figures['nodes']:,} nodes, "
        f"{figures['head_series']:,} series scraped every {SCRAPE_SECONDS} s; a {figures['window_s'] / 60:g}-minute "
        f"window at a 15 s step. Prometheus ingesting alone: {figures['ingest_cpu_per_s']:.2f} CPU-s a second.\n"
    )
    print(f"{'cycle':<34} {'seconds':>8} {'Prometheus CPU-s':>17} {'MiB read':>9} {'analyzer peak MiB':>18}")
    rows = [("first (start to /readyz)", cycles["first"][0])]
    rows += [(f"next {i + 1}, older steps too", c) for i, c in enumerate(cycles["filling"])]
    steady = cycles["steady"]
    if steady:
        middle = {k: statistics.median(c[k] for c in steady) for k in steady[0]}
        worst = {k: max(c[k] for c in steady) for k in steady[0]}
        rows += [(f"steady, median of {len(steady)}", middle), (f"steady, worst of {len(steady)}", worst)]
    rows += [("restart (start to /readyz)", cycles["restart"][0])]
    minute = cycles["minute"]
    rows += [
        (
            f"at a 60 s interval, median of {len(minute)}",
            {k: statistics.median(c[k] for c in minute) for k in minute[0]},
        )
    ]
    for label, c in rows:
        print(
            f"{label:<34} {c['seconds']:>8.2f} {c['prometheus_cpu_s']:>17.2f} {c['read_bytes'] / 2**20:>9.1f} "
            f"{c['peak_rss_mib']:>18.0f}"
        )
    bare = figures["bare"]
    total = sum(c["seconds"] for name in ("first", "filling", "steady") for c in cycles[name])
    print(
        f"\nbaseline: the analyzer's {bare['queries']} queries ({figures['queries_per_cycle']:.0f} a cycle) sent "
        f"again and decoded, nothing else: {bare['seconds']:.2f} s for {bare['bytes'] / 2**20:.0f} MiB; the "
        f"analyzer's cycles took {total:.2f} s ({total / bare['seconds']:.2f}x)"
    )
    floor = figures["select_only"]
    print(
        f"floor: the steady cycles' {floor['series_per_cycle']:,.0f} series only selected and counted, nothing "
        f"evaluated or answered: {statistics.median(floor['prometheus_cpu_s']):.2f} Prometheus CPU-s a cycle "
        f"(median of {len(floor['prometheus_cpu_s'])}); each, with Prometheus' garbage collections meanwhile: "
        + ", ".join(f"{c:.2f} ({g:g})" for c, g in zip(floor["prometheus_cpu_s"], floor["prometheus_gcs"], strict=True))
    )
    stop = max(figures["stop_seconds"])
    print(f"SIGTERM to exit, the cycle under way ended and the state file written: {stop:.1f} s at most")
    print("\nPrometheus' evaluation time by query over the run (its query log), the costliest:")
    for expr, seconds in bare["costliest"]:
        print(f"  {seconds:8.2f} s  {expr[:150]}")
    print(
        "\nEach steady cycle as Prometheus evaluated it (query log): queries, seconds, the costliest three; and "
        "what else Prometheus did meanwhile (garbage collections, TSDB reloads)"
    )
    for cycle, asked in zip(steady, figures.get("steady_queries", []), strict=False):
        print(
            f"  {asked['queries']:3d} queries {asked['exec_s']:6.2f} s ({cycle['read_bytes'] / 2**20:5.1f} MiB read, "
            f"{cycle['prometheus_cpu_s']:.2f} CPU-s; {cycle.get('prometheus_gcs')} GCs, "
            f"{cycle.get('prometheus_reloads')} reloads)"
        )
        for seconds, expr in asked["costliest"]:
            print(f"      {seconds:6.2f} s  {expr[:130]}")


if __name__ == "__main__":
    raise SystemExit(main())
