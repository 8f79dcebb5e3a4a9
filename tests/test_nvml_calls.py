"""The NVML choke point (exporter/sources/nvml/calls.py) with pynvml's own error classes and codes:
how each NVML error is sorted, how a call falls back to an older version, and how collectors are judged.
The exporter running on the fake driver is tested in test_nvml_source.py."""

import logging

import pynvml
import pytest

from gpulens.core.status import CollectorStatus, ProblemLog
from gpulens.exporter.sources.nvml import COLLECTORS
from gpulens.exporter.sources.nvml.calls import DeviceLost, NvmlCalls, Outcome, Version, Versioned


def error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)  # pynvml returns the subclass for the code, as the driver's answers raise


@pytest.fixture
def calls():
    return NvmlCalls(pynvml, ProblemLog(logging.getLogger("test")), tuple(COLLECTORS))


@pytest.mark.parametrize(
    "code, outcome",
    [
        (pynvml.NVML_ERROR_NOT_SUPPORTED, Outcome.UNSUPPORTED),
        (pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, Outcome.UNSUPPORTED),
        (pynvml.NVML_ERROR_NOT_FOUND, Outcome.NOTHING),
        (pynvml.NVML_ERROR_TIMEOUT, Outcome.TIMEOUT),
        (pynvml.NVML_ERROR_UNKNOWN, Outcome.FAILED),
        (pynvml.NVML_ERROR_INSUFFICIENT_SIZE, Outcome.FAILED),
    ],
)
def test_every_error_is_sorted_the_same_way(calls, code, outcome):
    assert calls.sort(error(code), "nvmlDeviceGetPowerUsage", "0") is outcome


def test_a_lost_gpu_raises_where_a_gpu_is_named_and_is_a_failure_elsewhere(calls, caplog):
    with pytest.raises(DeviceLost):
        calls.sort(error(pynvml.NVML_ERROR_GPU_IS_LOST), "nvmlDeviceGetPowerUsage", "3")
    assert calls.sort(error(pynvml.NVML_ERROR_GPU_IS_LOST), "nvmlEventSetWait") is Outcome.FAILED
    assert caplog.messages == ["nvmlEventSetWait failed: GPU is lost"]


def test_a_failure_is_logged_once_per_call_and_gpu(calls, caplog):
    for _ in range(3):
        assert calls.call(lambda: (_ for _ in ()).throw(error(pynvml.NVML_ERROR_UNKNOWN)), device="1") is None
    calls.sort(error(pynvml.NVML_ERROR_UNKNOWN), "nvmlDeviceGetTemperature", "2")
    assert caplog.messages == [
        "GPU 1: <lambda> failed: Unknown Error",
        "GPU 2: nvmlDeviceGetTemperature failed: Unknown Error",
    ]


def test_a_call_falls_back_once_to_the_newest_version_the_driver_has(caplog):
    made = []

    def absent(code):
        def call(*args):
            made.append(code)
            raise error(code)

        return call

    versioned = Versioned(
        pynvml,
        [
            Version("fn_v3", absent(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)),
            Version("fn_v2", absent(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)),
            Version("fn", lambda handle: f"first version of {handle}"),
        ],
    )
    caplog.set_level(logging.INFO)
    assert [versioned("h0"), versioned("h1")] == ["first version of h0", "first version of h1"]
    assert made == [pynvml.NVML_ERROR_FUNCTION_NOT_FOUND, pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH]  # once each
    assert versioned.version == "fn"
    assert caplog.messages == [
        "the NVIDIA driver has no fn_v3 (Function Not Found): using fn_v2",
        "the NVIDIA driver has no fn_v2 (NVML Error with code 25): using fn",  # pynvml without the library
    ]


def test_other_errors_of_a_version_are_the_calls_own_and_keep_the_version():
    versioned = Versioned(
        pynvml,
        [
            Version("fn_v2", lambda: (_ for _ in ()).throw(error(pynvml.NVML_ERROR_NOT_SUPPORTED))),
            Version("fn", lambda: "older"),
        ],
    )
    with pytest.raises(pynvml.NVMLError_NotSupported):
        versioned()
    assert versioned.version == "fn_v2"
    only = Versioned(
        pynvml, [Version("fn", lambda: (_ for _ in ()).throw(error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)))]
    )
    with pytest.raises(pynvml.NVMLError_FunctionNotFound):
        only()


def test_a_collector_succeeds_unless_one_of_its_reads_failed_in_the_tick(calls):
    assert calls.statuses == dict.fromkeys(COLLECTORS, CollectorStatus(True, 0.0, 0))
    for gpu in ("0", "1"):
        with calls.collector("processes"):
            if gpu == "1":
                calls.sort(error(pynvml.NVML_ERROR_UNKNOWN), "nvmlDeviceGetComputeRunningProcesses_v3", gpu)
        with calls.collector("gpm"):
            calls.sort(error(pynvml.NVML_ERROR_NOT_SUPPORTED), "nvmlGpmSampleGet", gpu)  # not a failure
    calls.end_tick()
    assert (calls.statuses["processes"].success, calls.statuses["processes"].failures) == (False, 1)
    assert (calls.statuses["gpm"].success, calls.statuses["gpm"].failures) == (True, 0)
    assert calls.statuses["topology"] == CollectorStatus(True, 0.0, 0)  # did not run: kept as it was
    with calls.collector("processes"):
        pass
    calls.end_tick()
    assert (calls.statuses["processes"].success, calls.statuses["processes"].failures) == (True, 1)
