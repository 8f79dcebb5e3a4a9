"""What every GPU source produces: one NodeSample per sampler tick.

A source (NVML, simulated, later DCGM) turns hardware state into plain data here. It never touches
prometheus_client: rendering is the collector's job, time integration the sampler's.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

from gpulens.core import metrics as m
from gpulens.core.pods import PodRef
from gpulens.core.status import CollectorStatus
from gpulens.core.topology import Pair

Labels = tuple[str, ...]


class SourceUnavailable(Exception):
    """The source cannot start at all (no driver, no library). The message is shown to the user
    as is, so it names the problem and the fix."""


@dataclass(slots=True)
class ProcessSample:
    """A compute process on a device. `utilization` is its SM share (ratio) or None where the
    driver does not report per-process utilization (MIG, old drivers). `pod` and `container_id`
    are filled in by attribution (or by the simulator, which knows)."""

    pid: int
    command: str
    memory_used_bytes: float | None
    utilization: float | None
    pod: PodRef | None = None
    container_id: str = ""
    #: The driver's per-process samples since the last read: (unix seconds, SM share 0-1), oldest first;
    #: None where the source has none (the sampler then takes `utilization` once per tick).
    samples: list[tuple[float, float]] | None = None


@dataclass(slots=True)
class DeviceSample:
    """One full GPU or MIG instance at one instant.

    `gpu` is the locator label ("0", or "0/gi3" for a MIG instance), `uuid` the stable identity.
    `values` maps each metric spec to {extra label values: value}; plain per-device metrics use the
    empty tuple. Unsupported metrics are simply absent.
    """

    gpu: str
    uuid: str
    model: str = ""
    pci_bus_id: str = ""
    mig_mode: str = "disabled"  # "enabled" | "disabled" | "instance" (this device is a MIG instance)
    mig_profile: str = ""
    parent_uuid: str = ""
    up: bool = True
    values: dict[m.MetricSpec, dict[Labels, float]] = field(default_factory=dict)
    processes: list[ProcessSample] = field(default_factory=list)
    clock_event_reasons: int | None = None
    #: Whether the source counts this GPU's XID events (NVML's event watcher, the simulator): then a GPU
    #: without gpulens_gpu_xid_errors_total counts had none, rather than none known.
    xids_watched: bool = False
    #: Every activity sample the driver kept since the last read: (unix seconds, activity 0-1), oldest
    #: first, at the driver's own rate (nvmlDeviceGetSamples). None where the driver keeps none: the
    #: sampler then takes activity() once per tick.
    activity_samples: list[tuple[float, float]] | None = None
    # Which source fed a metric, where it is not the node's main source (DCGM filling NVML's gaps).
    sources: dict[m.MetricSpec, str] = field(default_factory=dict)

    def set(self, spec: m.MetricSpec, value: float | None, *extra_labels: str) -> None:
        """Record a value; None (not supported, not available) records nothing."""
        if value is not None:
            by_labels = self.values.get(spec)
            if by_labels is None:
                self.values[spec] = {extra_labels: float(value)}
            else:
                by_labels[extra_labels] = float(value)

    def get(self, spec: m.MetricSpec, *extra_labels: str) -> float | None:
        return self.values.get(spec, {}).get(extra_labels)

    def activity(self) -> float | None:
        """The best available "is a kernel running" ratio: NVML utilization on full GPUs, the
        graphics-engine activity on MIG instances (where NVML utilization is not supported), SM
        activity as a last resort. None if the device reports none of them."""
        for spec in (m.UTILIZATION, m.GRAPHICS_ENGINE_ACTIVE, m.SM_ACTIVE):
            value = self.get(spec)
            if value is not None:
                return value
        return None


@dataclass
class NodeSample:
    """Everything one source saw on this node in one tick."""

    devices: list[DeviceSample]
    driver_version: str = ""
    nvml_version: str = ""
    #: How each ordered pair of full GPUs connects (core/topology.py).
    topology: list[Pair] = field(default_factory=list)


class Source(abc.ABC):
    """A GPU source. `name` is the collector label in gpulens_exporter_collector_* series."""

    name = "source"

    def start(self) -> None:
        """Connect to the hardware. Raise SourceUnavailable if it cannot work at all."""

    @abc.abstractmethod
    def sample(self) -> NodeSample:
        """Read every device once. Per-device failures are reported as DeviceSample.up = False;
        an exception here means the whole source failed this tick."""

    def close(self) -> None:
        """Release the hardware."""

    def statuses(self) -> dict[str, CollectorStatus]:
        """Status of helper collectors the source runs itself (a DCGM fetcher beside NVML)."""
        return {}

    def loop_errors(self) -> int:
        """Unexpected errors (bugs) in the source's own background loops (the XID watcher), counted
        with its collector's."""
        return 0
