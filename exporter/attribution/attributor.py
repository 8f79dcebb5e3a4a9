"""Attribution: which pod holds each GPU and MIG instance, and which pod each GPU process runs in.

The kubelet is read on its own short interval by a background thread, never on a scrape, and every
call has a deadline. The sampler asks for the latest state on each tick (`resolve`) and for the pod of
each new PID (`process_pod`, answered from /proc and the kubelet's log links, cached per PID).
"""

from __future__ import annotations

import abc
import logging
import threading
import time
from dataclasses import dataclass, field, replace

from gpulens.core.pods import PodRef
from gpulens.core.status import CollectorStatus, LoopGuard, ProblemLog
from gpulens.exporter.attribution.cgroups import Cgroup, ContainerIndex, read_cgroup
from gpulens.exporter.attribution.kubelet import (
    DEFAULT_RESOURCE_NAMES,
    DEFAULT_SOCKET,
    DeviceRef,
    KubeletError,
    PodResourcesClient,
    parse_device_id,
)
from gpulens.exporter.sources.base import DeviceSample

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AttributionState:
    """The latest word of the kubelet. `known` is False when it could not be read: then nobody
    knows which pods hold which GPUs, which is different from "no pod holds it"."""

    known: bool = False
    allocations: tuple[tuple[DeviceRef, PodRef], ...] = ()
    unknown_format: int = 0  # device IDs in a format gpulens cannot map
    status: CollectorStatus = field(default_factory=CollectorStatus)


@dataclass
class Resolved:
    """Attribution matched against the devices of one sample."""

    pods_by_uuid: dict[str, tuple[PodRef, ...]] | None  # None: unknown (no kubelet)
    unmapped: dict[str, int]  # reason -> device IDs: unknown_format, no_such_device


def resolve(state: AttributionState, devices: list[DeviceSample]) -> Resolved:
    """Which pods hold each device, by uuid."""
    if not state.known:
        return Resolved(None, {})
    by_uuid = {d.uuid: d for d in devices}
    by_gpu = {d.gpu: d for d in devices}
    pods: dict[str, list[PodRef]] = {}
    missing = 0
    for ref, pod in state.allocations:
        device = by_uuid.get(ref.uuid) if ref.uuid else by_gpu.get(ref.gpu) if ref.gpu else None
        if ref.parent_uuid and ref.parent_uuid in by_uuid:
            device = by_gpu.get(f"{by_uuid[ref.parent_uuid].gpu}/gi{ref.gpu_instance_id}")
        if device is None:
            missing += 1
            continue
        holders = pods.setdefault(device.uuid, [])
        if pod not in holders:  # time-sliced replicas of one GPU in one container count once
            holders.append(pod)
    return Resolved(
        {d.uuid: tuple(pods.get(d.uuid, ())) for d in devices},
        {"unknown_format": state.unknown_format, "no_such_device": missing},
    )


class Attribution(abc.ABC):
    """A provider of pod attribution; `name` is its collector label ("" reports no status)."""

    name = ""

    def start(self) -> None:
        """Get ready in the background (load what reading needs), without reading yet."""

    def first_reading(self, timeout: float) -> None:
        """Read now, waiting up to `timeout` seconds so that the first sample has its pods; then refresh
        every interval in the background."""

    def close(self) -> None:
        """Stop refreshing."""

    @abc.abstractmethod
    def state(self) -> AttributionState:
        """The latest allocation state; never blocks."""

    @abc.abstractmethod
    def process_pod(self, pid: int) -> tuple[PodRef | None, str]:
        """(pod, container id) of a host PID; (None, "") when it is not in a container."""


class KubeletAttribution(Attribution):
    """Attribution from the kubelet pod-resources socket, /proc and the kubelet's log links.
    With no socket (bare metal, plain Docker) processes still get their container IDs."""

    def __init__(
        self,
        socket_path: str = DEFAULT_SOCKET,
        resource_names: tuple[str, ...] = DEFAULT_RESOURCE_NAMES,
        refresh_interval: float = 10.0,
        timeout: float = 2.0,
        proc_root: str = "/proc",
        log_root: str = "/var/log",
    ):
        self.client = PodResourcesClient(socket_path, timeout) if socket_path else None
        self.name = "kubelet" if socket_path else ""
        self.resource_names = resource_names
        self.refresh_interval = refresh_interval
        self.proc_root = proc_root
        self.index = ContainerIndex(log_root)
        self._state = AttributionState()
        self._pids: dict[int, Cgroup] = {}
        self._problems = ProblemLog(log)
        self._guard = LoopGuard(log, "reading the kubelet's pod resources")
        self._stop = threading.Event()
        self._read = threading.Event()  # set by first_reading(): the thread may read
        self._first_reading = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        # The client's code loads while the source starts (loading NVML); the reading itself waits for
        # first_reading(), so an exporter whose source cannot start reports that alone.
        self._thread = threading.Thread(target=self._run, name="gpulens-kubelet", daemon=True)
        self._thread.start()

    def first_reading(self, timeout: float) -> None:
        self._read.set()
        self._first_reading.wait(timeout)

    def close(self) -> None:
        self._stop.set()
        self._read.set()  # a thread still waiting to read ends
        if self.client is not None:
            self.client.close()

    def state(self) -> AttributionState:
        state = self._state
        return replace(state, status=replace(state.status, errors=self._guard.errors))

    def refresh(self) -> None:
        """Read the kubelet and the log links once."""
        started = time.monotonic()
        failures = self._state.status.failures
        self.index.refresh()
        self._pids = {}  # PIDs are reused: look each one up again after every refresh
        if self.client is None:
            return
        try:
            allocations = self.client.list_allocations(self.resource_names)
        except KubeletError as e:
            self._problems.problem("kubelet", f"pod attribution unavailable: {e}; GPUs are served without pod labels")
            self._state = AttributionState(status=CollectorStatus(False, time.monotonic() - started, failures + 1))
            return
        self._problems.resolved("kubelet", "pod attribution restored: the kubelet answers again")
        mapped, unknown = [], 0
        for allocation in allocations:
            ref = parse_device_id(allocation.device_id)
            if ref is None:
                unknown += 1
                self._problems.problem(
                    f"id:{allocation.device_id}",
                    f"device ID {allocation.device_id!r} of resource {allocation.resource_name} "
                    f"(pod {allocation.pod.namespace}/{allocation.pod.pod}) is in a format "
                    "gpulens does not know; that GPU is served without its pod",
                )
                continue
            mapped.append((ref, allocation.pod))
        self._state = AttributionState(
            True, tuple(mapped), unknown, CollectorStatus(True, time.monotonic() - started, failures)
        )

    def _run(self) -> None:
        if self.client is not None:
            self.client.prepare()
        self._read.wait()
        if self._stop.is_set():
            return
        self._guard.call(self.refresh)
        self._first_reading.set()
        while not self._stop.wait(self._guard.delay(self.refresh_interval)):
            self._guard.call(self.refresh)

    def process_pod(self, pid: int) -> tuple[PodRef | None, str]:
        cgroup = self._pids.get(pid)
        if cgroup is None:
            cgroup = self._pids[pid] = read_cgroup(self.proc_root, pid)
        return self.index.pod_of(cgroup), cgroup.container_id
