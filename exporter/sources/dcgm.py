"""The DCGM source: reads this node's dcgm-exporter over HTTP and feeds its fields to the sampler.

On GPUs before Hopper, DCGM is the only source of SM activity, occupancy, tensor and DRAM activity.
dcgm-exporter is fetched on its own thread (a slow endpoint never delays NVML sampling) and parsed
by gpulens.core.dcgm. Alone (`--source dcgm`) or filling what NVML lacks (`--dcgm.url`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import requests

from gpulens.core import metrics as m
from gpulens.core.config import redact
from gpulens.core.dcgm import DcgmDevice, devices_from_rows, parse_exposition
from gpulens.core.pods import PodRef
from gpulens.core.status import CollectorStatus, LoopGuard, ProblemLog
from gpulens.exporter.attribution.attributor import Attribution, AttributionState
from gpulens.exporter.attribution.kubelet import DeviceRef
from gpulens.exporter.sources.base import DeviceSample, NodeSample, Source, SourceUnavailable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DcgmReading:
    """The latest good scrape, with cumulative counters integrated from its rate fields."""

    devices: dict[tuple[str, int | None], DcgmDevice]
    fetched_at: float  # time.monotonic()
    counters: dict[tuple[str, int | None, m.MetricSpec], float]  # integrated bytes from rate fields


class DcgmFetcher:
    """Fetches dcgm-exporter every `interval` seconds on a background thread, with one keep-alive
    session. Values older than `max_age` seconds are not served: a dcgm-exporter that stopped
    answering must not look like a GPU frozen at its last reading."""

    name = "dcgm"

    def __init__(
        self,
        url: str,
        interval: float = 5.0,
        timeout: float = 2.0,
        max_age: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.url = url
        self.shown_url = redact(url)  # for logs: a URL may carry credentials
        self.interval = interval
        self.timeout = timeout
        self.max_age = max_age if max_age is not None else 3 * interval
        self.clock = clock
        self.session = requests.Session()
        self.status = CollectorStatus()
        self._reading: DcgmReading | None = None
        self._counters: dict[tuple[str, int | None, m.MetricSpec], float] = {}
        self._problems = ProblemLog(log)
        self._guard = LoopGuard(log, f"reading dcgm-exporter at {self.shown_url}")
        self._stop = threading.Event()

    def fetch(self) -> None:
        """One scrape of dcgm-exporter; on failure the previous reading stays until it ages out."""
        started = self.clock()
        try:
            response = self.session.get(self.url, timeout=self.timeout)
            if response.status_code != 200:
                raise ValueError(f"HTTP {response.status_code}")
            parsed = parse_exposition(response.text)
            if not parsed.rows:
                kind = response.headers.get("Content-Type", "no Content-Type")
                raise ValueError(
                    f"no DCGM metrics in the answer ({kind}, {len(response.content)} bytes): "
                    "is this dcgm-exporter's /metrics?"
                )
            devices = devices_from_rows(parsed.rows)
        except (requests.RequestException, ValueError) as e:
            reason = "timed out" if isinstance(e, requests.Timeout) else str(e)
            self.status = replace(
                self.status, success=False, duration_seconds=self.clock() - started, failures=self.status.failures + 1
            )
            self._problems.problem(
                "fetch",
                f"cannot read dcgm-exporter at {self.shown_url}: {redact(reason)}; DCGM fields age out, "
                "NVML fields are unaffected",
            )
            return
        now = self.clock()
        previous = self._reading
        if previous is not None:
            elapsed = now - previous.fetched_at
            # Each rate value is the average over dcgm-exporter's last collect interval; weight it by
            # the time since the previous reading, skipping gaps after an outage.
            if elapsed <= self.max_age:
                for device in devices.values():
                    for spec, rate in device.rates.items():
                        counter = (device.uuid, device.gpu_instance_id, spec)
                        self._counters[counter] = self._counters.get(counter, 0.0) + rate * elapsed
        for device in devices.values():
            for spec in device.rates:
                self._counters.setdefault((device.uuid, device.gpu_instance_id, spec), 0.0)
        self._reading = DcgmReading(devices, now, dict(self._counters))
        self.status = replace(self.status, success=True, duration_seconds=now - started)
        if parsed.unusable or parsed.unparsable or parsed.duplicates:
            log.debug(
                "dcgm-exporter %s: %d unusable values, %d unparsable lines, %d duplicates dropped",
                self.shown_url,
                parsed.unusable,
                parsed.unparsable,
                parsed.duplicates,
            )
        self._problems.resolved("fetch", f"dcgm-exporter at {self.shown_url} answers again")

    def reading(self) -> DcgmReading | None:
        """The latest reading, or None when there is none younger than max_age."""
        reading = self._reading
        if reading is None or self.clock() - reading.fetched_at > self.max_age:
            return None
        return reading

    def start(self) -> None:
        self._step()
        threading.Thread(target=self._run, name="gpulens-dcgm", daemon=True).start()

    def _step(self) -> None:
        if not self._guard.call(self.fetch):
            self.status = replace(self.status, success=False, errors=self._guard.errors)

    def _run(self) -> None:
        while not self._stop.wait(self._guard.delay(self.interval)):
            self._step()

    def close(self) -> None:
        self._stop.set()
        self.session.close()


def apply(reading: DcgmReading, dcgm: DcgmDevice, sample: DeviceSample) -> None:
    """Fill what `sample` lacks from DCGM: the better source already there wins, and every value
    taken is marked as DCGM's."""
    for (spec, extra), value in dcgm.values.items():
        if sample.get(spec, *extra) is None:
            sample.set(spec, value, *extra)
            sample.sources[spec] = "dcgm"
    for spec in dcgm.rates:
        if sample.get(spec) is None:
            sample.set(spec, reading.counters.get((dcgm.uuid, dcgm.gpu_instance_id, spec), 0.0))
            sample.sources[spec] = "dcgm"
    if sample.clock_event_reasons is None and dcgm.clock_event_reasons is not None:
        sample.clock_event_reasons = dcgm.clock_event_reasons
        sample.sources[m.CLOCK_EVENT_ACTIVE] = "dcgm"


class MergedSource(Source):
    """NVML first, DCGM for what NVML lacks on the same GPU (profiling fields on GPUs without GPM),
    matched by GPU UUID (MIG instances by parent UUID and GPU instance id), never exported twice."""

    def __init__(self, nvml: Source, fetcher: DcgmFetcher):
        self.nvml = nvml
        self.fetcher = fetcher
        self.name = nvml.name

    def start(self) -> None:
        self.nvml.start()
        self.fetcher.start()

    def close(self) -> None:
        self.fetcher.close()
        self.nvml.close()

    def sample(self) -> NodeSample:
        node = self.nvml.sample()
        reading = self.fetcher.reading()
        if reading is None:
            return node
        for d in node.devices:
            if not d.up:
                continue
            if d.mig_mode == "instance":
                gi = int(d.gpu.rpartition("/gi")[2])
                dcgm = reading.devices.get((d.parent_uuid, gi))
            else:
                dcgm = reading.devices.get((d.uuid, None))
            if dcgm is not None:
                apply(reading, dcgm, d)
        return node

    def statuses(self) -> dict[str, CollectorStatus]:
        return {**self.nvml.statuses(), self.fetcher.name: self.fetcher.status}

    def loop_errors(self) -> int:
        return self.nvml.loop_errors()


class DcgmSource(Source):
    """dcgm-exporter alone, for nodes where gpulens cannot load NVML itself. MIG instances have no
    UUID of their own in dcgm-exporter's output: they are named `<GPU UUID>/gi<id>`."""

    name = "dcgm"

    def __init__(self, fetcher: DcgmFetcher):
        self.fetcher = fetcher

    def start(self) -> None:
        self.fetcher.start()
        if self.fetcher.reading() is None:
            self.fetcher.close()
            raise SourceUnavailable(
                f"cannot read dcgm-exporter at {self.fetcher.url}: check --dcgm.url and that "
                "dcgm-exporter runs on this node (the log line above says why)"
            )

    def close(self) -> None:
        self.fetcher.close()

    def sample(self) -> NodeSample:
        reading = self.fetcher.reading()
        if reading is None:
            raise RuntimeError(
                f"no reading of dcgm-exporter at {self.fetcher.url} younger than {self.fetcher.max_age:g} s"
            )
        devices: list[DeviceSample] = []
        parents = {uuid for uuid, gi in reading.devices if gi is not None}
        for (uuid, gi), dcgm in sorted(reading.devices.items(), key=lambda kv: (kv[1].gpu, kv[0][1] or -1)):
            sample = DeviceSample(
                gpu=dcgm.gpu,
                uuid=uuid if gi is None else f"{uuid}/gi{gi}",
                model=dcgm.model,
                pci_bus_id=dcgm.pci_bus_id,
                mig_mode="instance" if gi is not None else "enabled" if uuid in parents else "disabled",
                mig_profile=dcgm.mig_profile,
                parent_uuid=uuid if gi is not None else "",
            )
            apply(reading, dcgm, sample)
            devices.append(sample)
        return NodeSample(devices)


class DcgmAttribution(Attribution):
    """Pods as dcgm-exporter labelled them (pod/namespace/container, or exported_* when Prometheus
    renamed them), for --source=dcgm without a kubelet socket of our own."""

    name = ""

    def __init__(self, fetcher: DcgmFetcher):
        self.fetcher = fetcher

    def state(self) -> AttributionState:
        reading = self.fetcher.reading()
        if reading is None:
            return AttributionState()
        allocations = tuple(
            (DeviceRef(uuid=uuid if gi is None else f"{uuid}/gi{gi}"), d.pod)
            for (uuid, gi), d in reading.devices.items()
            if d.pod is not None
        )
        return AttributionState(True, allocations, 0, self.fetcher.status)

    def process_pod(self, pid: int) -> tuple[PodRef | None, str]:
        return None, ""  # dcgm-exporter reports no processes
