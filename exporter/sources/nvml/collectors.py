"""The NVML collectors, each switchable by `--collector.NAME` (device.py says what a collector is). Their
order is the order of their gpulens_exporter_collector_* series and of their reads in a tick."""

from __future__ import annotations

from gpulens.exporter.sources.nvml.device import Collector
from gpulens.exporter.sources.nvml.gpm import Gpm
from gpulens.exporter.sources.nvml.nvlink import Nvlink
from gpulens.exporter.sources.nvml.processes import Processes
from gpulens.exporter.sources.nvml.topology import Topology
from gpulens.exporter.sources.nvml.xid import Xid

COLLECTORS: dict[str, type[Collector]] = {c.name: c for c in (Processes, Nvlink, Gpm, Xid, Topology)}
