"""`gpulens exporter --record FILE`: every sample appended to a trace CSV (docs/trace-format.md),
so `gpulens report FILE` can later say what happened on this node, with no Prometheus."""

from __future__ import annotations

import csv
import io
import logging
import os
import time
from collections.abc import Sequence

from gpulens.core import catalog
from gpulens.core import metrics as m
from gpulens.core import trace as tr
from gpulens.core.activity import Totals
from gpulens.core.status import ProblemLog
from gpulens.core.topology import GROUPS
from gpulens.exporter.sampler import Snapshot

log = logging.getLogger(__name__)


class RecordError(Exception):
    """The --record file cannot be appended to; the message names it and the fix."""


def _repair(path: str) -> None:
    """Cut a recording back to its last whole row: a crash (the node's power, SIGKILL) can end it mid-row,
    and rows appended after that half row would be read as one broken row, the file as unreadable."""
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        at = end
        while at > 0:
            start = max(0, at - 65536)
            f.seek(start)
            block = f.read(at - start)
            newline = block.rfind(b"\n")
            if newline >= 0:
                whole = start + newline + 1
                break
            at = start
        else:
            whole = 0
        if whole < end:
            f.truncate(whole)
            log.warning(
                "--record %s ended mid-row (the exporter stopped while writing): cut back to its last whole row "
                "(%d bytes) before appending",
                path,
                end - whole,
            )


class Recorder:
    """Appends one row per device per sample; never stops the exporter.

    Each sample's rows are appended in one write. A write that fails (the disk full, a quota) is undone
    to the last whole line, so the file never holds half a row, and the rows are kept in memory (up to
    MAX_PENDING_BYTES, oldest dropped past it, said once) to be written, in order, once writes succeed
    again. Logged once when it starts and once when it clears."""

    #: Rows kept while the file cannot be written: about an hour of an 8-GPU node at 1 s.
    MAX_PENDING_BYTES = 16 << 20

    def __init__(self, path: str, node: str = ""):
        self.path = path
        self.node = node
        new = not os.path.exists(path) or os.path.getsize(path) == 0
        #: The file's layout: today's, or that of a recording an older gpulens began (its columns kept, so
        #: the file stays one table; what it lacks is not recorded).
        self.columns = tr.ALL_COLUMNS
        if not new:
            with open(path, newline="") as existing:
                header = next(csv.reader(existing), [])
            if header != tr.ALL_COLUMNS and header not in tr.OLDER_LAYOUTS:
                raise RecordError(
                    f"--record {path} holds a trace with other columns (written by another gpulens version, "
                    "or not a trace): appending would mix two layouts; record to a new file"
                )
            if header in tr.OLDER_LAYOUTS:
                log.warning(
                    "--record %s was begun by an older gpulens: appending in its layout, without the %s "
                    "columns; record to a new file to have them",
                    path,
                    ", ".join(c for c in tr.ALL_COLUMNS if c not in header),
                )
            self.columns = header
            _repair(path)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        #: Lines (CSV text) not yet in the file, oldest first, and how many were dropped past the bound.
        self._pending: list[str] = []
        if new:
            os.write(self._fd, _csv_lines([self.columns]).encode())  # at start: a failure is the CLI's error
        self.dropped_rows = 0
        self._rates = tr.CounterRates()
        self._xids = tr.NewXids(from_zero=True)  # the exporter counts the XIDs it saw since it started
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
        by_uuid = {d.uuid: d for d in node.devices}
        for d in node.devices:
            if not d.up:
                continue
            row: dict[str, object] = dict.fromkeys(tr.ALL_COLUMNS, "")
            row.update(
                timestamp=f"{now:.3f}",
                gpu=d.uuid,
                node=self.node,
                gpu_model=catalog.device_name(d.model, d.mig_profile),
            )
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
            board = by_uuid.get(d.parent_uuid, d)  # XIDs are the physical GPU's, and so its instances'
            if board.xids_watched:
                xid_counts = {labels[0]: count for labels, count in board.values.get(m.XID_ERRORS, {}).items()}
                row["hardware_xid"] = f"{self._xids.code(d.uuid, xid_counts):g}"
            shape = snapshot.shapes.get(d.uuid)
            if shape is not None:
                totals = shape.totals()
                row.update(tr.shape_row(self._shape_totals.get(d.uuid), totals))
                self._shape_totals[d.uuid] = totals
            rows.append([row[c] for c in self.columns])
        if rows:
            self._pending.append(_csv_lines(rows))
        self._flush()

    def _flush(self) -> None:
        """Append the pending lines; on failure, cut the file back to its last whole line and keep them."""
        text = "".join(self._pending).encode()
        if not text:
            return
        size = os.fstat(self._fd).st_size
        try:
            written = 0
            while written < len(text):
                written += os.write(self._fd, text[written:])
        except OSError as e:
            os.ftruncate(self._fd, size)  # no half row: the file ends on a whole line
            self._bound_pending()
            self._problems.problem(
                "write",
                f"cannot append to --record file {self.path}: {e.strerror}; keeping the rows in memory "
                f"(up to {self.MAX_PENDING_BYTES >> 20} MiB) until it can",
            )
            return
        self._pending.clear()
        self._problems.resolved("write", f"recording to {self.path} works again, the rows kept meanwhile written")

    def _bound_pending(self) -> None:
        while self._pending and sum(map(len, self._pending)) > self.MAX_PENDING_BYTES:
            self.dropped_rows += self._pending.pop(0).count("\n")
            self._problems.problem("dropped", f"--record {self.path}: dropping the oldest rows kept in memory")

    def _rate(self, row: dict[str, object], column: str, uuid: str, value: float | None, now: float) -> None:
        """A counter's per-second rate since the previous sample into row[column]; nothing on the first, after
        a reset, or without a value."""
        rate = None if value is None else self._rates.rate((uuid, column), value, now)
        if rate is not None:
            row[column] = repr(rate)

    def close(self) -> None:
        self._flush()
        os.close(self._fd)


def _csv_lines(rows: Sequence[Sequence[object]]) -> str:
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return out.getvalue()
