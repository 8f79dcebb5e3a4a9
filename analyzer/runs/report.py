"""How `gpulens report` and `gpulens digest` run: from files, or from a store over a span.

From a store (from_store): the store is opened and its scrape interval measured, the span aligned to that
step, and the span read and judged in pieces (span.py), in `processes` processes at once (each the nodes
whose name hashes to its share), or as one shard of several runs that `merge` joins (shards.py); then the
cluster's share, the workloads' changes and OpenCost's prices are read beside the verdicts.
From files (from_files): the recording is read whole and judged (history.analyze), with kube-state-metrics'
series where they were recorded.

Either way the run ends in a Judged record, which `concluded` sizes and plans, and the command line
(analyzer/cli/) writes out in the format asked. What a run needs is a typed record (StoreReport, FileReport)
that the command line makes of its flags: nothing here reads a flag.
"""

from __future__ import annotations

import hashlib
import math
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path

import pandas as pd

from gpulens.analyzer.inputs.cluster import ClusterReader, judged_grid
from gpulens.analyzer.inputs.engines import EngineLoad, Health, read_engine_loads, read_workload_health
from gpulens.analyzer.inputs.kinds import PodKey, load_pools, load_rules
from gpulens.analyzer.inputs.kube_state import KubeState, RecordedKubeState
from gpulens.analyzer.inputs.owners import Owner, OwnerReader
from gpulens.analyzer.inputs.proposals import KeptPlan, first_proposal, kept_proposal, read_proposal
from gpulens.analyzer.inputs.readers import TraceError
from gpulens.analyzer.inputs.series import SeriesReader
from gpulens.analyzer.inputs.store import Store, StoreAuth, StoreError
from gpulens.analyzer.inputs.window import Shard
from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.judging.features import UnitKeys
from gpulens.analyzer.judging.history import analyze, sample_interval, with_owners
from gpulens.analyzer.judging.scheduling import Scheduling, judge_store
from gpulens.analyzer.outputs import terminal
from gpulens.analyzer.outputs.actions import Plan
from gpulens.analyzer.outputs.outcomes import Outcome, mark_done, over_span
from gpulens.analyzer.outputs.plan import make_plan, sized
from gpulens.analyzer.outputs.timelines import TimelineBins
from gpulens.analyzer.outputs.use import Use
from gpulens.analyzer.runs import shards, span
from gpulens.core import catalog, mixin
from gpulens.core.bottlenecks import INSUFFICIENT_DATA, INSUFFICIENT_FILE
from gpulens.core.mixin import MixinConfig
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import rfc3339

#: The step a store report reads at where the store holds no sample to read its scrape interval from.
DEFAULT_STORE_STEP = 30.0


@dataclass(frozen=True)
class Judging:
    """How a report judges (picklable, for `processes`): the thresholds, the prices (USD per GPU-hour by
    model), and the window and how far it slides (seconds; None: history.analyze's defaults)."""

    thresholds: Thresholds
    prices: dict[str, float]
    window: float | None = None
    slide: float | None = None

    def of_report(self) -> tuple[Thresholds, dict[str, float], float | None, float | None]:
        """In the order span.report takes them."""
        return self.thresholds, self.prices, self.window, self.slide


@dataclass(frozen=True)
class Attribution:
    """What says whose each pod is, what it is and where it belongs, in a store or in recorded kube-state-metrics
    series: the jobs whose series are read (`config`: kube-state-metrics' among them), the pod label that names a
    team (--team-label), and the kinds config's path (--analysis.config, "" none: its kinds and node pools)."""

    config: MixinConfig
    team_label: str = ""
    analysis_config: str = ""

    def owners(self, source: Store | KubeState) -> OwnerReader:
        """The pods' owners, teams and kinds, read from kube-state-metrics' series (of the job `config` names)."""
        rules = load_rules(self.analysis_config)
        return OwnerReader(source, self.team_label, rules, self.config.kube_state_metrics)


@dataclass(frozen=True)
class StoreSource:
    """How a store is reached and its series read (picklable: each process of a report opens its own): the
    URL and credentials, the selectors added to the GPUs' series, and what attributes their pods."""

    url: str
    auth: StoreAuth
    #: Seconds a query may take (--prometheus.timeout), and how answers are asked for (store.COMPRESSIONS).
    timeout: float
    compression: str
    attribution: Attribution
    selector: str = ""
    dcgm_selector: str = ""

    def open(self) -> Store:
        """The store, its credentials checked (close it)."""
        return Store(self.url, self.auth, self.timeout, compression=self.compression)

    def reader(self, store: Store, step: float, intervals: Mapping[str, float] | None = None) -> SeriesReader:
        """A reader of the GPUs' series at `step`, where the scrape intervals are already measured (`intervals`)."""
        config = self.attribution.config
        return SeriesReader(store, step, config, self.selector, self.dcgm_selector, intervals)


@dataclass(frozen=True)
class StoreReport:
    """A report read from a store: the span (unix seconds) and how it is read and what it writes."""

    source: StoreSource
    since: float
    until: float
    #: Seconds between the points read (--prometheus.step); 0: the store's scrape interval.
    step: float = 0.0
    processes: int = 1
    #: Shard files to merge instead of reading the span (--merge).
    merge: tuple[str, ...] = ()
    #: What the output shows beyond the verdicts: the units' timelines (HTML) and the workloads' changes.
    timelines: bool = False
    changes: bool = True
    #: OpenCost's metric of USD per GPU-hour by node ("" reads none).
    price_metric: str = ""


@dataclass(frozen=True)
class FileReport:
    """A report of recorded files, with kube-state-metrics' series where they were recorded (`kube_state`)."""

    files: tuple[str, ...]
    #: Seconds between scrapes of saved scrape files, the GPU model to assume where a file names none, and the
    #: first scrape's time (None: the first file's modification time).
    scrape_interval: float
    gpu_model: str
    scrape_start: float | None
    #: Where kube-state-metrics' series were recorded ("" none), and what attributes pods in them.
    kube_state: str = ""
    attribution: Attribution | None = None
    changes: bool = True


@dataclass(frozen=True)
class Judged:
    """What a report judged: the verdicts, for an HTML report what its timelines draw (a store's TimelineBins,
    or the `trace` of files), what each unit used, the cluster's judgement where kube-state-metrics says which
    pods asked for GPUs (None where it does not), the workloads' changes (None where nothing is known of them),
    and OpenCost's USD per GPU-hour by node (empty where the store holds none)."""

    verdicts: list[Verdict]
    use: Use
    timelines: TimelineBins | None = None
    trace: pd.DataFrame | None = None
    scheduling: Scheduling | None = None
    changes: list[Outcome] | None = None
    node_prices: dict[str, float] = field(default_factory=dict)


def concluded(judged: Judged, how: Judging) -> tuple[list[Verdict], Plan]:
    """The verdicts sized (most waste first) and the plan made of them, its actions marked done by the changes."""
    verdicts = sized(judged.verdicts, judged.use, how.thresholds, how.prices)
    verdicts.sort(key=lambda v: -v.wasted_gpu_seconds)
    plan = make_plan(verdicts, judged.use, how.thresholds, how.prices, judged.scheduling)
    if judged.changes:
        mark_done(plan.actions, judged.changes)
    return verdicts, plan


# --- from files ---------------------------------------------------------------------------------------
def from_files(report: FileReport, how: Judging, kept: list[KeptPlan]) -> Judged:
    """The verdicts of recorded files, with their owners, the cluster's share and the changes where
    kube-state-metrics' series were recorded (TraceError where the files hold no sample)."""
    trace = terminal.read_files_with_progress(
        list(report.files), report.scrape_interval, report.gpu_model, report.scrape_start
    )
    if trace.empty:  # an empty report would read as a fleet without GPUs
        raise TraceError(
            ", ".join(map(str, report.files)),
            "no samples (a header, no rows): nothing to judge; give a recording that holds some (gpulens "
            "exporter --record writes one)",
        )
    _warn_unknown_models(trace, how.prices)
    kube_state = RecordedKubeState.read(report.kube_state) if report.kube_state else None
    attribution = report.attribution
    owners = attribution.owners(kube_state) if kube_state is not None and attribution is not None else None
    owned = _owners_of(owners, trace)
    workloads = {f"{namespace}/{pod}": owner.workload for (namespace, pod), owner in owned.items()}
    verdicts = analyze(trace, how.thresholds, how.prices, how.window, how.slide, workloads if owners else None)
    verdicts = with_owners(verdicts, owned)
    # A file holds what it holds: the advice is to record more, not to check a scrape.
    advice = INSUFFICIENT_FILE.format(min_samples=how.thresholds.min_samples)
    verdicts = [replace(v, recommendation=advice) if v.bottleneck == INSUFFICIENT_DATA else v for v in verdicts]
    keys = UnitKeys.of(trace)
    interval = sample_interval(trace, keys)
    use = Use.of_trace(trace, interval, how.thresholds, keys)
    scheduling, changes = None, None
    if kube_state is not None and owners is not None and attribution is not None:
        ts = trace["timestamp"]
        grid = (float(ts.min()), float(ts.max()), interval)
        scheduling = cluster_share(attribution, kube_state, owners, grid, verdicts, how)
        changes = _changes(attribution, kube_state, grid, verdicts, use, how, kept) if report.changes else None
    return Judged(verdicts, use, trace=trace, scheduling=scheduling, changes=changes)


def _warn_unknown_models(trace: pd.DataFrame, prices: dict[str, float]) -> None:
    """Say on stderr which GPUs the files name no known model for, and the price and links assumed."""
    models = trace["gpu_model"].astype(str)
    unknown = sorted({m for m in models.unique() if catalog.model_info(m).match == catalog.UNKNOWN.match})
    if not unknown:
        return
    gpus = trace.loc[models.isin(unknown), "gpu"].nunique()
    named = ", ".join(repr(m) if m else "the files name none" for m in unknown)
    price = catalog.model_info(unknown[0], prices).price_per_hour
    print(
        f"gpulens report: warning: {gpus} GPU{'s' if gpus != 1 else ''} with no model gpulens knows ({named}): "
        f"waste priced at ${price:.2f}/GPU-h and links assumed PCIe Gen3; name the model with --gpu-model "
        "(e.g. --gpu-model 'NVIDIA A100 80GB PCIe') or set its price with --prices",
        file=sys.stderr,
    )


def _owners_of(owners: OwnerReader | None, trace: pd.DataFrame) -> dict[PodKey, Owner]:
    """The owners of the trace's pods as kube-state-metrics said over its span ({} where it is not read)."""
    if owners is None or trace.empty:
        return {}
    pods = trace.loc[trace["pod"].astype(str) != "", ["namespace", "pod"]].drop_duplicates()
    ts = trace["timestamp"]
    keys = zip(pods["namespace"].astype(str), pods["pod"].astype(str), strict=True)
    return owners.read(keys, float(ts.max()), float(ts.max() - ts.min()))


# --- from a store -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Opened:
    """A store opened for a report and the span read from it: the reader (its step the store's scrape
    interval, or the one asked), and what says whose each pod is."""

    store: Store
    reader: SeriesReader
    owners: OwnerReader
    span: span.Span


def _open(report: StoreReport) -> _Opened:
    """The store and the span on its step grid (close the store)."""
    store = report.source.open()
    try:
        found = report.source.reader(store, report.step or DEFAULT_STORE_STEP)
        interval = found.scrape_interval(report.until, min(report.until - report.since, 3600.0))
        reader = report.source.reader(store, _step(report.step, interval), found.intervals)
        owners = report.source.attribution.owners(store)
        return _Opened(store, reader, owners, span.Span.aligned(report.since, report.until, reader.step))
    except BaseException:
        store.close()
        raise


def _step(given: float, interval: float | None) -> float:
    """The step to read at: --prometheus.step where given (and said, where it is coarser than the store's samples:
    what happens between its points is not seen), else the store's scrape interval."""
    if given and interval is not None and given >= 1.5 * interval:
        print(
            f"gpulens report: reading a point every {given:g} s (--prometheus.step), coarser than the {interval:g} s "
            "the store holds the GPUs' samples at: bursts and stalls between points are not seen; drop "
            "--prometheus.step to read every sample",
            file=sys.stderr,
        )
    return given or interval or DEFAULT_STORE_STEP


def from_store(report: StoreReport, how: Judging, kept: list[KeptPlan]) -> Judged:
    """The verdicts of the span (or of the shard files to merge), what each unit used, for an HTML report what
    its timelines draw, the cluster's judgement, the changes its workloads went through with what became of
    each (against the `kept` plans), and OpenCost's prices."""
    opened = _open(report)
    the_span = opened.span
    try:
        timelines = TimelineBins(the_span.start, the_span.end, the_span.step) if report.timelines else None
        use = Use.over(the_span.start, the_span.end, the_span.step, how.thresholds)
        if report.merge:
            verdicts = shards.merge(list(report.merge), _origin(report, opened, how), use, timelines)
        else:
            verdicts = _judged(report, opened, how, use, timelines, None)
        verdicts = _some(verdicts, opened.store.name, opened.reader, the_span)
        grid = (the_span.start, the_span.end, the_span.step)
        attribution = report.source.attribution
        scheduling = cluster_share(attribution, opened.store, opened.owners, grid, verdicts, how)
        changes = _changes(attribution, opened.store, grid, verdicts, use, how, kept) if report.changes else None
        node_prices = _opencost_prices(report.price_metric, opened.store, the_span.start, the_span.end)
        return Judged(verdicts, use, timelines, scheduling=scheduling, changes=changes, node_prices=node_prices)
    finally:
        opened.store.close()


def shard_from_store(report: StoreReport, how: Judging, shard: Shard, out: str) -> list[Verdict]:
    """The verdicts, use and timelines of the shard's nodes into the shard file `out` (shards.py), for a merge;
    the verdicts written."""
    opened = _open(report)
    the_span = opened.span
    try:
        timelines = TimelineBins(the_span.start, the_span.end, the_span.step)
        use = Use.over(the_span.start, the_span.end, the_span.step, how.thresholds)
        verdicts = _judged(report, opened, how, use, timelines, shard)
        shards.write(out, shard, _origin(report, opened, how), shards.Judged(verdicts, use, timelines))
        return verdicts
    finally:
        opened.store.close()


def _opencost_prices(metric: str, store: Store, start: float, end: float) -> dict[str, float]:
    """`metric` (OpenCost's node_gpu_hourly_cost) by node, averaged over the span: what the cluster's own cost
    tool charges a GPU-hour, to check gpulens' prices against. Nodes it prices 0 (OpenCost's "unknown") are
    left out; a failed read is said and leaves the check out."""
    if not metric:
        return {}
    expr = f"max by (node) (avg_over_time({metric}[{max(int(end - start), 1)}s]))"
    try:
        result = store.query(expr, end)
        prices = {s["metric"]["node"]: float(s["value"][1]) for s in result if s["metric"].get("node")}
    except (StoreError, KeyError, IndexError, TypeError, ValueError) as e:
        print(f"gpulens report: warning: OpenCost's prices ({expr}) are not compared: {e}", file=sys.stderr)
        return {}
    return {node: price for node, price in prices.items() if math.isfinite(price) and price > 0}


def _origin(report: StoreReport, opened: _Opened, how: Judging) -> shards.Origin:
    """What a shard is judged from, which its merge must share (shards.Origin): the settings that change a
    verdict, the kinds config by its content (the same file may sit at another path on another machine)."""
    source, attribution = report.source, report.source.attribution
    rules = Path(attribution.analysis_config).read_bytes() if attribution.analysis_config else b""
    settings = {
        "thresholds": asdict(how.thresholds),
        "prices": how.prices,
        "window": how.window,
        "step": how.slide,
        "selector": source.selector,
        "dcgm_selector": source.dcgm_selector,
        "dcgm_pod_labels": attribution.config.dcgm_pod_labels,
        **{name: getattr(attribution.config, name) for name in mixin.JOBS_READ},
        "team_label": attribution.team_label,
        "analysis_config": hashlib.sha256(rules).hexdigest() if rules else "",
        "scrape_intervals": opened.reader.intervals,
    }
    return shards.Origin(opened.store.name, opened.span, settings)


def _judged(
    report: StoreReport, opened: _Opened, how: Judging, use: Use, timelines: TimelineBins | None, shard: Shard | None
) -> list[Verdict]:
    """The verdicts of the span's nodes (of `shard`'s, where given), read in `processes` processes, with a
    progress bar on a terminal; what each unit used into `use`, and its timelines into `timelines`."""
    store, reader, the_span = opened.store, opened.reader, opened.span
    # What each serving pod's engine counted over the span: a few reduced queries, not its samples.
    percentile = how.thresholds.plan_load_percentile
    engines = read_engine_loads(store, the_span.start, the_span.end, the_span.step, percentile)
    if report.processes > 1:
        job = _Share(report, the_span, reader.intervals, how, engines, timelines is not None)
        return _judged_in_processes(job, report.processes, use, timelines, shard)
    if not sys.stderr.isatty():
        return span.report(reader, the_span, *how.of_report(), None, opened.owners, timelines, use, engines, shard)
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[read]}"))
    with Progress(*columns, TimeRemainingColumn(), transient=True) as bar:
        task = bar.add_task(f"reading {store.name}", total=the_span.end - the_span.start, read="")

        def show(p: span.Progress) -> None:
            read = f"{p.bytes_read / 2**20:,.0f} MiB, {len(p.gpus):,} GPUs, {p.pieces_done} pieces"
            bar.update(task, total=p.span_seconds, completed=p.seconds_done, read=read)

        return span.report(reader, the_span, *how.of_report(), show, opened.owners, timelines, use, engines, shard)


@dataclass(frozen=True)
class _Share:
    """What a process of `processes` needs to judge its share of a report's nodes (picklable: a process is
    spawned, not forked, so that no thread or connection of this one is copied into it)."""

    report: StoreReport
    span: span.Span
    #: The store's scrape interval by family, as read once (SeriesReader.intervals).
    intervals: dict[str, float]
    how: Judging
    engines: Mapping[PodKey, EngineLoad]
    #: Whether the timelines are drawn: for an HTML report, and for every shard (its merge may write one).
    timelines: bool


def _judged_in_processes(
    job: _Share, count: int, use: Use, timelines: TimelineBins | None, shard: Shard | None
) -> list[Verdict]:
    """The verdicts of `count` processes, each judging its share of the nodes (of `shard`'s, where given:
    process p of shard I of N judges shard I + N * p of N * count, the nodes of I whose hash picks p), what
    each unit used merged into `use` and what an HTML report draws into `timelines`. A process's error (a
    store that fails, too many pods) ends the report with it."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    whole = shard or Shard(0, 1)
    shares = [Shard(whole.index + whole.count * p, whole.count * count) for p in range(count)]
    verdicts: list[Verdict] = []
    with ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn")) as pool:
        for found, used, drawn in pool.map(_judge_share, [(job, share) for share in shares]):
            verdicts += found
            use.merge(used)
            if timelines is not None and drawn is not None:
                timelines.merge(drawn)
    return verdicts


def _judge_share(task: tuple[_Share, Shard]) -> tuple[list[Verdict], Use, TimelineBins | None]:
    """One process's share of a report: the verdicts of the nodes of its shard."""
    job, shard = task
    the_span, how, source = job.span, job.how, job.report.source
    store = source.open()
    try:
        reader = source.reader(store, the_span.step, job.intervals)
        timelines = TimelineBins(the_span.start, the_span.end, the_span.step) if job.timelines else None
        use = Use.over(the_span.start, the_span.end, the_span.step, how.thresholds)
        owners = source.attribution.owners(store)
        verdicts = span.report(reader, the_span, *how.of_report(), None, owners, timelines, use, job.engines, shard)
        return verdicts, use, timelines
    finally:
        store.close()


def _some(verdicts: list[Verdict], store: str, reader: SeriesReader, the_span: span.Span) -> list[Verdict]:
    """The verdicts, or where a store that answered held no GPU's series in the span, the error that says so
    and what to check (an empty report would read as a fleet without GPUs)."""
    if verdicts:
        return verdicts
    gpulens, dcgm = reader.looked_for()
    raise StoreError(
        f"{store} answered, but holds no GPU's series from {rfc3339(the_span.start)} to "
        f"{rfc3339(the_span.end)}: neither gpulens' {gpulens} nor dcgm-exporter's {dcgm}. Check the URL's "
        "path (Mimir and Cortex serve the API under /prometheus), the tenant (--prometheus.header "
        "'X-Scope-OrgID: ...'), that the jobs (--exporter.job, --dcgm.job) and --prometheus.selector and "
        "--prometheus.dcgm-selector match the series' labels, and that the exporters ran in the span "
        "(--since, --until)"
    )


# --- beside the verdicts: the cluster's share, the workloads' changes -----------------------------------
def cluster_share(
    attribution: Attribution,
    read_from: Store | KubeState,
    owners: OwnerReader,
    grid: tuple[float, float, float],
    verdicts: list[Verdict],
    how: Judging,
) -> Scheduling | None:
    """The cluster's judgement over `grid` (start, end, step: unix seconds) from kube-state-metrics' series in a
    store or recorded (None where no pod asked for a GPU)."""
    pools = load_pools(attribution.analysis_config)
    models = {v.node: v.gpu_model for v in verdicts if v.node and v.gpu_model}
    try:
        reader = ClusterReader(read_from, pools.label, attribution.config.kube_state_metrics)
        return judge_store(reader, owners, judged_grid(*grid), how.thresholds, pools, how.prices, models)
    except StoreError as e:
        # The pods' verdicts stand without it: say what is missing rather than lose the report.
        print(f"gpulens report: warning: the cluster's share is left out: {e}", file=sys.stderr)
        return None


def _changes(
    attribution: Attribution,
    read_from: Store | KubeState,
    grid: tuple[float, float, float],
    verdicts: list[Verdict],
    use: Use,
    how: Judging,
    kept: list[KeptPlan],
) -> list[Outcome]:
    """The changes the workloads of `verdicts` (those whose pods held GPUs) went through over `grid` (start, end,
    step: unix seconds), from kube-state-metrics' series in a store or recorded, and what became of each: its
    figures before and after from `use`, from a store its engine's health, and gpulens' plan before it (the
    `kept` plans, then a store's plan series) (docs/changes.md); none, said, where the store fails to say."""
    t, prices = how.thresholds, how.prices
    try:
        reader = ClusterReader(read_from, "", attribution.config.kube_state_metrics)
        history = reader.workloads(*judged_grid(*grid))
        if not isinstance(read_from, Store):
            return over_span(history, verdicts, use, grid, t, prices, None, kept_proposal(kept))
        store = read_from

        def health(namespace: str, pods: list[str], start: float, end: float) -> Health | None:
            return read_workload_health(store, namespace, pods, start, end, grid[2], t.plan_load_percentile)

        proposals = first_proposal(kept_proposal(kept), partial(read_proposal, store))
        return over_span(history, verdicts, use, grid, t, prices, health, proposals)
    except StoreError as e:
        print(f"gpulens report: warning: the workloads' changes are left out: {e}", file=sys.stderr)
        return []
