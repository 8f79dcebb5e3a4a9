"""What the analyzer reads from a store, and how it holds it: the range queries for gpulens' series and
for NVIDIA dcgm-exporter's (fleets that run only the GPU Operator get verdicts too), cAdvisor's and
kube-state-metrics' per-pod series, and the step grid the answers are placed on.

The live analyzer (analyzer/inputs/live.py) reads a sliding window through it, and `gpulens report --prometheus`
a span of days, piece by piece (analyzer/runs/span.py). Every fact is read per step, the pod that holds a GPU
included: over a week a GPU passes from pod to pod.

Where a GPU reports through both gpulens' exporter and dcgm-exporter, gpulens' series are used (they hold
the activity shape between scrapes and the topology) and dcgm-exporter's rows for that GPU are dropped.
Which series a deployment's labels hold is configured in core/mixin.py (MixinConfig), the home of every
query the dashboards and alerts make too.
"""

from __future__ import annotations

import collections
import copy
import functools
import json
import re
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial

import numpy as np
import pandas as pd

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs.queries import (
    BARE_STEPS,
    GPU_BY,
    SHAPE_BUCKETS,
    SHAPE_COUNT,
    Bare,
    Query,
    QueryWriter,
    judged_columns,
    keep_answer,
    newest_last,
    part_key,
    parts_of,
    scaled_answer,
    to_each,
)
from gpulens.analyzer.inputs.store import Store
from gpulens.analyzer.inputs.window import (
    Exporters,
    Hardware,
    Key,
    StepGrid,
    Window,
    dcgm_gpu,
    gpulens_gpu,
    left_by_a_pod,
    pod_key,
)
from gpulens.core import catalog, mixin
from gpulens.core import metrics as m
from gpulens.core import trace as tr
from gpulens.core.topology import GROUPS

#: How often the GPUs' models and NVLink topology are read again (SeriesReader.hardware).
HARDWARE_REFRESH_SECONDS = 300.0
#: Range queries asked of the store at once: two keep it evaluating the next while this process decodes
#: and places the last (about 40% of a cycle's time at 10,000 GPUs; benchmarks/live_prometheus.py).
QUERIES_IN_FLIGHT = 2


class SeriesReader(QueryWriter):
    """Fills a Window from a store: one range query per signal and family for every GPU at once, so the
    queries do not grow with the fleet. Each family's series are those of its job in `config`
    (MixinConfig.exporter, .dcgm: "" any job), with the label matchers `gpulens_selector` and
    `dcgm_selector` added (`cluster="eu-1"`); `instances` (scoped()) keeps a shard's."""

    def __init__(
        self,
        store: Store,
        step: float,
        config: mixin.MixinConfig | None = None,
        gpulens_selector: str = "",
        dcgm_selector: str = "",
        intervals: Mapping[str, float] | None = None,
    ):
        super().__init__(step, config, gpulens_selector, dcgm_selector, intervals)
        self.store = store
        self._exporter_pods = re.compile(self.config.exporter_pods)
        #: gpulens' hardware series as last read, and when (time.monotonic()): shared with scoped() copies.
        self._hardware: list[tuple[Hardware, float]] = []

    def scoped(self, instances: str) -> SeriesReader:
        """This reader, reading only the exporters `instances` matches (instances_matcher(); "" all) besides
        those it is scoped to already: a shard's, or a group of nodes read apart. The copy shares the store,
        the intervals measured and the hardware read."""
        scoped = copy.copy(self)
        scoped.instances = mixin.matchers(self.instances, instances)
        return scoped

    def scrape_interval(self, at: float, lookback: float) -> float | None:
        """Seconds between the samples the store holds of a GPU in the `lookback` seconds to `at` (the median
        gap between one GPU's raw samples: gpulens' series, else dcgm-exporter's), to a tenth of a second; None
        where it holds none. Each family's interval is kept (`intervals`): a GPU's pod is read only from
        identity samples at most IDENTITY_FRESH intervals old, so that a pod gone from a store that holds no
        staleness marker (backfilled history) is not carried for its lookback. (Values are not filtered so: it
        would triple Prometheus' cost of every value query, benchmarks/store_report.py; dcgm-exporter's, which
        carry the pod, give way to the next pod's series instead.) A few small queries a family: one GPU is
        found, then its samples read."""
        window = f"{max(lookback, 60.0):.0f}s"
        for family, expr in zip(("gpulens", "dcgm"), self.looked_for(), strict=True):
            found = self.store.query(f"topk(1, last_over_time({expr}[{window}]))", at)
            if not found:
                continue
            name = expr.split("{")[0]
            labels = ",".join(f"{k}={json.dumps(v)}" for k, v in sorted(found[0]["metric"].items()) if k != "__name__")
            series = self.store.samples(f"{name}{{{labels}}}[{window}]", at)
            stamps = np.array([float(t) for t, _ in series[0]["values"]]) if series else np.zeros(0)
            if len(stamps) > 1:
                gap = float(np.median(np.diff(stamps)))
                self.intervals[family] = float(round(gap)) if abs(gap - round(gap)) < 0.05 else round(gap, 1)
        return next(iter(self.intervals.values()), None)

    # --- reading -----------------------------------------------------------------------------------
    def read(self, window: Window, start: float | dict[int, float], end: float) -> int:
        """The queries' steps to `end` (on the grid) into `window`: every part's from `start`, or (a dict:
        Window.due) the parts it names, each from its own first step. QUERIES_IN_FLIGHT are asked at once,
        so that the store evaluates the next while this process decodes and places the last, each answer
        placed in the order asked. A query of BARE_STEPS steps or more is asked in its bare form (Bare). The
        points the answers held."""
        firsts = start if isinstance(start, dict) else dict.fromkeys(range(window.parts), start)
        # The plan is made again each read: 0.4 ms for 53 queries, a ten-thousandth of a live cycle, and a
        # kept one would carry the answers its consumers hold between queries past a read that failed.
        queries = self._queries(window)
        part_of = parts_of(queries, window.parts)
        # Each expression is asked once, where it is last asked, and its answer handed to each consumer in
        # turn: bare reads of dcgm-exporter ask DCGM_FI_DEV_FB_USED as memory used, as a kind of the memory
        # total and as the pod identity. A consumer that keeps an answer for a later one (a freshness count,
        # the memory kinds) is asked before it, so moving a shared query later keeps that order.
        consumers: dict[tuple[str, float], list[Callable[[list[dict]], int]]] = {}
        for query in queries:
            part = part_of[query.key]
            if part not in firsts:
                continue
            long = round((end - firsts[part]) / self.step) + 1 >= BARE_STEPS
            forms = query.bare if long and query.bare is not None else [(query.expr, query.place)]
            for expr, place in forms:
                shared = consumers.pop((expr, firsts[part]), [])
                consumers[expr, firsts[part]] = [*shared, functools.partial(place, part)]
        asked = [(expr, start, to_each(uses)) for (expr, start), uses in consumers.items()]
        points = self._answered(asked, end)
        shape = part_of[SHAPE_COUNT]
        if shape in firsts:
            self._shape_ratios(window.gpus, firsts[shape], end, shape)
        return points

    def parts(self, count: int) -> dict[str, int]:
        """The part of `count` each query key is read in (what a state file's reads mean)."""
        return parts_of(self._queries(Window.of(self.step, 1, count)), count)

    def _queries(self, window: Window) -> list[Query]:
        """Every range query of a read, in the order asked, with what places its answer in `window`."""
        gpus = window.gpus
        queries: list[Query] = []

        def ask(
            family: str,
            key: str,
            expr: str,
            place: Callable[[int, list[dict]], int],
            series: float = 1,
            bare: Bare | list[tuple[str, Callable[[int, list[dict]], int]]] | None = None,
        ) -> None:
            # Prometheus allocates about 1.5 times as much for a rate over a GPU's series as for its gauge
            # (benchmarks/live_prometheus.py): the weight that balances the parts.
            rated = "rate(" in expr or "increase(" in expr
            bare_form = bare.asked(place) if isinstance(bare, Bare) else bare
            queries.append(Query(key, family, expr, place, series * (1.5 if rated else 1.0), bare_form))

        def add(
            family: str,
            expr: str,
            column: str,
            weight: Callable[[dict], float] | None = None,
            key: Callable[[dict], Key | None] = gpulens_gpu,
            grid: StepGrid = gpus,
            summed: bool | None = None,
            bare: Bare | None = None,
            scale: float = 1.0,
        ) -> None:
            ask(
                family,
                part_key(column),
                expr,
                lambda part, result: grid.add(scaled_answer(result, scale), column, weight, key, summed, part),
                self._series_per_gpu(column),
                bare,
            )

        for query in self._gpulens_queries():
            add("gpulens", query.expr, query.column, query.weight, bare=query.bare, scale=query.scale)
        # The hardware XIDs counted at each step, one series per code: written lowest code first, so that
        # where a GPU counted several the highest stays. Asked as it is: few GPUs have such series.
        ask(
            "gpulens",
            "hardware_xid",
            mixin.hardware_xids(
                self.selector(m.XID_ERRORS.name, mixin.HARDWARE_XID_MATCHER), self.rate_window(), "instance, uuid"
            ),
            lambda part, xids: gpus.add(
                sorted(
                    (x for x in xids if x["metric"].get("xid", "").isdigit()), key=lambda x: int(x["metric"]["xid"])
                ),
                "hardware_xid",
                lambda labels: float(labels["xid"]),
                summed=False,
                part=part,
            ),
        )
        pod_labels = ("namespace", "pod", "container")
        pod_info = self.selector(m.GPU_POD_INFO.name)
        ask(
            "gpulens",
            "_pod",
            f"max by (instance, uuid, {', '.join(pod_labels)}) ({self._fresh('gpulens', pod_info)})",
            lambda part, held: gpus.add(
                newest_last(held),
                "_pod",
                weight=lambda labels: self._pod_code(window, labels, pod_labels),
                summed=False,
                part=part,
            ),
            bare=self._bare_identity("gpulens", pod_info, (*GPU_BY, *pod_labels)),
        )
        by_labels = ("instance", *mixin.DCGM_GPU_LABELS)
        by = ", ".join(by_labels)
        # dcgm-exporter writes a GPU's pod on its value series: where a pod gives way to the next (or to none),
        # both series stand for a while (a store's lookback without staleness markers): each pod's values are
        # read apart and placed oldest first, so that at a step both name, the newer series' value stands, as
        # the newer pod does in the identity.
        held_by = tuple(n for names in mixin.DCGM_POD_LABELS.values() for n in names)
        for column, source in judged_columns(mixin.dcgm_columns()).items():
            selector = source.selector(self.matchers("dcgm"))
            ask(
                "dcgm",
                column,
                f"max by ({by}, {', '.join(held_by)}) ({selector})",
                partial(self._add_newest_last, gpus, column, source.scale),
                self._series_per_gpu(column),
                Bare(selector, (*by_labels, *held_by)),
            )
        # Bare: the kinds but USED kept, then USED (the memory-used column's query, asked once) adds them up.
        kept: list[list[dict]] = []
        ask(
            "dcgm",
            "memory_total_bytes",
            mixin.dcgm_memory_total(self.matchers("dcgm"), by),
            lambda part, result: gpus.add(result, "memory_total_bytes", key=dcgm_gpu, part=part),
            bare=[
                (mixin.dcgm_memory_selector(self.matchers("dcgm"), ("TOTAL", "FREE", "RESERVED")), keep_answer(kept)),
                (
                    mixin.dcgm_memory_selector(self.matchers("dcgm"), ("USED",)),
                    lambda part, used: self._add_memory_total(gpus, by_labels, part, [*kept.pop(), *used]),
                ),
            ],
        )
        add("dcgm", mixin.dcgm_hardware_xid(self.matchers("dcgm"), by), "hardware_xid", key=dcgm_gpu)
        labels = (*by_labels, *mixin.DCGM_HARDWARE_LABELS, *held_by)
        identity = mixin.names_selector((mixin.DCGM_IDENTITY_SERIES,), self.matchers("dcgm"))
        ask(
            "dcgm",
            "_pod",
            f"group by ({', '.join(labels)}) ({self._fresh('dcgm', identity)})",
            lambda part, identity: self._add_dcgm_identity(window, identity, part),
            bare=self._bare_identity("dcgm", identity, labels),
        )
        for expr, column in self._pod_queries():
            add("pods", expr, column, key=pod_key, grid=window.pods)
        return queries

    @staticmethod
    def _add_memory_total(grid: StepGrid, by: tuple[str, ...], part: int, answer: list[dict]) -> int:
        """dcgm-exporter's memory series (mixin.dcgm_memory_selector) into memory_total_bytes as
        mixin.dcgm_memory_total() adds them up: the total where the counter set has it, else used + free
        (+ reserved where reported), in bytes. Each kind is placed in a matrix of its own first, and only the
        steps with a total are written: the rest of the grid keeps what it held."""
        kinds = ("TOTAL", "USED", "FREE", "RESERVED")
        reduced = Bare("", (*by, "__name__")).reduce(answer)
        read = 0
        for kind in kinds:
            mine = [series for series in reduced if series["metric"].get("__name__") == f"DCGM_FI_DEV_FB_{kind}"]
            read += grid.add(mine, f"_fb_{kind}", key=dcgm_gpu, part=part)
        total, used, free, reserved = (grid.drop(f"_fb_{kind}") for kind in kinds)
        summed = used + free + np.where(np.isnan(reserved), 0.0, reserved)
        in_bytes = np.where(np.isnan(total), summed, total) * mixin.dcgm.MIB
        known = ~np.isnan(in_bytes)
        grid.matrix("memory_total_bytes", part)[known] = in_bytes[known]
        return read

    @staticmethod
    def _add_newest_last(grid: StepGrid, column: str, scale: float, part: int, result: list[dict]) -> int:
        """dcgm-exporter's series of `column` (in its unit: times `scale` in the trace's) into `grid`, each
        pod's apart, older series first (a newer one stands where both name a step)."""
        return grid.add(newest_last(scaled_answer(result, scale)), column, key=dcgm_gpu, part=part)

    def _answered(self, queries: list[tuple[str, float, Callable[[list[dict]], int]]], end: float) -> int:
        """Each query's answer (from its start to `end`) handed to its consumer (which returns the points it
        placed), in the order asked, with QUERIES_IN_FLIGHT asked of the store at once; the points placed. A
        failure ends the read: the queries not answered yet are let go."""
        pending: collections.deque[tuple[Future[list[dict]], Callable[[list[dict]], int]]] = collections.deque()
        points = 0
        with ThreadPoolExecutor(QUERIES_IN_FLIGHT, thread_name_prefix="gpulens-query") as pool:
            try:
                for expr, start, consume in queries:
                    pending.append((pool.submit(self.store.query_range, expr, start, end, self.step), consume))
                    if len(pending) >= QUERIES_IN_FLIGHT:
                        future, use = pending.popleft()
                        points += use(future.result())
                while pending:
                    future, use = pending.popleft()
                    points += use(future.result())
            finally:
                for future, _ in pending:
                    future.cancel()
        return points

    def _add_dcgm_identity(self, window: Window, identity: list[dict], part: int) -> int:
        """dcgm-exporter's identity series: the pod that holds each GPU at each step, under the pod labels
        the deployment's layout names (config.dcgm_pod_labels; "auto": exported_pod wherever a series has it)."""
        layout = self.config.dcgm_pod_labels
        if layout == "auto":
            layout = "exported" if any("exported_pod" in s["metric"] for s in identity) else "plain"
        return window.gpus.add(
            newest_last(identity),
            "_pod",
            weight=lambda labels: self._pod_code(window, labels, mixin.DCGM_POD_LABELS[layout]),
            key=lambda labels: self._dcgm_identity(window, labels),
            summed=False,
            part=part,
        )

    def _shape_ratios(self, grid: StepGrid, start: float, end: float, part: int) -> None:
        """The SHAPE columns of the steps read from `start` to `end`: samples per row, and each bucket's share
        of them (at or below its bound; the high one's complement), with PromQL's arithmetic (x / 0 is
        infinite, 0 / 0 NaN, a missing count NaN)."""
        count = grid.values.get(SHAPE_COUNT)
        if count is None:
            return
        read = slice(round((start - grid.start) / self.step), round((end - grid.start) / self.step) + 1)
        seconds = max(4 * self.step, 60)  # rate_window()
        n = count[:, read]
        with np.errstate(divide="ignore", invalid="ignore"):
            grid.matrix("activity_samples", part)[:, read] = n / seconds * self.step
            for column in SHAPE_BUCKETS:
                matrix = grid.matrix(column)
                matrix[:, read] = matrix[:, read] / n
            high = grid.matrix("activity_high_ratio")
            high[:, read] = 1 - high[:, read]

    def pods_named(self, start: float, end: float) -> int:
        """The most pod names that one family's identity series name between `start` and `end` (unix
        seconds), from the store's index without reading a sample: a lower bound of the pods a report of
        that span judges (a name in two namespaces counts once)."""
        named = [len(self.store.label_values("pod", self.selector(m.GPU_POD_INFO.name), start, end))]
        dcgm = f"{mixin.DCGM_IDENTITY_SERIES}{{{self.matchers('dcgm')}}}"
        for label in ("exported_pod", "pod"):
            values = self.store.label_values(label, dcgm, start, end)
            named.append(sum(1 for pod in values if not self._exporter_pods.fullmatch(pod)))
        return max(named)

    def exporters(self, start: float, end: float) -> list[Exporters]:
        """The exporters that reported GPUs between `start` and `end` (unix seconds), grouped so that
        those naming one GPU (gpulens' and dcgm-exporter's on its node) are together, from the store's
        index without reading a sample; the shard's matcher (`instances`) is not applied."""
        every = copy.copy(self)
        every.instances = ""
        gpulens = self.store.series(every.selector(m.GPU_INFO.name), start, end)
        dcgm = self.store.series(f"{mixin.DCGM_IDENTITY_SERIES}{{{every.matchers('dcgm')}}}", start, end)
        named = [(s.get("instance", ""), s.get("uuid", "")) for s in gpulens]
        named += [(s.get("instance", ""), s.get("UUID", "")) for s in dcgm]
        node_of: dict[str, str] = {}
        for s in gpulens + dcgm:
            node = next((s[n] for n in mixin.DCGM_NODE_LABELS if s.get(n)), "")
            if node:
                node_of.setdefault(s.get("instance", ""), node)
        # Instances that name one GPU are one group: a union-find over instances, joined through GPUs.
        parent: dict[str, str] = {}

        def root(instance: str) -> str:
            while parent.setdefault(instance, instance) != instance:
                parent[instance] = instance = parent[parent[instance]]
            return instance

        seen_at: dict[str, str] = {}
        for instance, gpu in named:
            if gpu:
                parent[root(instance)] = root(seen_at.setdefault(gpu, instance))
            root(instance)
        instances: dict[str, set[str]] = collections.defaultdict(set)
        gpus: dict[str, set[str]] = collections.defaultdict(set)
        for instance, gpu in named:
            instances[root(instance)].add(instance)
            if gpu:
                gpus[root(instance)].add(gpu)
        return sorted(
            (
                Exporters(
                    frozenset(instances[r]),
                    frozenset(gpus[r]),
                    next((node_of[i] for i in sorted(instances[r]) if i in node_of), min(instances[r])),
                )
                for r in instances
            ),
            key=lambda e: sorted(e.instances),
        )

    def _pod_code(self, window: Window, labels: dict, names: tuple[str, ...]) -> float:
        """The code in `window` of the pod an identity series names in `names` (namespace, pod, container): 0
        for none, and for the exporters' own pods (config.exporter_pods), which hold no GPU."""
        pod = (labels.get(names[0], ""), labels.get(names[1], ""), labels.get(names[2], ""))
        if not pod[1] or self._exporter_pods.fullmatch(pod[1]):
            return 0.0
        return float(window.names.code(pod))

    @staticmethod
    def _dcgm_identity(window: Window, labels: dict) -> Key | None:
        """The row of a dcgm-exporter identity series; records the GPU's model and node in `window`."""
        row = dcgm_gpu(labels)
        if row is not None:
            # A MIG instance as NVML names it ("<GPU> MIG 3g.40gb"): dcgm-exporter gives its parent's model and
            # its profile apart, and what it costs follows the profile (catalog.gpu_share_of).
            profile = labels.get("GPU_I_PROFILE", "") if labels.get("GPU_I_ID") else ""
            window.dcgm.models[row] = catalog.device_name(labels.get("modelName", ""), profile)
            node = next((labels[n] for n in mixin.DCGM_NODE_LABELS if labels.get(n)), "")
            window.dcgm.nodes[row] = node or row[0]
        return row

    # --- the frame -----------------------------------------------------------------------------------
    def hardware(self, keys: list[Key], end: float, lookback: float) -> Hardware:
        """gpulens' gpu_info (model, node) by row key and the topology groups by uuid, as of `end` over
        the `lookback` seconds before it. Hardware changes rarely and the topology is a series per pair of
        GPUs (a third of a node's series): read every HARDWARE_REFRESH_SECONDS, or at once when a gpulens
        GPU appears that the last read did not have."""
        if self._hardware:
            cached, read_at = self._hardware[0]
            if time.monotonic() - read_at < HARDWARE_REFRESH_SECONDS and all(k in cached.models for k in keys):
                return cached
        window = f"{lookback:.0f}s"
        info = {
            gpulens_gpu(r["metric"]): r["metric"]
            for r in self.store.query(f"last_over_time({self.selector(m.GPU_INFO.name)}[{window}])", end)
            if "uuid" in r["metric"]
        }
        pairs = [
            (r["metric"]["uuid"], r["metric"]["peer_uuid"], r["metric"]["level"], r["metric"].get("p2p", "unknown"))
            for r in self.store.query(f"last_over_time({self.selector(m.TOPOLOGY.name)}[{window}])", end)
            if {"uuid", "peer_uuid", "level"} <= r["metric"].keys()
        ]
        hardware = Hardware(
            {
                k: catalog.device_name(labels.get("model", ""), labels.get("mig_profile", ""))
                for k, labels in info.items()
                if k is not None
            },
            {k: labels.get("node", "") for k, labels in info.items() if k is not None},
            {column: of(pairs) for column, of in GROUPS.items()},
            frozenset(k for k, labels in info.items() if k is not None and labels.get("mig_mode") == "enabled"),
        )
        self._hardware[:] = [(hardware, time.monotonic())]
        return hardware

    def frame(self, window: Window, lookback: float) -> pd.DataFrame:
        """The window's rows as a trace frame: a row per GPU and step with a value, the GPU's model, node
        and topology, the pod that held it at that step, and that pod's CPU and restarts. A GPU that
        reports through gpulens' exporter too keeps only gpulens' rows; a GPU in MIG mode, only its instances'."""
        assert window.gpus.end is not None
        # A one-off read (a report's piece) completes nothing: it shows every step.
        until = window.gpus.end if window.whole_until is None else window.whole_until
        keys, gpu, columns = window.gpus.rows(until)
        if not len(gpu):
            return fr.empty()
        dcgm, pods = window.dcgm, window.names.pods
        hardware = self.hardware([k for k in keys if k not in dcgm.models], until, lookback)
        from_gpulens = {k[1] for k in keys if k not in dcgm.models}
        dropped = np.array(
            [(k in dcgm.models and k[1].split("/")[0] in from_gpulens) or k in hardware.mig_parents for k in keys],
            dtype=bool,
        )
        if dropped.any():
            keep = ~dropped[gpu]
            gpu, columns = gpu[keep], {name: values[keep] for name, values in columns.items()}
        # The columns are this frame's own: shared, not copied into one block (at 10,000 GPUs and 41 steps, 150 MB
        # a cycle; 44 ms against 5 in a fresh process).
        frame = pd.DataFrame({name: values for name, values in columns.items() if not name.startswith("_")}, copy=False)
        models = {**hardware.models, **dcgm.models}
        nodes = {**hardware.nodes, **dcgm.nodes}
        per_gpu = {
            "instance": [k[0] for k in keys],
            "gpu": [k[1] for k in keys],
            "gpu_model": [models.get(k, "") for k in keys],
            "node": [nodes.get(k) or k[0] for k in keys],
        }
        for column, values in per_gpu.items():
            frame[column] = pd.Categorical(values).take(gpu)
        for column, group in hardware.groups.items():
            frame[column] = np.array([group.get(k[1], np.nan) for k in keys], dtype=np.float64)[gpu]
        held = columns.get("_pod", np.zeros(len(gpu)))
        # A code outside the pod table (a store answering a value where it had 1) is no pod, not an IndexError.
        code = np.where((held >= 0) & (held < len(pods)), held, 0.0).astype(np.intp)
        for j, column in enumerate(("namespace", "pod", "container")):
            # Names stay Python strings (object): numpy's fixed-width text would make every name as wide as
            # the longest, four bytes a character (a pod of 1 MiB of name made each of thousands 4 MiB).
            names = pd.Categorical(pd.array([p[j] for p in pods], dtype=object))
            frame[column] = pd.Categorical.from_codes(names.codes[code], categories=names.categories)
        window.pods.rows(until)  # forgets the pods gone for a whole window
        step = np.rint((columns["timestamp"] - window.pods.start) / self.step).astype(np.intp)
        pod_keys = [(ns, pod) if pod else None for ns, pod, _ in pods]
        for column in ("cpu_usage_cores", "cpu_limit_cores", "restarts_total"):
            frame[column] = window.pods.at(column, pod_keys, step, code)
        self._unknown_after_a_pod(window, frame, keys, gpu, code)
        self._forget(window)
        return fr.normalize(frame)

    def _unknown_after_a_pod(
        self, window: Window, frame: pd.DataFrame, keys: list[Key], gpu: np.ndarray, code: np.ndarray
    ) -> None:
        """Make the rate-derived values of a gpulens GPU unknown in its rows within a rate window after a pod
        held it and none holds it now (left_by_a_pod()): they reach back over the pod's samples, and would show
        kernels running without a pod after every busy pod ends. The rows stay: the GPU is free from then."""
        ours = np.array([k not in window.dcgm.models for k in keys], dtype=bool)
        if not ours.any():  # a fleet that runs only dcgm-exporter: gauges, nothing reaches back
            return
        ts = frame["timestamp"].to_numpy()
        seed = np.array([window.held_until.get(k, np.nan) for k in keys], dtype=np.float64)
        left, held_until = left_by_a_pod(gpu, ts, code, seed, self.rate_seconds())
        for key, until, mine in zip(keys, held_until, ours, strict=True):
            if mine and not np.isnan(until):
                window.held_until[key] = until
        left &= ours[gpu]
        if left.any():
            rated = [c for c in (*tr.FROM_RATES, *tr.NVLINK_ERROR_RATES, *tr.SHAPE) if c in frame.columns]
            frame.loc[left, rated] = np.nan

    def _forget(self, window: Window) -> None:
        """Forget the pods and dcgm-exporter GPUs that `window` no longer holds: a service that runs for
        months sees every pod its fleet ever ran. The pod table is compacted when it holds more than twice
        the pods in the window (so each compaction is paid for by as many new pods), and the codes in the
        window's "_pod" matrix renumbered to match."""
        for table in (window.dcgm.models, window.dcgm.nodes, window.held_until):
            for key in [k for k in table if k not in window.gpus.gpus]:
                del table[key]
        codes = window.gpus.values.get("_pod")
        if codes is None:
            return
        held = ~np.isnan(codes)
        live = np.union1d([0], codes[held].astype(np.intp))
        if len(window.names.pods) <= 2 * len(live) + 64:
            return
        codes[held] = window.names.keep(live)[codes[held].astype(np.intp)]
