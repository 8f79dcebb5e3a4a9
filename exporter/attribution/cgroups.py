"""Which container, and which pod, a host PID runs in.

NVML reports host PIDs. `/proc/<pid>/cgroup` names the container: the last path component carries
the container ID and, under Kubernetes, a parent carries the pod UID. The layouts differ by cgroup
version, cgroup driver and runtime:

    v2, systemd, containerd  0::/kubepods.slice/kubepods-burstable.slice/
                               kubepods-burstable-pod<uid_with_underscores>.slice/cri-containerd-<id>.scope
    v2, systemd, CRI-O       0::/kubepods.slice/.../kubepods-pod<uid>.slice/crio-<id>.scope
    v1, cgroupfs, containerd 11:memory:/kubepods/besteffort/pod<uid>/<id>
    v1, systemd, Docker      4:cpu,cpuacct:/kubepods.slice/.../docker-<id>.scope
    plain Docker             0::/system.slice/docker-<id>.scope   or   3:memory:/docker/<id>

A container ID becomes namespace/pod/container through the kubelet's log links, which every
Kubernetes node keeps (log shippers read the same names):

    /var/log/containers/<pod>_<namespace>_<container>-<container id>.log

and a pod UID through its log directory /var/log/pods/<namespace>_<pod>_<uid>/<container>/.
Pod and namespace names cannot contain "_" (they are DNS names), so both parse unambiguously.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpulens.core.pods import PodRef

_CONTAINER = re.compile(r"(?:^|[/-])([0-9a-f]{64})(?:\.scope)?$")
_CONMON = re.compile(r"crio-conmon-[0-9a-f]{64}")
_POD_UID = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")
_CONTAINER_LOG = re.compile(r"^([^_]+)_([^_]+)_(.+)-([0-9a-f]{64})\.log$")
_POD_LOG_DIR = re.compile(r"^([^_]+)_([^_]+)_([0-9a-f-]{36})$")


@dataclass(frozen=True)
class Cgroup:
    """What a process's cgroup says about it; empty strings where it says nothing."""

    container_id: str = ""
    pod_uid: str = ""


def parse_cgroup(text: str) -> Cgroup:
    """Container ID and pod UID from the contents of /proc/<pid>/cgroup (v1 or v2)."""
    container_id = pod_uid = ""
    for line in text.splitlines():
        path = line.split(":", 2)[-1].strip()
        if not path or _CONMON.search(path):
            continue
        match = _CONTAINER.search(path)
        if match and not container_id:
            container_id = match.group(1)
        uid = _POD_UID.search(path)
        if uid and not pod_uid:
            pod_uid = uid.group(1).replace("_", "-")
        if container_id and pod_uid:
            break
    return Cgroup(container_id, pod_uid)


def read_cgroup(proc_root: str, pid: int) -> Cgroup:
    """The cgroup of `pid` under `proc_root` (a fixture tree in tests); empty if unreadable,
    which is what a process that just exited looks like."""
    try:
        return parse_cgroup(Path(proc_root, str(pid), "cgroup").read_text())
    except OSError:
        return Cgroup()


class ContainerIndex:
    """Container IDs and pod UIDs to pods, from the kubelet's log links under `log_root`."""

    def __init__(self, log_root: str):
        self.log_root = log_root
        self.by_container: dict[str, PodRef] = {}
        self.by_pod_uid: dict[str, tuple[str, str, list[str]]] = {}

    def refresh(self) -> None:
        by_container: dict[str, PodRef] = {}
        for name in _listdir(os.path.join(self.log_root, "containers")):
            match = _CONTAINER_LOG.match(name)
            if match:
                pod, namespace, container, container_id = match.groups()
                by_container[container_id] = PodRef(namespace, pod, container)
        by_pod_uid = {}
        for name in _listdir(os.path.join(self.log_root, "pods")):
            match = _POD_LOG_DIR.match(name)
            if match:
                namespace, pod, uid = match.groups()
                by_pod_uid[uid] = (namespace, pod, sorted(_listdir(os.path.join(self.log_root, "pods", name))))
        self.by_container, self.by_pod_uid = by_container, by_pod_uid

    def pod_of(self, cgroup: Cgroup) -> PodRef | None:
        if cgroup.container_id in self.by_container:
            return self.by_container[cgroup.container_id]
        if cgroup.pod_uid in self.by_pod_uid:
            namespace, pod, containers = self.by_pod_uid[cgroup.pod_uid]
            # The container is certain only when the pod has one.
            return PodRef(namespace, pod, containers[0] if len(containers) == 1 else "")
        return None


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []
