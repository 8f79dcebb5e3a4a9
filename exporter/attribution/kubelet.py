"""Which pod holds which GPU, from the kubelet's pod-resources API on its unix socket.

The kubelet knows which device IDs its device plugins handed to which container. The IDs depend on
the plugin and its strategy, so they are mapped to gpulens devices here:

    GPU-<uuid>                 NVIDIA device plugin, whole GPU          -> uuid
    GPU-<uuid>::<n>            time-sliced replica n of that GPU        -> uuid
    MIG-<uuid>                 a MIG instance (driver 470+ UUIDs)       -> uuid
    MIG-GPU-<uuid>/<gi>/<ci>   a MIG instance, pre-470 style            -> parent uuid + GPU instance
    nvidia<i>                  GKE's plugin, whole GPU                  -> gpu index
    nvidia<i>/gi<g>            GKE's plugin, a MIG instance             -> "<i>/gi<g>"
    nvidia<i>/vgpu<n>          GKE's plugin, a time-shared replica      -> gpu index
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

import grpc

from gpulens.core.pods import PodRef
from gpulens.exporter.attribution import podresources_pb2 as pb
from gpulens.exporter.attribution import podresources_pb2_grpc as pb_grpc

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_RESOURCE_NAMES = ("nvidia.com/gpu", "nvidia.com/mig-*")


@dataclass(frozen=True)
class DeviceRef:
    """A device as a device plugin names it: by `uuid` (GPU-/MIG- UUID), or by `gpu` locator
    ("0", "0/gi3"), or by parent uuid plus MIG GPU instance id."""

    uuid: str = ""
    gpu: str = ""
    parent_uuid: str = ""
    gpu_instance_id: int | None = None


_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
_PATTERNS = [
    (re.compile(rf"^(GPU-{_UUID})(?:::\d+)?$"), lambda m: DeviceRef(uuid=m.group(1))),
    (re.compile(rf"^(MIG-{_UUID})$"), lambda m: DeviceRef(uuid=m.group(1))),
    (
        re.compile(rf"^MIG-(GPU-{_UUID})/(\d+)/(\d+)$"),
        lambda m: DeviceRef(parent_uuid=m.group(1), gpu_instance_id=int(m.group(2))),
    ),
    (re.compile(r"^nvidia(\d+)(?:/vgpu\d+)?$"), lambda m: DeviceRef(gpu=m.group(1))),
    (re.compile(r"^nvidia(\d+)/gi(\d+)$"), lambda m: DeviceRef(gpu=f"{m.group(1)}/gi{m.group(2)}")),
]


def parse_device_id(device_id: str) -> DeviceRef | None:
    """The device a plugin's device ID names, or None for a format gpulens does not know."""
    for pattern, build in _PATTERNS:
        match = pattern.match(device_id)
        if match:
            return build(match)
    return None


def resource_matches(resource_name: str, patterns: tuple[str, ...]) -> bool:
    """`nvidia.com/mig-1g.10gb` matches `nvidia.com/mig-*`."""
    return any(fnmatchcase(resource_name, p) for p in patterns)


@dataclass(frozen=True)
class Allocation:
    """One device ID the kubelet assigned to one container."""

    pod: PodRef
    resource_name: str
    device_id: str


class KubeletError(Exception):
    """The pod-resources API could not be read; the message says why and what to check."""


class PodResourcesClient:
    """A client of v1.PodResourcesLister over the kubelet's unix socket. Every call has a deadline,
    so a hung kubelet costs at most `timeout` seconds of the refresh thread, never a scrape."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0):
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._stub = pb_grpc.PodResourcesListerStub(self._channel)

    def list_allocations(self, resource_names: tuple[str, ...] = DEFAULT_RESOURCE_NAMES) -> list[Allocation]:
        """Every GPU device ID assigned to a container on this node."""
        try:
            response = self._stub.List(pb.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as e:
            raise KubeletError(self._explain(e)) from e
        allocations: list[Allocation] = []
        for pod in response.pod_resources:
            for container in pod.containers:
                ref = PodRef(pod.namespace, pod.name, container.name)
                for devices in container.devices:
                    if resource_matches(devices.resource_name, resource_names):
                        allocations.extend(Allocation(ref, devices.resource_name, d) for d in devices.device_ids)
        return allocations

    def _explain(self, error: grpc.RpcError) -> str:
        code = error.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"the kubelet did not answer within {self.timeout:g} s on {self.socket_path}"
        if code == grpc.StatusCode.UNAVAILABLE:
            fix = (
                "mount /var/lib/kubelet/pod-resources into the exporter, or set --kubelet.socket "
                "(--kubelet.socket='' outside Kubernetes)"
            )
            if not os.path.exists(self.socket_path):
                return f"the kubelet pod-resources socket {self.socket_path} does not exist; {fix}"
            if not os.access(self.socket_path, os.R_OK | os.W_OK):
                return (
                    f"permission denied on the kubelet pod-resources socket {self.socket_path}; "
                    "run the exporter as root or give it access to the socket"
                )
            return f"cannot reach the kubelet on {self.socket_path} ({error.details()}); {fix}"
        return f"the kubelet pod-resources API failed on {self.socket_path}: {code.name} {error.details()}"

    def close(self) -> None:
        self._channel.close()
