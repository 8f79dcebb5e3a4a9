"""The exporter on the path production takes: sampling, every scrape format, start and memory.

Run: .venv/bin/python benchmarks/exporter.py [--rounds N]   (nvitop-exporter, the peer: pip install -e '.[bench]')

Everything goes through the real nvidia-ml-py bindings and the fake libnvidia-ml.so.1 from the tests
(H100s with GPM and 18 NVLinks each, 8 processes per GPU), at 8, 16 and 64 GPUs, so the baselines and
the exporter pay the same driver cost. Three tables:

- Sampling, CPU per sample (read + time integration): against the same NVML reads through pynvml's
  wrappers ("pynvml", the budget's floor: within 1.5x), and as bare calls made as the exporter makes
  them ("calls": its four array answers with one driver call each into kept buffers), so sample/calls
  is gpulens' own work. GPM is on both sides: sample alloc, get and metrics get per GPU.
- Scrapes, CPU per /metrics answer after a new sample, for each format Prometheus negotiates, asked with
  its Accept and Accept-Encoding headers and answered by the server's own negotiation: gpulens' renderer
  beside prometheus_client's encoders (choose_encoder, then gzip as its server compresses), and the
  bytes on the wire.
- The process: seconds from start to the first /metrics holding the last GPU, and resident memory after
  20 scrapes, for `gpulens exporter` without and with kubelet attribution (the fake kubelet from the
  tests) beside nvitop-exporter on the same fake and a bare interpreter.

Ratios, not absolute times, are what to compare across machines. The figures are written to
benchmarks/results/exporter.json with the machine they were measured on.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks import results  # noqa: E402

SIZES = (8, 16, 64)
PROCESSES_PER_GPU = 8
#: The GPUs of the process table: an HGX board.
#: Boards of the process table: a start is done when the last GPU's series are served.
PROCESS_GPUS = (8, 64)

#: What Prometheus sends (scrape/scrape.go's acceptHeader, scrape_protocols left at their default), and
#: what a text-only scraper sends (scrape_protocols: [PrometheusText0.0.4], vmagent, older Prometheus).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
TEXT_ACCEPT = "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
#: (name, Accept, Accept-Encoding); Prometheus asks for gzip unless a job sets enable_compression: false.
FORMATS = (
    ("OpenMetrics 1.0, gzip", PROMETHEUS_ACCEPT, "gzip"),
    ("OpenMetrics 1.0", PROMETHEUS_ACCEPT, "identity"),
    ("text 0.0.4, gzip", TEXT_ACCEPT, "gzip"),
    ("text 0.0.4", TEXT_ACCEPT, "identity"),
)


def gpu_state(index: int, processes: int, board: int = 8) -> dict:
    """GPU `index` of a board of `board` H100s, running `processes` processes, with GPM and NVLink."""
    state = {
        "uuid": f"GPU-{index:08x}-0000-0000-0000-000000000000",
        "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
        "util_gpu": 97,
        "util_memory": 40,
        "memory_total": 85520809984,
        "memory_reserved": 502267904,
        "memory_used": 60000000000,
        "pcie_tx_bytes": 10**12,
        "pcie_rx_bytes": 3 * 10**12,
        "nvlink_tx_kib": 10**10,
        "nvlink_rx_kib": 10**10,
        "nvlink_links": 18,
        "sm_clock_mhz": 1980,
        "sm_clock_max_mhz": 1980,
        "memory_clock_mhz": 2619,
        "power_mw": 650000,
        "power_limit_mw": 700000,
        "energy_mj": 10**10,
        "temperature_c": 66,
        "clock_event_reasons": 0,
        "pcie_gen": 5,
        "pcie_gen_max": 5,
        "pcie_width": 16,
        "pcie_width_max": 16,
        "gpm": 1,
        "gpm.1": 99,
        "gpm.2": 88,
        "gpm.3": 45,
        "gpm.5": 60,
        "gpm.10": 40,
        "gpm.11": 0,
        "gpm.12": 12,
        "gpm.13": 30,
        # The benchmark reads back to back, not once a second: the driver keeps a utilization sample every
        # millisecond per 8 GPUs on the board, so that a read finds a couple of new samples at every size
        # (a tick takes about that long per 8 GPUs), not one at 8 GPUs and dozens at 64.
        "sample_period_ms": max(1, board // 8),
    }
    for p in range(processes):
        state.update(
            {
                f"proc{p}.pid": 1000 * (index + 1) + p,
                f"proc{p}.name": "python3",
                f"proc{p}.memory": 900_000_000,
                f"proc{p}.sm_util": 10,
            }
        )
    return state


def link_fields(nvml) -> list:
    """The field ids the exporter reads from an H100 every tick: PCIe and NVLink counters, each link's state."""
    return [
        nvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
        nvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
        nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
        nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        nvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        nvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
        nvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL,
        nvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
        *((nvml.NVML_FI_DEV_NVLINK_GET_STATE, link) for link in range(18)),
    ]


def baseline_sample(nvml, handles, fields: list, kept_buffers: bool) -> None:
    """The NVML reads the exporter makes for each GPU, with nothing done with the answers but what the next
    read needs (the newest timestamp seen). The four array reads (field values, utilization samples,
    processes, per-process samples) go through pynvml's wrappers, or with `kept_buffers` through the
    exporter's own DeviceBuffers: one driver call each into a buffer kept per GPU."""
    for h, state in handles:
        buffers = state["buffers"]
        for kind in (nvml.NVML_GPU_UTILIZATION_SAMPLES, nvml.NVML_MEMORY_UTILIZATION_SAMPLES):
            try:
                if kept_buffers:
                    _, raw = buffers.samples(kind, state[kind])
                    state[kind] = struct.unpack_from("=Q", raw, len(raw) - 16)[0]  # the newest, last
                else:
                    _, samples = nvml.nvmlDeviceGetSamples(h, kind, state[kind])
                    state[kind] = max(sample.timeStamp for sample in samples)
            except nvml.NVMLError_NotFound:
                pass  # nothing new since the last read
        nvml.nvmlDeviceGetMemoryInfo(h, nvml.nvmlMemory_v2)
        sample = nvml.nvmlGpmSampleAlloc()
        nvml.nvmlGpmSampleGet(h, sample)
        request = state.get("request")
        if request is None:  # one request per GPU, its metric ids set once
            request = state["request"] = nvml.c_nvmlGpmMetricsGet_t()
            request.version = nvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = 8
            for i, metric in enumerate((1, 2, 3, 5, 10, 11, 12, 13)):
                request.metrics[i].metricId = metric
        request.sample1, request.sample2 = state["gpm"], sample
        nvml.nvmlGpmMetricsGet(request)
        nvml.nvmlGpmSampleFree(state["gpm"])
        state["gpm"] = sample
        if kept_buffers:
            buffers.field_values(fields)
        else:
            nvml.nvmlDeviceGetFieldValues(h, fields)
        nvml.nvmlDeviceGetCurrPcieLinkGeneration(h)
        nvml.nvmlDeviceGetCurrPcieLinkWidth(h)
        nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM)
        nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM)
        nvml.nvmlDeviceGetPowerUsage(h)
        nvml.nvmlDeviceGetEnforcedPowerLimit(h)
        nvml.nvmlDeviceGetTotalEnergyConsumption(h)
        nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU)
        nvml.nvmlDeviceGetCurrentClocksEventReasons(h)
        nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, nvml.NVML_AGGREGATE_ECC)
        nvml.nvmlDeviceGetTotalEccErrors(h, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_AGGREGATE_ECC)
        nvml.nvmlDeviceGetRemappedRows(h)
        if kept_buffers:
            buffers.running_processes()
            try:
                raw = buffers.process_utilization(state["ts"])
                state["ts"] = struct.unpack_from("=Q", raw, len(raw) - 24)[0]  # the newest, last
            except nvml.NVMLError_NotFound:
                pass
        else:
            list(nvml.nvmlDeviceGetComputeRunningProcesses(h))
            for u in nvml.nvmlDeviceGetProcessUtilization(h, state["ts"]):
                state["ts"] = max(state["ts"], u.timeStamp)


def cpu_per_call(fn, rounds: int) -> float:
    fn()  # warm up
    started = time.process_time()
    for _ in range(rounds):
        fn()
    return (time.process_time() - started) / rounds


def rss_mib(pid: int | str = "self") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(gpus: int, rounds: int) -> dict:
    """CPU per sample and per scrape; runs inside the child, where LD_LIBRARY_PATH already points at the
    fake library."""
    import pynvml
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import choose_encoder

    from gpulens.core.exposition import Exposition, negotiate
    from gpulens.exporter.attribution.attributor import KubeletAttribution
    from gpulens.exporter.collector import ExporterCollector
    from gpulens.exporter.sampler import Sampler
    from gpulens.exporter.sources.nvml import NvmlSource, gpm
    from gpulens.exporter.sources.nvml.buffers import DeviceBuffers

    # Ticks here come milliseconds apart, not a second: let every one compute the GPM metrics, as every
    # tick does in production (the fake does not need the driver's 100 ms between two GPM samples).
    gpm.MIN_SPACING_SECONDS = 0.0
    source = NvmlSource()
    source.start()
    # Pod attribution as deployed, minus the kubelet: every process is looked up in a /proc.
    # An empty /proc and /var/log: no process is found in a container, as on a node outside Kubernetes.
    empty = tempfile.TemporaryDirectory(prefix="gpulens-bench-")
    attribution = KubeletAttribution("", proc_root=empty.name, log_root=empty.name)
    sampler = Sampler(source, interval=1.0, attribution=attribution)
    registry = CollectorRegistry(auto_describe=False)
    collector = ExporterCollector(sampler, "bench", "nvml")
    registry.register(collector)
    sampler.tick()
    sampler.tick()
    # A scrape comes after a new sample (Prometheus scrapes every 15-60 s, the exporter samples every
    # second), so every answer here is rendered anew: a version that is never the same object twice.
    fresh = Exposition(collector.exposition.gather, object)

    def fast(accept: str, encoding: str) -> bytes:
        return fresh.body(*negotiate(accept, encoding))

    def generic(accept: str, encoding: str) -> bytes:
        encoder, _ = choose_encoder(accept)  # what prometheus_client's server does (_bake_output)
        body = encoder(registry)
        return gzip.compress(body) if "gzip" in encoding else body

    handles = []
    for i in range(gpus):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        first = pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmSampleGet(h, first)
        state = {"gpm": first, "ts": 0, "buffers": DeviceBuffers(pynvml, h)}
        state |= dict.fromkeys((pynvml.NVML_GPU_UTILIZATION_SAMPLES, pynvml.NVML_MEMORY_UTILIZATION_SAMPLES), 0)
        handles.append((h, state))
    fields = link_fields(pynvml)

    # Interleave the measurements so machine noise hits them alike, and keep each one's fastest repeat:
    # on a shared machine noise only ever adds time.
    sampling: dict[str, list[float]] = {"pynvml": [], "calls": [], "sample": []}
    scrapes: dict[tuple[str, str], list[float]] = {(f, way): [] for f, _, _ in FORMATS for way in ("fast", "generic")}
    for _ in range(5):
        sampling["pynvml"].append(cpu_per_call(lambda: baseline_sample(pynvml, handles, fields, False), rounds))
        sampling["calls"].append(cpu_per_call(lambda: baseline_sample(pynvml, handles, fields, True), rounds))
        sampling["sample"].append(cpu_per_call(sampler.tick, rounds))
        for name, accept, encoding in FORMATS:
            scrapes[(name, "fast")].append(cpu_per_call(functools.partial(fast, accept, encoding), rounds))
            scrapes[(name, "generic")].append(cpu_per_call(functools.partial(generic, accept, encoding), rounds))
    text = collector.render_text().decode()
    return {
        "gpus": gpus,
        "processes": gpus * PROCESSES_PER_GPU,
        "series": sum(1 for line in text.splitlines() if not line.startswith("#")),
        "sampling_ms": {name: min(times) * 1000 for name, times in sampling.items()},
        "scrapes": [
            {
                "format": name,
                "fast_ms": min(scrapes[(name, "fast")]) * 1000,
                "generic_ms": min(scrapes[(name, "generic")]) * 1000,
                "bytes": len(fast(accept, encoding)),
            }
            for name, accept, encoding in FORMATS
        ],
    }


#: The floor of the process table: an interpreter serving one fixed answer with the standard library.
BARE_SERVER = """
import http.server, sys
answer = sys.argv[2].encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(answer)
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_figures(command: list[str], url: str, env: dict[str, str], ready: str) -> dict:
    """Start `command`, time it to the first answer of `url` that contains `ready`, scrape it 20 times
    as Prometheus would (gzip), then read its resident memory."""
    import requests

    headers = {"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"{command[0]} exited with {process.returncode}: {process.communicate()[1].decode()}")
            try:
                if ready in requests.get(url, headers=headers, timeout=2).text:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.002)
        start_seconds = time.perf_counter() - started
        for _ in range(20):
            requests.get(url, headers=headers, timeout=5).raise_for_status()
            time.sleep(0.05)
        return {"start_s": start_seconds, "rss_mib": rss_mib(process.pid)}
    finally:
        process.terminate()
        process.communicate(timeout=10)


def measure_processes(fake, workdir: Path, gpus: int, repeats: int) -> dict[str, dict]:
    """Start time and resident memory of each exporter on the fake's `gpus` GPUs: the median of `repeats`
    starts, each after the others (interleaved, so noise hits them alike). A start ends when the last
    GPU's series (with the kubelet, its pod) are served: an exporter that reads GPUs one at a time, or
    serves before it has read them all, is not done when the first appears."""
    from tests.fake_kubelet import FakeKubelet

    socket_path = str(workdir / "kubelet.sock")
    kubelet = FakeKubelet(
        socket_path,
        {
            ("serving", f"replica-{i}"): {"server": [("nvidia.com/gpu", [f"GPU-{i:08x}-0000-0000-0000-000000000000"])]}
            for i in range(gpus)
        },
    ).start()
    env = fake.env() | {"PYTHONPATH": str(REPO)}
    python = sys.executable
    # An empty /proc and /var/log, as in the sampling table: this machine's own processes must not lend
    # their cgroups to the fake's PIDs.
    empty = workdir / "empty"
    empty.mkdir(exist_ok=True)
    gpulens = [python, "-m", "gpulens", "--log.level", "error", "exporter", "--source", "nvml"]
    gpulens += ["--path.procfs", str(empty), "--path.var-log", str(empty)]
    nvitop = shutil.which("nvitop-exporter", path=str(Path(python).parent))
    uuid = gpu_state(gpus - 1, 0)["uuid"]
    commands = {
        "python (bare interpreter)": (lambda port: [python, "-c", BARE_SERVER, str(port), uuid], uuid),
        "gpulens, no kubelet": (
            lambda port: [*gpulens, "--kubelet.socket", "", "--web.listen-address", f"127.0.0.1:{port}"],
            f'uuid="{uuid}"',
        ),
        "gpulens, kubelet": (
            lambda port: [*gpulens, "--kubelet.socket", socket_path, "--web.listen-address", f"127.0.0.1:{port}"],
            f'pod="replica-{gpus - 1}"',
        ),
    }
    if nvitop:
        commands["nvitop-exporter"] = (lambda port: [nvitop, "--bind-address", "127.0.0.1", "--port", str(port)], uuid)
    runs: dict[str, list[dict]] = {name: [] for name in commands}
    try:
        for _ in range(repeats):
            for name, (command, ready) in commands.items():
                port = free_port()
                runs[name].append(process_figures(command(port), f"http://127.0.0.1:{port}/metrics", env, ready))
    finally:
        kubelet.stop()
    return {
        name: {key: statistics.median(r[key] for r in figures) for key in ("start_s", "rss_mib")}
        for name, figures in runs.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100, help="calls per measurement at 8 GPUs (fewer at more)")
    parser.add_argument("--starts", type=int, default=5, help="starts of each exporter for the process table")
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.rounds)))
        return 0

    from tests.helpers import FakeNvml, build_fake_nvml

    rows = []
    with tempfile.TemporaryDirectory(prefix="gpulens-bench-") as tmp:
        workdir = Path(tmp)
        library = build_fake_nvml(workdir / "lib").parent
        for gpus in SIZES:
            fake = FakeNvml(library, workdir / f"state-{gpus}")
            write_board(fake, gpus)
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(gpus), "--rounds", str(max(10, args.rounds * 8 // gpus))],
                env=fake.env() | {"PYTHONPATH": str(REPO)},
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(out.stdout))
        processes = {}
        for gpus in PROCESS_GPUS:
            fake = FakeNvml(library, workdir / f"state-process-{gpus}")
            write_board(fake, gpus)
            processes[str(gpus)] = measure_processes(fake, workdir, gpus, args.starts)

    print(
        f"Sampling: CPU ms per sample, {PROCESSES_PER_GPU} processes per GPU, through the fake libnvidia-ml.\n"
        "pynvml: the NVML reads the exporter makes, through pynvml's wrappers, GPM included, nothing done "
        "with the answers (the floor);\ncalls: the same reads as the exporter makes them; sample: read + "
        "integrate (every --sampler.interval). The budget: sample within 1.5x of pynvml.\n"
    )
    print(
        f"{'GPUs':>5} {'series':>7} {'pynvml':>8} {'calls':>8} {'sample':>8} {'sample/pynvml':>14} {'sample/calls':>13}"
    )
    for r in rows:
        ms = r["sampling_ms"]
        print(
            f"{r['gpus']:>5} {r['series']:>7} {ms['pynvml']:>8.2f} {ms['calls']:>8.2f} {ms['sample']:>8.2f} "
            f"{ms['sample'] / ms['pynvml']:>14.2f} {ms['sample'] / ms['calls']:>13.2f}"
        )
    print(
        "\nScrapes: CPU ms per /metrics answer after a new sample, asked as Prometheus asks; gpulens' renderer "
        "beside prometheus_client's encoders (and its gzip).\n"
    )
    print(f"{'GPUs':>5} {'format':<22} {'gpulens':>8} {'generic':>8} {'generic/gpulens':>16} {'KiB':>7}")
    for r in rows:
        for f in r["scrapes"]:
            print(
                f"{r['gpus']:>5} {f['format']:<22} {f['fast_ms']:>8.2f} {f['generic_ms']:>8.2f} "
                f"{f['generic_ms'] / f['fast_ms']:>16.1f} {f['bytes'] / 1024:>7.1f}"
            )
    print(
        "\nThe process: seconds from start to the first /metrics with the last GPU's series, resident MiB after 20 "
        f"scrapes (median of {args.starts} starts each).\n"
    )
    print(f"{'GPUs':>5} {'exporter':<28} {'start s':>8} {'RSS MiB':>8}")
    for gpus, by_name in processes.items():
        for name, figures in by_name.items():
            print(f"{gpus:>5} {name:<28} {figures['start_s']:>8.3f} {figures['rss_mib']:>8.1f}")
    results.save("exporter", {"sizes": rows, "processes": processes})
    return 0


def write_board(fake, gpus: int) -> None:
    """An HGX-like board of `gpus` H100s: every pair joined by NVLink (through NVSwitch), sockets of four."""
    pairs = [(a, b) for a in range(gpus) for b in range(gpus) if a != b]
    fake.write(
        [gpu_state(i, PROCESSES_PER_GPU, gpus) for i in range(gpus)],
        topology={(a, b): 40 if a // 4 == b // 4 else 50 for a, b in pairs},
        p2p=dict.fromkeys(pairs, "nvlink"),
    )


if __name__ == "__main__":
    raise SystemExit(main())
