"""CPU cost of the exporter against two baselines: the same NVML reads through pynvml, and as bare calls.

Run: .venv/bin/python benchmarks/exporter.py [--rounds N]

Everything goes through the real nvidia-ml-py bindings and the fake libnvidia-ml.so.1 from the tests,
so the baselines and the exporter pay the same driver cost. Two baselines, because the exporter reads
its four array answers (field values, utilization samples, processes, per-process samples) with one
driver call each into buffers it keeps, where pynvml's wrappers make two calls, build a new array and
convert every element: "pynvml" is the same reads through pynvml (the budget's baseline), "calls" the
same reads as the exporter makes them, so sample/calls is gpulens' own work on top of the driver calls.
Prints CPU time per sample (source read + time integration) and per /metrics render, for 1 and 8
GPUs with 64 processes, and the resident memory of the exporter. Ratios, not absolute times, are what
to compare across machines.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

PROCESSES = 64


def gpu_state(index: int, processes: int) -> dict:
    """An H100 running `processes` processes, with GPM and NVLink, like a busy training node."""
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
        # The driver keeps a utilization sample every millisecond here: the benchmark reads far more often
        # than once a second, and each read should find a handful of new samples, as a 1 s read finds six.
        "sample_period_ms": 1,
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


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(gpus: int, rounds: int) -> dict:
    """Runs inside the child, where LD_LIBRARY_PATH already points at the fake library."""
    import pynvml
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import generate_latest

    from gpulens.exporter.attribution.attributor import KubeletAttribution
    from gpulens.exporter.collector import ExporterCollector
    from gpulens.exporter.sampler import Sampler
    from gpulens.exporter.sources import nvml
    from gpulens.exporter.sources.nvml import NvmlSource
    from gpulens.exporter.sources.nvml_buffers import DeviceBuffers

    # Ticks here come milliseconds apart, not a second: let every one compute the GPM metrics, as every
    # tick does in production (the fake does not need the driver's 100 ms between two GPM samples).
    nvml._GPM_MIN_SPACING_SECONDS = 0.0
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
    runs: dict[str, list[float]] = {"pynvml": [], "calls": [], "sample": [], "render": [], "generic": []}
    for _ in range(5):
        runs["pynvml"].append(cpu_per_call(lambda: baseline_sample(pynvml, handles, fields, False), rounds))
        runs["calls"].append(cpu_per_call(lambda: baseline_sample(pynvml, handles, fields, True), rounds))
        runs["sample"].append(cpu_per_call(sampler.tick, rounds))
        runs["render"].append(cpu_per_call(collector.render_text, rounds))
        runs["generic"].append(cpu_per_call(lambda: generate_latest(registry), rounds))
    body = collector.render_text()
    return {
        "gpus": gpus,
        **{name: min(times) for name, times in runs.items()},
        "series": sum(1 for line in body.decode().splitlines() if not line.startswith("#")),
        "shape_series": sum(
            1
            for line in body.decode().splitlines()
            if line.startswith(("gpulens_gpu_activity_", "gpulens_gpu_steady_bursts"))
        ),
        "topology_series": sum(
            1 for line in body.decode().splitlines() if line.startswith("gpulens_gpu_topology_info")
        ),
        "rss_mib": rss_mib(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200, help="calls per measurement (5 measurements each)")
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
        for gpus in (1, 8):
            fake = FakeNvml(library, workdir / f"state-{gpus}")
            # An HGX board: every pair joined by NVLink (through NVSwitch), sockets of four GPUs each.
            pairs = [(a, b) for a in range(gpus) for b in range(gpus) if a != b]
            fake.write(
                [gpu_state(i, PROCESSES // gpus) for i in range(gpus)],
                topology={(a, b): 40 if a // 4 == b // 4 else 50 for a, b in pairs},
                p2p=dict.fromkeys(pairs, "nvlink"),
            )
            env = fake.env() | {"PYTHONPATH": str(REPO)}
            out = subprocess.run(
                [sys.executable, __file__, "--child", str(gpus), "--rounds", str(args.rounds)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            rows.append(json.loads(out.stdout))

    print(
        f"exporter CPU time per operation, {PROCESSES} processes, through the fake libnvidia-ml\n"
        "pynvml: the NVML reads the exporter makes, through pynvml's wrappers, nothing done with the answers\n"
        "calls: the same reads as the exporter makes them (array answers into kept buffers), nothing done\n"
        "sample: read + integrate (every --sampler.interval); render: /metrics in text format (every scrape);\n"
        "generic: prometheus_client's generate_latest. The budget: sample within 1.5x of pynvml.\n"
    )
    print(
        f"{'GPUs':>4} {'series':>7} {'pynvml ms':>10} {'calls ms':>9} {'sample ms':>10} {'render ms':>10} "
        f"{'generic ms':>11} {'sample/pynvml':>14} {'sample/calls':>13} {'render/pynvml':>14} {'RSS MiB':>8}"
    )
    per_gpu = (rows[1]["series"] - rows[0]["series"]) / (rows[1]["gpus"] - rows[0]["gpus"])
    for r in rows:
        ms = {k: r[k] * 1000 for k in ("pynvml", "calls", "sample", "render", "generic")}
        print(
            f"{r['gpus']:>4} {r['series']:>7} {ms['pynvml']:>10.3f} {ms['calls']:>9.3f} {ms['sample']:>10.3f} "
            f"{ms['render']:>10.3f} {ms['generic']:>11.3f} {r['sample'] / r['pynvml']:>14.2f} "
            f"{r['sample'] / r['calls']:>13.2f} {r['render'] / r['pynvml']:>14.2f} {r['rss_mib']:>8.1f}"
        )
    print(
        f"\nseries per GPU (an H100 with 18 NVLinks on an 8-GPU board, processes aside): {per_gpu:.0f}, of which "
        f"{rows[1]['shape_series'] // rows[1]['gpus']} are the activity shape (histogram, transitions, steady bursts) "
        f"and {rows[1]['topology_series'] // rows[1]['gpus']} the topology (one per peer)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
