"""`gpulens exporter --record FILE`: every sample appended to a trace CSV (docs/trace-format.md),
so `gpulens analyze FILE` can later say what happened on this node, with no Prometheus."""

from __future__ import annotations

import csv
import logging
import os
import time

from gpulens.core import metrics as m
from gpulens.core import trace as tr
from gpulens.core.activity import Totals
from gpulens.core.status import ProblemLog
from gpulens.core.topology import GROUPS
from gpulens.exporter.sampler import Snapshot

log = logging.getLogger(__name__)


class RecordError(Exception):
    """The --record file cannot be appended to; the message names it and the fix."""


class Recorder:
    """Appends one row per device per sample. A write error is logged once and recording stops
    trying until the next sample; it never stops the exporter."""

    COLUMNS = tr.ALL_COLUMNS

    def __init__(self, path: str, node: str = ""):
        self.path = path
        self.node = node
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        if not new:
            with open(path, newline="") as existing:
                header = next(csv.reader(existing), [])
            if header != self.COLUMNS:
                raise RecordError(
                    f"--record {path} holds a trace with other columns (written by another gpulens version, "
                    "or not a trace): appending would mix two layouts; record to a new file"
                )
        self._file = open(path, "a", newline="", buffering=1)
        self._writer = csv.writer(self._file)
        if new:
            self._writer.writerow(self.COLUMNS)
        self._rates = tr.CounterRates()
        self._shape_totals: dict[str, Totals] = {}
        self._problems = ProblemLog(log)

    def write(self, snapshot: Snapshot) -> None:
        node = snapshot.node
        if node is None:
            return
        now = time.time()
        pods = snapshot.attribution.pods_by_uuid if snapshot.attribution else None
        groups = {column: of(node.topology) for column, of in GROUPS.items()}
        rows = []
        for d in node.devices:
            if not d.up:
                continue
            row: dict[str, object] = dict.fromkeys(self.COLUMNS, "")
            row.update(timestamp=f"{now:.3f}", gpu=d.uuid, node=self.node, gpu_model=d.model)
            holders = (pods or {}).get(d.uuid) or [p.pod for p in d.processes if p.pod]
            if holders:
                row.update(namespace=holders[0].namespace, pod=holders[0].pod, container=holders[0].container)
            for column, spec in tr.FROM_GAUGES.items():
                value = d.get(spec)
                row[column] = "" if value is None else repr(value)
            for column, spec in tr.FROM_RATES.items():
                self._rate(row, column, d.uuid, d.get(spec), now)
            for column, kinds in tr.NVLINK_ERROR_RATES.items():
                counts = [d.get(m.NVLINK_ERRORS, kind) for kind in kinds]
                total = sum(c for c in counts if c is not None) if None not in counts else None
                self._rate(row, column, d.uuid, total, now)
            for column, group in groups.items():
                row[column] = group.get(d.uuid, "")
            if d.clock_event_reasons is not None:
                row["clock_event_reasons"] = str(d.clock_event_reasons)
            shape = snapshot.shapes.get(d.uuid)
            if shape is not None:
                totals = shape.totals()
                row.update(tr.shape_row(self._shape_totals.get(d.uuid), totals))
                self._shape_totals[d.uuid] = totals
            rows.append([row[c] for c in self.COLUMNS])
        try:
            self._writer.writerows(rows)
            self._problems.resolved("write", f"recording to {self.path} works again")
        except OSError as e:
            self._problems.problem("write", f"cannot append to --record file {self.path}: {e.strerror}")

    def _rate(self, row: dict[str, object], column: str, uuid: str, value: float | None, now: float) -> None:
        """A counter's per-second rate since the previous sample into row[column]; nothing on the first, after
        a reset, or without a value."""
        rate = None if value is None else self._rates.rate((uuid, column), value, now)
        if rate is not None:
            row[column] = repr(rate)

    def close(self) -> None:
        self._file.close()
