"""The NVML source end to end: the real nvidia-ml-py bindings loading the fake libnvidia-ml.so.1.

No Python mock of pynvml: the exporter runs as a process with LD_LIBRARY_PATH pointing at the fake,
whose GPU state the tests rewrite atomically while it runs.
"""

import re
import subprocess
import sys
import threading
import time

import pytest
import requests

from tests import captures
from tests.fake_kubelet import FakeKubelet
from tests.helpers import REPO, FakeNvml, build_fake_nvml, samples, start_nvml_exporter, value, wait_until

#: Every test here starts real servers or gpulens processes (the fast lane skips them: pytest -m "not slow").
pytestmark = pytest.mark.slow

GOLDEN = REPO / "tests" / "golden"
MIB = 1024**2

# Values that depend on wall-clock timing are masked in golden files; the series must still be there.
_TIMED = re.compile(
    r"^(gpulens_(?:gpu|process)_\w*seconds_total|gpulens_exporter_collector_duration_seconds"
    r"|gpulens_exporter_sample_age_seconds)(\{[^}]*\})? .*$",
    re.M,
)


def run_once(fake_nvml, *args) -> subprocess.CompletedProcess:
    # No kubelet and an empty /proc: the scrape shows what a node without the socket serves, and
    # no process of the machine running the tests can lend its cgroup to a captured PID.
    empty = fake_nvml.state_path.parent / "empty"
    empty.mkdir(exist_ok=True)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "gpulens",
            "exporter",
            "--source",
            "nvml",
            "--once",
            "--sampler.interval",
            "0.2",
            "--kubelet.socket",
            "/nonexistent/kubelet.sock",
            "--path.procfs",
            str(empty),
            "--path.var-log",
            str(empty),
            *args,
        ],
        env=fake_nvml.env(),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def capture_state(name: str):
    if name == "h100":
        gpu = captures.h100_under_load()
        # GPM on Hopper: what dcgm's profiling fields showed for gpu-burn (SM busy, FP32-heavy).
        gpu.update(
            {
                "gpm.1": 99.5,
                "gpm.2": 97.25,
                "gpm.3": 48.5,
                "gpm.5": 0.5,
                "gpm.10": 31.0,
                "gpm.11": 0.0,
                "gpm.12": 88.0,
                "gpm.13": 0.0,
            }
        )
        return [gpu], "590.48.01"
    if name == "a100-mig":
        gpu, driver = captures.a100_mig()
        return [gpu], driver
    gpu, driver = captures.t4_with_processes()
    return [gpu], driver


@pytest.mark.parametrize("capture", ["h100", "a100-mig", "t4"])
def test_golden_exposition_per_real_capture(fake_nvml, capture, request):
    gpus, driver = capture_state(capture)
    fake_nvml.write(gpus, driver_version=driver, nvml_version="12." + driver)
    result = run_once(fake_nvml)
    assert result.returncode == 0, result.stderr
    text = _TIMED.sub(lambda mt: f"{mt.group(1)}{mt.group(2) or ''} <timed>", result.stdout)
    golden = GOLDEN / f"{capture}.prom"
    if request.config.getoption("--update-golden"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text(), f"exposition differs from {golden}; run pytest --update-golden if intended"


def test_h100_values_match_the_capture(fake_nvml):
    gpus, driver = capture_state("h100")
    fake_nvml.write(gpus, driver_version=driver)
    parsed = samples(run_once(fake_nvml).stdout)
    gpu = {"gpu": "0", "uuid": "GPU-00000000-0000-0000-0000-000000000000"}
    # nvidia-smi under load: 631.95 W of 700 W, 19818 of 81559 MiB, 479 MiB reserved, SM 1980 MHz, 59 C.
    assert value(parsed, "gpulens_gpu_power_watts", **gpu) == 631.95
    assert value(parsed, "gpulens_gpu_power_limit_watts", **gpu) == 700.0
    assert value(parsed, "gpulens_gpu_memory_used_bytes", **gpu) == 19818 * MIB
    assert value(parsed, "gpulens_gpu_memory_total_bytes", **gpu) == 81559 * MIB
    assert value(parsed, "gpulens_gpu_memory_reserved_bytes", **gpu) == 479 * MIB
    assert value(parsed, "gpulens_gpu_sm_clock_hertz", **gpu) == 1980e6
    assert value(parsed, "gpulens_gpu_temperature_celsius", **gpu) == 59
    assert value(parsed, "gpulens_gpu_utilization_ratio", **gpu) == 1.0
    assert value(parsed, "gpulens_gpu_memory_controller_utilization_ratio", **gpu) == 0.11
    # GPM percentages become ratios.
    assert value(parsed, "gpulens_gpu_sm_active_ratio", **gpu) == 0.9725
    assert value(parsed, "gpulens_gpu_fp32_active_ratio", **gpu) == 0.88
    # gpu_burn held 15690 MiB at 99% SM; the memory hogs 2566 and 1542 MiB at no SM.
    assert value(parsed, "gpulens_process_memory_used_bytes", pid="11345") == 15690 * MIB
    assert value(parsed, "gpulens_process_utilization_ratio", pid="11345") == 0.99
    assert value(parsed, "gpulens_process_utilization_ratio", pid="11327") == 0.0
    assert value(parsed, "gpulens_process_info", pid="11345", command="gpu_burn") == 1
    assert value(parsed, "gpulens_driver_info", driver_version="590.48.01") == 1


def test_mig_instances_are_devices_of_their_own(fake_nvml):
    gpus, driver = capture_state("a100-mig")
    fake_nvml.write(gpus, driver_version=driver)
    parsed = samples(run_once(fake_nvml).stdout)
    parent = "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    instances = sorted(
        dict(labels)["gpu"]
        for (name, labels) in parsed
        if name == "gpulens_gpu_info" and dict(labels)["parent_uuid"] == parent
    )
    assert instances == ["0/gi3", "0/gi4", "0/gi5", "0/gi6"]
    assert value(parsed, "gpulens_gpu_info", gpu="0/gi3", mig_profile="1g.20gb", mig_mode="instance") == 1
    assert value(parsed, "gpulens_gpu_memory_total_bytes", gpu="0/gi3") == 19968 * MIB
    assert value(parsed, "gpulens_gpu_memory_used_bytes", gpu="0/gi5") == 12 * MIB
    # NVML has no utilization on a MIG GPU: omitted, never exported as 0.
    assert [k for k in parsed if k[0] == "gpulens_gpu_utilization_ratio"] == []
    # The board-level readings stay on the physical GPU.
    assert value(parsed, "gpulens_gpu_power_watts", gpu="0") == 67.03
    assert value(parsed, "gpulens_gpu_power_watts", gpu="0/gi3") is None


def test_t4_link_running_below_its_width_is_visible(fake_nvml):
    gpus, driver = capture_state("t4")
    fake_nvml.write(gpus, driver_version=driver)
    parsed = samples(run_once(fake_nvml).stdout)
    assert value(parsed, "gpulens_gpu_pcie_link_width", gpu="0") == 8
    assert value(parsed, "gpulens_gpu_pcie_link_max_width", gpu="0") == 16
    # No GPM before Hopper: SM activity is omitted, not zero.
    assert [k for k in parsed if k[0] == "gpulens_gpu_sm_active_ratio"] == []
    assert value(parsed, "gpulens_process_memory_used_bytes", pid="5762") == 1005 * MIB


def test_not_supported_calls_are_omitted_and_the_rest_served(fake_nvml):
    gpus, driver = capture_state("t4")
    gpus[0]["not_supported"] = "nvmlDeviceGetPowerUsage,nvmlDeviceGetTotalEnergyConsumption"
    fake_nvml.write(gpus, driver_version=driver)
    result = run_once(fake_nvml)
    parsed = samples(result.stdout)
    assert value(parsed, "gpulens_gpu_power_watts", gpu="0") is None
    assert value(parsed, "gpulens_gpu_energy_joules_total", gpu="0") is None
    assert value(parsed, "gpulens_gpu_temperature_celsius", gpu="0") == 40
    assert "nvmlDevice" not in result.stderr  # not supported is normal, not an error worth a log line


#: Modules an exporter loads only when its node uses what they serve (or never: the demo, the analyzer).
OPTIONAL_MODULES = (
    "requests",  # dcgm-exporter (--dcgm.url)
    "h2",  # the kubelet's pod-resources socket
    "grpc",  # never: the tests' fake kubelet only
    "google.protobuf",
    "yaml",  # --web.config.file
    "pandas",
    "gpulens.demo",
    "gpulens.alerts",
    "gpulens.analyzer",
    "gpulens.core.mixin",  # the dashboards', alerts' and analyzer's PromQL
    "gpulens.core.trace",
    "gpulens.core.dcgm",  # dcgm-exporter's format: --source dcgm or --dcgm.url only
    "gpulens.core.bottlenecks",  # the analyzer's classes and thresholds
    "gpulens.core.thresholds",
    "importlib.metadata",  # the version is a literal: looking the distribution up costs a start 0.1 s
)


def loaded_by_exporter(fake_nvml, *flags: str) -> list[str]:
    """The optional modules `gpulens exporter --once` has loaded by the time it exits."""
    script = (
        "import sys; from gpulens.cli import main; main(sys.argv[1:]); "
        f"print(' '.join(m for m in {OPTIONAL_MODULES!r} if m in sys.modules), file=sys.stderr)"
    )
    empty = fake_nvml.state_path.parent / "empty"
    empty.mkdir(exist_ok=True)
    argv = ["exporter", "--source", "nvml", "--once", "--sampler.interval", "0.01"]
    argv += ["--path.procfs", str(empty), "--path.var-log", str(empty), *flags]
    result = subprocess.run(
        [sys.executable, "-c", script, *argv], env=fake_nvml.env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stderr.splitlines()[-1].split()


def test_a_node_loads_only_what_it_uses(fake_nvml, tmp_path):
    # The core modules the exporter's benchmarks leave out of what they measure are among those it never loads.
    from benchmarks import results

    left_out = {p.removeprefix("!gpulens/core/").removesuffix(".py") for p in results._NOT_IN_EXPORTER}
    assert {f"gpulens.core.{name}" for name in left_out} <= set(OPTIONAL_MODULES)
    fake_nvml.write(capture_state("h100")[0])
    assert loaded_by_exporter(fake_nvml, "--kubelet.socket", "") == []
    kubelet = FakeKubelet(str(tmp_path / "kubelet.sock"), {}).start()
    try:
        assert loaded_by_exporter(fake_nvml, "--kubelet.socket", kubelet.socket_path) == ["h2"]
    finally:
        kubelet.stop()


def test_missing_driver_library_is_one_clear_line_and_exit_2(tmp_path):
    env = {"LD_LIBRARY_PATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "exporter", "--source", "nvml"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "libnvidia-ml.so.1 was not found" in result.stderr and "--source=simulated" in result.stderr


def test_driver_not_loaded_is_a_clear_error(fake_nvml):
    fake_nvml.write([], init_error=9)  # NVML_ERROR_DRIVER_NOT_LOADED
    result = run_once(fake_nvml)
    assert result.returncode == 2
    assert result.stderr == (
        "gpulens exporter: the NVIDIA kernel driver is not loaded (nvidia-smi will say the "
        "same): load it, or use --source=simulated\n"
    )


def _two_gpus():
    h100 = capture_state("h100")[0][0]
    t4 = captures.t4_with_processes()[0]
    return [h100, t4]


def test_lost_gpu_goes_down_alone_and_is_logged_once(fake_nvml):
    gpus = _two_gpus()
    fake_nvml.write(gpus)
    exporter, url = start_nvml_exporter(fake_nvml)
    try:
        t4 = gpus[1]["uuid"]
        assert value(samples(requests.get(url + "/metrics").text), "gpulens_gpu_up", uuid=t4) == 1
        gpus[1]["lost"] = 1
        fake_nvml.write(gpus, count_calls="nvmlDeviceGetTemperature")  # read once a sample, of GPU 0
        wait_until(
            lambda: value(samples(requests.get(url + "/metrics").text), "gpulens_gpu_up", uuid=t4) == 0,
            10,
            what="the lost GPU to report up 0",
        )
        fake_nvml.wait_for_calls(10, "ten more samples of the lost GPU")
        parsed = samples(requests.get(url + "/metrics").text)
        assert sorted(name for name, labels in parsed if ("uuid", t4) in labels) == ["gpulens_gpu_up"]
        assert value(parsed, "gpulens_gpu_up", gpu="0") == 1
        assert value(parsed, "gpulens_gpu_power_watts", gpu="0") == 631.95
        assert value(parsed, "gpulens_exporter_collector_success", collector="nvml") == 1
        assert exporter.log.count("is lost (NVML_ERROR_GPU_IS_LOST)") == 1
        # It comes back after a reset: series return, and the recovery is logged once too.
        gpus[1]["lost"] = 0
        fake_nvml.write(gpus)
        wait_until(
            lambda: (
                value(samples(requests.get(url + "/metrics").text), "gpulens_gpu_temperature_celsius", uuid=t4) == 40
            ),
            10,
            what="the GPU to come back",
        )
        assert exporter.log.count("answers again") == 1
    finally:
        exporter.stop()


@pytest.mark.parametrize("lost", [0, 1], ids=["h100-with-nvlink-and-gpm", "t4"])
def test_lost_gpu_keeps_its_identity_across_rediscovery(fake_nvml, lost):
    gpus = _two_gpus()
    gpus[0]["nvlink_links"] = 18
    gpus[lost]["lost"] = 1
    fake_nvml.write([gpu | {"lost": 0} for gpu in gpus])
    exporter, url = start_nvml_exporter(fake_nvml, "--nvml.rediscover-interval", "0.2")
    try:
        fake_nvml.write(gpus)  # lost, and re-enumeration can no longer open it
        fake_nvml.wait_for_calls(3, "three re-enumerations")
        parsed = samples(requests.get(url + "/metrics").text)
        ups = {dict(labels)["uuid"]: v for (name, labels), v in parsed.items() if name == "gpulens_gpu_up"}
        assert ups == {gpu["uuid"]: float(i != lost) for i, gpu in enumerate(gpus)}
        # Every tick's sample was whole: a collector learning of the GPU it could not open again (its
        # NVLinks, its GPM support) must not fail the enumeration.
        assert "source failed" not in exporter.log
        fake_nvml.write([gpu | {"lost": 0} for gpu in gpus])
        wait_until(
            lambda: value(samples(requests.get(url + "/metrics").text), "gpulens_gpu_up", gpu=str(lost)) == 1,
            10,
            what="the GPU back",
        )
        parsed = samples(requests.get(url + "/metrics").text)
        assert value(parsed, "gpulens_gpu_nvlink_links", gpu="0") == 18
        assert value(parsed, "gpulens_gpu_nvlink_links_down", gpu="0") == 0
    finally:
        exporter.stop()


def test_a_gpu_that_leaves_the_enumeration_stays_expected_and_reported_down(fake_nvml):
    # The driver stops listing the T4 (fallen off the bus and unbound): it must not vanish without a word.
    gpus = _two_gpus()
    fake_nvml.write(gpus)
    exporter, url = start_nvml_exporter(fake_nvml, "--nvml.rediscover-interval", "0.2")
    h100, t4 = gpus[0]["uuid"], gpus[1]["uuid"]

    def state():
        parsed = samples(requests.get(url + "/metrics").text)
        ups = {dict(labels)["uuid"]: v for (name, labels), v in parsed.items() if name == "gpulens_gpu_up"}
        return ups, value(parsed, "gpulens_gpus_expected"), value(parsed, "gpulens_gpus_visible")

    try:
        assert state() == ({h100: 1.0, t4: 1.0}, 2.0, 2.0)
        fake_nvml.write(gpus[:1])
        wait_until(lambda: state() == ({h100: 1.0, t4: 0.0}, 2.0, 1.0), 10, what="the T4 reported down, expected")
        fake_nvml.wait_for_calls(3, "three re-enumerations: logged once")
        assert exporter.log.count(f"GPU 1 ({t4}, PCI {gpus[1]['pci_bus_id']}) is no longer enumerated") == 1
        fake_nvml.write(gpus)
        wait_until(lambda: state() == ({h100: 1.0, t4: 1.0}, 2.0, 2.0), 10, what="the T4 back")
        assert exporter.log.count(f"GPU {t4} ({gpus[1]['pci_bus_id']}) is enumerated again, as GPU 1") == 1
    finally:
        exporter.stop()


def test_a_64_gpu_node_is_served_whole_and_a_smaller_node_after_it(fake_nvml):
    # The benchmarks measure 64 GPUs; the fake reuses and clears only the slots its last state used.
    h100 = capture_state("h100")[0][0]
    gpus = [
        h100
        | {
            "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
            "pci_bus_id": f"00000000:{i:02X}:00.0",
            "temperature_c": 30 + i,
        }
        for i in range(64)
    ]
    fake_nvml.write(gpus)
    exporter, url = start_nvml_exporter(fake_nvml, "--nvml.rediscover-interval", "0.2")

    def temperatures():
        parsed = samples(requests.get(url + "/metrics").text)
        return {
            dict(labels)["gpu"]: v for (name, labels), v in parsed.items() if name == "gpulens_gpu_temperature_celsius"
        }, value(parsed, "gpulens_gpus_visible")

    try:
        assert temperatures() == ({str(i): 30.0 + i for i in range(64)}, 64.0)
        fake_nvml.write(gpus[:8])
        wait_until(lambda: temperatures() == ({str(i): 30.0 + i for i in range(8)}, 8.0), 10, what="56 GPUs gone")
    finally:
        exporter.stop()


def test_hanging_nvml_call_never_hangs_the_scrape(fake_nvml):
    gpus = _two_gpus()
    fake_nvml.write(gpus)
    exporter, url = start_nvml_exporter(fake_nvml)
    try:
        gpus[0].update({"hang": "nvmlDeviceGetTemperature", "hang_ms": 4000})
        fake_nvml.write(gpus)

        def sample_age() -> float:
            return value(samples(requests.get(url + "/metrics", timeout=2).text), "gpulens_exporter_sample_age_seconds")

        wait_until(lambda: sample_age() > 1.0, 10, what="the sampler held a second in the hanging call")
        started = time.monotonic()
        response = requests.get(url + "/metrics", timeout=2)
        assert response.status_code == 200 and time.monotonic() - started < 1.0
        parsed = samples(response.text)
        # The last complete sample is served, with its age saying how stale it is.
        assert value(parsed, "gpulens_exporter_sample_age_seconds") > 1.0
        assert value(parsed, "gpulens_gpu_power_watts", gpu="0") == 631.95
    finally:
        exporter.stop()


def test_intermittent_errors_drop_one_value_and_log_once(fake_nvml):
    gpus = _two_gpus()
    gpus[1]["flaky"] = "nvmlDeviceGetTemperature"
    fake_nvml.write(gpus)
    exporter, url = start_nvml_exporter(fake_nvml)
    try:
        seen = set()

        def scrape_both() -> bool:
            """Samples whose temperature read failed and samples whose read worked (any other value stops it)."""
            parsed = samples(requests.get(url + "/metrics").text)
            seen.add(value(parsed, "gpulens_gpu_temperature_celsius", gpu="1"))
            assert value(parsed, "gpulens_gpu_power_watts", gpu="1") == 26.78
            assert value(parsed, "gpulens_gpu_up", gpu="1") == 1
            return seen == {40.0, None}

        wait_until(scrape_both, 10, interval=0.05, what="a temperature dropped and one read")
        assert exporter.log.count("nvmlDeviceGetTemperature failed") == 1
    finally:
        exporter.stop()


def test_every_xid_event_is_counted(fake_nvml):
    gpus = _two_gpus()
    gpus[0]["xids"] = "48"  # raised before the exporter started: not an event it saw
    fake_nvml.write(gpus)
    exporter, url = start_nvml_exporter(fake_nvml)
    try:

        def xids():
            parsed = samples(requests.get(url + "/metrics").text)
            return {
                dict(labels)["xid"]: v
                for (name, labels), v in parsed.items()
                if name == "gpulens_gpu_xid_errors_total" and ("gpu", "0") in labels
            }

        gpus[0]["xids"] = "48,79,79,13"
        fake_nvml.write(gpus)
        assert wait_until(lambda: xids() == {"79": 2.0, "13": 1.0} and xids(), 10, what="XID counts")
        gpus[0]["xids"] = "48,79,79,13,79"
        fake_nvml.write(gpus)
        assert wait_until(lambda: xids() == {"79": 3.0, "13": 1.0} and xids(), 10, what="the repeated XID")
    finally:
        exporter.stop()


def test_series_of_an_ended_process_disappear(fake_nvml):
    gpus = _two_gpus()
    fake_nvml.write(gpus)
    exporter, url = start_nvml_exporter(fake_nvml)
    try:
        assert (
            value(samples(requests.get(url + "/metrics").text), "gpulens_process_busy_seconds_total", pid="11345")
            is not None
        )
        for key in [k for k in gpus[0] if k.startswith("proc2.")]:  # gpu_burn exits
            del gpus[0][key]
        fake_nvml.write(gpus)

        def gone():
            text = requests.get(url + "/metrics").text
            return 'pid="11345"' not in text and 'pid="11327"' in text

        wait_until(gone, 10, what="gpu_burn's series to vanish")
    finally:
        exporter.stop()


def test_scrape_while_state_changes_constantly_never_fails(fake_nvml):
    """Rewrites racing with the sampler must never produce a 500 or a half-read GPU."""
    gpus = _two_gpus()
    fake_nvml.write(gpus)
    exporter, url = start_nvml_exporter(fake_nvml, interval="0.05")
    stop = threading.Event()

    def churn():
        n = 0
        while not stop.is_set():
            gpus[0]["util_gpu"] = n % 101
            fake_nvml.write(gpus)
            n += 7

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        for _ in range(30):
            response = requests.get(url + "/metrics", timeout=2)
            assert response.status_code == 200
            parsed = samples(response.text)
            assert 0 <= value(parsed, "gpulens_gpu_utilization_ratio", gpu="0") <= 1
            assert value(parsed, "gpulens_gpu_memory_total_bytes", gpu="1") == 15360 * MIB
    finally:
        stop.set()
        writer.join()
        exporter.stop()


def _sample_list(start_us: int, values: list[int], spacing_us: int = 166_667) -> str:
    """The fake's util_samples value: <CPU time in us>:<percent>, oldest first."""
    return ",".join(f"{start_us + i * spacing_us}:{v}" for i, v in enumerate(values))


def test_every_driver_sample_counts_once_at_the_drivers_own_rate(fake_nvml):
    gpu = captures.h100_under_load()
    start = 1_900_000_000_000_000  # CPU time in us; the driver's, not ours
    gpu["util_samples"] = _sample_list(start, [0])
    fake_nvml.write([gpu], count_calls="nvmlDeviceGetSamples")
    exporter, url = start_nvml_exporter(fake_nvml)
    uuid = gpu["uuid"]

    def activity():
        parsed = samples(requests.get(url + "/metrics").text)
        count = value(parsed, "gpulens_gpu_activity_ratio_count", uuid=uuid)
        return parsed if count else None

    try:
        fake_nvml.wait_for_calls(1, "the first read, which only learns how far the buffer goes")
        assert activity() is None
        # A starving training step every second: 2 busy samples of 1/6 s, then 4 idle ones, four times.
        steps = [100, 100, 0, 0, 0, 0] * 4
        gpu["util_samples"] = _sample_list(start, [0] + steps)
        fake_nvml.write([gpu], count_calls="nvmlDeviceGetSamples")
        parsed = wait_until(activity, 10, what="the new samples to be counted")
        fake_nvml.wait_for_calls(5, "five more reads, each answered NVML_ERROR_NOT_FOUND: nothing new to count")
        parsed = samples(requests.get(url + "/metrics").text)
        bucket = {
            labels_le: v
            for (name, labels), v in parsed.items()
            if name == "gpulens_gpu_activity_ratio_bucket"
            for labels_le in [dict(labels)["le"]]
        }
        assert bucket == {"0.01": 16, "0.1": 16, "0.3": 16, "0.5": 16, "0.7": 16, "0.9": 16, "+Inf": 24}
        assert value(parsed, "gpulens_gpu_activity_ratio_sum", uuid=uuid) == 8.0
        # 4 falls and 3 rises (the sample before the first burst was the buffer's, not ours); rises
        # 1 s apart: the second has a period, the third repeats it.
        assert value(parsed, "gpulens_gpu_activity_transitions_total", uuid=uuid) == 7
        assert value(parsed, "gpulens_gpu_steady_bursts_total", uuid=uuid) == 1
        # Busy time at the driver's rate: 8 busy samples of 1/6 s each (the first stands for no time,
        # having no predecessor of ours), where a read of the gauge once a second sees 0.
        assert value(parsed, "gpulens_gpu_busy_seconds_total", uuid=uuid) == pytest.approx(7 * 0.166667, abs=1e-6)
        assert value(parsed, "gpulens_gpu_idle_seconds_total", uuid=uuid) == pytest.approx(16 * 0.166667, abs=1e-6)
        assert value(parsed, "gpulens_gpu_utilization_ratio", uuid=uuid) == 0.0  # the newest sample
        # The driver keeps its last 120 samples: 200 more while nobody read leave 120 to count.
        gpu["util_samples"] = _sample_list(start, [0] + steps + [100] * 200)
        fake_nvml.write([gpu])
        wait_until(
            lambda: (
                value(samples(requests.get(url + "/metrics").text), "gpulens_gpu_activity_ratio_count", uuid=uuid)
                == 24 + 120
            ),
            10,
            what="the ring's 120 samples to be counted",
        )
        assert "nvmlDeviceGetSamples failed" not in exporter.log
    finally:
        exporter.stop()


def test_topology_peer_paths_and_nvlink_health_from_the_driver(fake_nvml, tmp_path):
    """Three H100s of the capture (18 NVLinks each, as `nvidia-smi nvlink -s` listed them): 0 and 1 under one
    host bridge and joined by NVLink, 2 on the other socket with no peer path. GPU 0 has two links down and
    counts errors; GPU 2's driver reports link states only through nvmlDeviceGetNvLinkState (before Hopper)."""
    base = captures.h100_under_load()
    gpus = [
        {**base, "uuid": f"GPU-0000000{i}-0000-0000-0000-000000000000", "pci_bus_id": f"00000000:0{i}:00.0"}
        for i in range(3)
    ]
    gpus[0].update(nvlink_down="3,7", nvlink_crc_flit=5, nvlink_crc_data=2, nvlink_replay=12, nvlink_recovery=1)
    gpus[2].update(nvlink_down="0", not_supported="field165")
    topology, p2p = {}, {}
    for a in range(3):
        for b in range(3):
            if a != b:
                near = {a, b} == {0, 1}
                topology[a, b] = 30 if near else 50  # NVML_TOPOLOGY_HOSTBRIDGE, NVML_TOPOLOGY_SYSTEM
                p2p[a, b] = "nvlink" if near else "none"
    fake_nvml.write(gpus, topology=topology, p2p=p2p)
    record = tmp_path / "node.csv"
    exporter, url = start_nvml_exporter(fake_nvml, "--record", str(record))
    uuid = [g["uuid"] for g in gpus]
    try:
        parsed = wait_until(
            lambda: (
                (p := samples(requests.get(url + "/metrics").text))
                and value(p, "gpulens_gpu_nvlink_links_down", uuid=uuid[2]) is not None
                and p
            ),
            10,
            what="the link states",
        )
        for a, b, level, path in [
            (0, 1, "host_bridge", "nvlink"),
            (1, 0, "host_bridge", "nvlink"),
            (0, 2, "system", "none"),
        ]:
            assert (
                value(parsed, "gpulens_gpu_topology_info", uuid=uuid[a], peer_uuid=uuid[b], level=level, p2p=path) == 1
            )
        assert [value(parsed, "gpulens_gpu_nvlink_links", uuid=u) for u in uuid] == [18, 18, 18]
        assert [value(parsed, "gpulens_gpu_nvlink_links_down", uuid=u) for u in uuid] == [2, 0, 1]
        errors = {
            t: value(parsed, "gpulens_gpu_nvlink_errors_total", uuid=uuid[0], type=t)
            for t in ("crc_flit", "crc_data", "replay", "recovery")
        }
        assert errors == {"crc_flit": 5, "crc_data": 2, "replay": 12, "recovery": 1}
        assert f"GPU 0 ({uuid[0]}): NVLink links down: [3, 7] of 18" in exporter.log
        assert f"GPU 2 ({uuid[2]}): NVLink links down: [0] of 18" in exporter.log
        # The links come back and replays go on: the gauge drops to 0, the log says so once.
        gpus[0].update(nvlink_down="", nvlink_replay=112)
        fake_nvml.write(gpus, topology=topology, p2p=p2p, count_calls="nvmlDeviceGetTemperature")
        wait_until(
            lambda: (
                value(samples(requests.get(url + "/metrics").text), "gpulens_gpu_nvlink_links_down", uuid=uuid[0]) == 0
            ),
            10,
            what="the links to come back",
        )
        fake_nvml.wait_for_calls(3 * 5, "five more samples of the three GPUs: the links' return logged once")
    finally:
        exporter.stop()
    assert exporter.log.count(f"GPU 0 ({uuid[0]}): every NVLink link is up again") == 1
    assert exporter.log.count("NVLink links down: [3, 7]") == 1
    # The recorder writes where each GPU sits and how its links fare.
    from gpulens.analyzer.inputs.readers import read_trace

    frame = read_trace(record)
    last = frame.groupby("gpu").last()
    assert list(last.loc[uuid, "numa_node"]) == [0, 0, 1]
    assert list(last.loc[uuid, "pcie_root"]) == [0, 0, 1]
    assert list(last.loc[uuid, "nvlink_group"]) == [0, 0, 1]
    assert list(last.loc[uuid, "nvlink_links_down"]) == [0, 0, 1]
    assert frame[frame.gpu == uuid[0]].nvlink_links_down.max() == 2
    assert frame[frame.gpu == uuid[0]].nvlink_replay_errors_per_second.max() > 0


def test_a_gpu_with_more_processes_than_the_kept_buffer_reports_every_one(fake_nvml):
    # The exporter keeps room for 64 processes per GPU and grows it when the driver answers
    # NVML_ERROR_INSUFFICIENT_SIZE (MPS can put a hundred clients on one GPU).
    gpus, driver = capture_state("t4")
    gpu = {k: v for k, v in gpus[0].items() if not k.startswith("proc")}
    for i in range(100):
        gpu |= {f"proc{i}.pid": 5000 + i, f"proc{i}.name": "triton", f"proc{i}.memory": (i + 1) * MIB}
        gpu[f"proc{i}.sm_util"] = i % 50
    gpu["proc99.memory"] = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE: no memory series, not 16 EiB
    fake_nvml.write([gpu], driver_version=driver)
    parsed = samples(run_once(fake_nvml).stdout)
    memory = {
        dict(labels)["pid"]: v for (name, labels), v in parsed.items() if name == "gpulens_process_memory_used_bytes"
    }
    assert len(memory) == 99
    assert memory["5000"] == MIB and memory["5098"] == 99 * MIB
    assert "5099" not in memory
    busy = [labels for name, labels in parsed if name == "gpulens_process_busy_seconds_total"]
    assert len(busy) == 100


@pytest.fixture(scope="session")
def older_drivers(tmp_path_factory) -> dict[int, object]:
    """The fake library as drivers of older branches: the directory holding each."""
    return {
        branch: build_fake_nvml(tmp_path_factory.mktemp(f"fake-nvml-{branch}"), driver_branch=branch).parent
        for branch in (470, 450)
    }


def collector_series(parsed, name: str) -> dict[str, float]:
    return {dict(labels)["collector"]: v for (metric, labels), v in parsed.items() if metric == name}


@pytest.mark.parametrize(
    "branch, processes_call",
    [(470, "nvmlDeviceGetComputeRunningProcesses_v2"), (450, "nvmlDeviceGetComputeRunningProcesses")],
)
def test_an_older_driver_is_read_through_the_older_version_of_each_call(
    older_drivers, tmp_path, branch, processes_call
):
    """The T4 capture on a driver that lacks the newest entry points: each value comes through the newest
    version that driver has, and nothing is reported failing."""
    gpu, _ = captures.t4_with_processes()
    gpu["clock_event_reasons"] = 0x4  # sw_power_cap
    gpu["gpm"] = 1  # the board could; the driver has no GPM
    nvml = FakeNvml(older_drivers[branch], tmp_path / "nvml-state")
    nvml.write([gpu], driver_version=f"{branch}.256.02", nvml_version=f"11.{branch}.256.02")
    result = run_once(nvml)
    assert result.returncode == 0, result.stderr
    parsed = samples(result.stdout)
    # nvidia-smi's capture: 1032 MiB used and 388 MiB reserved. The first nvmlDeviceGetMemoryInfo has no
    # reserved: what the driver reserves is in its used, as nvidia-smi showed it on those drivers.
    assert value(parsed, "gpulens_gpu_memory_used_bytes", gpu="0") == (1032 + 388) * MIB
    assert value(parsed, "gpulens_gpu_memory_reserved_bytes", gpu="0") is None
    assert value(parsed, "gpulens_gpu_memory_total_bytes", gpu="0") == 15360 * MIB
    assert value(parsed, "gpulens_process_memory_used_bytes", pid="5762") == 1005 * MIB
    assert value(parsed, "gpulens_gpu_clock_event_active", gpu="0", reason="sw_power_cap") == 1
    assert value(parsed, "gpulens_gpu_clock_event_active", gpu="0", reason="hw_slowdown") == 0
    assert value(parsed, "gpulens_gpu_sm_active_ratio", gpu="0") is None
    assert collector_series(parsed, "gpulens_exporter_collector_success") == dict.fromkeys(
        ("nvml", "processes", "nvlink", "gpm", "xid", "topology", "kubelet"), 1.0
    ) | {"kubelet": 0.0}
    for newer, older in (
        ("nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"),
        ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo"),
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
    ):
        assert f"the NVIDIA driver has no {newer} (Function Not Found): using {older}" in result.stderr
    assert result.stderr.count("the NVIDIA driver has no") == (4 if branch == 450 else 3)
    assert f"using {processes_call}" in result.stderr and "failed" not in result.stderr


def test_collectors_switched_off_read_nothing_and_report_nothing(fake_nvml):
    gpus, driver = capture_state("h100")
    gpus[0].update({"nvlink_links": 18, "xids": "", "proc0.pid": 4242, "proc0.name": "python", "proc0.memory": MIB})
    fake_nvml.write(gpus, driver_version=driver)
    every = samples(run_once(fake_nvml).stdout)
    off = ("--no-collector.processes", "--no-collector.nvlink", "--no-collector.gpm", "--no-collector.topology")
    result = run_once(fake_nvml, *off, "--no-collector.xid")
    assert result.returncode == 0, result.stderr
    fewer = samples(result.stdout)
    assert set(collector_series(every, "gpulens_exporter_collector_success")) == {
        "nvml",
        "processes",
        "nvlink",
        "gpm",
        "xid",
        "topology",
        "kubelet",
    }
    assert set(collector_series(fewer, "gpulens_exporter_collector_success")) == {"nvml", "kubelet"}
    gone = {metric for metric, _ in every} - {metric for metric, _ in fewer}
    assert gone == {
        "gpulens_process_info",
        "gpulens_process_memory_used_bytes",
        "gpulens_process_utilization_ratio",
        "gpulens_process_busy_seconds_total",
        "gpulens_process_idle_seconds_total",
        "gpulens_gpu_nvlink_links",
        "gpulens_gpu_nvlink_links_down",
        "gpulens_gpu_nvlink_transmit_bytes_total",
        "gpulens_gpu_nvlink_receive_bytes_total",
        "gpulens_gpu_nvlink_errors_total",
        "gpulens_gpu_sm_active_ratio",
        "gpulens_gpu_sm_active_seconds_total",
        "gpulens_gpu_sm_occupancy_ratio",
        "gpulens_gpu_tensor_active_ratio",
        "gpulens_gpu_dram_active_ratio",
        "gpulens_gpu_graphics_engine_active_ratio",
        "gpulens_gpu_fp64_active_ratio",
        "gpulens_gpu_fp32_active_ratio",
        "gpulens_gpu_fp16_active_ratio",
    }
    # What stays is read as before: the PCIe counters share the NVLink collector's driver call.
    for metric in ("gpulens_gpu_power_watts", "gpulens_gpu_pcie_transmit_bytes_total", "gpulens_gpu_memory_used_bytes"):
        assert value(fewer, metric, gpu="0") == value(every, metric, gpu="0")


def test_a_failing_collector_reports_itself_and_only_itself(fake_nvml):
    gpus = _two_gpus()
    gpus[1]["flaky"] = "nvmlDeviceGetComputeRunningProcesses_v3"
    fake_nvml.write(gpus)
    exporter, url = start_nvml_exporter(fake_nvml)
    try:
        failures = lambda: collector_series(  # noqa: E731
            samples(requests.get(url + "/metrics").text), "gpulens_exporter_collector_failures_total"
        )
        wait_until(lambda: failures()["processes"] >= 2, timeout=30, what="two failed runs of the processes collector")
        counted = failures()
        assert {name: n for name, n in counted.items() if name not in ("processes", "kubelet")} == {
            "nvml": 0,
            "nvlink": 0,
            "gpm": 0,
            "xid": 0,
            "topology": 0,
        }
        assert exporter.log.count("GPU 1: nvmlDeviceGetComputeRunningProcesses_v3 failed") == 1
    finally:
        exporter.stop()
