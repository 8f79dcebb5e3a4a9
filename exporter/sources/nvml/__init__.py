"""The NVML source: every GPU and MIG instance through nvidia-ml-py (pynvml).

- source.py: discovery and the basic reads of every device each tick (utilization, memory, the board);
- collectors.py: the read groups that can be switched off, one module each (processes, nvlink, gpm, xid,
  topology), as node_exporter's collectors (device.py says what one is);
- calls.py: the choke point that says what each NVML error means, and the older versions of a call;
- buffers.py: NVML's array answers, one driver call each, into buffers each GPU keeps.
"""

from gpulens.exporter.sources.nvml.collectors import COLLECTORS
from gpulens.exporter.sources.nvml.source import NvmlSource

__all__ = ["COLLECTORS", "NvmlSource"]
