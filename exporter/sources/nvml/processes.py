"""The `processes` collector: each compute process's GPU memory and SM use.

The running processes and their utilization samples are read with one driver call each into the buffers
each GPU keeps (buffers.py) and unpacked from the raw bytes: pynvml's structures convert every attribute
read in Python.
"""

from __future__ import annotations

import struct
from functools import partial
from typing import Any

from gpulens.exporter.sources.base import DeviceSample, ProcessSample
from gpulens.exporter.sources.nvml.buffers import RUNNING_PROCESSES, DeviceBuffers
from gpulens.exporter.sources.nvml.calls import NvmlCalls, Outcome, Version, Versioned
from gpulens.exporter.sources.nvml.device import Collector, Device

#: Of an nvmlProcessInfo_t (pid, padding, usedGpuMemory, gpuInstanceId, computeInstanceId): pid and usedGpuMemory,
#: by the version of the running-processes call that filled it (the first version's has only those two).
_PROCESS_INFO = {version: struct.Struct("=I4xQ8x") for version in RUNNING_PROCESSES[:-1]}
_PROCESS_INFO[RUNNING_PROCESSES[-1]] = struct.Struct("=I4xQ")
_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF  # NVML_VALUE_NOT_AVAILABLE as an unsigned long long
#: Of an nvmlProcessUtilizationSample_t (pid, padding, timeStamp, smUtil, memUtil, encUtil, decUtil): pid,
#: timeStamp and smUtil.
_PROCESS_SAMPLE = struct.Struct("=I4xQI12x")
#: Process names kept at most: PIDs are reused, so the names are forgotten now and then.
_NAMES_KEPT = 4096


class Processes(Collector):
    name = "processes"
    help = "each process's GPU memory and SM use"

    def __init__(self, nvml: Any, calls: NvmlCalls):
        super().__init__(nvml, calls)
        self._running = Versioned(
            nvml,
            [Version(name, partial(DeviceBuffers.running_processes, version=name)) for name in RUNNING_PROCESSES],
        )
        #: nvmlDeviceGetProcessUtilization's lastSeenTimeStamp (us) per device UUID: kept across rediscoveries.
        self._seen: dict[str, int] = {}
        self._names: dict[int, str] = {}

    def discovered(self, devices: list[Device]) -> None:
        present = {d.uuid for d in devices}
        self._seen = {uuid: seen for uuid, seen in self._seen.items() if uuid in present}

    def read(self, d: Device, s: DeviceSample) -> None:
        nvml = self.nvml
        if d.mig_mode == "enabled":
            return  # processes are reported on the MIG instances they run in
        raw = self.call(d, self._running, d.buffers)
        if raw is None:
            return
        processes = list(_PROCESS_INFO[self._running.version].iter_unpack(raw))  # (pid, GPU memory in bytes)
        # Per PID, the driver's samples newer than the last read (the driver filters by lastSeenTimeStamp):
        # (unix seconds, SM share 0-1). The first read returns whatever the driver kept before the exporter
        # started: averaged into the gauge, but not samples of ours.
        by_pid: dict[int, list[tuple[float, float]]] | None = None
        seen = self._seen.get(d.uuid, 0)
        if processes and d.mig_mode != "instance":  # NVML has no per-process utilization on MIG
            by_pid = {}
            try:
                raw = d.buffers.process_utilization(seen)
            except nvml.NVMLError as e:
                # NOTHING (NOT_FOUND): no samples since last time, that is no activity.
                if self.calls.sort(e, "nvmlDeviceGetProcessUtilization", d.gpu) is not Outcome.NOTHING:
                    by_pid = None
            else:
                newest = seen
                for pid, timestamp, sm in _PROCESS_SAMPLE.iter_unpack(raw):  # (pid, us, percent)
                    sample = (timestamp / 1e6, sm / 100)
                    pid_samples = by_pid.get(pid)
                    if pid_samples is None:
                        by_pid[pid] = [sample]
                    else:
                        pid_samples.append(sample)
                    if timestamp > newest:
                        newest = timestamp
                self._seen[d.uuid] = newest
        names = self._names
        for pid, memory in processes:
            name = names.get(pid)
            if name is None:
                name = self.calls.call(nvml.nvmlSystemGetProcessName, pid) or ""
                names[pid] = name = name.rsplit("/", 1)[-1]
            utilization = samples = None
            if by_pid is not None:
                samples = by_pid.get(pid, [])
                utilization = sum([v for _, v in samples]) / len(samples) if samples else 0.0
                if not seen:
                    samples = None
            if memory == _NOT_AVAILABLE:  # NVML_VALUE_NOT_AVAILABLE: Windows WDDM, some vGPU profiles
                memory = None
            s.processes.append(ProcessSample(pid, name, memory, utilization, samples=samples))
        if len(names) > _NAMES_KEPT:
            names.clear()
