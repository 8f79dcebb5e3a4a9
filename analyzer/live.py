"""Live inputs of the analyzer service: Prometheus (the production path) or exporters directly.

Both turn gpulens exporter metrics into the trace frame (gpulens.analyzer.frame) over a sliding window.
- PrometheusInput issues one range query per signal per cycle, for all GPUs at once, so the number
  of queries does not grow with the number of pods; any server with Prometheus' HTTP API works
  (Thanos, Mimir, VictoriaMetrics). cAdvisor and kube-state-metrics series, where present, add the
  pods' CPU use, limits and restarts.
- ExporterInput scrapes a list of exporters itself and keeps the window in memory: the embedded
  default for the demo and small setups with no Prometheus.
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, cast
from urllib.parse import urlparse

import numpy as np
import orjson
import pandas as pd
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpulens.analyzer import frame as fr
from gpulens.core import metrics as m
from gpulens.core import trace as tr
from gpulens.core.activity import HIGH_BOUND, IDLE_BOUND, LOW_BOUND, Totals
from gpulens.core.config import redact
from gpulens.core.status import LoopGuard
from gpulens.core.topology import GROUPS, Pair

log = logging.getLogger(__name__)

GAUGES, RATES = tr.FROM_GAUGES, tr.FROM_RATES
#: gpulens_gpu_nvlink_errors_total's type label -> the trace column whose rate it adds to.
_ERROR_COLUMN = {kind: column for column, kinds in tr.NVLINK_ERROR_RATES.items() for kind in kinds}
#: The exporter samples that carry the activity shape, and the totals read from them, in Totals order.
_SHAPE_SAMPLES = {
    m.ACTIVITY.name + "_count",
    m.ACTIVITY.name + "_bucket",
    m.ACTIVITY_TRANSITIONS.name,
    m.STEADY_BURSTS.name,
}
_SHAPE_TOTALS = (
    m.ACTIVITY.name + "_count",
    *(f"{m.ACTIVITY.name}_bucket{bound:g}" for bound in (IDLE_BOUND, LOW_BOUND, HIGH_BOUND)),
    m.ACTIVITY_TRANSITIONS.name,
    m.STEADY_BURSTS.name,
)


@dataclass
class TargetStatus:
    """How one target of an input (a Prometheus, an exporter) answered: `up` at the last attempt, the
    unix time of the last answer read, and the failed attempts since the start."""

    up: bool = False
    last_success: float | None = None
    failures: int = 0
    read_bytes: int = 0  # bytes of the answers read, since the start

    def succeeded(self, now: float) -> None:
        self.up, self.last_success = True, now

    def failed(self) -> None:
        self.up, self.failures = False, self.failures + 1


class AnalyzerInput(Protocol):
    """Where the analyzer service reads its window from: Prometheus, or exporters directly."""

    name: str

    def start(self) -> None: ...

    def close(self) -> None: ...

    def window_frame(self) -> pd.DataFrame:
        """The last window of samples as a trace frame; InputError when the input cannot be read."""
        ...

    def target_status(self) -> dict[str, TargetStatus]:
        """Each target by its URL (credentials removed)."""
        ...

    def node_prices(self) -> dict[str, float]:
        """USD per GPU-hour by node where the cluster keeps prices (OpenCost), else empty."""
        ...


class InputError(Exception):
    """The input could not be read this cycle; the message names it and why."""


class ExporterInput:
    """Scrapes gpulens exporters every `interval` seconds and keeps `window` seconds of samples."""

    name = "exporter"

    def __init__(
        self, targets: list[tuple[str, str]], window: float = 600.0, interval: float = 2.0, timeout: float = 5.0
    ):
        self.targets = targets  # (node name, /metrics URL)
        self.window = window
        self.interval = interval
        self.timeout = timeout
        self.session = requests.Session()
        self._rows: collections.deque = collections.deque()
        self._rates = tr.CounterRates()
        self._shape_totals: dict[tuple[str, str], Totals] = {}
        self._lock = threading.Lock()
        self.last_error = ""
        self._status = {url: TargetStatus() for _, url in targets}
        self._stop = threading.Event()

    @staticmethod
    def parse_targets(values: list[str]) -> list[tuple[str, str]]:
        """`URL` or `node=URL`; the node defaults to the URL's host:port."""
        targets = []
        for value in values:
            node, sep, url = value.partition("=")
            if not sep or node.startswith("http"):
                node, url = "", value
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"--input.exporter {value!r} is not an http(s) URL (optionally node=URL)")
            targets.append((node or urlparse(url).netloc, url))
        return targets

    def poll(self) -> None:
        now = time.time()
        rows = []
        for node, url in self.targets:
            status = self._status[url]
            try:
                response = self.session.get(url, timeout=self.timeout)
                response.raise_for_status()
                status.read_bytes += len(response.content)
                rows.extend(self._rows_from(node, response.text, now))
            except requests.RequestException as e:
                status.failed()
                self.last_error = redact(f"cannot scrape exporter {url}: {e}")
            except Exception as e:  # an answer the reader did not foresee: this target fails, the loop goes on
                status.failed()
                self.last_error = redact(f"exporter {url} answered what gpulens cannot read: {e!r}")
                log.warning("%s", self.last_error, exc_info=True)
            else:
                status.succeeded(now)
        with self._lock:
            self._rows.extend(rows)
            while self._rows and self._rows[0]["timestamp"] < now - self.window:
                self._rows.popleft()

    def _rows_from(self, node: str, text: str, now: float) -> list[dict]:
        gauges = {spec.name: column for column, spec in GAUGES.items()}
        rates = {spec.name: column for column, spec in RATES.items()}
        devices: dict[str, dict] = {}
        pods: dict[str, dict] = {}
        topology: list[Pair] = []
        errors: dict[tuple[str, str], float] = {}  # NVLink error totals by (uuid, trace column)
        reports_clock_events: set[str] = set()  # devices with clock-event series: no bit set means 0
        shape: dict[str, dict[str, float]] = {}  # the activity histogram's totals, by uuid
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                uuid = s.labels.get("uuid")
                if uuid is None:
                    continue
                row = devices.setdefault(uuid, {"timestamp": now, "gpu": uuid, "node": node})
                if s.name in _SHAPE_SAMPLES:
                    total = s.name + s.labels.get("le", "")
                    if total in _SHAPE_TOTALS:
                        shape.setdefault(uuid, {})[total] = s.value
                elif s.name in gauges:
                    row[gauges[s.name]] = s.value
                elif s.name in rates:
                    self._rate(row, rates[s.name], (node, uuid, s.name), s.value, now)
                elif s.name == m.NVLINK_ERRORS.name and s.labels.get("type") in _ERROR_COLUMN:
                    key = (uuid, _ERROR_COLUMN[s.labels["type"]])
                    errors[key] = errors.get(key, 0.0) + s.value
                elif s.name == m.CLOCK_EVENT_ACTIVE.name:
                    reports_clock_events.add(uuid)
                    if s.value == 1:
                        row["clock_event_reasons"] = row.get("clock_event_reasons", 0) + m.CLOCK_EVENT_REASONS.get(
                            s.labels["reason"], 0
                        )
                elif s.name == m.GPU_INFO.name:
                    row["gpu_model"] = s.labels.get("model", "")
                elif s.name == m.GPU_POD_INFO.name:
                    pods[uuid] = {column: s.labels.get(column, "") for column in ("namespace", "pod", "container")}
                elif s.name == m.TOPOLOGY.name:
                    if "peer_uuid" in s.labels and "level" in s.labels:
                        topology.append(
                            (uuid, s.labels["peer_uuid"], s.labels["level"], s.labels.get("p2p", "unknown"))
                        )
        for (uuid, column), errors_total in errors.items():
            self._rate(devices[uuid], column, (node, uuid, column), errors_total, now)
        groups = {column: of(topology) for column, of in GROUPS.items()}
        for uuid, values in shape.items():
            if len(values) == len(_SHAPE_TOTALS):
                totals = cast(Totals, tuple(values[name] for name in _SHAPE_TOTALS))
                devices[uuid].update(tr.shape_row(self._shape_totals.get((node, uuid)), totals))
                self._shape_totals[(node, uuid)] = totals
        for uuid, row in devices.items():
            row.update(pods.get(uuid, {}))
            if uuid in reports_clock_events:
                row.setdefault("clock_event_reasons", 0)
            for column, group in groups.items():
                if uuid in group:
                    row[column] = group[uuid]
        return [row for row in devices.values() if len(row) > 3]

    def _rate(self, row: dict, column: str, key: tuple, value: float, now: float) -> None:
        """The per-second rate of a counter since its previous scrape; nothing on the first, or after a reset."""
        rate = self._rates.rate(key, value, now)
        if rate is not None:
            row[column] = rate

    def window_frame(self) -> pd.DataFrame:
        with self._lock:
            rows = list(self._rows)
        if not rows and any(status.failures for status in self._status.values()):
            raise InputError(self.last_error)
        return fr.normalize(pd.DataFrame(rows)) if rows else fr.empty()

    def start(self) -> None:
        threading.Thread(target=self._run, name="gpulens-exporter-input", daemon=True).start()

    def _run(self) -> None:
        guard = LoopGuard(log, "polling the exporters")  # the targets' own failures are counted in poll
        while not self._stop.is_set():
            started = time.monotonic()
            guard.call(self.poll)
            self._stop.wait(max(0.0, guard.delay(self.interval) - (time.monotonic() - started)))

    def close(self) -> None:
        self._stop.set()

    def target_status(self) -> dict[str, TargetStatus]:
        return {redact(url): status for url, status in self._status.items()}

    def node_prices(self) -> dict[str, float]:
        return {}  # exporters know no prices: the price file and the catalogue apply


#: How often the analyzer reads the GPUs' models and NVLink topology again (PrometheusInput._hardware).
HARDWARE_REFRESH_SECONDS = 300.0
#: OpenCost's (and Kubecost's) metric: hourly cost per GPU on the node, labelled `node`.
OPENCOST_GPU_PRICE = "node_gpu_hourly_cost"
PRICE_REFRESH_SECONDS = 300.0


@dataclass(frozen=True)
class Shard:
    """One analyzer replica's share of the fleet: the nodes whose name hashes to `index` modulo `count`,
    as Prometheus' hashmod relabelling hashes a label (so a scrape config can split the same way). N
    replicas with indexes 0..N-1 over one store judge every pod exactly once: a pod's GPUs are on one
    node, and each node hashes to one index."""

    index: int
    count: int

    def owns(self, node: str) -> bool:
        return hashmod(node, self.count) == self.index

    def __str__(self) -> str:
        return f"shard {self.index} of {self.count}"


def _by_row(per_gpu: list[str], gpu: np.ndarray) -> pd.Categorical[str]:
    """A value per GPU spread over the rows (`gpu`: each row's GPU), as a categorical column."""
    return pd.Categorical(per_gpu).take(gpu)


def hashmod(value: str, modulus: int) -> int:
    """Prometheus' relabel action `hashmod`: the last 8 bytes of the value's MD5, big-endian, modulo."""
    return int.from_bytes(hashlib.md5(value.encode()).digest()[8:], "big") % modulus


#: Steps a cycle reads again before the first it has not read: a scrape that reached the store after the
#: last cycle's query (a slow target, a remote-write queue) changes the newest values it held.
REREAD_STEPS = 2


class _StepGrid:
    """The window's values on the store's step grid, kept from cycle to cycle so that each cycle queries
    only the steps it has not read (and the newest REREAD_STEPS again): the points a cycle reads grow
    with the analysis interval, not the window. One row per GPU series (its exporter's `instance` and
    `uuid`), one column per step, one matrix per trace column; NaN where the store had no value."""

    def __init__(self, step: float, points: int):
        self.step, self.points = step, points
        self.end: float | None = None  # unix seconds of the newest step held
        self.gpus: dict[tuple[str, str], int] = {}  # (instance, uuid) -> row
        self.values: dict[str, np.ndarray] = {}  # trace column -> (rows, points)
        self._rows = 0  # rows allocated in each matrix

    @property
    def start(self) -> float:
        assert self.end is not None
        return self.end - (self.points - 1) * self.step

    def move_to(self, end: float) -> float:
        """Slide the grid so that its newest step is `end`; the first step the store must be asked for."""
        shift = self.points if self.end is None else round((end - self.end) / self.step)
        if not 0 <= shift < self.points:  # the first cycle, a clock that went back, or a cycle missed by a window
            self.gpus, self.values, self._rows = {}, {}, 0
            shift = self.points
        kept = self.points - shift
        first = max(0, kept - REREAD_STEPS)
        for matrix in self.values.values():
            matrix[:, :kept] = matrix[:, shift:]
            matrix[:, first:] = np.nan
        self.end = end
        return self.start + first * self.step

    def add(
        self,
        result: list[dict],
        column: str | Callable[[dict], str | None],
        weight: Callable[[dict], float] | None = None,
    ) -> int:
        """A range query's series into `column` (or the column each one's labels name); with `weight`
        (labels -> factor), the series of a GPU add up (weight x value) instead. The points read.
        All of a query's points are converted and placed at once: per-series numpy calls would cost
        more than the points at 10,000 GPUs."""
        names: dict[str, int] = {}
        rows, columns, factors, counts, points = [], [], [], [], []
        for series in result:
            labels = series["metric"]
            name = column(labels) if callable(column) else column
            uuid = labels.get("uuid", "")
            if name is None or not uuid:  # a series without the labels that identify its GPU
                continue
            rows.append(self._row((labels.get("instance", ""), uuid)))
            columns.append(names.setdefault(name, len(names)))
            factors.append(1.0 if weight is None else weight(labels))
            counts.append(len(series["values"]))
            points.extend(series["values"])
        if not points:
            return 0
        values = np.array(points, dtype=np.float64).reshape(-1, 2)
        steps = np.rint((values[:, 0] - self.start) / self.step).astype(np.intp)
        inside = (steps >= 0) & (steps < self.points)
        row, which = np.repeat(rows, counts)[inside], np.repeat(columns, counts)[inside]
        steps, values = steps[inside], (values[:, 1] * np.repeat(factors, counts))[inside]
        for name, index in names.items():
            mine = which == index
            matrix, at = self._matrix(name), (row[mine], steps[mine])
            if weight is None:
                matrix[at] = values[mine]
            else:
                matrix[at] = np.where(np.isnan(matrix[at]), 0.0, matrix[at])
                np.add.at(matrix, at, values[mine])
        return len(points)

    def _row(self, key: tuple[str, str]) -> int:
        row = self.gpus.setdefault(key, len(self.gpus))
        if row >= self._rows:
            self._rows = max(64, 2 * self._rows)
            for name, matrix in self.values.items():
                grown = np.full((self._rows, self.points), np.nan)
                grown[: len(matrix)] = matrix
                self.values[name] = grown
        return row

    def _matrix(self, name: str) -> np.ndarray:
        if name not in self.values:
            self.values[name] = np.full((self._rows, self.points), np.nan)
        return self.values[name]

    def rows(self) -> tuple[list[tuple[str, str]], np.ndarray, dict[str, np.ndarray]]:
        """The GPUs with any value in the window (others are forgotten), and the window as rows in (GPU,
        time) order: each row's GPU (an index into the GPUs) and its trace columns, timestamp included."""
        held = len(self.gpus)
        present = np.zeros((held, self.points), dtype=bool)
        for matrix in self.values.values():
            present |= ~np.isnan(matrix[:held])
        keep = np.any(present, axis=1)
        if not keep.all():  # GPUs gone for a whole window: drop their rows
            kept = [key for key, row in self.gpus.items() if keep[row]]
            self.gpus = {key: row for row, key in enumerate(kept)}
            self.values = {name: matrix[:held][keep] for name, matrix in self.values.items()}
            self._rows, present = len(self.gpus), present[keep]
        gpu, step = np.nonzero(present)
        columns = {name: matrix[gpu, step] for name, matrix in self.values.items()}
        columns["timestamp"] = self.start + step * self.step
        return list(self.gpus), gpu, columns


class PrometheusInput:
    """Range queries against a Prometheus HTTP API: a fixed number per cycle, whatever the fleet."""

    name = "prometheus"

    def __init__(
        self,
        url: str,
        window: float = 600.0,
        step: float = 15.0,
        timeout: float = 30.0,
        selector: str = "",
        clock: Callable[[], float] = time.time,
        price_metric: str = OPENCOST_GPU_PRICE,
        shard: Shard | None = None,
    ):
        self.url = url.rstrip("/")
        #: This replica's share of the nodes; None judges them all.
        self.shard = shard
        #: The matcher on `instance` that keeps this cycle's queries to the shard's exporters.
        self._instances = ""
        #: OpenCost's price per GPU-hour by node, read every PRICE_REFRESH_SECONDS; "" reads none.
        self.price_metric = price_metric
        self._prices: dict[str, float] = {}
        self._prices_read_at = -math.inf
        self.clock = clock  # the window ends now: unix seconds
        self.window = window
        self.step = step
        self.timeout = timeout
        self.selector = selector  # e.g. job="gpulens", added to every gpulens series selector
        self.session = requests.Session()
        self._status = TargetStatus()
        #: The window held between cycles; None: the next cycle reads it whole.
        self._grid: _StepGrid | None = None
        self._grid_instances = ""
        #: Points in the range queries' answers of the last cycle.
        self.last_cycle_points = 0
        self._hardware_cache: tuple[dict[tuple[str, str], dict], dict[str, dict[str, int]]] | None = None
        self._hardware_read_at = -math.inf

    def _sel(self, name: str, *extra: str) -> str:
        """`name` with the configured selector, this cycle's shard matcher and `extra` matchers."""
        matchers = ",".join(part for part in (self.selector, self._instances, *extra) if part)
        return f"{name}{{{matchers}}}" if matchers else name

    def _query(self, expr: str, start: float, end: float) -> list[dict]:
        """A range query over the window, at the step."""
        params = {"query": expr, "start": str(start), "end": str(end), "step": str(self.step)}
        return self._api("query_range", params)

    def _api(self, endpoint: str, params: dict[str, str]) -> list[dict]:
        """The series Prometheus' /api/v1/<endpoint> answers; InputError when it cannot be reached."""
        try:
            # POST: a shard's selector names hundreds of exporters, past what proxies allow in a URL.
            response = self.session.post(f"{self.url}/api/v1/{endpoint}", data=params, timeout=self.timeout)
        except requests.RequestException as e:
            raise InputError(redact(f"cannot reach Prometheus at {self.url}: {e}")) from e
        self._status.read_bytes += len(response.content)
        return self._result(response, params["query"])

    def _result(self, response: requests.Response, expr: str) -> list[dict]:
        """The series of a query's answer; InputError naming what is wrong with any other answer."""
        try:
            body = orjson.loads(response.content)
        except ValueError:
            raise InputError(
                redact(
                    f"Prometheus at {self.url} answered HTTP {response.status_code} with no JSON: "
                    "is this the Prometheus HTTP API?"
                )
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            error = body.get("error", response.status_code) if isinstance(body, dict) else response.status_code
            raise InputError(redact(f"Prometheus at {self.url} refused {expr!r}: {error}"))
        data = body.get("data")
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list) or not all(
            isinstance(s, dict) and isinstance(s.get("metric"), dict) for s in result
        ):
            raise InputError(
                redact(f"Prometheus at {self.url} answered {expr!r} without a list of series in data.result")
            )
        return result

    def window_frame(self) -> pd.DataFrame:
        try:
            frame = self._window_frame()
        except InputError:
            self._status.failed()
            self._grid = None  # part of the window was not read again: read it whole next time
            raise
        except (KeyError, IndexError, TypeError, ValueError) as e:
            self._status.failed()
            self._grid = None
            raise InputError(redact(f"Prometheus at {self.url} answered with a malformed sample: {e!r}")) from e
        self._status.succeeded(time.time())
        return frame

    def target_status(self) -> dict[str, TargetStatus]:
        return {redact(self.url): self._status}

    def node_prices(self) -> dict[str, float]:
        """OpenCost's `node_gpu_hourly_cost` (USD per GPU-hour) by node, where Prometheus has it: the
        price the cluster's own cost tool charges. Read at most every PRICE_REFRESH_SECONDS (prices
        move by the hour, not by the cycle); nodes priced 0 (OpenCost's "unknown") are left out, so
        the price file and the catalogue apply to them. A failed read keeps the last prices."""
        if not self.price_metric or time.monotonic() - self._prices_read_at < PRICE_REFRESH_SECONDS:
            return self._prices
        self._prices_read_at = time.monotonic()
        expr = f"max by (node) ({self.price_metric})"
        try:
            result = self._api("query", {"query": expr, "time": str(self.clock())})
            prices = {s["metric"]["node"]: float(s["value"][1]) for s in result if s["metric"].get("node")}
        except (InputError, KeyError, IndexError, TypeError, ValueError) as e:
            log.warning("cannot read GPU prices (%s) from Prometheus, keeping the last ones: %s", expr, e)
            return self._prices
        priced = {node: price for node, price in prices.items() if math.isfinite(price) and price > 0}
        if sorted(priced) != sorted(self._prices):
            log.info("%d nodes priced by %s; the others by the price file", len(priced), self.price_metric)
        self._prices = priced
        return priced

    def _window_frame(self) -> pd.DataFrame:
        # The window ends on the store's step grid (a multiple of the step): every cycle asks for the same
        # instants, so the steps read by the cycles before are the steps held.
        end = math.floor(self.clock() / self.step) * self.step
        self._instances = ""  # the shard's exporters are looked up anew each cycle: nodes come and go
        if self.shard is not None:
            instances = self._shard_instances(self.shard, end)
            if not instances:
                return fr.empty()
            self._instances = "instance=~" + json.dumps("|".join(re.escape(i) for i in instances))
        if self._grid is None or self._instances != self._grid_instances:  # the steps held are not all theirs
            self._grid = _StepGrid(self.step, int(self.window // self.step) + 1)
            self._grid_instances = self._instances
        grid = self._grid
        start = grid.move_to(end)
        rate_window = self._rate_window()
        # Each answer keeps only the labels that place its values (a GPU: its exporter and uuid): a scrape
        # through kube-prometheus adds a dozen target labels to every series, and once a cycle reads only
        # the newest steps, labels would be most of its bytes.
        by_gpu = "instance, uuid"
        queries: list[tuple[str, str | Callable[[dict], str | None], Callable[[dict], float] | None]] = [
            *((f"max by ({by_gpu}) ({self._sel(spec.name)})", column, None) for column, spec in GAUGES.items()),
            *(
                (f"max by ({by_gpu}) (rate({self._sel(spec.name)}[{rate_window}]))", column, None)
                for column, spec in RATES.items()
            ),
            # Error rates of a GPU's links add up by kind; so do the bits of the clock-event reasons active.
            (
                f"sum by ({by_gpu}, type) (rate({self._sel(m.NVLINK_ERRORS.name)}[{rate_window}]))",
                lambda labels: _ERROR_COLUMN.get(labels.get("type", "")),
                lambda labels: 1.0,
            ),
            (
                f"max by ({by_gpu}, reason) ({self._sel(m.CLOCK_EVENT_ACTIVE.name)} == 1)",
                "clock_event_reasons",
                lambda labels: m.CLOCK_EVENT_REASONS.get(labels.get("reason", ""), 0),
            ),
            *((f"max by ({by_gpu}) ({expr})", column, None) for column, expr in self._shape_queries().items()),
        ]
        self.last_cycle_points = 0
        for expr, column, weight in queries:
            self.last_cycle_points += grid.add(self._query(expr, start, end), column, weight)
        keys, gpu, columns = grid.rows()
        if not len(gpu):
            return fr.empty()
        return fr.normalize(self._identity(keys, gpu, pd.DataFrame(columns), end))

    def _shard_instances(self, shard: Shard, end: float) -> list[str]:
        """The exporters (their `instance`) of the nodes `shard` owns, from one instant query. A GPU's
        node is its `node` label, else its exporter's address, as _identity() names it."""
        window = f"{self.window:.0f}s"
        expr = f"count by (node, instance) (last_over_time({self._sel(m.GPU_INFO.name)}[{window}]))"
        return sorted(
            {
                s["metric"].get("instance", "")
                for s in self._latest(expr, end)
                if shard.owns(s["metric"].get("node") or s["metric"].get("instance", ""))
            }
        )

    def _shape_queries(self) -> dict[str, str]:
        """The SHAPE columns (core/trace.py) as PromQL: counts per row are rates times the step, so that
        their sum over a window is the number of samples, transitions and bursts in it."""
        window = self._rate_window()
        count = f"increase({self._sel(m.ACTIVITY.name + '_count')}[{window}])"

        def below(bound: float) -> str:
            selector = self._sel(m.ACTIVITY.name + "_bucket", f'le="{bound:g}"')
            return f"increase({selector}[{window}]) / ignoring(le) {count}"

        def per_row(name: str) -> str:
            return f"rate({self._sel(name)}[{window}]) * {self.step:g}"

        return {
            "activity_samples": per_row(m.ACTIVITY.name + "_count"),
            "activity_idle_ratio": below(IDLE_BOUND),
            "activity_low_ratio": below(LOW_BOUND),
            "activity_high_ratio": f"1 - ({below(HIGH_BOUND)})",
            "activity_transitions": per_row(m.ACTIVITY_TRANSITIONS.name),
            "steady_bursts": per_row(m.STEADY_BURSTS.name),
        }

    def _rate_window(self) -> str:
        """The range of rate() and increase(): four steps, and never under a minute (four 15 s scrapes)."""
        return f"{max(4 * self.step, 60):.0f}s"

    def _latest(self, expr: str, end: float) -> list[dict]:
        """An instant query at the window's end."""
        return self._api("query", {"query": expr, "time": str(end)})

    def _identity(self, keys: list[tuple[str, str]], gpu: np.ndarray, frame: pd.DataFrame, end: float) -> pd.DataFrame:
        """Model, pod and socket of each GPU (`keys`: its exporter's instance and uuid; `gpu`: each row's
        index into them) as of the window's end (pods rarely move mid-window), and the pods' CPU and
        restarts where cAdvisor and kube-state-metrics are scraped. Looked up once a GPU, not once a row."""
        window = f"{self.window:.0f}s"
        info, groups = self._hardware(keys, end)
        # Series without the labels that identify them (a relabelling that dropped one) are skipped.
        pods = {
            (r["metric"].get("instance", ""), r["metric"]["uuid"]): r["metric"]
            for r in self._latest(f"last_over_time({self._sel(m.GPU_POD_INFO.name)}[{window}])", end)
            if "uuid" in r["metric"]
        }
        per_gpu = {
            "instance": [k[0] for k in keys],
            "gpu": [k[1] for k in keys],
            "gpu_model": [info.get(k, {}).get("model", "") for k in keys],
            "node": [pods.get(k, {}).get("node") or info.get(k, {}).get("node") or k[0] for k in keys],
            **{column: [pods.get(k, {}).get(column, "") for k in keys] for column in ("namespace", "pod", "container")},
        }
        for column, values in per_gpu.items():
            frame[column] = _by_row(values, gpu)
        for column, group in groups.items():
            frame[column] = np.array([group.get(k[1], np.nan) for k in keys], dtype=np.float64)[gpu]
        cpu = {
            (r["metric"].get("namespace"), r["metric"].get("pod")): float(r["value"][1])
            for r in self._latest(
                'sum by (namespace, pod) (rate(container_cpu_usage_seconds_total{container!="",container!="POD"}[2m]))',
                end,
            )
        }
        limit = {
            (r["metric"].get("namespace"), r["metric"].get("pod")): float(r["value"][1])
            for r in self._latest(
                # kube-state-metrics where it runs, else the CFS quota cAdvisor reports for the limit.
                'sum by (namespace, pod) (kube_pod_container_resource_limits{resource="cpu"}) or '
                "sum by (namespace, pod) "
                '(container_spec_cpu_quota{container!=""} / container_spec_cpu_period{container!=""})',
                end,
            )
        }
        restarts = {
            (r["metric"].get("namespace"), r["metric"].get("pod")): float(r["value"][1])
            for r in self._latest(
                f"sum by (namespace, pod) (increase(kube_pod_container_status_restarts_total[{window}]))", end
            )
        }
        pod_keys = list(zip(per_gpu["namespace"], per_gpu["pod"], strict=True))
        frame["cpu_usage_cores"] = np.array([cpu.get(k, np.nan) for k in pod_keys], dtype=np.float64)[gpu]
        frame["cpu_limit_cores"] = np.array([limit.get(k, np.nan) for k in pod_keys], dtype=np.float64)[gpu]
        # The restarts within the window: 0 at each pod's first sample, the increase at its last.
        frame["restarts_total"] = np.nan
        with_restarts = frame[np.array([k in restarts for k in pod_keys], dtype=bool)[gpu]]
        if not with_restarts.empty:
            grouped = with_restarts.groupby(["namespace", "pod"], observed=True)["timestamp"]
            frame.loc[grouped.idxmin().to_numpy(), "restarts_total"] = 0.0
            last = grouped.idxmax()
            frame.loc[last.to_numpy(), "restarts_total"] = [restarts[k] for k in last.index]
        return frame

    def _hardware(
        self, keys: list[tuple[str, str]], end: float
    ) -> tuple[dict[tuple[str, str], dict], dict[str, dict[str, int]]]:
        """Each GPU's gpu_info labels (model, node) by (instance, uuid), and its topology groups (socket,
        PCIe root, NVLink island; core/topology.py) by uuid. Hardware changes rarely and the topology is
        a series per pair of GPUs (a third of a node's series): read every HARDWARE_REFRESH_SECONDS, or
        at once when a GPU appears that the last read did not have."""
        cached = self._hardware_cache
        if (
            cached is not None
            and time.monotonic() - self._hardware_read_at < HARDWARE_REFRESH_SECONDS
            and all(k in cached[0] for k in keys)
        ):
            return cached
        window = f"{self.window:.0f}s"
        info = {
            (r["metric"].get("instance", ""), r["metric"]["uuid"]): r["metric"]
            for r in self._latest(f"last_over_time({self._sel(m.GPU_INFO.name)}[{window}])", end)
            if "uuid" in r["metric"]
        }
        pairs = [
            (r["metric"]["uuid"], r["metric"]["peer_uuid"], r["metric"]["level"], r["metric"].get("p2p", "unknown"))
            for r in self._latest(f"last_over_time({self._sel(m.TOPOLOGY.name)}[{window}])", end)
            if {"uuid", "peer_uuid", "level"} <= r["metric"].keys()
        ]
        self._hardware_cache = info, {column: of(pairs) for column, of in GROUPS.items()}
        self._hardware_read_at = time.monotonic()
        return self._hardware_cache

    def start(self) -> None:
        """Nothing to run in the background: every cycle queries the window it needs."""

    def close(self) -> None:
        self.session.close()
