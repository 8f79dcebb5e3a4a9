"""Live inputs of the analyzer service: Prometheus (the production path) or exporters directly.

Both turn gpulens exporter metrics into the trace frame (gpulens.analyzer.inputs.frame) over a sliding window.
- PrometheusInput issues one range query per signal per cycle, for all GPUs at once, so the number
  of queries does not grow with the number of pods; any server with Prometheus' HTTP API works
  (Thanos, Mimir, VictoriaMetrics). cAdvisor and kube-state-metrics series, where present, add the
  pods' CPU use, limits and restarts.
- ExporterInput scrapes a list of exporters itself and keeps the window in memory: the embedded
  default for the demo and small setups with no Prometheus.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO, cast
from urllib.parse import urlparse

import pandas as pd
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs import state
from gpulens.analyzer.inputs.cluster import ClusterReader, ClusterReading, WorkloadHistory, judged_grid, read_cluster
from gpulens.analyzer.inputs.engines import EngineLoad, Health, read_engine_loads, read_workload_health
from gpulens.analyzer.inputs.kinds import DEFAULT_RULES, KindRule, PodKey, Pools
from gpulens.analyzer.inputs.owners import Owner, OwnerReader
from gpulens.analyzer.inputs.proposals import Proposal, read_proposal
from gpulens.analyzer.inputs.queries import instances_matcher
from gpulens.analyzer.inputs.series import SeriesReader
from gpulens.analyzer.inputs.store import (
    MAX_ANSWER_BYTES,
    AnswerLate,
    AnswerTooBig,
    Store,
    StoreAuth,
    StoreError,
    read_answer,
)
from gpulens.analyzer.inputs.window import READ_PARTS, REREAD_STEPS, Shard, Window
from gpulens.core import catalog, mixin
from gpulens.core import metrics as m
from gpulens.core import trace as tr
from gpulens.core.activity import HIGH_BOUND, IDLE_BOUND, LOW_BOUND, Totals
from gpulens.core.config import ConfigError, redact
from gpulens.core.mixin import MixinConfig
from gpulens.core.status import LoopGuard, ProblemLog
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


class ValueChecks:
    """The values an input answered that no GPU can report (frame.impossible): left out of its frames,
    counted, and said once while they keep coming."""

    def __init__(self, source: str):
        self.source = source
        #: Values left out since the start.
        self.left_out = 0
        self._problems = ProblemLog(log)

    def possible(self, frame: pd.DataFrame) -> pd.DataFrame:
        frame, counts, first = fr.without_impossible(frame)
        if counts:
            self.left_out += sum(counts.values())
            self._problems.problem(
                "impossible",
                f"{self.source} answered values no GPU can report ({', '.join(sorted(counts))}): left out of the "
                f"verdicts, as if not sampled; the first: {first}",
            )
        else:
            self._problems.resolved("impossible", f"{self.source} answers only values a GPU can report again")
        return frame


@dataclass(frozen=True)
class WorkloadReading:
    """kube-state-metrics' replicas and autoscaler bounds of every workload over a span (unix seconds), and the
    step the GPU samples of that span are taken at: what the changes over the service's history are found in."""

    history: WorkloadHistory
    start: float
    end: float
    sample_step: float


class AnalyzerInput(Protocol):
    """Where the analyzer service reads its window from: Prometheus, or exporters directly."""

    name: str
    #: What the input answered that no GPU can report.
    checks: ValueChecks

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

    def owners(self, pods: set[PodKey]) -> dict[PodKey, Owner]:
        """The workload and team of each pod where the cluster says (kube-state-metrics), else empty."""
        ...

    def engine_loads(self, pods: set[PodKey], history: float, percentile: float) -> dict[PodKey, EngineLoad]:
        """What each serving pod's engine counted over the last `history` seconds (analyzer/inputs/engines.py),
        where the store holds its metrics, else empty. `pods` are those judged (not insufficient_data): a pod
        is read once it has the samples its GPU verdict needs, not from its first seconds."""
        ...

    def cluster(self) -> ClusterReading | None:
        """The cluster over the window, for its share (analyzer/judging/scheduling.py), where kube-state-metrics
        says which pods ask GPUs, else None; the same object until it is read again."""
        ...

    def workloads(self, history: float) -> WorkloadReading | None:
        """The workloads' replicas and autoscaler bounds over the last `history` seconds (docs/changes.md), where
        the store holds kube-state-metrics' series, else None."""
        ...

    def workload_health(
        self, namespace: str, pods: list[str], start: float, end: float, percentile: float
    ) -> Health | None:
        """A serving workload's health between `start` and `end` as its engine counted it, its spreads at
        `percentile` (engines.py), where the store holds its engine's series, else None."""
        ...

    def proposal(self, owner: str, at: float, lookback: float) -> Proposal | None:
        """What the live plan proposed for `owner` as last served within `lookback` seconds before `at`, where
        the store keeps the analyzer's own series, else None."""
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
        self.session.headers["Accept-Encoding"] = "gzip, deflate"  # what read_answer inflates within its bound
        self._rows: collections.deque = collections.deque()
        self._rates = tr.CounterRates()
        self._xids = tr.NewXids()
        self._shape_totals: dict[tuple[str, str], Totals] = {}
        self._lock = threading.Lock()
        self.last_error = ""
        self._status = {url: TargetStatus() for _, url in targets}
        self.checks = ValueChecks(f"the {len(targets)} exporters")
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
                with self.session.get(url, timeout=self.timeout, stream=True) as response:
                    response.raise_for_status()
                    content = read_answer(response, MAX_ANSWER_BYTES, time.monotonic() + self.timeout)
                status.read_bytes += len(content)
                rows.extend(self._rows_from(node, content.decode("utf-8", "replace"), now))
            except (requests.RequestException, AnswerTooBig, AnswerLate) as e:
                status.failed()
                problem = f"did not answer whole within {self.timeout:g} s" if isinstance(e, AnswerLate) else e
                self.last_error = redact(f"cannot scrape exporter {url}: {problem}")
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
        xids: dict[str, dict[str, float]] = {}  # XID counts by uuid and code
        mig_parents: set[str] = set()  # GPUs in MIG mode: their instances are the units (SeriesReader.frame)
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
                elif s.name == m.XID_ERRORS.name:
                    xids.setdefault(uuid, {})[s.labels.get("xid", "")] = s.value
                elif s.name == m.CLOCK_EVENT_ACTIVE.name:
                    reports_clock_events.add(uuid)
                    if s.value == 1:
                        row["clock_event_reasons"] = row.get("clock_event_reasons", 0) + m.CLOCK_EVENT_REASONS.get(
                            s.labels["reason"], 0
                        )
                elif s.name == m.GPU_INFO.name:
                    row["gpu_model"] = catalog.device_name(s.labels.get("model", ""), s.labels.get("mig_profile", ""))
                    if s.labels.get("mig_mode") == "enabled":
                        mig_parents.add(uuid)
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
            code = self._xids.code((node, uuid), xids.get(uuid, {}))
            if code is not None and len(row) > 3:  # on the rows of GPUs that report
                row["hardware_xid"] = code
            row.update(pods.get(uuid, {}))
            if uuid in reports_clock_events:
                row.setdefault("clock_event_reasons", 0)
            for column, group in groups.items():
                if uuid in group:
                    row[column] = group[uuid]
        return [row for uuid, row in devices.items() if len(row) > 3 and uuid not in mig_parents]

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
        return self.checks.possible(fr.normalize(pd.DataFrame(rows)) if rows else fr.empty())

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

    def owners(self, pods: set[PodKey]) -> dict[PodKey, Owner]:
        return {}  # exporters know pods, not their owners

    def engine_loads(self, pods: set[PodKey], history: float, percentile: float) -> dict[PodKey, EngineLoad]:
        return {}  # the engines are scraped into a store, not read here

    def cluster(self) -> ClusterReading | None:
        return None  # kube-state-metrics is scraped into a store, not read here

    def workloads(self, history: float) -> WorkloadReading | None:
        return None  # likewise

    def workload_health(
        self, namespace: str, pods: list[str], start: float, end: float, percentile: float
    ) -> Health | None:
        return None  # the engines are scraped into a store

    def proposal(self, owner: str, at: float, lookback: float) -> Proposal | None:
        return None  # the analyzer's own series are scraped into a store


#: Points (a GPU's value at a step) a cycle reads of the steps before its newest while its window is not
#: whole yet. A replica's first cycle reads only the newest eighth of its window, so that it serves verdicts
#: within seconds however large the fleet (on a shorter span at first: each says its samples); the rest
#: follows at this many points a cycle (at 10,000 GPUs, about 6 steps a cycle), or at once in a small fleet.
READ_POINTS_PER_CYCLE = 2_000_000
#: How often the live input writes the window it holds to its state file (and at shutdown): a restart
#: reads again what came after the last write. 8 bytes a GPU, column and step (about 120 MB at 10,000
#: GPUs and a 10-minute window at a 15 s step), written in a fraction of a second.
STATE_WRITE_SECONDS = 60.0
#: How often the live input reads the pods' owners and teams, and their engines' load, again (new pods are
#: read at once).
OWNER_REFRESH_SECONDS = 300.0
#: Steps of kube-state-metrics' workload series read over the service's history (a day: a minute a step).
WORKLOAD_POINTS = 1440
#: OpenCost's (and Kubecost's) metric: hourly cost per GPU on the node, labelled `node`.
OPENCOST_GPU_PRICE = "node_gpu_hourly_cost"
PRICE_REFRESH_SECONDS = 300.0
#: How often the live input reads the cluster's nodes, GPU requests and waits again.
CLUSTER_REFRESH_SECONDS = 60.0


class PrometheusInput:
    """Range queries against a Prometheus HTTP API: a fixed number per cycle, whatever the fleet. Reads
    gpulens' series and dcgm-exporter's (analyzer/inputs/series.py), through analyzer/inputs/store.py."""

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
        auth: StoreAuth | None = None,
        compression: str = "auto",
        dcgm_selector: str = "",
        config: MixinConfig | None = None,
        team_label: str = "",
        state_file: str = "",
        parts: int = READ_PARTS,
        rules: Sequence[KindRule] = DEFAULT_RULES,
        pools: Pools | None = None,
    ):
        self.store = Store(url, auth, timeout, retries=1, compression=compression)
        self.checks = ValueChecks(self.store.name)
        self.url = self.store.url
        #: This replica's share of the nodes; None judges them all.
        self.shard = shard
        #: OpenCost's price per GPU-hour by node, read every PRICE_REFRESH_SECONDS; "" reads none.
        self.price_metric = price_metric
        self._prices: dict[str, float] = {}
        self._prices_read_at = -math.inf
        self.clock = clock  # the window ends now: unix seconds
        self.window = window
        self.step = step
        #: The parts the queries are split into, read in turns (analyzer/inputs/window.py READ_PARTS).
        self.parts = parts
        self.reader = SeriesReader(self.store, step, config, selector, dcgm_selector)
        kube_state = self.reader.config.kube_state_metrics
        self._owner_reader = OwnerReader(self.store, team_label, rules, kube_state)
        self._owners: dict[PodKey, Owner] = {}
        self._owners_read_at = -math.inf
        #: The controller of each pod a read named one for, the most recent last, at most MAX_UNITS of them.
        self._controllers: collections.OrderedDict[PodKey, Owner] = collections.OrderedDict()
        self._engines: dict[PodKey, EngineLoad] = {}
        self._engines_read_at = -math.inf
        self._engines_read_for: set[PodKey] = set()  # the pods judged when they were last read
        #: Where each kind of workload belongs (--analysis.config's pools), and the cluster last read.
        self.pools = pools or Pools()
        self._cluster_reader = ClusterReader(self.store, self.pools.label, kube_state)
        self._cluster: ClusterReading | None = None
        self._cluster_read_at = -math.inf
        self._status = TargetStatus()
        #: The window held between cycles; None: the next cycle reads it whole.
        self._held: Window | None = None
        self._held_instances = ""
        #: Where the window is kept across restarts ("": nowhere), and when it was last written
        #: (time.monotonic()); a cycle and a write never run at once.
        self.state_file = state_file
        self._state_written_at = -math.inf
        self._state_loaded = False
        self._state_lock: TextIO | None = None  # the state file's lock, held while the process lives
        self._state_problems = ProblemLog(log)
        self._reading = threading.Lock()
        self._last_points = 0
        self._filling = False  # the window held is not whole yet (first cycles, or after a long gap)

    @property
    def last_cycle_points(self) -> int:
        """Points in the range queries' answers of the last cycle."""
        return self._last_points

    def window_frame(self) -> pd.DataFrame:
        with self._reading:
            frame = self._checked_frame()
            if self.state_file and time.monotonic() - self._state_written_at >= STATE_WRITE_SECONDS:
                self._write_state()
            return frame

    def _checked_frame(self) -> pd.DataFrame:
        before = self.store.read_bytes
        try:
            frame = self.checks.possible(self._window_frame())
        except StoreError as e:
            self._failed()
            raise InputError(str(e)) from None
        except (KeyError, IndexError, TypeError, ValueError) as e:
            self._failed()
            self._held = None  # what it holds may be what is malformed: the next cycle reads the window anew
            raise InputError(redact(f"Prometheus at {self.url} answered with a malformed sample: {e!r}")) from e
        finally:
            self._status.read_bytes += self.store.read_bytes - before
        self._status.succeeded(time.time())
        return frame

    def _failed(self) -> None:
        self._status.failed()  # the window held is kept: the next cycle reads from its first step not read

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
            before = self.store.read_bytes
            result = self.store.query(expr, self.clock())
            self._status.read_bytes += self.store.read_bytes - before
            prices = {s["metric"]["node"]: float(s["value"][1]) for s in result if s["metric"].get("node")}
        except (StoreError, KeyError, IndexError, TypeError, ValueError) as e:
            log.warning("cannot read GPU prices (%s) from Prometheus, keeping the last ones: %s", expr, e)
            return self._prices
        priced = {node: price for node, price in prices.items() if math.isfinite(price) and price > 0}
        if sorted(priced) != sorted(self._prices):
            log.info("%d nodes priced by %s; the others by the price file", len(priced), self.price_metric)
        self._prices = priced
        return priced

    def owners(self, pods: set[PodKey]) -> dict[PodKey, Owner]:
        """kube-state-metrics' owners and teams of `pods`, read every OWNER_REFRESH_SECONDS or at once
        when a pod appears; a failed read keeps the last ones. A pod's controller never changes: one read
        after a pod ended (its samples linger a step in the window, its kube-state-metrics series do not) keeps
        the controller read before, rather than take it for a bare pod."""
        fresh = time.monotonic() - self._owners_read_at < OWNER_REFRESH_SECONDS
        if fresh and pods <= self._owners.keys():
            return self._owners
        try:
            before = self.store.read_bytes
            read = self._owner_reader.read(pods, self.clock(), self.window)
            for pod, owner in read.items():
                if owner.kind != "Pod":
                    self._controllers[pod] = owner
                    self._controllers.move_to_end(pod)
                elif pod in self._controllers:  # its series are gone, its controller is not
                    read[pod] = self._controllers[pod]
            while len(self._controllers) > fr.MAX_UNITS:
                self._controllers.popitem(last=False)
            self._owners = read
            self._status.read_bytes += self.store.read_bytes - before
        except (StoreError, KeyError, TypeError) as e:
            log.warning("cannot read the pods' owners from kube-state-metrics, keeping the last ones: %s", e)
        self._owners_read_at = time.monotonic()
        return self._owners

    def cluster(self) -> ClusterReading | None:
        """The cluster over the window, read every CLUSTER_REFRESH_SECONDS (kube-state-metrics
        changes at a pod's pace, not a scrape's); a failed read keeps the last one. The cluster is one
        whatever the shards: shard 0 alone reads it, so that its series are not repeated by every replica."""
        if self.shard is not None and self.shard.index != 0:
            return None
        if time.monotonic() - self._cluster_read_at < CLUSTER_REFRESH_SECONDS:
            return self._cluster
        end = math.floor(self.clock() / self.step) * self.step
        try:
            before = self.store.read_bytes
            span = (end - self.window, end, self.step)
            self._cluster = read_cluster(self._cluster_reader, self._owner_reader, span, self.pools)
            self._status.read_bytes += self.store.read_bytes - before
        except (StoreError, KeyError, TypeError, ValueError) as e:
            log.warning("cannot read the cluster from kube-state-metrics, keeping the last reading: %s", e)
        self._cluster_read_at = time.monotonic()
        return self._cluster

    def workloads(self, history: float) -> WorkloadReading | None:
        """The workloads' replicas and autoscaler bounds over the last `history` seconds, at most
        WORKLOAD_POINTS steps of it (at least the window's step); None where the store fails (said) or holds
        none."""
        end = math.floor(self.clock() / self.step) * self.step
        grid = judged_grid(end - history, end, max(self.step, history / WORKLOAD_POINTS))
        try:
            before = self.store.read_bytes
            found = self._cluster_reader.workloads(*grid)
            self._status.read_bytes += self.store.read_bytes - before
        except (StoreError, KeyError, TypeError, ValueError) as e:
            log.warning("cannot read the workloads' replicas from kube-state-metrics: %s", e)
            return None
        if not found.replicas and not found.autoscalers:
            return None
        return WorkloadReading(found, end - history, end, self.step)

    def workload_health(
        self, namespace: str, pods: list[str], start: float, end: float, percentile: float
    ) -> Health | None:
        try:
            return read_workload_health(self.store, namespace, pods, start, end, self.step, percentile)
        except (StoreError, KeyError, TypeError, ValueError) as e:
            log.warning("cannot read %s's engine health: %s", namespace, e)
            return None

    def proposal(self, owner: str, at: float, lookback: float) -> Proposal | None:
        try:
            return read_proposal(self.store, owner, at, lookback)
        except (StoreError, KeyError, TypeError, ValueError) as e:
            log.warning("cannot read the plan's series for %s: %s", owner, e)
            return None

    def engine_loads(self, pods: set[PodKey], history: float, percentile: float) -> dict[PodKey, EngineLoad]:
        """What each serving pod's engine counted over the last `history` seconds, read every
        OWNER_REFRESH_SECONDS or at once when a pod is judged that the last read was not made for, and never
        before a pod is judged: a replica is sized from at least the samples that judged it, not from its first
        seconds for five minutes. A failed read keeps the last ones until the next."""
        fresh = time.monotonic() - self._engines_read_at < OWNER_REFRESH_SECONDS
        if not pods or (fresh and pods <= self._engines_read_for):
            return self._engines
        end = self.clock()
        try:
            before = self.store.read_bytes
            self._engines = read_engine_loads(self.store, end - history, end, self.step, percentile)
            self._status.read_bytes += self.store.read_bytes - before
        except (StoreError, KeyError, TypeError, ValueError) as e:
            log.warning("cannot read the serving engines' metrics, keeping the last ones: %s", e)
        # Even when the read failed: a store that cannot answer is asked again in five minutes or for a pod
        # judged since, not at every cycle.
        self._engines_read_for = set(pods)
        self._engines_read_at = time.monotonic()
        return self._engines

    def _window_frame(self) -> pd.DataFrame:
        # The window ends on the store's step grid (a multiple of the step): every cycle asks for the same
        # instants, so the steps read by the cycles before are the steps held.
        end = math.floor(self.clock() / self.step) * self.step
        reader = self.reader
        if self.shard is not None:  # the shard's exporters are looked up anew each cycle: nodes come and go
            instances = self._shard_instances(self.shard, end)
            if not instances:
                return fr.empty()
            reader = self.reader.scoped(instances_matcher(instances))
        if self._held is None and self.state_file and not self._state_loaded:  # a restart: what it held before
            self._state_loaded = True
            self._state_lock = state.lock(self.state_file)
            if self._state_lock is None:
                log.error(
                    "another analyzer holds the state file %s: give each replica its own --analysis.state-file "
                    "(a StatefulSet's volume); this one keeps no state",
                    self.state_file,
                )
                self.state_file = ""
            else:
                self._held = state.load(self.state_file, self._identity(reader.instances), self._empty_window())
                self._held_instances = reader.instances
        if self._held is None or reader.instances != self._held_instances:  # the steps held are not all theirs
            self._held = self._empty_window()
            self._held_instances = reader.instances
        held = self._held
        first = held.read_from is None
        start = held.move_to(end, newest=max(REREAD_STEPS + 1, held.gpus.points // 8))
        points, steps = reader.read(held, held.due, end), round((end - start) / self.step) + 1
        # The older steps while the window is not whole: as many as READ_POINTS_PER_CYCLE allows at the
        # points a step of every part costs (all of them at once in a small fleet, a few a cycle in a large
        # one); a first cycle reads them only if they all fit, so that it serves within seconds.
        step_points = points / steps * held.parts / len(held.due)
        older = held.older(max(1, round(READ_POINTS_PER_CYCLE / max(step_points, 1))), start)
        if older is not None and (not first or older[0] <= held.start):
            points, start = points + reader.read(held, *older), older[0]
        held.complete(start)
        read_from = held.read_from
        filling = read_from is not None and read_from > held.start
        if filling and not self._filling:
            log.info(
                "%s: reading the window newest steps first (%.0f s so far), the older ones a few a cycle; "
                "verdicts meanwhile rest on the span read",
                self.store.name,
                end - start,
            )
        elif self._filling and not filling:
            log.info("%s: the window is whole", self.store.name)
        self._filling = filling
        self._last_points = points
        return reader.frame(held, self.window)

    def _empty_window(self) -> Window:
        return Window.of(self.step, int(self.window // self.step) + 1, self.parts)

    def _shard_instances(self, shard: Shard, end: float) -> list[str]:
        """The exporters (their `instance`) of the nodes `shard` owns, from one instant query per family.
        A GPU's node is its `node` label (dcgm-exporter: `Hostname`), else its exporter's address."""
        window = f"{self.window:.0f}s"
        gpulens = self.store.query(
            f"count by (node, instance) (last_over_time({self.reader.selector(m.GPU_INFO.name)}[{window}]))", end
        )
        dcgm_matchers = self.reader.matchers("dcgm")
        dcgm = self.store.query(
            f"count by (Hostname, instance) (last_over_time({mixin.DCGM_IDENTITY_SERIES}"
            f"{{{dcgm_matchers}}}[{window}]))",
            end,
        )
        return sorted(
            {
                s["metric"].get("instance", "")
                for s in gpulens + dcgm
                if shard.owns(s["metric"].get("node") or s["metric"].get("Hostname") or s["metric"].get("instance", ""))
            }
        )

    def _identity(self, instances: str) -> dict:
        """What a state file must have been written with to be used: the same store, series (`instances`: the
        exporters a shard reads) and grid, and the settings that change the values read (not the verdicts'
        thresholds, links or severities)."""
        config = self.reader.config
        return {
            "store": redact(self.url),
            "selector": self.reader.gpulens_selector,
            "dcgm_selector": self.reader.dcgm_selector,
            "instances": instances,
            "step": self.step,
            "window": self.window,
            "parts": self.reader.parts(self.parts),
            "throttle_reasons_mask": config.thresholds.throttle_reasons_mask,
            "dcgm_pod_labels": config.dcgm_pod_labels,
            "exporter_pods": config.exporter_pods,
            # The jobs read, as the shards' settings name them (analyzer/cli/).
            **{name: getattr(config, name) for name in mixin.JOBS_READ},
        }

    def _write_state(self) -> None:
        """The window held, to the state file; a failure is said once (and once when writes work again), and
        the service goes on."""
        if self._held is None:
            return
        try:
            state.save(self.state_file, self._held, self._identity(self._held_instances))
        except ConfigError as e:
            self._state_problems.problem("write", f"cannot keep the window across restarts: {e}")
        else:
            self._state_problems.resolved("write", f"the window is kept across restarts again, in {self.state_file}")
        self._state_written_at = time.monotonic()

    def start(self) -> None:
        """Nothing to run in the background: every cycle queries the window it needs."""

    def close(self) -> None:
        """Keep the window for the next start (after the cycle under way, if any), then let the store go. A
        cycle waiting to retry gives up at once, so a shutdown waits for one request at most."""
        self.store.interrupt()
        if self.state_file:
            with self._reading:
                self._write_state()
        if self._state_lock is not None:
            self._state_lock.close()
            self._state_lock = None
        self.store.close()
