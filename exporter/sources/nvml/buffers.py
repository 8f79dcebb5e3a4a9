"""NVML's array answers, one driver call each, into buffers each GPU keeps.

pynvml's wrappers for these calls ask the driver twice (once for the size, once for the data), build a
new ctypes array every time and, for the running processes, convert every element in Python. On every
GPU every second that was most of the exporter's own cost (benchmarks/exporter.py). Here each GPU keeps
its buffers: one call fills them, grown and asked again on NVML_ERROR_INSUFFICIENT_SIZE, and the caller
unpacks the raw bytes (source.py and the collectors). The C entry points are the ones pynvml loaded, and failures are
raised as pynvml's NVMLError, so a caller handles them as it handles any other NVML call.
"""

from __future__ import annotations

import ctypes
from typing import Any

#: Entries kept at first: a read finds far fewer utilization samples (six a second at most) and far fewer
#: compute processes on one GPU; a larger answer grows the buffer.
_INITIAL_ENTRIES = 64
#: How often one read may grow its buffer (64 entries doubled five times: 2,048) before it gives up.
_GROWTHS = 5


class ProcessInfoV1(ctypes.Structure):
    """nvmlProcessInfo_v1_t (nvml.h), what the first nvmlDeviceGetComputeRunningProcesses fills: 16 bytes."""

    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong)]


#: The versions of the running-processes call, newest first. _v2 and _v3 fill the same 24-byte
#: nvmlProcessInfo_t (pid, usedGpuMemory, gpuInstanceId, computeInstanceId); the first, ProcessInfoV1.
RUNNING_PROCESSES = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)


class DeviceBuffers:
    """The buffers of one GPU or MIG instance (`handle`), for the reads the sampler makes every tick."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._buffers: dict[str, Any] = {}
        self._fields: tuple[list, Any] | None = None

    def field_values(self, field_ids: list) -> bytes:
        """nvmlDeviceGetFieldValues: the nvmlFieldValue_t array, for field ids (or (field id, scope id)
        pairs) as pynvml takes them. The request is built once per list of ids."""
        nvml = self._nvml
        if self._fields is None or self._fields[0] is not field_ids:
            request = (nvml.c_nvmlFieldValue_t * len(field_ids))()
            for value, field_id in zip(request, field_ids, strict=True):
                value.fieldId, value.scopeId = field_id if isinstance(field_id, tuple) else (field_id, 0)
            self._fields = (field_ids, request)
        values = self._fields[1]
        ret = self._function("nvmlDeviceGetFieldValues")(self._handle, ctypes.c_int32(len(values)), values)
        if ret != nvml.NVML_SUCCESS:
            raise nvml.NVMLError(ret)
        return bytes(values)

    def samples(self, kind: int, last_seen: int) -> tuple[int, bytes]:
        """nvmlDeviceGetSamples: (nvmlValueType_t, the nvmlSample_t array) of the samples of type `kind`
        newer than `last_seen` (us); NVML_ERROR_NOT_FOUND when there is none."""
        fn, value_type = self._function("nvmlDeviceGetSamples"), ctypes.c_int()
        since = ctypes.c_ulonglong(last_seen)
        raw = self._fill(
            "samples",
            self._nvml.c_nvmlSample_t,
            lambda buffer, count: fn(self._handle, kind, since, ctypes.byref(value_type), count, buffer),
        )
        return value_type.value, raw

    def process_utilization(self, last_seen: int) -> bytes:
        """nvmlDeviceGetProcessUtilization: the nvmlProcessUtilizationSample_t array of the samples newer
        than `last_seen` (us); NVML_ERROR_NOT_FOUND when there is none."""
        fn, since = self._function("nvmlDeviceGetProcessUtilization"), ctypes.c_ulonglong(last_seen)
        return self._fill(
            "process_samples",
            self._nvml.c_nvmlProcessUtilizationSample_t,
            lambda buffer, count: fn(self._handle, buffer, count, since),
        )

    def running_processes(self, version: str = RUNNING_PROCESSES[0]) -> bytes:
        """The compute processes, by the `version` of RUNNING_PROCESSES given: the array of its
        nvmlProcessInfo_t (ProcessInfoV1 for the first version); NVML_ERROR_FUNCTION_NOT_FOUND where
        the driver lacks that version."""
        fn = self._function(version)
        element = ProcessInfoV1 if version == RUNNING_PROCESSES[-1] else self._nvml.c_nvmlProcessInfo_v2_t
        return self._fill(version, element, lambda buffer, count: fn(self._handle, count, buffer))

    def _function(self, name: str) -> Any:
        # pynvml's cached lookup in the library it loaded; NVML_ERROR_FUNCTION_NOT_FOUND on an older driver.
        return self._nvml._nvmlGetFunctionPointer(name)

    def _fill(self, key: str, element: Any, call: Any) -> bytes:
        """The answer of `call(buffer, byref(count))` into the buffer of `element`s kept under `key`: on
        NVML_ERROR_INSUFFICIENT_SIZE the buffer grows (to twice what the driver says it has, or twice its
        size where the driver does not say) and the call is made again."""
        nvml, count = self._nvml, ctypes.c_uint()
        for _ in range(_GROWTHS + 1):
            buffer = self._buffers.get(key)
            if buffer is None:
                buffer = self._buffers[key] = (element * _INITIAL_ENTRIES)()
            count.value = len(buffer)
            ret = call(buffer, ctypes.byref(count))
            if ret == nvml.NVML_SUCCESS:
                return ctypes.string_at(buffer, count.value * ctypes.sizeof(element))
            if ret != nvml.NVML_ERROR_INSUFFICIENT_SIZE:
                raise nvml.NVMLError(ret)
            self._buffers[key] = (element * (2 * max(count.value, len(buffer))))()
        raise nvml.NVMLError(nvml.NVML_ERROR_INSUFFICIENT_SIZE)
