"""The simulated source: one node of a simulated fleet, served as if NVML read it.

The workloads (gpulens.simulator) say what each GPU does at each instant; this adapter turns that
into the exporter's NodeSample, integrating the hardware counters (PCIe, NVLink, energy, XIDs) from
their rates as the driver would, and plays the node's kubelet: its pod-resources answer
(SimulatedAttribution) and its cAdvisor endpoint (pod CPU, for the analyzer's data-starvation evidence).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

from gpulens.core import metrics as m
from gpulens.core.catalog import MIB
from gpulens.core.pods import PodRef
from gpulens.core.status import CollectorStatus
from gpulens.exporter.attribution.attributor import Attribution, AttributionState
from gpulens.exporter.attribution.kubelet import DeviceRef
from gpulens.exporter.sources.base import DeviceSample, NodeSample, ProcessSample, Source
from gpulens.simulator.fleet import CPU_LIMIT_CORES, SimNode
from gpulens.simulator.workloads import PROFILES, Activity, SimGpu

#: The profile of a GPU no pod holds: what a GPU shows once its pod ended.
UNALLOCATED = "unallocated"

#: Seconds between the simulated driver's utilization samples (NVML: 1/6 s to 1 s by product; data-centre
#: GPUs sample at the fast end), in simulated time.
DRIVER_SAMPLE_SECONDS = 1 / 6
#: The driver keeps this many samples; older ones are gone if nobody reads them in time.
DRIVER_SAMPLE_RING = 120
#: gpulens_gpu_nvlink_errors_total's types <- the simulated error counters (the simulator counts CRC errors
#: as flit errors, as links mostly report them).
_NVLINK_ERRORS = {"crc_flit": "crc", "crc_data": "", "replay": "replay", "recovery": "recovery"}


class SimulatedSource(Source):
    """Serves one simulated node as if it were NVML on that node, with the driver's utilization
    samples (nvmlDeviceGetSamples) every DRIVER_SAMPLE_SECONDS of simulated time."""

    name = "simulated"

    def __init__(self, node: SimNode, clock: Callable[[], float] = time.time, speed: float = 1.0):
        """`speed` runs the workloads faster than real time (speed 10: ten simulated seconds per
        second), so that slow signatures such as a memory-fragmentation cycle show within a minute."""
        self.node = node
        self.speed = speed
        self._real_clock = clock
        self._started = clock()
        for g in node.gpus:  # the fleet's pods run, and their traffic changes, counted from now
            g.started = self._started
        self._last: float | None = None
        self._sampled_until: float | None = None  # simulated time of the last driver sample taken
        # Cumulative hardware counters the simulator integrates from rates, per GPU index.
        self._counters = {
            g.index: dict.fromkeys(
                ("pcie_tx", "pcie_rx", "nvlink_tx", "nvlink_rx", "energy", "xid", "crc", "replay", "recovery"), 0.0
            )
            for g in node.gpus
        }
        # CPU seconds used by each pod's container, integrated from its first GPU's workload.
        self._cpu_seconds = {g.pod: 0.0 for g in node.gpus if g.pod is not None and g.role == 0}

    def clock(self) -> float:
        """Simulated time: real time, sped up by `speed` from the moment the source was made."""
        real = self._real_clock()
        return self._started + (real - self._started) * self.speed

    def sample(self) -> NodeSample:
        now = self.clock()
        elapsed = 1.0 if self._last is None else max(now - self._last, 1e-3)
        self._last = now
        window = min(elapsed, 1.0)  # NVML averages over at most ~1 s
        sample_times = self._driver_sample_times(now)
        devices = []
        for g in self.node.gpus:
            running = g.running(now)
            profile = g.profile if running or g.pod is None else UNALLOCATED  # a pod that ended leaves its GPU
            activity = PROFILES[profile](g, now, window)
            if running and g.pod is not None and g.role == 0:
                self._cpu_seconds[g.pod] += activity.cpu_fraction * CPU_LIMIT_CORES * elapsed / self.speed
            device = self._device(g, activity, elapsed)
            if g.mig:
                devices.extend(_mig_split(g, device))
                continue
            if device.up:
                device.activity_samples = [
                    (self._real_time(t), round(PROFILES[profile](g, t, DRIVER_SAMPLE_SECONDS).busy, 2))
                    for t in sample_times
                ]
                for process in device.processes:
                    process.samples = device.activity_samples
            devices.append(device)
        topology = [(a.uuid, b.uuid, *a.connection(b)) for a in self.node.gpus for b in self.node.gpus if a is not b]
        return NodeSample(devices, driver_version="550.90.07", nvml_version="12.550.90.07", topology=topology)

    def _driver_sample_times(self, now: float) -> list[float]:
        """Simulated times of the driver samples taken since the last read (none on the first read, as
        the exporter ignores what the driver kept before it started)."""
        if self._sampled_until is None:
            self._sampled_until = now
            return []
        count = int((now - self._sampled_until) / DRIVER_SAMPLE_SECONDS + 1e-9)
        times = [self._sampled_until + (k + 1) * DRIVER_SAMPLE_SECONDS for k in range(count)]
        if times:
            self._sampled_until = times[-1]
        return times[-DRIVER_SAMPLE_RING:]

    def _real_time(self, simulated: float) -> float:
        """The real clock's time at a simulated time: what the driver stamps its samples with."""
        return self._started + (simulated - self._started) / self.speed

    def _device(self, g: SimGpu, a: Activity, elapsed: float) -> DeviceSample:
        model = g.model
        d = DeviceSample(
            gpu=str(g.index),
            uuid=g.uuid,
            model=model.name,
            pci_bus_id=f"00000000:{0x18 + 0x10 * g.index:02X}:00.0",
            up=not a.lost,
        )
        if a.lost:
            return d
        c = self._counters[g.index]
        power = model.idle_power_watts + a.power_fraction * (model.power_limit_watts - model.idle_power_watts)
        for key, rate in (
            ("pcie_tx", a.pcie_tx),
            ("pcie_rx", a.pcie_rx),
            ("nvlink_tx", a.nvlink_tx),
            ("nvlink_rx", a.nvlink_rx),
            ("energy", power),
            ("xid", a.xid_rate),
            ("crc", a.nvlink_crc_rate),
            ("replay", a.nvlink_replay_rate),
            ("recovery", a.nvlink_recovery_rate),
        ):
            c[key] += rate * elapsed
        usable = model.memory_total_bytes - model.memory_reserved_bytes
        memory_used = round(a.memory_fraction * usable) if a.memory_fraction else 1 * MIB
        d.set(m.UTILIZATION, round(a.busy, 2))  # NVML reports whole percent
        d.set(m.MEMORY_CONTROLLER_UTILIZATION, round(a.dram * 0.9, 2))
        if g.profiling:
            for spec, value in (
                (m.GRAPHICS_ENGINE_ACTIVE, a.busy),
                (m.SM_ACTIVE, a.sm_active),
                (m.SM_OCCUPANCY, a.sm_occupancy),
                (m.TENSOR_ACTIVE, a.tensor),
                (m.DRAM_ACTIVE, a.dram),
                (m.FP16_ACTIVE, a.fp16),
                (m.FP32_ACTIVE, a.fp32),
                (m.FP64_ACTIVE, a.fp64),
            ):
                d.set(spec, round(min(max(value, 0.0), 1.0), 4))
        d.set(m.MEMORY_USED, memory_used)
        d.set(m.MEMORY_TOTAL, model.memory_total_bytes)
        d.set(m.MEMORY_RESERVED, model.memory_reserved_bytes)
        d.set(m.PCIE_TRANSMIT, int(c["pcie_tx"]))
        d.set(m.PCIE_RECEIVE, int(c["pcie_rx"]))
        if model.nvlink_links:
            d.set(m.NVLINK_TRANSMIT, int(c["nvlink_tx"]) // 1024 * 1024)  # NVML counts KiB
            d.set(m.NVLINK_RECEIVE, int(c["nvlink_rx"]) // 1024 * 1024)
        d.set(m.NVLINK_LINKS, model.nvlink_links)
        if model.nvlink_links:
            d.set(m.NVLINK_LINKS_DOWN, a.nvlink_links_down)
            for kind, counter in _NVLINK_ERRORS.items():
                d.set(m.NVLINK_ERRORS, int(c[counter]) if counter else 0, kind)
        d.set(m.PCIE_LINK_GENERATION, model.pcie_generation)
        d.set(m.PCIE_LINK_MAX_GENERATION, model.pcie_generation)
        d.set(m.PCIE_LINK_WIDTH, model.pcie_width)
        d.set(m.PCIE_LINK_MAX_WIDTH, model.pcie_width)
        d.set(m.SM_CLOCK, round(model.sm_clock_max_mhz * a.clock_fraction) * 1e6)
        d.set(m.SM_CLOCK_MAX, model.sm_clock_max_mhz * 1e6)
        d.set(m.MEMORY_CLOCK, model.memory_clock_mhz * 1e6)
        d.set(m.POWER, round(power, 3))
        d.set(m.POWER_LIMIT, model.power_limit_watts)
        d.set(m.ENERGY, round(c["energy"], 3))
        d.set(m.TEMPERATURE, round(a.temperature_celsius))
        d.clock_event_reasons = a.reasons
        for kind in ("corrected", "uncorrected"):
            d.set(m.ECC_ERRORS, 0, kind)
        for cause in ("correctable", "uncorrectable"):
            d.set(m.REMAPPED_ROWS, 0, cause)
        d.xids_watched = True
        if a.xid:
            d.set(m.XID_ERRORS, int(c["xid"] + 1e-9), str(a.xid))  # 30 x (1/30) is 9.999...
        d.set(m.ROW_REMAP_PENDING, 0)
        d.set(m.ROW_REMAP_FAILED, 0)
        if a.process:
            d.processes.append(
                ProcessSample(
                    pid=g.base_pid + a.restarts,
                    command="python3",
                    memory_used_bytes=memory_used,
                    utilization=round(a.busy, 2),
                    pod=g.pod,
                    container_id=f"{g.uuid[4:12]}{a.restarts:056x}",
                )
            )
        return d

    def cadvisor_text(self) -> tuple[int, str, bytes]:
        """What the node's kubelet serves on /metrics/cadvisor for the simulated pods' containers:
        CPU seconds used (in real seconds, whatever --simulate.speed is) and the CFS quota that a
        CPU limit of CPU_LIMIT_CORES sets. Served by the simulated exporter on the same path."""
        lines = [
            "# HELP container_cpu_usage_seconds_total Cumulative cpu time consumed in seconds.",
            "# TYPE container_cpu_usage_seconds_total counter",
        ]
        now = self.clock()
        running = {g.pod for g in self.node.gpus if g.role == 0 and g.running(now)}
        series = [
            (pod, f'container="{pod.container}",namespace="{pod.namespace}",pod="{pod.pod}"')
            for pod in self._cpu_seconds
            if pod in running  # a pod that ended has no container left to measure
        ]
        lines += [
            f"container_cpu_usage_seconds_total{{{labels}}} {self._cpu_seconds[pod]:.3f}" for pod, labels in series
        ]
        for name, help_, value in (
            ("container_spec_cpu_quota", "CPU quota of the container.", CPU_LIMIT_CORES * 100000),
            ("container_spec_cpu_period", "CPU period of the container.", 100000),
        ):
            lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge"]
            lines += [f"{name}{{{labels}}} {value:.0f}" for _, labels in series]
        return 200, "text/plain; version=0.0.4; charset=utf-8", ("\n".join(lines) + "\n").encode()


#: What a MIG instance reports of its own, as NVML does: GPM's activity on Hopper (over the instance's share of the
#: GPU), its memory, its processes. Its GPU keeps the rest (power, clocks, temperature, PCIe, NVLink). Neither has
#: NVML's utilization: MIG has none.
_ACTIVITY_SPECS = (
    m.GRAPHICS_ENGINE_ACTIVE,
    m.SM_ACTIVE,
    m.SM_OCCUPANCY,
    m.TENSOR_ACTIVE,
    m.DRAM_ACTIVE,
    m.FP16_ACTIVE,
    m.FP32_ACTIVE,
    m.FP64_ACTIVE,
)
_INSTANCE_SPECS = (*_ACTIVITY_SPECS, m.MEMORY_USED, m.MEMORY_TOTAL, m.MEMORY_RESERVED)


def _mig_split(g: SimGpu, whole: DeviceSample) -> list[DeviceSample]:
    """A MIG-enabled GPU as NVML shows it: the GPU ("enabled") and its one instance ("<index>/gi1"), which the
    pod holds. The instance does the workload's work in its share of the GPU: its activity is the whole GPU's
    over that share (at most 1), its memory the profile's."""
    profile = next(p for p in g.model.mig_profiles if p.name == g.mig)
    parent = DeviceSample(
        gpu=whole.gpu, uuid=whole.uuid, model=whole.model, pci_bus_id=whole.pci_bus_id, mig_mode="enabled", up=whole.up
    )
    instance = DeviceSample(
        gpu=f"{whole.gpu}/gi1",
        uuid=g.mig_uuid,
        model=whole.model,
        pci_bus_id=whole.pci_bus_id,
        mig_mode="instance",
        mig_profile=g.mig,
        parent_uuid=whole.uuid,
        up=whole.up,
    )
    if not whole.up:
        return [parent, instance]
    for spec, by_labels in whole.values.items():
        if spec in (m.UTILIZATION, m.MEMORY_CONTROLLER_UTILIZATION):
            continue
        target = instance if spec in _INSTANCE_SPECS else parent
        target.values[spec] = dict(by_labels)
    for spec in _ACTIVITY_SPECS:
        if spec in instance.values:
            instance.values[spec] = {
                k: round(min(v / profile.compute_share, 1.0), 4) for k, v in instance.values[spec].items()
            }
    instance.set(m.MEMORY_TOTAL, profile.memory_bytes)
    instance.set(m.MEMORY_RESERVED, 0)
    parent.clock_event_reasons = whole.clock_event_reasons
    parent.xids_watched = whole.xids_watched
    # NVML has no per-process utilization on a MIG instance: its processes name their memory only.
    instance.processes = [replace(p, utilization=None) for p in whole.processes]
    return [parent, instance]


class SimulatedAttribution(Attribution):
    """Plays the kubelet of a simulated node: the pods of the fleet file hold their GPUs while they run, and a
    moment after (SimGpu.allocated; `clock`: the simulated time, SimulatedSource.clock; without one, every pod
    runs)."""

    name = "kubelet"

    def __init__(self, node: SimNode, clock: Callable[[], float] | None = None):
        self.node = node
        self._clock = clock

    def state(self) -> AttributionState:
        now = self._clock() if self._clock is not None else None
        allocations = tuple(
            (DeviceRef(uuid=g.held_uuid), g.pod)
            for g in self.node.gpus
            if g.pod is not None and (now is None or g.allocated(now))
        )
        return AttributionState(True, allocations, 0, CollectorStatus(True, 0.0, 0))

    def process_pod(self, pid: int) -> tuple[PodRef | None, str]:
        return None, ""  # the simulated source puts its processes in their pods itself
