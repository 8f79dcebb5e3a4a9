"""The DCGM source on real dcgm-exporter scrapes, served as they are by a real local HTTP server."""

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from gpulens.core import metrics as m
from gpulens.core.dcgm import devices_from_rows, is_blank, parse_exposition
from gpulens.exporter.sources.dcgm import DcgmFetcher, DcgmSource
from tests.captures import FIXTURES
from tests.helpers import samples, start_nvml_exporter, value, wait_until

DCGM = FIXTURES / "dcgm-exporter"
MIB = 1024**2
A100 = "GPU-7099682b-a20d-2bcc-74ab-b9060454d81e"
T4_0, T4_1 = "GPU-7a2e92f2-be71-d37e-a744-541600ffc722", "GPU-5f587dd4-6505-0873-c6db-8324dbfe5ba9"


class FakeDcgmExporter:
    """A real HTTP server that answers like dcgm-exporter, or like a broken one on demand."""

    def __init__(self):
        self.body = b""
        self.mode = "ok"  # ok | 500 | html | slow | truncated | hang-up
        self.requests = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                owner.requests += 1
                mode, body = owner.mode, owner.body
                if mode == "slow":
                    time.sleep(3)
                if mode == "500":
                    self._reply(500, b"internal error\n", "text/plain")
                elif mode == "html":
                    self._reply(200, b"<!doctype html><html><body><h1>Login</h1></body></html>", "text/html")
                elif mode == "truncated":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.close_connection = True
                else:
                    self._reply(200, body, "text/plain; version=0.0.4")

            def _reply(self, code, body, content_type):
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def serve(self, name: str) -> None:
        self.body, self.mode = (DCGM / name).read_bytes(), "ok"

    def stop(self):
        self.server.shutdown()


@pytest.fixture
def dcgm_exporter():
    server = FakeDcgmExporter()
    yield server
    server.stop()


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def read(server, name, **kwargs):
    server.serve(name)
    fetcher = DcgmFetcher(server.url, interval=5, **kwargs)
    fetcher.fetch()
    return fetcher


@pytest.mark.slow
def test_a100_in_mig_mode(dcgm_exporter):
    devices = read(dcgm_exporter, "a100-mig-2x1g5gb-2g10gb.prom").reading().devices
    assert sorted(devices, key=str) == sorted([(A100, None), (A100, 5), (A100, 7), (A100, 9)], key=str)
    board, busy = devices[(A100, None)], devices[(A100, 9)]
    # Board fields go to the physical GPU, from the first row that carries them.
    assert board.values[(m.POWER, ())] == 116.043
    assert board.values[(m.SM_CLOCK, ())] == 1410e6
    assert board.values[(m.ENERGY, ())] == 57585.599  # mJ -> J
    assert board.model == "NVIDIA A100-SXM4-40GB"
    # Instance fields to the instance: the busy 1g.5gb instance.
    assert (busy.gpu, busy.mig_profile) == ("0/gi9", "1g.5gb")
    assert busy.values[(m.GRAPHICS_ENGINE_ACTIVE, ())] == 0.999917
    assert busy.values[(m.DRAM_ACTIVE, ())] == 0.647986
    assert busy.values[(m.MEMORY_USED, ())] == 4384 * MIB
    assert busy.values[(m.MEMORY_TOTAL, ())] == (4384 + 480) * MIB
    assert devices[(A100, 5)].mig_profile == "2g.10gb"


@pytest.mark.slow
def test_t4_pair_with_one_pod(dcgm_exporter):
    devices = read(dcgm_exporter, "t4x2-one-pod.prom").reading().devices
    gpu0, gpu1 = devices[(T4_0, None)], devices[(T4_1, None)]
    assert gpu0.pod is not None and (gpu0.pod.namespace, gpu0.pod.container) == (
        "runai-reservation",
        "runai-reservation",
    )
    assert gpu0.pod.pod == "runai-reservation-gpu-qa-mig-worker-gpu-1-kvltw"
    assert gpu1.pod is None  # empty pod labels mean no pod, not a pod named ""
    assert gpu0.values[(m.TEMPERATURE, ())] == 55
    assert gpu0.values[(m.UTILIZATION, ())] == 0.0
    assert gpu0.values[(m.MEMORY_USED, ())] == 128 * MIB
    assert gpu0.rates[m.PCIE_RECEIVE] == 420785.0


@pytest.mark.slow
def test_two_consecutive_scrapes_integrate_rates_by_the_time_they_cover(dcgm_exporter):
    clock = Clock()
    dcgm_exporter.serve("a100-no-mig-scrape1.prom")
    fetcher = DcgmFetcher(dcgm_exporter.url, interval=5, clock=clock)
    fetcher.fetch()
    assert fetcher.reading().counters[(A100, None, m.PCIE_TRANSMIT)] == 0.0
    clock.now += 5.0
    dcgm_exporter.serve("a100-no-mig-scrape2.prom")
    fetcher.fetch()
    reading = fetcher.reading()
    # 16503 B/s transmitted and 11775 B/s received over the 5 s the second value covers.
    assert reading.counters[(A100, None, m.PCIE_TRANSMIT)] == 16503 * 5.0
    assert reading.counters[(A100, None, m.PCIE_RECEIVE)] == 11775 * 5.0
    assert reading.devices[(A100, None)].values[(m.MEMORY_TOTAL, ())] == 40384 * MIB


def test_every_fixture_parses_cleanly():
    for path in sorted(DCGM.glob("*.prom")):
        parsed = parse_exposition(path.read_text())
        assert (parsed.unparsable, parsed.unusable, parsed.duplicates) == (0, 0, 0), path.name
        assert (
            len(parsed.rows)
            == {
                "a100-mig-2x1g5gb-2g10gb.prom": 42,
                "a100-no-mig-scrape1.prom": 23,
                "a100-no-mig-scrape2.prom": 23,
                "t4x2-one-pod.prom": 38,
            }[path.name]
        ), path.name


def test_broken_values_never_become_numbers():
    labels = '{gpu="0",UUID="GPU-7099682b-a20d-2bcc-74ab-b9060454d81e"}'
    text = "\n".join(
        [
            f"DCGM_FI_PROF_SM_ACTIVE{labels} 9223372036854775794",  # DCGM_INT64_NOT_SUPPORTED
            f"DCGM_FI_DEV_POWER_USAGE{labels} 140737488355328",  # DCGM_FP64_BLANK
            f"DCGM_FI_DEV_SM_CLOCK{labels} 2147483632",  # DCGM_INT32_BLANK
            f"DCGM_FI_DEV_GPU_TEMP{labels} ERROR - FAILED TO CONVERT TO STRING",
            f"DCGM_FI_PROF_DRAM_ACTIVE{labels} NaN",
            f"DCGM_FI_DEV_MEM_CLOCK{labels} 1215",
            f"DCGM_FI_DEV_MEM_CLOCK{labels} 1593",  # a duplicate series: the first one counts
            'DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-7099682b-a20d-2bcc-74ab-b9060454d81e"',  # cut off
            f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{labels} 0.25",  # and no final newline
        ]
    )
    parsed = parse_exposition(text)
    assert [(name, v) for name, _, v in parsed.rows] == [
        ("DCGM_FI_DEV_MEM_CLOCK", 1215.0),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.25),
    ]
    assert (parsed.unusable, parsed.duplicates, parsed.unparsable) == (4, 1, 2)
    device = devices_from_rows(parsed.rows)[(A100, None)]
    assert (m.SM_ACTIVE, ()) not in devices_from_rows(parsed.rows).get((A100, None)).values
    assert device.values[(m.MEMORY_CLOCK, ())] == 1215e6
    assert is_blank(9223372036854775792.0) and not is_blank(57585599.0)


def test_dcgm_46_names_and_exported_labels():
    text = (
        'DCGM_FI_PROF_SM_UTIL_RATIO{gpu="1",UUID="GPU-1",model_name="NVIDIA L4",hostname="n1",'
        'exported_pod="p",exported_namespace="ns",exported_container="c"} 0.42\n'
        'DCGM_FI_DEV_GPU_UTIL_RATIO{gpu="1",UUID="GPU-1"} 37\n'
        'DCGM_FI_DEV_POWER_VIOLATION{gpu="1",UUID="GPU-1"} 2500000000\n'
        'DCGM_FI_DEV_CLOCKS_EVENT_REASONS{gpu="1",UUID="GPU-1"} 96\n'
    )
    device = devices_from_rows(parse_exposition(text).rows)[("GPU-1", None)]
    assert device.values[(m.SM_ACTIVE, ())] == 0.42
    assert device.values[(m.UTILIZATION, ())] == 0.37  # the renamed field keeps GPU_UTIL's percent
    assert device.values[(m.CLOCK_VIOLATION_SECONDS, ("power",))] == 2.5
    assert device.clock_event_reasons == 0x60
    assert device.model == "NVIDIA L4"
    assert (device.pod.namespace, device.pod.pod, device.pod.container) == ("ns", "p", "c")


@pytest.mark.parametrize(
    "mode, reason",
    [
        ("500", "HTTP 500"),
        ("html", "no DCGM metrics in the answer (text/html"),
        ("slow", "timed out"),
        ("truncated", "cannot read dcgm-exporter"),
    ],
)
@pytest.mark.slow
def test_faults_are_reported_and_old_values_age_out(dcgm_exporter, mode, reason, caplog):
    clock = Clock()
    dcgm_exporter.serve("t4x2-one-pod.prom")
    fetcher = DcgmFetcher(dcgm_exporter.url, interval=5, timeout=1, clock=clock)
    fetcher.fetch()
    assert fetcher.status.success and fetcher.reading() is not None
    dcgm_exporter.mode = mode
    for _ in range(3):
        clock.now += 5
        fetcher.fetch()
    assert (fetcher.status.success, fetcher.status.failures) == (False, 3)
    assert fetcher.reading() is not None  # 15 s old: still within 3 x the interval
    clock.now += 5
    fetcher.fetch()
    assert fetcher.reading() is None  # 20 s old: no longer served as current
    assert caplog.text.count(f"cannot read dcgm-exporter at {dcgm_exporter.url}") == 1
    assert reason in caplog.text


def test_endpoint_down(caplog):
    fetcher = DcgmFetcher("http://127.0.0.1:1/metrics", interval=5, timeout=1)
    fetcher.fetch()
    assert not fetcher.status.success and fetcher.reading() is None
    assert "cannot read dcgm-exporter at http://127.0.0.1:1/metrics" in caplog.text


@pytest.mark.slow
def test_dcgm_only_source_names_mig_instances_by_parent(dcgm_exporter):
    dcgm_exporter.serve("a100-mig-2x1g5gb-2g10gb.prom")
    source = DcgmSource(DcgmFetcher(dcgm_exporter.url, interval=60))
    source.start()
    try:
        node = source.sample()
        by_gpu = {d.gpu: d for d in node.devices}
        assert sorted(by_gpu) == ["0", "0/gi5", "0/gi7", "0/gi9"]
        assert (by_gpu["0/gi9"].uuid, by_gpu["0/gi9"].parent_uuid) == (f"{A100}/gi9", A100)
        assert by_gpu["0"].mig_mode == "enabled"
        assert by_gpu["0/gi9"].activity() == 0.999917
    finally:
        source.close()


# --- merged with NVML, end to end --------------------------------------------------------------


def t4_pair_in_nvml():
    """The two T4s of the dcgm-exporter capture as NVML sees them: no GPM, so no SM activity."""
    from tests import captures

    base = captures.t4_with_processes()[0]
    return [base | {"uuid": T4_0, "power_mw": 28000}, base | {"uuid": T4_1, "pci_bus_id": "00000000:00:1F.0"}]


@pytest.mark.slow
def test_dcgm_fills_what_nvml_lacks_and_nothing_twice(fake_nvml, dcgm_exporter):
    fake_nvml.write(t4_pair_in_nvml())
    dcgm_exporter.serve("t4x2-one-pod.prom")
    exporter, url = start_nvml_exporter(
        fake_nvml, "--kubelet.socket", "", "--dcgm.url", dcgm_exporter.url, "--dcgm.interval", "0.2"
    )
    try:
        text = requests.get(url + "/metrics").text
        parsed = samples(text)
        # Profiling fields NVML has not on a T4 come from DCGM...
        assert value(parsed, "gpulens_gpu_graphics_engine_active_ratio", gpu="0") == 0.000039
        assert value(parsed, "gpulens_gpu_dram_active_ratio", gpu="0") == 0.000002
        # ...what NVML has stays NVML's: 28 W from NVML, not DCGM's 28.722 W; exported once.
        assert value(parsed, "gpulens_gpu_power_watts", gpu="0") == 28.0
        assert text.count('gpulens_gpu_power_watts{gpu="0"') == 1
        assert (
            value(parsed, "gpulens_exporter_metric_source_devices", metric="gpulens_gpu_power_watts", source="nvml")
            == 2
        )
        assert (
            value(
                parsed,
                "gpulens_exporter_metric_source_devices",
                metric="gpulens_gpu_graphics_engine_active_ratio",
                source="dcgm",
            )
            == 2
        )
        assert value(parsed, "gpulens_exporter_collector_success", collector="dcgm") == 1
        # dcgm-exporter goes away: its fields age out, NVML's stay.
        dcgm_exporter.mode = "500"
        wait_until(
            lambda: (
                value(samples(requests.get(url + "/metrics").text), "gpulens_gpu_graphics_engine_active_ratio", gpu="0")
                is None
            ),
            10,
            what="DCGM values to age out",
        )
        parsed = samples(requests.get(url + "/metrics").text)
        assert value(parsed, "gpulens_gpu_power_watts", gpu="0") == 28.0
        assert value(parsed, "gpulens_exporter_collector_success", collector="dcgm") == 0
        assert value(parsed, "gpulens_exporter_collector_success", collector="nvml") == 1
    finally:
        exporter.stop()


@pytest.mark.slow
def test_mig_instances_get_their_activity_from_dcgm(fake_nvml, dcgm_exporter):
    gpu = {
        "uuid": A100,
        "name": "NVIDIA A100-SXM4-40GB",
        "pci_bus_id": "00000000:07:00.0",
        "mig_mode": 1,
        "memory_total": 40960 * MIB,
        "memory_used": 4800 * MIB,
        "temperature_c": 37,
        "power_mw": 116000,
    }
    for i, (gi, profile) in enumerate([(7, "1g.5gb"), (9, "1g.5gb"), (5, "2g.10gb")]):
        gpu.update(
            {
                f"mig{i}.uuid": f"MIG-0000000{i}-aaaa-bbbb-cccc-dddddddddddd",
                f"mig{i}.gi": gi,
                f"mig{i}.name": f"NVIDIA A100-SXM4-40GB MIG {profile}",
                f"mig{i}.memory_total": 4864 * MIB,
            }
        )
    fake_nvml.write([gpu])
    dcgm_exporter.serve("a100-mig-2x1g5gb-2g10gb.prom")
    exporter, url = start_nvml_exporter(
        fake_nvml, "--kubelet.socket", "", "--dcgm.url", dcgm_exporter.url, "--dcgm.interval", "0.5"
    )
    try:

        def integrated() -> dict | None:
            """The scrape once the instances' busy and idle time passed half a second."""
            parsed = samples(requests.get(url + "/metrics").text)
            busy = value(parsed, "gpulens_gpu_busy_seconds_total", gpu="0/gi9") or 0.0
            idle = value(parsed, "gpulens_gpu_idle_seconds_total", gpu="0/gi7") or 0.0
            return parsed if busy > 0.5 and idle > 0.5 else None

        parsed = wait_until(integrated, 10, what="half a second of busy and idle time")
        assert value(parsed, "gpulens_gpu_graphics_engine_active_ratio", gpu="0/gi9") == 0.999917
        assert value(parsed, "gpulens_gpu_graphics_engine_active_ratio", gpu="0/gi5") == 0.000036
        # NVML has no utilization on MIG; the instance's busy time comes from DCGM's activity.
        assert value(parsed, "gpulens_gpu_idle_seconds_total", gpu="0/gi9") == 0
    finally:
        exporter.stop()


@pytest.mark.slow
def test_dcgm_source_needs_a_url():
    import subprocess
    import sys

    from tests.helpers import REPO

    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "exporter", "--source", "dcgm"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
    )
    assert result.returncode == 2
    assert "--dcgm.url '' is not an http(s) URL" in result.stderr


def test_the_counters_file_turns_on_every_field_gpulens_maps():
    from gpulens.core.dcgm import BY_NAME
    from tests.helpers import REPO

    fields = {}
    for line in (REPO / "deploy" / "dcgm-exporter" / "gpulens-counters.csv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, kind, help_text = (part.strip() for part in line.split(",", 2))
            assert kind in ("gauge", "counter", "label") and help_text, line
            fields[name] = kind
    legacy_names = {f.names[0] for f in BY_NAME.values()}
    assert legacy_names <= set(fields), f"not turned on: {sorted(legacy_names - set(fields))}"
    unmapped = set(fields) - set(BY_NAME) - {"DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DRIVER_VERSION"}
    assert unmapped == set()
    for name in ("DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_SM_OCCUPANCY", "DCGM_FI_DEV_THERMAL_VIOLATION"):
        assert name in fields
