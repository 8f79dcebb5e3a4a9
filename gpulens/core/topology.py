"""How the GPUs of a node connect, and the groups that placement findings compare.

A pair is (uuid, peer_uuid, level, p2p), one per ordered pair of full GPUs, as the exporter reads it at
discovery and serves it in gpulens_gpu_topology_info:

- level: NVML's closest common ancestor on PCIe (nvmlDeviceGetTopologyCommonAncestor), as named in
  metrics.TOPOLOGY_LEVELS: internal, single_switch, multiple_switches, host_bridge (one root complex),
  numa_node (across root complexes of one CPU socket), system (across sockets);
- p2p: how peer-to-peer reads between the two travel (nvmlDeviceGetP2PStatus): "nvlink", "pcie",
  "none" (the driver offers no P2P: copies go through host memory), or "unknown".

A trace gives each GPU a number per group (core/trace.py: numa_node, pcie_root, nvlink_group), equal
for GPUs in the same group of their node. The GPUs of one pod in different groups, with no NVLink
between them, are a placement finding.
"""

from __future__ import annotations

from collections.abc import Callable

Pair = tuple[str, str, str, str]

P2P_PATHS = ("nvlink", "pcie", "none", "unknown")
#: Levels whose path turns back at or below the CPU's host bridge: the two GPUs share a PCIe root complex.
SAME_ROOT_LEVELS = ("internal", "single_switch", "multiple_switches", "host_bridge")


def _groups(pairs: list[Pair], joined: Callable[[str, str], bool]) -> dict[str, int]:
    """A number per GPU, equal for GPUs linked by a chain of pairs for which `joined(level, p2p)` holds;
    numbered in the order of the GPUs' UUIDs, so that the same node always gets the same numbers."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b, level, p2p in pairs:
        find(a), find(b)
        if joined(level, p2p):
            parent[find(a)] = find(b)
    roots: dict[str, int] = {}
    for x in sorted(parent):
        roots.setdefault(find(x), len(roots))
    return {x: roots[find(x)] for x in parent}


def socket_groups(pairs: list[Pair]) -> dict[str, int]:
    """The trace's numa_node: GPUs whose PCIe path does not cross CPU sockets share a number."""
    return _groups(pairs, lambda level, p2p: level != "system")


def root_groups(pairs: list[Pair]) -> dict[str, int]:
    """The trace's pcie_root: GPUs under one PCIe root complex share a number."""
    return _groups(pairs, lambda level, p2p: level in SAME_ROOT_LEVELS)


def nvlink_groups(pairs: list[Pair]) -> dict[str, int]:
    """The trace's nvlink_group: GPUs that reach each other over NVLink (directly or through NVSwitch)
    share a number; a GPU with no NVLink peer has a number of its own."""
    return _groups(pairs, lambda level, p2p: p2p == "nvlink")


#: Trace column -> the groups it holds.
GROUPS: dict[str, Callable[[list[Pair]], dict[str, int]]] = {
    "numa_node": socket_groups,
    "pcie_root": root_groups,
    "nvlink_group": nvlink_groups,
}
