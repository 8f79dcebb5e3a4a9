"""The `nvlink` collector: NVLink traffic, errors and the state of every link.

Its counters and, on Hopper and newer, its link states ride on the one nvmlDeviceGetFieldValues read the
basic reads make for PCIe each tick (Device.board_fields): at discovery the collector adds its fields, and
each tick it reads the link states' answers (Device.field_answers). Before Hopper a link's state is no
field: nvmlDeviceGetNvLinkState is called per link instead, from the first refusal on.
"""

from __future__ import annotations

import logging
from typing import Any

from gpulens.core import metrics as m
from gpulens.exporter.sources.base import DeviceSample
from gpulens.exporter.sources.nvml.calls import NvmlCalls
from gpulens.exporter.sources.nvml.device import Collector, Device

log = logging.getLogger(__name__)

#: NVLink error counters over all links (NVML_FI_DEV_NVLINK_*_ERROR_COUNT_TOTAL), by gpulens' type label.
_ERROR_FIELDS = {"crc_flit": 38, "crc_data": 45, "replay": 52, "recovery": 59}
_GET_STATE = 165  # NVML_FI_DEV_NVLINK_GET_STATE, one link per scopeId (Hopper and newer)
#: Link states that carry traffic: NVML_NVLINK_STATE_ACTIVE (= NVML_FEATURE_ENABLED of
#: nvmlDeviceGetNvLinkState) and NVML_NVLINK_STATE_SLEEP (low power between transfers).
_UP_STATES = (1, 2)
_UP_FIELDS = {(0, state) for state in _UP_STATES}  # (NVML_SUCCESS, state) as unpacked


class Nvlink(Collector):
    name = "nvlink"
    help = "NVLink traffic, errors and link states"

    def __init__(self, nvml: Any, calls: NvmlCalls):
        super().__init__(nvml, calls)
        #: NVLinks per full GPU's UUID (NVML_FI_DEV_NVLINK_LINK_COUNT at discovery; None where not reported).
        self._links: dict[str, int | None] = {}
        #: The links found down per UUID, kept across rediscoveries: a change is logged once, not at each one.
        self._down: dict[str, tuple[int, ...]] = {}

    def discovered(self, devices: list[Device]) -> None:
        nvml = self.nvml
        self._links = {d.uuid: self._links.get(d.uuid) for d in devices if d.kept}  # its fields are added
        for gpu in devices:
            if not gpu.is_board or gpu.kept:
                continue
            count = self.call(gpu, nvml.nvmlDeviceGetFieldValues, gpu.handle, [nvml.NVML_FI_DEV_NVLINK_LINK_COUNT])
            links = count[0].value.uiVal if count is not None and count[0].nvmlReturn == nvml.NVML_SUCCESS else None
            self._links[gpu.uuid] = links
            if not links:
                continue
            gpu.counter_fields += [
                (m.NVLINK_TRANSMIT, 1024.0, ()),  # KiB
                (m.NVLINK_RECEIVE, 1024.0, ()),
                *((m.NVLINK_ERRORS, 1.0, (kind,)) for kind in _ERROR_FIELDS),
            ]
            gpu.board_fields += [
                nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
                nvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
                *_ERROR_FIELDS.values(),
                *((_GET_STATE, link) for link in range(links)),
            ]

    def read(self, d: Device, s: DeviceSample) -> None:
        states = d.field_answers
        if states is None or not d.is_board:
            return
        links = self._links.get(d.uuid)
        s.set(m.NVLINK_LINKS, links)
        if not links:
            return
        ok = self.nvml.NVML_SUCCESS
        if states and set(states) <= _UP_FIELDS:  # the common case, in one step: every link up
            down: tuple[int, ...] = ()
        elif states and all(ret == ok for ret, _ in states):
            down = tuple(link for link, (_, state) in enumerate(states) if state & 0xFFFFFFFF not in _UP_STATES)
        else:
            if states:  # before Hopper the state is no field: one call per link from now on
                d.board_fields = d.board_fields[: len(d.counter_fields)]
            down_links = []
            for link in range(links):
                state = self.call(d, self.nvml.nvmlDeviceGetNvLinkState, d.handle, link)
                if state is None:
                    return
                if state not in _UP_STATES:
                    down_links.append(link)
            down = tuple(down_links)
        s.set(m.NVLINK_LINKS_DOWN, len(down))
        if down != self._down.get(d.uuid, ()):  # logged on each change only: the gauge counts, the log names the links
            self._down[d.uuid] = down
            if down:
                log.warning("GPU %s (%s): NVLink links down: %s of %s", d.gpu, d.uuid, list(down), links)
            else:
                log.warning("GPU %s (%s): every NVLink link is up again", d.gpu, d.uuid)
