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

import re
import socket
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from fnmatch import fnmatchcase

from gpulens.core.pods import PodRef

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
    so a hung kubelet costs at most `timeout` seconds of the refresh thread, never a scrape.

    One unary gRPC call is an HTTP/2 POST whose body and answer are length-prefixed protobuf messages,
    and whose status comes in the trailers (grpc/doc/PROTOCOL-HTTP2.md). It is made here with h2 (the
    HTTP/2 state machine), and the answer decoded by field number (_allocations), not with grpcio and
    protobuf, whose runtimes hold about 18 MiB of every exporter's memory for this one call every few
    seconds. A connection per call: the kubelet restarts, and a unix socket connects in microseconds.
    The tests' fake kubelet is grpcio's own server with protobuf's generated messages
    (tests/podresources.proto), so the client is held to the real protocol and encoding."""

    #: The method's HTTP/2 path: /<package>.<service>/<method> of api/pod-resources (v1).
    LIST_PATH = "/v1.PodResourcesLister/List"

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0):
        self.socket_path = socket_path
        self.timeout = timeout

    def list_allocations(self, resource_names: tuple[str, ...] = DEFAULT_RESOURCE_NAMES) -> list[Allocation]:
        """Every GPU device ID assigned to a container on this node."""
        answer = self._call(self.LIST_PATH, b"")  # ListPodResourcesRequest has no fields: zero bytes
        try:
            return list(_allocations(answer, resource_names))
        except ValueError as e:  # a malformed message, or names that are not UTF-8
            raise KubeletError(f"the kubelet's answer on {self.socket_path} is not a pod list ({e})") from e

    def prepare(self) -> None:
        """Load the HTTP/2 code the call needs (h2: tens of milliseconds), ahead of the first call."""
        import h2.connection  # noqa: F401

    def _call(self, path: str, request: bytes) -> bytes:
        """One unary call: the answer message's bytes, or KubeletError saying why not."""
        import h2.config
        import h2.connection
        import h2.events
        import h2.exceptions

        deadline = time.monotonic() + self.timeout
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_path)
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
            conn.initiate_connection()
            stream = conn.get_next_available_stream_id()
            conn.send_headers(
                stream,
                [
                    (":method", "POST"),
                    (":scheme", "http"),
                    (":path", path),
                    (":authority", "localhost"),
                    ("content-type", "application/grpc"),
                    ("te", "trailers"),
                ],  # no grpc-timeout: the deadline is this side's, so a late answer reads as one here
            )
            conn.send_data(stream, b"\0" + len(request).to_bytes(4, "big") + request, end_stream=True)
            sock.sendall(conn.data_to_send())
            headers: dict[str, str] = {}
            body = bytearray()
            ended = False
            first = True
            while not ended:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
                data = sock.recv(65536)
                if not data:
                    raise KubeletError(f"the kubelet closed the connection on {self.socket_path} before answering")
                # An HTTP/2 server's first frame is SETTINGS (type 4, RFC 9113 3.4): anything else is
                # another kind of server behind the socket, which h2 would only wait on for more bytes.
                if first and len(data) >= 4 and data[3] != 4:
                    raise KubeletError(
                        f"{self.socket_path} does not speak gRPC over HTTP/2: its answer begins {data[:16]!r}"
                    )
                first = False
                for event in conn.receive_data(data):
                    if isinstance(event, h2.events.ResponseReceived | h2.events.TrailersReceived):
                        headers.update((str(k), str(v)) for k, v in event.headers)
                    elif isinstance(event, h2.events.DataReceived):
                        body += event.data
                        conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
                    elif isinstance(event, h2.events.StreamEnded):
                        ended = True
                    elif isinstance(event, h2.events.StreamReset | h2.events.ConnectionTerminated):
                        what = "reset the call" if isinstance(event, h2.events.StreamReset) else "closed the connection"
                        code = getattr(event.error_code, "name", event.error_code)
                        raise KubeletError(
                            f"the kubelet {what} on {self.socket_path} (HTTP/2 error {code}): "
                            "is it restarting? The next refresh asks again"
                        )
                sock.sendall(conn.data_to_send())
        except TimeoutError as e:
            raise KubeletError(f"the kubelet did not answer within {self.timeout:g} s on {self.socket_path}") from e
        except OSError as e:
            raise KubeletError(self._unreachable(e)) from e
        except h2.exceptions.H2Error as e:
            raise KubeletError(f"{self.socket_path} does not speak gRPC over HTTP/2: {e!r}") from e
        finally:
            sock.close()
        return self._message(headers, bytes(body))

    def _message(self, headers: dict[str, str], body: bytes) -> bytes:
        """The one answer message of a finished call, after its status."""
        status = headers.get("grpc-status")
        if status is None:
            raise KubeletError(
                f"{self.socket_path} answered without a gRPC status (HTTP {headers.get(':status', '?')}): "
                "is it the kubelet's pod-resources socket?"
            )
        if status != "0":
            name = GRPC_STATUS_NAMES.get(status, f"status {status}")
            message = urllib.parse.unquote(headers.get("grpc-message", ""))
            raise KubeletError(f"the kubelet pod-resources API failed on {self.socket_path}: {name} {message}".rstrip())
        if len(body) < 5 or body[0] != 0 or int.from_bytes(body[1:5], "big") != len(body) - 5:
            raise KubeletError(f"the kubelet's answer on {self.socket_path} is not one uncompressed gRPC message")
        return body[5:]

    def _unreachable(self, error: OSError) -> str:
        fix = (
            "mount /var/lib/kubelet/pod-resources into the exporter, or set --kubelet.socket "
            "(--kubelet.socket='' outside Kubernetes)"
        )
        if isinstance(error, FileNotFoundError):
            return f"the kubelet pod-resources socket {self.socket_path} does not exist; {fix}"
        if isinstance(error, PermissionError):
            return (
                f"permission denied on the kubelet pod-resources socket {self.socket_path}; "
                "run the exporter as root or give it access to the socket"
            )
        return f"cannot reach the kubelet on {self.socket_path} ({error.strerror or error}); {fix}"

    def close(self) -> None:
        """Nothing is held between calls; here for the attribution's life cycle."""


def _allocations(answer: bytes, resource_names: tuple[str, ...]) -> Iterator[Allocation]:
    """The device IDs of the matching resources in a v1 ListPodResourcesResponse (the field numbers of
    tests/podresources.proto): pod_resources = 1 { name = 1, namespace = 2, containers = 3 { name = 1,
    devices = 2 { resource_name = 1, device_ids = 2 } } }. Fields of other numbers or wire types (the
    CPU, memory and topology the kubelet also sends) are skipped, as protobuf's own decoder does.
    ValueError for a malformed message."""
    for pod in _by_number(answer).get(1, ()):
        fields = _by_number(pod)
        name, namespace = _last_text(fields, 1), _last_text(fields, 2)
        for container in fields.get(3, ()):
            devices = _by_number(container)
            ref = PodRef(namespace, name, _last_text(devices, 1))
            for device in devices.get(2, ()):
                entry = _by_number(device)
                resource = _last_text(entry, 1)
                if resource_matches(resource, resource_names):
                    yield from (Allocation(ref, resource, d.decode()) for d in entry.get(2, ()))


def _by_number(message: bytes) -> dict[int, list[bytes]]:
    """The length-delimited fields (strings, bytes, messages) of one message, by field number, in order."""
    fields: dict[int, list[bytes]] = {}
    for number, value in _fields(message):
        fields.setdefault(number, []).append(value)
    return fields


def _last_text(fields: dict[int, list[bytes]], number: int) -> str:
    """A string field: the last value wins, as in protobuf; "" when absent (proto3's default)."""
    return fields[number][-1].decode() if number in fields else ""


def _fields(message: bytes) -> Iterator[tuple[int, bytes]]:
    """(field number, value) of each length-delimited field of a protobuf message; the fields of other
    wire types (varints, fixed 32 and 64 bits) are read past."""
    i, end = 0, len(message)
    while i < end:
        key, i = _varint(message, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, i = _varint(message, i)
            continue
        if wire == 2:
            length, i = _varint(message, i)
            size = length
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
        else:
            raise ValueError(f"field {number} has wire type {wire}, which proto3 does not use")
        if i + size > end:
            raise ValueError(f"field {number} runs past the end of its message")
        if wire == 2:
            yield number, message[i : i + size]
        i += size


def _varint(data: bytes, i: int) -> tuple[int, int]:
    """The base-128 varint at `i`, and the position after it."""
    value = shift = 0
    while i < len(data):
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 10 bytes")
    raise ValueError("a varint runs past the end of its message")


#: gRPC status codes by number (grpc/doc/statuscodes.md), for error messages.
GRPC_STATUS_NAMES = {
    str(code): name
    for code, name in enumerate(
        (
            "OK",
            "CANCELLED",
            "UNKNOWN",
            "INVALID_ARGUMENT",
            "DEADLINE_EXCEEDED",
            "NOT_FOUND",
            "ALREADY_EXISTS",
            "PERMISSION_DENIED",
            "RESOURCE_EXHAUSTED",
            "FAILED_PRECONDITION",
            "ABORTED",
            "OUT_OF_RANGE",
            "UNIMPLEMENTED",
            "INTERNAL",
            "UNAVAILABLE",
            "DATA_LOSS",
            "UNAUTHENTICATED",
        )
    )
}
