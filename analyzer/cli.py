"""`gpulens report` (files; `analyze` is its old name), `gpulens eval` (accuracy on simulated pods)."""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
from typing import TYPE_CHECKING, Any

from gpulens.core import catalog, flags, mixin
from gpulens.core.config import finite_json, parse_duration, write_atomically
from gpulens.core.flags import Subcommands
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import rfc3339

if TYPE_CHECKING:
    from gpulens.analyzer.inputs.store import StoreAuth
    from gpulens.analyzer.runs.report import StoreReport, StoreSource
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


def _store_source(args: argparse.Namespace, thresholds: Thresholds) -> StoreSource:
    """How the flags say to reach and read the store (credentials checked: ConfigError naming the flag)."""
    from gpulens.analyzer.runs.report import StoreSource

    return StoreSource(
        args.prometheus,
        _store_auth(args),
        args.timeout,
        args.compression,
        _mixin(args, thresholds),
        args.selector,
        args.dcgm_selector,
        args.team_label,
        args.analysis_config,
    )


def _store_report(args: argparse.Namespace, thresholds: Thresholds, since: str, until: str) -> StoreReport:
    """The store report the flags ask for over `since` to `until` (--since's and --until's forms)."""
    import time

    from gpulens.analyzer.runs.report import StoreReport

    if not args.prometheus.startswith(("http://", "https://")):
        raise ValueError(f"--prometheus {args.prometheus!r} is not an http(s) URL")
    if not since:
        raise ValueError("--prometheus needs --since: how far back to read (7d, 24h, an RFC 3339 time or unix seconds)")
    end = _when(until, "--until") if until else time.time()
    start = _since(since, end)
    if start >= end:
        raise ValueError(f"--since {since} is not before --until {rfc3339(end)}")
    return StoreReport(
        _store_source(args, thresholds),
        start,
        end,
        args.query_step,
        args.processes,
        tuple(args.merge),
        timelines=args.format == "html",
        # The CSVs of the pods, the waste or the cluster show no change: their store is not asked for them.
        changes=not (args.format == "csv" and args.by not in ("change", "plan")),
        price_metric=args.price_metric,
    )


def run_report(args: argparse.Namespace) -> int:
    # pandas and the classifier load here, not at `gpulens` start: the exporter shares this CLI.
    from gpulens.analyzer.inputs.kube_state import KubeStateError
    from gpulens.analyzer.inputs.proposals import read_plan_file
    from gpulens.analyzer.inputs.readers import TraceError
    from gpulens.analyzer.inputs.series import Shard
    from gpulens.analyzer.inputs.store import StoreError
    from gpulens.analyzer.outputs import formats, showback
    from gpulens.analyzer.runs import report as run

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
        how = run.Judging(thresholds, prices, window, step)
        if args.shard_count > 1:
            shard = Shard(args.shard_index, args.shard_count)
            written = run.shard_from_store(
                _store_report(args, thresholds, args.since, args.until), how, shard, args.out
            )
            print(
                f"gpulens report: {shard}: {len(written)} verdicts of {len({v.node for v in written})} nodes written "
                f"to {args.out}; merge every shard's file with --merge",
                file=sys.stderr,
            )
            return 0
        if args.prometheus:
            judged = run.from_store(_store_report(args, thresholds, args.since, args.until), how, kept)
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
            files = run.FileReport(
                tuple(args.files),
                args.scrape_interval,
                args.gpu_model,
                _scrape_start(args),
                args.kube_state,
                _store_source(args, thresholds),
                changes=not (args.format == "csv" and args.by not in ("change", "plan")),
            )
            judged = run.from_files(files, how, kept)
    except (TraceError, ValueError, StoreError, KubeStateError) as e:
        print(f"gpulens report: {e}", file=sys.stderr)
        return 2
    verdicts, plan = run.concluded(judged, how)
    scheduling, changes, timelines, trace = judged.scheduling, judged.changes, judged.timelines, judged.trace
    requested = scheduling.requested if scheduling is not None else None
    bills = showback.charges(verdicts, prices, requested, judged.node_prices or {})
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
    from gpulens.analyzer.runs import report as run
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
        how = run.Judging(thresholds, prices)
        read = run.from_store(_store_report(args, thresholds, rfc3339(periods.start), rfc3339(until)), how, [])
    except (TraceError, ValueError, StoreError) as e:
        print(f"gpulens digest: {e}", file=sys.stderr)
        return 2
    verdicts, plan = run.concluded(read, how)
    requested = read.scheduling.requested if read.scheduling is not None else None
    bills = showback.charges(verdicts, prices, requested, read.node_prices or {})
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


#: A UTC day in seconds: a digest's periods are whole days of them.
DAY = 86400.0


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
    from gpulens.analyzer.runs.livepage import LivePage
    from gpulens.analyzer.runs.service import AnalyzerService
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
