"""What the NVML source and its collectors share: a discovered device, and what a collector is.

A collector is one NVML read group that can be switched off (`--no-collector.NAME`), as node_exporter's
are: its switch, what it learns at discovery and what it reads each tick live in its own module
(processes.py, nvlink.py, gpm.py, xid.py, topology.py), and every hook runs inside the collector's timing
(NvmlCalls.collector), so its failures and duration are its own gpulens_exporter_collector_* series.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from gpulens.core import metrics as m
from gpulens.exporter.sources.base import DeviceSample, NodeSample
from gpulens.exporter.sources.nvml.buffers import DeviceBuffers
from gpulens.exporter.sources.nvml.calls import NvmlCalls

#: One plain board read: the spec it feeds, the pynvml function, its arguments after the device handle, the
#: factor to base units, and the spec's extra label values.
BoardRead = tuple[m.MetricSpec, Any, tuple[Any, ...], float, tuple[str, ...]]


@dataclass
class Device:
    """A full GPU or MIG instance as discovered, with what the basic reads keep between ticks."""

    handle: object
    gpu: str
    uuid: str
    model: str
    #: Where the array answers of this device's per-tick reads land (buffers.py).
    buffers: DeviceBuffers
    pci_bus_id: str = ""
    mig_mode: str = "disabled"
    mig_profile: str = ""
    parent_uuid: str = ""
    parent_handle: object = None
    gpu_instance_id: int | None = None
    #: Kept from an enumeration before, as the same object: the driver could not open the GPU this time
    #: (lost), so nothing is learnt of it again; collectors keep what they learnt of it then.
    kept: bool = False
    #: nvmlDeviceGetSamples lastSeenTimeStamp (us) per sampling type; absent until the first read.
    samples_seen: dict[int, int] = field(default_factory=dict)
    samples_unsupported: set[int] = field(default_factory=set)  # sampling types the driver refused
    utilization: float | None = None  # the newest utilization sample seen (ratio), for the gauge
    memory_utilization: float | None = None
    #: The field ids read every tick in one nvmlDeviceGetFieldValues: the counters first (PCIe, and what
    #: collectors add at discovery: NVLink's), then what collectors read themselves (NVLink's link states).
    board_fields: list = field(default_factory=list)
    #: What the counter fields (the first of board_fields) feed: spec, factor to base units, extra labels.
    counter_fields: list[tuple[m.MetricSpec, float, tuple[str, ...]]] = field(default_factory=list)
    #: This tick's (nvmlReturn, value) answers to board_fields past the counters, for the collector that
    #: added them; None where the read failed this tick.
    field_answers: list[tuple[int, int]] | None = None
    #: The plain board reads (NvmlSource._board_reads), less those the GPU refused since discovery.
    board_reads: list[BoardRead] = field(default_factory=list)
    #: The board's maxima (PCIe generation and width, SM clock), read at discovery, in base units.
    limits: dict[m.MetricSpec, float] = field(default_factory=dict)

    @property
    def is_board(self) -> bool:
        """A physical GPU that answers (not a MIG instance, not one lost before discovery): it has links,
        clocks, power and errors of its own."""
        return self.handle is not None and self.mig_mode != "instance"

    def carry_over(self, previous: Device) -> None:
        """Keep what the driver's sample buffers were last read up to, across a rediscovery."""
        self.samples_seen = previous.samples_seen
        self.samples_unsupported = previous.samples_unsupported
        self.utilization, self.memory_utilization = previous.utilization, previous.memory_utilization


class Collector:
    """One switchable NVML read group (see the module docstring). Subclasses set `name` (the
    `--collector.NAME` flag and the `collector` label) and `help`, and override the hooks they need."""

    name: ClassVar[str]
    #: What it reads, for `--collector.NAME`'s help.
    help: ClassVar[str]

    def __init__(self, nvml: Any, calls: NvmlCalls):
        self.nvml = nvml
        self.calls = calls

    def discovered(self, devices: list[Device]) -> None:
        """After each enumeration (at the start and at every rediscovery), with every device: those
        without a handle are GPUs no longer enumerated, and those `kept` GPUs the driver could not open
        (their calls would answer GPU_IS_LOST: ask them nothing)."""

    def read(self, d: Device, s: DeviceSample) -> None:
        """Each tick, for each device that has a handle, after the basic reads."""

    def finish(self, node: NodeSample) -> None:
        """Each tick, after every device: what the collector adds for the node."""

    def loop_errors(self) -> int:
        """Failures of a background loop the collector runs, for gpulens_exporter_loop_errors_total."""
        return 0

    def close(self) -> None:
        """The exporter stops: release what the collector holds in the driver."""

    def call(self, d: Device, fn: Any, *args: Any) -> Any:
        """A read of device `d` through the choke point: its value, or None where unsupported or failing
        this tick; DeviceLost raised where the GPU fell off the bus."""
        return self.calls.call(fn, *args, device=d.gpu)
