"""`gpulens report` (files; `analyze` is its old name), `gpulens eval` (accuracy on simulated pods)."""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpulens.core import catalog, flags, mixin
from gpulens.core.bottlenecks import INSUFFICIENT_FILE
from gpulens.core.config import finite_json, parse_duration, write_atomically
from gpulens.core.flags import Subcommands
from gpulens.core.thresholds import Thresholds

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd

    from gpulens.analyzer.inputs.engines import EngineLoad, Health
    from gpulens.analyzer.inputs.kinds import PodKey
    from gpulens.analyzer.inputs.kube_state import KubeState
    from gpulens.analyzer.inputs.owners import Owner, OwnerReader
    from gpulens.analyzer.inputs.proposals import KeptPlan
    from gpulens.analyzer.inputs.series import SeriesReader, Shard
    from gpulens.analyzer.inputs.store import Store, StoreAuth
    from gpulens.analyzer.judging.classify import Verdict
    from gpulens.analyzer.judging.scheduling import Scheduling
    from gpulens.analyzer.outputs import shards
    from gpulens.analyzer.outputs.outcomes import Outcome
    from gpulens.analyzer.outputs.plan import Plan, Use
    from gpulens.analyzer.outputs.span import Span
    from gpulens.analyzer.outputs.timelines import TimelineBins
    from gpulens.core.mixin import MixinConfig


def register(commands: Subcommands) -> None:
    # `report`, not `analyze`: one letter from `analyzer` (the service) was one letter too few.
    # The old name stays an alias so scripts and notes that use it keep working.
    p = commands.add_parser(
        "report",
        aliases=["analyze"],
        help="say why each pod's GPU is underused, from recorded files or a Prometheus",
        description="Classify each pod's GPU bottleneck over a span: from trace files, nvidia-smi or "
        "dcgmi dmon logs, or saved dcgm-exporter scrapes; or straight from a store with the Prometheus HTTP "
        "API (Prometheus, Thanos, Mimir, VictoriaMetrics) holding gpulens' or dcgm-exporter's series: "
        "gpulens report --prometheus URL --since 7d.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="files to analyze together, as one span of time")
    p.add_argument(
        "--prometheus",
        default="",
        metavar="URL",
        help="read the span from this Prometheus HTTP API instead of files (Mimir: its /prometheus prefix)",
    )
    p.add_argument(
        "--since",
        default="",
        help="with --prometheus: the span's start, as a duration before --until (7d, 12h) or a time, RFC 3339 or "
        "unix seconds",
    )
    p.add_argument(
        "--until",
        default="",
        help="with --prometheus: the span's end, RFC 3339 (2026-11-23T00:00:00Z) or unix seconds; default now",
    )
    p.add_argument(
        "--format",
        choices=["table", "json", "csv", "html", "focus"],
        default="table",
        help="output format: html is a self-contained report with a timeline per pod; focus is showback's charges "
        "(a row a workload, GPU model and day) as a FinOps FOCUS dataset in CSV (docs/showback.md)",
    )
    flags.add(
        p,
        "--focus.account",
        dest="focus_account",
        default="kubernetes",
        help="with --format focus: the billing account the charges are billed to (the cluster or platform's name)",
    )
    p.add_argument(
        "--window",
        default="",
        help="length of the analysis window slid across the data (900, 15m, 1h); default 1h, or longer "
        "when an hour holds fewer than 60 samples per GPU",
    )
    p.add_argument("--step", default="", help="how far the window moves each time; default a quarter of the window")
    p.add_argument("--out", default="", help="write to this file (atomically) instead of stdout")
    p.add_argument(
        "--processes",
        type=int,
        default=1,
        help="with --prometheus: read and judge the span in this many processes at once, each the nodes whose "
        "name hashes to its share (as --shard.count shares them between machines), merged into one report; each "
        "holds its own pieces (about 2 GiB), and the store answers them all at once",
    )
    flags.add(
        p,
        "--shard.count",
        dest="shard_count",
        type=int,
        default=1,
        help="with --prometheus and --until: the report is shared between this many runs (pods, machines), each "
        "judging the nodes whose name hashes to its --shard.index (Prometheus' hashmod) into a shard file at "
        "--out; `--merge` makes the report of them (docs/sizing.md)",
    )
    flags.add(
        p,
        "--shard.index",
        dest="shard_index",
        type=int,
        default=0,
        help="this run's share, 0 to --shard.count - 1 (in an indexed Job: its completion index, from the pod's "
        "batch.kubernetes.io/job-completion-index annotation through the downward API)",
    )
    p.add_argument(
        "--merge",
        nargs="+",
        default=[],
        metavar="SHARD",
        help="with --prometheus and the shards' --since and --until: the report of the fleet from the shard files "
        "of every --shard.index, in any --format; kube-state-metrics' share is read here, once",
    )
    p.add_argument(
        "--by",
        choices=["pod", "class", "namespace", "owner", "team", "plan", "pending", "pool", "change", "charge"],
        default="pod",
        help="with --format csv: a row per pod, the waste summed by class, namespace, owner (workload) or team, "
        "showback's charges (charge: a row a workload, GPU model and day: its GPU-hours, cost, use and waste), "
        "the plan (a row per action), or from kube-state-metrics the pods that waited for GPUs (pending), each "
        "pool's free and stranded GPU-hours (pool), or each change a workload went through and what became of it "
        "(change)",
    )
    p.add_argument(
        "--kube-state",
        nargs="+",
        default=[],
        metavar="FILE",
        help="with files: kube-state-metrics' series over their span, recorded as OpenMetrics with timestamps "
        "(`promtool tsdb dump-openmetrics`, promtool 2.49+) or as saved /metrics scrapes (each at its file's "
        "modification time): each pod's owner and kind, and the cluster's share (docs/cluster.md)",
    )
    p.add_argument(
        "--plan",
        nargs="+",
        default=[],
        metavar="FILE",
        help="plans kept from earlier (`gpulens report --format json`, or the live analyzer's /api/v1/plan): each "
        "change is shown against the newest one made within a week before it that had an action on its workload, "
        "before the live analyzer's plan series a store holds (docs/changes.md)",
    )
    p.add_argument(
        "--team-label",
        default="",
        help="with --prometheus or --kube-state: the pod label (or namespace label) naming a pod's team, read from "
        "kube-state-metrics' kube_pod_labels (e.g. team reads label_team)",
    )
    flags.add(
        p,
        "--analysis.config",
        dest="analysis_config",
        default="",
        help="with --prometheus or --kube-state: settings YAML, its workload_kinds rules naming what your pods are "
        "(notebook, serving, job) by label, image or owner, before the defaults (docs/workloads.md), and its pools "
        "(docs/cluster.md)",
    )
    _common(p)
    p.add_argument(
        "--gpu-model",
        default="",
        help="GPU model for files that do not name it (dcgmi dmon), e.g. 'NVIDIA A100 80GB PCIe'",
    )
    p.add_argument(
        "--scrape-interval",
        type=flags.duration,
        default=30.0,
        help="seconds between saved dcgm-exporter scrapes (their files carry no time)",
    )
    p.add_argument(
        "--scrape-start",
        default="",
        help="when the first saved dcgm-exporter scrape was taken: RFC 3339 or unix seconds (default: the "
        "first scrape file's modification time)",
    )
    _store_flags(
        p,
        step_help="with --prometheus: seconds between the points read (default: the store's scrape interval, read "
        "from its samples; 30 s where it holds none to read it from)",
        step=0.0,
    )
    p.set_defaults(run=run_report)

    a = commands.add_parser(
        "analyzer",
        help="serve live verdicts for every pod as Prometheus metrics",
        description="Classify every pod's GPU bottleneck on a cycle, from Prometheus or "
        "from exporters directly, and serve the verdicts and the waste.",
    )
    flags.add(
        a,
        "--input.prometheus",
        dest="prometheus",
        default="",
        help="Prometheus (or Thanos, Mimir, VictoriaMetrics) URL to read exporter metrics from",
    )
    flags.add(
        a,
        "--input.exporter",
        dest="exporters",
        action="append",
        default=[],
        help="an exporter's /metrics URL to scrape directly, optionally node=URL; repeat per exporter",
    )
    _store_flags(a, step_help="range-query step in seconds", step=15.0)
    flags.add(
        a,
        "--shard.count",
        dest="shard_count",
        type=int,
        default=1,
        help="analyzer replicas sharing the fleet over one Prometheus; each judges the nodes whose name hashes "
        "to its --shard.index (Prometheus' hashmod)",
    )
    flags.add(
        a,
        "--shard.index",
        dest="shard_index",
        type=int,
        default=0,
        help="this replica's share, 0 to --shard.count - 1 (in a StatefulSet: the pod's index)",
    )
    flags.add(
        a,
        "--exporter.scrape-interval",
        dest="scrape_interval",
        type=flags.duration,
        default=2.0,
        help="seconds between direct scrapes of the exporters",
    )
    flags.add(
        a,
        "--analysis.window",
        dest="window",
        type=flags.duration,
        default=600.0,
        help="seconds of history each verdict looks at",
    )
    flags.add(
        a, "--analysis.interval", dest="interval", type=flags.duration, default=15.0, help="seconds between verdicts"
    )
    flags.add(
        a,
        "--prometheus.read-parts",
        dest="read_parts",
        type=int,
        default=4,
        help="with --input.prometheus: the parts the queries are split into, read in turns: a cycle of one step "
        "reads one, so Prometheus' cost a cycle falls as much, and verdicts rest on the steps every part has "
        "read (3 steps behind the newest at 4); 1 reads every query every cycle",
    )
    flags.add(
        a,
        "--analysis.state-file",
        dest="state_file",
        default="",
        help="with --input.prometheus: a file to keep the window read in (written every minute and at shutdown), "
        "so that a restart reads only what it missed; '' keeps none",
    )
    flags.add(
        a,
        "--analysis.history",
        dest="history",
        default="1d",
        help="how much of each pod's past to keep and serve (episodes, time and waste by class): 6h, 1d, 7d",
    )
    flags.add(
        a,
        "--analysis.team-label",
        dest="team_label",
        default="",
        help="the pod (or namespace) label naming a pod's team, read from kube-state-metrics' kube_pod_labels",
    )
    flags.add(
        a,
        "--analysis.config",
        dest="analysis_config",
        default="",
        help="settings YAML: workload_kinds rules naming what your pods are by label, image or owner "
        "(docs/workloads.md)",
    )
    flags.add(a, "--web.listen-address", dest="listen_address", default=":9849", help="address to serve on")
    flags.add(a, "--web.config.file", dest="web_config_file", default="", help="exporter-toolkit web config")
    _common(a)
    a.set_defaults(run=run_service)

    _register_digest(commands)

    e = commands.add_parser("eval", help="measure the classifier on simulated pods with known bottlenecks")
    e.add_argument("--seed", type=int, default=1000, help="scenario seed (thresholds were tuned on seeds 0-7)")
    e.add_argument("--per-class", type=int, default=12, help="scenarios per class")
    e.add_argument("--noise", type=float, default=0.03, help="standard deviation of the noise added to every ratio")
    e.add_argument(
        "--intervals", default="1,15,30,60", help="seconds between samples to judge every scenario at, comma-separated"
    )
    e.add_argument("--spans", default="10m,1h,6h,24h", help="spans of the day-scale scenarios, comma-separated")
    e.add_argument("--per-day-profile", type=int, default=3, help="day-scale scenarios per profile, interval and span")
    _common(e)
    e.set_defaults(run=run_eval)


def _store_flags(p: argparse.ArgumentParser, step_help: str, step: float) -> None:
    """What reading a store takes, the same for the report and the service: selectors, step, time-out and
    credentials (analyzer/inputs/store.py). Each flag's default is kept (`store_defaults`), so that a report of
    files can refuse the flags it would ignore."""
    defaults: dict[str, tuple[str, object]] = {}

    def add(flag: str, **kwargs: Any) -> None:
        flags.add(p, flag, **kwargs)
        defaults[kwargs["dest"]] = (flag, p.get_default(kwargs["dest"]))

    add(
        "--prometheus.selector",
        dest="selector",
        default="",
        help='label matchers added to every gpulens series besides its job (--exporter.job), e.g. cluster="eu-1"',
    )
    add(
        "--prometheus.dcgm-selector",
        dest="dcgm_selector",
        default="",
        help='label matchers added to every dcgm-exporter series besides its job (--dcgm.job), e.g. cluster="eu-1"',
    )
    add(
        "--prometheus.dcgm-pod-labels",
        dest="dcgm_pod_labels",
        choices=["auto", "exported", "plain"],
        default="auto",
        help="where dcgm-exporter's series name the GPU's pod: exported_pod (the GPU Operator's ServiceMonitor), "
        "pod (honorLabels), or auto: exported_pod wherever a series has it",
    )
    mixin.add_job_flags(add, named=False)
    add("--prometheus.step", dest="query_step", type=flags.duration, default=step, help=step_help)
    add("--prometheus.timeout", dest="timeout", type=flags.duration, default=30.0, help="seconds a query may take")
    add(
        "--prometheus.compression",
        dest="compression",
        choices=["auto", "gzip", "none"],  # store.COMPRESSIONS, not imported: the exporter shares this CLI
        default="auto",
        help="answers gzipped (for slow or metered links) or not (none: the store spends about half the CPU); "
        "auto: none for a store on this host or a Kubernetes service, gzip elsewhere (docs/stores.md)",
    )
    add(
        "--prometheus.bearer-token-file",
        dest="bearer_token_file",
        default="",
        help="file holding a bearer token for the store (re-read when it changes)",
    )
    add("--prometheus.basic-auth.username", dest="basic_auth_username", default="", help="basic auth user")
    add(
        "--prometheus.basic-auth.password-file",
        dest="basic_auth_password_file",
        default="",
        help="file holding the basic auth password",
    )
    add(
        "--prometheus.header",
        dest="headers",
        action="append",
        default=[],
        help="'Name: value' sent with every query, e.g. 'X-Scope-OrgID: team-a' for a Mimir tenant; repeat",
    )
    add(
        "--prometheus.price-metric",
        dest="price_metric",
        default="node_gpu_hourly_cost",
        help="metric of USD per GPU-hour by node (OpenCost's): the live analyzer prices the nodes it prices by it "
        "over --prices, a report and a digest compare their cost with it (docs/showback.md); '' reads none",
    )
    add("--prometheus.ca-file", dest="ca_file", default="", help="CA certificate (PEM) of the store")
    add("--prometheus.cert-file", dest="cert_file", default="", help="client certificate (PEM) for mTLS")
    add("--prometheus.key-file", dest="key_file", default="", help="client certificate's key (PEM)")
    p.set_defaults(store_defaults=defaults)


def _store_auth(args: argparse.Namespace) -> StoreAuth:
    """The store's credentials from the flags, checked: ConfigError naming the flag otherwise."""
    from gpulens.analyzer.inputs.store import StoreAuth

    auth = StoreAuth(
        bearer_token_file=args.bearer_token_file,
        basic_auth_username=args.basic_auth_username,
        basic_auth_password_file=args.basic_auth_password_file,
        headers=tuple(StoreAuth.parse_header(h) for h in args.headers),
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
    )
    auth.check()
    return auth


def _store(args: argparse.Namespace) -> Store:
    """The store the flags name, with their credentials, time-out and compression."""
    from gpulens.analyzer.inputs.store import Store

    return Store(args.prometheus, _store_auth(args), args.timeout, compression=args.compression)


def _mixin(args: argparse.Namespace, thresholds: Thresholds) -> MixinConfig:
    from gpulens.core.mixin import MixinConfig

    return MixinConfig(
        thresholds=thresholds,
        dcgm_pod_labels=args.dcgm_pod_labels,
        **{name: getattr(args, name) for name in mixin.JOBS_READ},
    )


def _common(p: argparse.ArgumentParser) -> None:
    flags.add(p, "--thresholds", default="", help="YAML overriding analyzer thresholds (gpulens/core/thresholds.py)")
    flags.add(p, "--prices", default="", help="YAML of GPU model: USD per GPU-hour (gpulens/core/catalog.py)")


def _config(args: argparse.Namespace) -> tuple[Thresholds, dict[str, float]]:
    return Thresholds.load(args.thresholds), catalog.load_prices(args.prices)


def _concluded(
    verdicts: list[Verdict],
    use: Use,
    thresholds: Thresholds,
    prices: dict[str, float],
    scheduling: Scheduling | None,
    changes: list[Outcome] | None,
) -> tuple[list[Verdict], Plan]:
    """The verdicts sized (most waste first) and the plan made of them, its actions marked done by `changes`."""
    from gpulens.analyzer.outputs.outcomes import mark_done
    from gpulens.analyzer.outputs.plan import make_plan, sized

    verdicts = sized(verdicts, use, thresholds, prices)
    verdicts.sort(key=lambda v: -v.wasted_gpu_seconds)
    plan = make_plan(verdicts, use, thresholds, prices, scheduling)
    if changes:
        mark_done(plan.actions, changes)
    return verdicts, plan


def run_report(args: argparse.Namespace) -> int:
    # pandas and the classifier load here, not at `gpulens` start: the exporter shares this CLI.
    from gpulens.analyzer.inputs.kinds import load_rules
    from gpulens.analyzer.inputs.kube_state import KubeStateError, RecordedKubeState
    from gpulens.analyzer.inputs.owners import OwnerReader
    from gpulens.analyzer.inputs.proposals import read_plan_file
    from gpulens.analyzer.inputs.readers import TraceError
    from gpulens.analyzer.inputs.store import StoreError
    from gpulens.analyzer.judging.features import UnitKeys
    from gpulens.analyzer.judging.history import analyze, sample_interval, with_owners
    from gpulens.analyzer.outputs import formats, showback, terminal
    from gpulens.analyzer.outputs.plan import Use

    try:
        thresholds, prices = _config(args)
        window = parse_duration(args.window, "--window") if args.window else None
        step = parse_duration(args.step, "--step") if args.step else None
        if window is not None and step is not None and step > window:
            raise ValueError(f"--step {args.step} is longer than --window {args.window}: windows would skip data")
        if args.files and args.prometheus:
            raise ValueError(_files_beside_a_store(args))
        if not args.files and not args.prometheus:
            raise ValueError("give files to read, or --prometheus URL --since DURATION: one of the two")
        if args.out and (read := next((f for f in args.files if _same_file(args.out, f)), None)):
            raise ValueError(f"--out {args.out} is {read}, which the report reads: name another file for the report")
        if args.out and os.path.isdir(args.out):  # said before a long read, not after
            raise ValueError(f"--out {args.out}: it is a directory; name a file")
        if args.processes < 1 or (args.processes > 1 and not args.prometheus):
            raise ValueError(
                f"--processes {args.processes}: give 1 or more, with --prometheus (files are read by one process)"
            )
        if args.prometheus and args.kube_state:
            raise ValueError("--kube-state is for files: a store's kube-state-metrics series are read from it")
        if args.plan and not (args.prometheus or args.kube_state):
            raise ValueError(
                "--plan: changes are found in kube-state-metrics' series; give --kube-state with files, or read a store"
            )
        kept = [read_plan_file(path) for path in args.plan]  # said before a long read, not after
        _check_shard_flags(args)
        if args.shard_count > 1:
            _shard_from_store(args, _Judging(thresholds, prices, window, step))
            return 0
        scheduling = None
        changes: list[Outcome] | None = None  # kube-state-metrics not read: nothing known of changes
        node_prices: dict[str, float] = {}  # OpenCost's, read from a store
        if args.prometheus:
            read = _report_from_store(args, _Judging(thresholds, prices, window, step), kept)
            verdicts, timelines, use = read.verdicts, read.timelines, read.use
            scheduling, changes, node_prices = read.scheduling, read.changes, read.node_prices
            trace = None
        else:
            given = {"--since": args.since, "--until": args.until}
            if not args.kube_state:
                given |= {"--team-label": args.team_label, "--analysis.config": args.analysis_config}
            for_stores = [flag for flag, value in given.items() if value]
            for_stores += [
                flag for dest, (flag, default) in args.store_defaults.items() if getattr(args, dest) != default
            ]
            if for_stores:
                raise ValueError(
                    f"{', '.join(for_stores)}: only for --prometheus (files cover their own span, carry no pod "
                    "labels unless --kube-state gives kube-state-metrics' series, and are read whole); drop them, "
                    "or read the store"
                )
            trace = terminal.read_files_with_progress(
                args.files, args.scrape_interval, args.gpu_model, _scrape_start(args)
            )
            if trace.empty:  # an empty report would read as a fleet without GPUs
                raise TraceError(
                    ", ".join(map(str, args.files)),
                    "no samples (a header, no rows): nothing to judge; give a recording that holds some (gpulens "
                    "exporter --record writes one)",
                )
            timelines = None
            _warn_unknown_models(trace, prices)
            kube_state = RecordedKubeState.read(args.kube_state) if args.kube_state else None
            owners = OwnerReader(kube_state, args.team_label, load_rules(args.analysis_config)) if kube_state else None
            owned = _owners_of(owners, trace)
            workloads = {f"{namespace}/{pod}": owner.workload for (namespace, pod), owner in owned.items()}
            verdicts = analyze(trace, thresholds, prices, window, step, workloads if owners else None)
            verdicts = with_owners(verdicts, owned)
            # A file holds what it holds: the advice is to record more, not to check a scrape.
            advice = INSUFFICIENT_FILE.format(min_samples=thresholds.min_samples)
            verdicts = [
                replace(v, recommendation=advice) if v.bottleneck == "insufficient_data" else v for v in verdicts
            ]
            keys = UnitKeys.of(trace) if len(trace) else None
            interval = sample_interval(trace, keys) if keys else 1.0
            use = Use.of_trace(trace, interval, thresholds, keys)
            if kube_state is not None and owners is not None and len(trace):
                ts = trace["timestamp"]
                the_span = (float(ts.min()), float(ts.max()), interval)
                scheduling = _scheduling(args, kube_state, owners, the_span, verdicts, thresholds, prices)
                changes = _changes(args, kube_state, the_span, verdicts, use, thresholds, prices, kept)
    except (TraceError, ValueError, StoreError, KubeStateError) as e:
        print(f"gpulens report: {e}", file=sys.stderr)
        return 2
    verdicts, plan = _concluded(verdicts, use, thresholds, prices, scheduling, changes)
    requested = scheduling.requested if scheduling is not None else None
    bills = showback.charges(verdicts, prices, requested, node_prices)
    checked = showback.checks(bills, showback.unsampled(requested, verdicts))
    if args.format == "json":
        document = formats.report_json(verdicts, plan, scheduling, changes, bills, prices, checked)
        text = finite_json(document, indent=2) + "\n"
    elif args.format == "focus":
        from gpulens.analyzer.outputs.focus import focus_csv

        text = focus_csv(bills, args.focus_account)
    elif args.format == "csv":
        if args.by == "charge":
            text = formats.charges_csv(bills)
        elif args.by == "plan":
            text = formats.plan_csv(plan)
        elif args.by in ("pending", "pool"):
            text = formats.cluster_csv(scheduling, args.by)
        elif args.by == "change":
            if changes is None:
                print(
                    "gpulens report: --by change: kube-state-metrics is not read (give --kube-state with files), so "
                    "nothing is known of changes: the CSV holds its header alone",
                    file=sys.stderr,
                )
            text = formats.changes_csv(changes)
        else:
            text = formats.verdicts_csv(verdicts) if args.by == "pod" else formats.waste_csv(verdicts, args.by)
    elif args.format == "html":
        from gpulens.analyzer.outputs import report

        if timelines is not None:
            samples = timelines.samples(report.drawn_units(verdicts))
        else:
            assert trace is not None
            samples = report.trace_timelines(trace, verdicts)
        text = report.render(
            verdicts, samples, plan, scheduling=scheduling, changes=changes, bills=bills, checks=checked
        )
    else:
        from gpulens.analyzer.outputs import terminal

        on_terminal = not args.out and sys.stdout.isatty()
        width = shutil.get_terminal_size((terminal.PIPED_COLUMNS, 24)).columns if on_terminal else terminal.columns_of()
        text = terminal.report_text(verdicts, plan, width, on_terminal, scheduling, changes, bills, checked)
    if args.out:
        try:
            write_atomically(args.out, text)
        except ValueError as e:
            print(f"gpulens report: {e}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0


def _register_digest(commands: Subcommands) -> None:
    d = commands.add_parser(
        "digest",
        help="each team's GPU cost, waste and efficiency this week against the last, what moved and why, what "
        "changed, what to change: as Markdown and HTML files, by e-mail, Slack and Microsoft Teams",
        description="Each team's digest from a store's last two periods (docs/showback.md, \"The weekly digest\"): "
        "gpulens digest --prometheus URL --team-label team --out digests/ --digest.config digest.yaml",
    )
    d.add_argument("--prometheus", default="", metavar="URL", help="the Prometheus HTTP API to read (required)")
    d.add_argument(
        "--period",
        default="7d",
        help="each period's length, whole days (7d): this period ends at --until, the one it is set against before it",
    )
    d.add_argument(
        "--until",
        default="",
        help="the end of this period, a UTC midnight (RFC 3339 or unix seconds); default the last one before now",
    )
    d.add_argument(
        "--out",
        default="",
        metavar="DIR",
        help="write each team's digest here as TEAM.md and TEAM.html (atomically); without it and without "
        "--digest.config, the Markdown goes to stdout",
    )
    flags.add(
        d,
        "--digest.config",
        dest="digest_config",
        default="",
        help="YAML of where each team's digest goes: an SMTP server and each team's e-mail addresses, Slack and "
        "Microsoft Teams webhooks (docs/showback.md)",
    )
    flags.add(
        d,
        "--digest.link",
        dest="digest_link",
        default="",
        help="the live analyzer page's URL (gpulens analyzer's /) the digests link to",
    )
    flags.add(
        d, "--digest.team", dest="digest_teams", action="append", default=[], help="only this team's digest; repeat"
    )
    flags.add(d, "--digest.top", dest="digest_top", type=int, default=3, help="movers and actions a digest lists")
    flags.add(
        d, "--digest.retries", dest="digest_retries", type=int, default=3, help="times a failed delivery is tried again"
    )
    flags.add(
        d,
        "--digest.retry-wait",
        dest="digest_retry_wait",
        type=flags.duration,
        default=5.0,
        help="seconds before the first retry, doubling at each",
    )
    d.add_argument("--team-label", default="", help="the pod label (or namespace label) naming a pod's team")
    flags.add(
        d,
        "--analysis.config",
        dest="analysis_config",
        default="",
        help="settings YAML: workload_kinds rules and pools (docs/workloads.md, docs/cluster.md)",
    )
    _common(d)
    _store_flags(d, step_help="seconds between the points read (default: the store's scrape interval)", step=0.0)
    d.set_defaults(run=run_digest, processes=1, merge=[], format="json", by="pod")


def run_digest(args: argparse.Namespace) -> int:
    """`gpulens digest`: one report over both periods, each team's digest of it written and delivered."""
    import time

    from gpulens.analyzer.inputs.readers import TraceError
    from gpulens.analyzer.inputs.store import StoreError
    from gpulens.analyzer.outputs import delivery, digest, showback
    from gpulens.core.times import rfc3339

    try:
        thresholds, prices = _config(args)
        settings = delivery.DigestSettings.load(args.digest_config)
        if not args.prometheus:
            raise ValueError("--prometheus URL: give the store to read the periods from")
        period = parse_duration(args.period, "--period")
        if period < DAY or period % DAY:
            raise ValueError(f"--period {args.period}: give whole days (7d): a day's charges fall in one period")
        until = _when(args.until, "--until") if args.until else time.time() // DAY * DAY
        if until % DAY:
            raise ValueError(
                f"--until {args.until}: give a UTC midnight ({rfc3339(until // DAY * DAY)}): a day's charges fall "
                "in one period"
            )
        if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
            raise ValueError(f"--out {args.out}: it is a file; name a directory for the digests")
        if args.digest_link:
            mixin.check_url(args.digest_link, "--digest.link")
        if args.digest_top < 1 or args.digest_retries < 0:
            raise ValueError("--digest.top: give 1 or more; --digest.retries: 0 or more")
        periods = digest.Periods(until - 2 * period, until - period, until)
        span = argparse.Namespace(**vars(args))
        span.since, span.until = rfc3339(periods.start), rfc3339(until)
        read = _report_from_store(span, _Judging(thresholds, prices, None, None), [])
    except (TraceError, ValueError, StoreError) as e:
        print(f"gpulens digest: {e}", file=sys.stderr)
        return 2
    verdicts, plan = _concluded(read.verdicts, read.use, thresholds, prices, read.scheduling, read.changes)
    requested = read.scheduling.requested if read.scheduling is not None else None
    bills = showback.charges(verdicts, prices, requested, read.node_prices)
    made = digest.digests(verdicts, plan, read.changes, bills, periods, args.digest_link, args.digest_top)
    if args.digest_teams:
        absent = sorted(set(args.digest_teams) - {d.team for d in made})
        if absent:
            print(
                f"gpulens digest: --digest.team {', '.join(absent)}: no GPU charges this period or the last",
                file=sys.stderr,
            )
        made = [d for d in made if d.team in args.digest_teams]
    if args.out:
        try:
            written = _write_digests(args.out, made)
        except (OSError, ValueError) as e:
            print(f"gpulens digest: --out {args.out}: {e}", file=sys.stderr)
            return 2
        print(
            f"gpulens digest: {len(made)} teams' digests written to {args.out}: {', '.join(written)}", file=sys.stderr
        )
    elif not args.digest_config:
        sys.stdout.write("\n".join(d.markdown() for d in made))
    retry = delivery.Retry(args.digest_retries, args.digest_retry_wait)
    deliveries = [sent for d in made for sent in delivery.deliver(d, settings, retry)]
    failed = [f"{d.team} by {d.channel} ({d.error})" for d in deliveries if not d.delivered]
    if deliveries:
        print(
            f"gpulens digest: {len(deliveries) - len(failed)} of {len(deliveries)} deliveries made"
            + (f"; failed after retries: {'; '.join(failed)}" if failed else ""),
            file=sys.stderr,
        )
    return 1 if failed else 0


def _write_digests(folder: str, made: list) -> list[str]:
    """Each digest as TEAM.md and TEAM.html in `folder` (made if absent), the team's name made a file's; the
    names written."""
    os.makedirs(folder, exist_ok=True)
    names: list[str] = []
    for d in made:
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", d.team).strip("-.") or "team"
        while stem in names:  # two names alike once cut to a file's: the second numbered
            stem += "-2"
        names.append(stem)
        write_atomically(os.path.join(folder, f"{stem}.md"), d.markdown())
        write_atomically(os.path.join(folder, f"{stem}.html"), d.html())
    return names


#: Words a person writes after a number for a duration, and Prometheus' unit for each.
_UNIT_WORDS = {
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), "s"),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), "m"),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), "h"),
    **dict.fromkeys(("d", "day", "days"), "d"),
    **dict.fromkeys(("w", "week", "weeks"), "w"),
}


def _files_beside_a_store(args: argparse.Namespace) -> str:
    """Why files and --prometheus together are refused: where the first "file" is a unit after a duration
    flag's number ("--since 10 minutes"), the duration as one word; else that a report reads one or the other."""
    unit = _UNIT_WORDS.get(args.files[0].lower())
    numbers = [
        (flag, value)
        for flag, value in (("--since", args.since), ("--window", args.window), ("--step", args.step))
        if value and re.fullmatch(r"\d+(\.\d+)?", value)
    ]
    if unit and len(numbers) == 1:
        flag, value = numbers[0]
        return (
            f"{flag} {value} {args.files[0]}: a duration is one word, as Prometheus writes it: {flag} {value}{unit} "
            "(units s, m, h, d, w)"
        )
    return (
        f"{', '.join(args.files)}: files given with --prometheus: a report reads a store or files, not both; drop "
        "one (a duration is one word: --since 10m)"
    )


def _check_shard_flags(args: argparse.Namespace) -> None:
    """--shard.count, --shard.index and --merge: ValueError naming the flag where they cannot work."""
    if args.shard_count < 1 or not 0 <= args.shard_index < args.shard_count:
        raise ValueError(
            f"--shard.index {args.shard_index} of --shard.count {args.shard_count}: give a count of 1 or more and "
            "an index from 0 to the count - 1"
        )
    if args.shard_count > 1 or args.merge:
        flag = "--merge" if args.merge else "--shard.count"
        if args.shard_count > 1 and args.merge:
            raise ValueError("--shard.count writes a shard, --merge reads them: give one of the two")
        if not args.prometheus or not args.until:
            raise ValueError(
                f"{flag} needs --prometheus and --until: every shard and the merge read one store over one span "
                "(a default --until is each run's own now)"
            )
    if args.merge and args.processes > 1:
        raise ValueError("--processes judges a span; --merge reads shards already judged: drop --processes")
    if args.shard_count > 1 and (not args.out or args.format != "table" or args.by != "pod"):
        raise ValueError(
            "--shard.count writes a shard file for --merge: name it with --out, and give --format and --by to the merge"
        )


def _same_file(a: str, b: str) -> bool:
    """Whether two paths name one file (through links too); False where either is not there."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


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


@dataclass(frozen=True)
class _Judging:
    """How a report judges (picklable, for --processes): the thresholds, the prices (USD per GPU-hour by
    model), and the window and how far it slides (seconds; None: history.analyze's defaults)."""

    thresholds: Thresholds
    prices: dict[str, float]
    window: float | None
    slide: float | None

    def of_report(self) -> tuple[Thresholds, dict[str, float], float | None, float | None]:
        """In the order span.report takes them."""
        return self.thresholds, self.prices, self.window, self.slide


@dataclass(frozen=True)
class _StoreSpan:
    """A store opened for a report and the span read from it: the reader (its step the store's scrape
    interval), and what says whose each pod is."""

    store: Store
    reader: SeriesReader
    owners: OwnerReader
    span: Span


def _open_store(args: argparse.Namespace, thresholds: Thresholds) -> _StoreSpan:
    """The store of `--prometheus` and the span of `--since` and `--until` on its step grid (close the store)."""
    import time

    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.outputs import span
    from gpulens.core.times import rfc3339

    if not args.prometheus.startswith(("http://", "https://")):
        raise ValueError(f"--prometheus {args.prometheus!r} is not an http(s) URL")
    if not args.since:
        raise ValueError("--prometheus needs --since: how far back to read (7d, 24h, an RFC 3339 time or unix seconds)")
    until = _when(args.until, "--until") if args.until else time.time()
    since = _since(args.since, until)
    if since >= until:
        raise ValueError(f"--since {args.since} is not before --until {rfc3339(until)}")
    store = _store(args)
    try:
        reader = SeriesReader(
            store, args.query_step or DEFAULT_STORE_STEP, _mixin(args, thresholds), args.selector, args.dcgm_selector
        )
        reader.step = _step(args.query_step, reader.scrape_interval(until, min(until - since, 3600.0)))
        owners = _store_owners(args, store, reader)
        return _StoreSpan(store, reader, owners, span.Span.aligned(since, until, reader.step))
    except BaseException:
        store.close()
        raise


@dataclass(frozen=True)
class _FromStore:
    """What a report reads from a store (_report_from_store)."""

    verdicts: list[Verdict]
    #: What an HTML report's timelines draw (None for the other formats).
    timelines: TimelineBins | None
    use: Use
    scheduling: Scheduling | None
    changes: list[Outcome] | None
    #: OpenCost's USD per GPU-hour by node, averaged over the span (empty where the store holds none).
    node_prices: dict[str, float]


def _report_from_store(args: argparse.Namespace, how: _Judging, kept: list[KeptPlan]) -> _FromStore:
    """The verdicts of `--prometheus URL --since ... --until ...` (or of the shard files of `--merge`), for an
    HTML report what its timelines draw, for the plan what each unit used, the cluster's judgement where
    kube-state-metrics says which pods asked for GPUs (None where it does not), and the changes its workloads
    went through with what became of each (against the `kept` plans)."""
    from gpulens.analyzer.outputs import shards
    from gpulens.analyzer.outputs.plan import Use
    from gpulens.analyzer.outputs.timelines import TimelineBins

    opened = _open_store(args, how.thresholds)
    the_span = opened.span
    try:
        timelines = TimelineBins(the_span.start, the_span.end, the_span.step) if args.format == "html" else None
        use = Use.over(the_span.start, the_span.end, the_span.step, how.thresholds)
        if args.merge:
            origin = _origin(args, opened, how)
            verdicts = shards.merge(args.merge, origin, use, timelines)
        else:
            verdicts = _judged(args, opened, how, use, timelines, None)
        verdicts = _some(verdicts, opened.store.name, opened.reader, the_span)
        grid = (the_span.start, the_span.end, the_span.step)
        scheduling = _scheduling(args, opened.store, opened.owners, grid, verdicts, how.thresholds, how.prices)
        changes = _changes(args, opened.store, grid, verdicts, use, how.thresholds, how.prices, kept)
        node_prices = _opencost_prices(args, opened.store, the_span.start, the_span.end)
        return _FromStore(verdicts, timelines, use, scheduling, changes, node_prices)
    finally:
        opened.store.close()


def _opencost_prices(args: argparse.Namespace, store: Store, start: float, end: float) -> dict[str, float]:
    """`--prometheus.price-metric` (OpenCost's node_gpu_hourly_cost) by node, averaged over the span: what the
    cluster's own cost tool charges a GPU-hour, to check gpulens' prices against. Nodes it prices 0 (OpenCost's
    "unknown") are left out; a failed read is said and leaves the check out."""
    import math

    from gpulens.analyzer.inputs.store import StoreError

    if not args.price_metric:
        return {}
    expr = f"max by (node) (avg_over_time({args.price_metric}[{max(int(end - start), 1)}s]))"
    try:
        result = store.query(expr, end)
        prices = {s["metric"]["node"]: float(s["value"][1]) for s in result if s["metric"].get("node")}
    except (StoreError, KeyError, IndexError, TypeError, ValueError) as e:
        print(f"gpulens report: warning: OpenCost's prices ({expr}) are not compared: {e}", file=sys.stderr)
        return {}
    return {node: price for node, price in prices.items() if math.isfinite(price) and price > 0}


def _shard_from_store(
    args: argparse.Namespace,
    how: _Judging,
) -> None:
    """`--shard.count N --shard.index I`: the verdicts, use and timelines of the shard's nodes into the shard
    file at --out (analyzer/outputs/shards.py), for `--merge`."""
    from gpulens.analyzer.inputs.series import Shard
    from gpulens.analyzer.outputs import shards
    from gpulens.analyzer.outputs.plan import Use
    from gpulens.analyzer.outputs.timelines import TimelineBins

    opened = _open_store(args, how.thresholds)
    the_span, shard = opened.span, Shard(args.shard_index, args.shard_count)
    try:
        timelines = TimelineBins(the_span.start, the_span.end, the_span.step)
        use = Use.over(the_span.start, the_span.end, the_span.step, how.thresholds)
        verdicts = _judged(args, opened, how, use, timelines, shard)
        origin = _origin(args, opened, how)
        shards.write(args.out, shard, origin, shards.Judged(verdicts, use, timelines))
    finally:
        opened.store.close()
    print(
        f"gpulens report: {shard}: {len(verdicts)} verdicts of {len({v.node for v in verdicts})} nodes written to "
        f"{args.out}; merge every shard's file with --merge",
        file=sys.stderr,
    )


def _origin(
    args: argparse.Namespace,
    opened: _StoreSpan,
    how: _Judging,
) -> shards.Origin:
    """What a shard is judged from, which its merge must share (shards.Origin): the settings that change a
    verdict, the kinds config by its content (the same file may sit at another path on another machine)."""
    import hashlib
    from dataclasses import asdict

    from gpulens.analyzer.outputs import shards

    rules = Path(args.analysis_config).read_bytes() if args.analysis_config else b""
    settings = {
        "thresholds": asdict(how.thresholds),
        "prices": how.prices,
        "window": how.window,
        "step": how.slide,
        "selector": args.selector,
        "dcgm_selector": args.dcgm_selector,
        "dcgm_pod_labels": args.dcgm_pod_labels,
        **{name: getattr(args, name) for name in mixin.JOBS_READ},
        "team_label": args.team_label,
        "analysis_config": hashlib.sha256(rules).hexdigest() if rules else "",
        "scrape_intervals": opened.reader.intervals,
    }
    return shards.Origin(opened.store.name, opened.span, settings)


def _judged(
    args: argparse.Namespace,
    opened: _StoreSpan,
    how: _Judging,
    use: Use,
    timelines: TimelineBins | None,
    shard: Shard | None,
) -> list[Verdict]:
    """The verdicts of the span's nodes (of `shard`'s, where given), read in `--processes` processes, with a
    progress bar on a terminal; what each unit used into `use`, and its timelines into `timelines`."""
    from gpulens.analyzer.inputs.engines import read_engine_loads
    from gpulens.analyzer.outputs import span

    store, reader, the_span = opened.store, opened.reader, opened.span
    # What each serving pod's engine counted over the span: a few reduced queries, not its samples.
    percentile = how.thresholds.plan_load_percentile
    engines = read_engine_loads(store, the_span.start, the_span.end, the_span.step, percentile)
    if args.processes > 1:
        html = timelines is not None
        job = _Share(args, the_span, reader.intervals, how, engines, html)
        return _judged_in_processes(job, args.processes, use, timelines, shard)
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
    """What a process of `--processes` needs to judge its share of a report's nodes (picklable: a process is
    spawned, not forked, so that no thread or connection of this one is copied into it)."""

    args: argparse.Namespace
    span: Span
    #: The store's scrape interval by family, as read once (SeriesReader.intervals).
    intervals: dict[str, float]
    how: _Judging
    engines: Mapping[PodKey, EngineLoad]
    html: bool


def _judged_in_processes(
    job: _Share, count: int, use: Use, timelines: TimelineBins | None, shard: Shard | None
) -> list[Verdict]:
    """The verdicts of `count` processes, each judging its share of the nodes (of `shard`'s, where given:
    process p of shard I of N judges shard I + N * p of N * count, the nodes of I whose hash picks p), what
    each unit used merged into `use` and what an HTML report draws into `timelines`. A process's error (a
    store that fails, too many pods) ends the report with it."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from gpulens.analyzer.inputs.series import Shard

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
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.outputs import span
    from gpulens.analyzer.outputs.plan import Use
    from gpulens.analyzer.outputs.timelines import TimelineBins

    job, shard = task
    args, the_span, how = job.args, job.span, job.how
    store = _store(args)
    try:
        reader = SeriesReader(store, the_span.step, _mixin(args, how.thresholds), args.selector, args.dcgm_selector)
        reader.intervals = dict(job.intervals)
        owners = _store_owners(args, store, reader)
        timelines = TimelineBins(the_span.start, the_span.end, the_span.step) if job.html else None
        use = Use.over(the_span.start, the_span.end, the_span.step, how.thresholds)
        verdicts = span.report(reader, the_span, *how.of_report(), None, owners, timelines, use, job.engines, shard)
        return verdicts, use, timelines
    finally:
        store.close()


def _store_owners(args: argparse.Namespace, store: Store, reader: SeriesReader) -> OwnerReader:
    """The pods' owners, teams and kinds, read from kube-state-metrics' series in `store` (of the job the
    reader's config names)."""
    from gpulens.analyzer.inputs.kinds import load_rules
    from gpulens.analyzer.inputs.owners import OwnerReader

    return OwnerReader(store, args.team_label, load_rules(args.analysis_config), reader.config.kube_state_metrics)


def _scheduling(
    args: argparse.Namespace,
    source: Store | KubeState,
    owners: OwnerReader,
    span: tuple[float, float, float],
    verdicts: list[Verdict],
    thresholds: Thresholds,
    prices: dict[str, float],
) -> Scheduling | None:
    """The cluster's judgement over `span` (start, end, step: unix seconds) from kube-state-metrics' series in a
    store or recorded (None where no pod asked for a GPU)."""
    from gpulens.analyzer.inputs.cluster import ClusterReader, judged_grid
    from gpulens.analyzer.inputs.kinds import load_pools
    from gpulens.analyzer.inputs.store import StoreError
    from gpulens.analyzer.judging.scheduling import judge_store

    pools = load_pools(args.analysis_config)
    models = {v.node: v.gpu_model for v in verdicts if v.node and v.gpu_model}
    try:
        reader = ClusterReader(source, pools.label, _mixin(args, thresholds).kube_state_metrics)
        return judge_store(reader, owners, judged_grid(*span), thresholds, pools, prices, models)
    except StoreError as e:
        # The pods' verdicts stand without it: say what is missing rather than lose the report.
        print(f"gpulens report: warning: the cluster's share is left out: {e}", file=sys.stderr)
        return None


def _changes(
    args: argparse.Namespace,
    source: Store | KubeState,
    span: tuple[float, float, float],
    verdicts: list[Verdict],
    use: Use,
    thresholds: Thresholds,
    prices: dict[str, float],
    kept: list[KeptPlan],
) -> list[Outcome] | None:
    """The changes the workloads of `verdicts` (those whose pods held GPUs) went through over `span` (start, end,
    step: unix seconds), from kube-state-metrics' series in a store or recorded, and what became of each: its
    figures before and after from `use`, from a store its engine's health, and gpulens' plan before it (the
    `kept` plans, then a store's plan series) (docs/changes.md); none, said, where the store fails to say. None
    where the output shows none (a CSV of the pods, the waste or the cluster), so that its store is not asked for
    them."""
    from functools import partial

    from gpulens.analyzer.inputs.cluster import ClusterReader, judged_grid
    from gpulens.analyzer.inputs.engines import read_workload_health
    from gpulens.analyzer.inputs.proposals import first_proposal, kept_proposal, read_proposal
    from gpulens.analyzer.inputs.store import Store, StoreError
    from gpulens.analyzer.outputs.outcomes import over_span

    if args.format == "csv" and args.by not in ("change", "plan"):
        return None  # not shown: the plan's CSV says which actions are done, the changes' CSV is them
    try:
        reader = ClusterReader(source, "", _mixin(args, thresholds).kube_state_metrics)
        history = reader.workloads(*judged_grid(*span))
        if not isinstance(source, Store):
            return over_span(history, verdicts, use, span, thresholds, prices, None, kept_proposal(kept))
        percentile = thresholds.plan_load_percentile

        def health(namespace: str, pods: list[str], start: float, end: float) -> Health | None:
            return read_workload_health(source, namespace, pods, start, end, span[2], percentile)

        proposals = first_proposal(kept_proposal(kept), partial(read_proposal, source))
        return over_span(history, verdicts, use, span, thresholds, prices, health, proposals)
    except StoreError as e:
        print(f"gpulens report: warning: the workloads' changes are left out: {e}", file=sys.stderr)
        return []


def _owners_of(owners: OwnerReader | None, trace: pd.DataFrame) -> dict[PodKey, Owner]:
    """The owners of the trace's pods as kube-state-metrics said over its span ({} where it is not read)."""
    if owners is None or trace.empty:
        return {}
    pods = trace.loc[trace["pod"].astype(str) != "", ["namespace", "pod"]].drop_duplicates()
    ts = trace["timestamp"]
    keys = zip(pods["namespace"].astype(str), pods["pod"].astype(str), strict=True)
    return owners.read(keys, float(ts.max()), float(ts.max() - ts.min()))


#: The step a store report reads at where the store holds no sample to read its scrape interval from.
DEFAULT_STORE_STEP = 30.0
#: A UTC day in seconds: a digest's periods are whole days of them.
DAY = 86400.0


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


def _some(verdicts: list[Verdict], store: str, reader: SeriesReader, the_span: Span) -> list[Verdict]:
    """The verdicts, or where a store that answered held no GPU's series in the span, the error that says so
    and what to check (an empty report would read as a fleet without GPUs)."""
    from gpulens.analyzer.inputs.store import StoreError
    from gpulens.core.times import rfc3339

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


#: Seconds past which a bare --since number is a time (unix seconds, as --until takes), not a span: 31 years
#: (10**9 is 2001-09-09T01:46:40Z), more history than any store holds.
SINCE_IS_A_TIME = 1e9


def _since(text: str, until: float) -> float:
    """--since as unix seconds: a duration before `until` (7d, or a number of seconds), else a time as --until
    takes it (RFC 3339, or unix seconds: a number too large to be a span of history, SINCE_IS_A_TIME)."""
    try:
        back = parse_duration(text, "--since")
    except ValueError:
        return _when(text, "--since", "a duration (7d, 24h), ")
    return _when(text, "--since") if back >= SINCE_IS_A_TIME else until - back


def _when(text: str, flag: str, or_else: str = "") -> float:
    from gpulens.analyzer.inputs.readers import parse_timestamp

    try:
        return parse_timestamp(text)
    except ValueError:
        raise ValueError(
            f"{flag} {text!r} is not a time: give {or_else}RFC 3339 (2026-11-23T00:00:00Z) or unix seconds"
        ) from None


def _scrape_start(args: argparse.Namespace) -> float | None:
    """--scrape-start as unix seconds; None: the first scrape file's modification time."""
    return _when(args.scrape_start, "--scrape-start") if args.scrape_start else None


def run_eval(args: argparse.Namespace) -> int:
    from gpulens.analyzer.outputs.evaluate import evaluate, render

    try:
        thresholds, _ = _config(args)
        intervals = tuple(parse_duration(x, "--intervals") for x in args.intervals.split(","))
        spans = tuple(parse_duration(x, "--spans") for x in args.spans.split(","))
        # Bounds that keep a run to hours at most: each scenario is simulated at every interval and span.
        for flag, value, low, high in (
            ("--per-class", args.per_class, 1, 1000),
            ("--per-day-profile", args.per_day_profile, 0, 100),
        ):
            if not low <= value <= high:
                raise ValueError(f"{flag} must be from {low} to {high}, got {value}")
        if not 0 <= args.noise <= 1:
            raise ValueError(f"--noise must be a ratio from 0 to 1, got {args.noise}")
    except ValueError as e:
        print(f"gpulens eval: {e}", file=sys.stderr)
        return 2
    report = evaluate(args.seed, args.per_class, thresholds, args.noise, intervals, spans, args.per_day_profile)
    print(f"{len(report.labels)} simulated pods, seed {args.seed}, noise {args.noise}\n")
    print(render(report))
    return 0


def run_service(args: argparse.Namespace) -> int:
    import signal
    import threading

    from prometheus_client import CollectorRegistry

    from gpulens.analyzer.inputs.kinds import load_pools, load_rules
    from gpulens.analyzer.inputs.live import AnalyzerInput, ExporterInput, PrometheusInput
    from gpulens.analyzer.inputs.series import MAX_READ_PARTS, Shard
    from gpulens.analyzer.outputs.livepage import LivePage
    from gpulens.analyzer.outputs.service import AnalyzerService
    from gpulens.core.config import ConfigError, redact
    from gpulens.core.web import WebConfig, parse_listen_address, serve

    try:
        thresholds, prices = _config(args)
        if bool(args.prometheus) == bool(args.exporters):
            raise ValueError("give exactly one input: --input.prometheus URL, or one or more --input.exporter URL")
        if args.shard_count < 1 or not 0 <= args.shard_index < args.shard_count:
            raise ValueError(
                f"--shard.index {args.shard_index} of --shard.count {args.shard_count}: give a count of 1 or more "
                "and an index from 0 to count - 1"
            )
        if not 1 <= args.read_parts <= MAX_READ_PARTS:
            raise ValueError(
                f"--prometheus.read-parts {args.read_parts}: give 1 (every query every cycle) to {MAX_READ_PARTS}"
            )
        if args.shard_count > 1 and not args.prometheus:
            raise ValueError(
                "--shard.count needs --input.prometheus: with --input.exporter, give each replica its own exporters"
            )
        shard = Shard(args.shard_index, args.shard_count) if args.shard_count > 1 else None
        source: AnalyzerInput
        if args.prometheus:
            if not args.prometheus.startswith(("http://", "https://")):
                raise ValueError(f"--input.prometheus {args.prometheus!r} is not an http(s) URL")
            source = PrometheusInput(
                args.prometheus,
                args.window,
                args.query_step,
                timeout=args.timeout,
                selector=args.selector,
                price_metric=args.price_metric,
                shard=shard,
                auth=_store_auth(args),
                compression=args.compression,
                dcgm_selector=args.dcgm_selector,
                config=_mixin(args, thresholds),
                team_label=args.team_label,
                rules=load_rules(args.analysis_config),
                state_file=args.state_file,
                parts=args.read_parts,
                pools=load_pools(args.analysis_config),
            )
        else:
            source = ExporterInput(ExporterInput.parse_targets(args.exporters), args.window, args.scrape_interval)
        history = parse_duration(args.history, "--analysis.history")
        address = parse_listen_address(args.listen_address)
        web_config = WebConfig.load(args.web_config_file)
    except (ValueError, ConfigError) as e:
        print(f"gpulens analyzer: {e}", file=sys.stderr)
        return 2
    # Replicas sharing a Prometheus read it each at its own point of the interval, not all at once.
    phase = args.interval * args.shard_index / args.shard_count
    grid = args.query_step if args.prometheus else None  # the step grid its range queries read
    service = AnalyzerService(source, thresholds, prices, args.interval, history=history, phase=phase, grid_step=grid)
    live = LivePage(service)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(service)
    try:
        server = serve(
            registry,
            address,
            web_config,
            title="gpulens analyzer",
            health=service.health,
            ready=service.ready,
            routes={
                "/": live.page,
                "/api/v1/page": live.changes,
                "/api/v1/verdicts": service.verdicts_json,
                "/api/v1/plan": service.plan_json,
                "/api/v1/changes": service.changes_json,
            },
            exposition=service.exposition,
        )
    except ConfigError as e:
        print(f"gpulens analyzer: {e}", file=sys.stderr)
        return 2
    service.start()
    log = logging.getLogger("gpulens.analyzer")
    host, port = address[0], server.server_address[1]
    reading = f"Prometheus at {redact(args.prometheus)}" if args.prometheus else f"{len(args.exporters)} exporter(s)"
    log.info(
        "serving on %s:%d (the page of verdicts at /, /metrics, /api/v1/verdicts, /api/v1/plan); judging the "
        "last %g s of %s "
        "every %g s",
        host or "*",
        port,
        args.window,
        reading,
        args.interval,
    )
    if shard is not None:
        log.info("judging %s: the nodes whose name hashes to %d modulo %d", shard, shard.index, shard.count)
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    log.info("shutting down")
    service.stop()
    server.shutdown()
    return 0
