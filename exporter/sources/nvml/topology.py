"""The `topology` collector: how the full GPUs connect (their common ancestor and peer-to-peer path),
read at each discovery: it does not change while the GPUs are there."""

from __future__ import annotations

from typing import Any

from gpulens.core import metrics as m
from gpulens.core.topology import Pair
from gpulens.exporter.sources.base import NodeSample
from gpulens.exporter.sources.nvml.calls import NvmlCalls
from gpulens.exporter.sources.nvml.device import Collector, Device


class Topology(Collector):
    name = "topology"
    help = "how the GPUs connect (topology and peer-to-peer paths, at each rediscovery)"

    def __init__(self, nvml: Any, calls: NvmlCalls):
        super().__init__(nvml, calls)
        self._pairs: list[Pair] = []

    def discovered(self, devices: list[Device]) -> None:
        gpus = [d for d in devices if d.is_board]
        pairs = []
        for a in gpus:
            for b in gpus:
                if a is b:
                    continue
                level = self.calls.call(self.nvml.nvmlDeviceGetTopologyCommonAncestor, a.handle, b.handle)
                if level is not None and level in m.TOPOLOGY_LEVELS:
                    pairs.append((a.uuid, b.uuid, m.TOPOLOGY_LEVELS[level], self._p2p(a, b)))
        self._pairs = pairs

    def finish(self, node: NodeSample) -> None:
        node.topology = self._pairs

    def _p2p(self, a: Device, b: Device) -> str:
        """How peer-to-peer reads from a to b travel: NVLink where the driver offers P2P over it, else
        PCIe where it offers P2P reads at all, else none (copies bounce through host memory)."""
        nvml, call = self.nvml, self.calls.call
        # pynvml spells NVML_P2P_CAPS_INDEX_READ (0) with a trailing comma, as a tuple: the values are nvml.h's.
        nvlink = call(nvml.nvmlDeviceGetP2PStatus, a.handle, b.handle, 2)  # NVML_P2P_CAPS_INDEX_NVLINK
        read = call(nvml.nvmlDeviceGetP2PStatus, a.handle, b.handle, 0)  # NVML_P2P_CAPS_INDEX_READ
        if nvlink is None and read is None:
            return "unknown"
        if nvlink == nvml.NVML_P2P_STATUS_OK:
            return "nvlink"
        return "pcie" if read == nvml.NVML_P2P_STATUS_OK else "none"
