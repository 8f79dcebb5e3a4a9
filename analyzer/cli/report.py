"""`gpulens report` (`analyze`, its old name): its flags, checked, made into a run (analyzer/runs/report.py) from
files or a store, and its verdicts written in the format asked."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from typing import TYPE_CHECKING

from gpulens.analyzer.cli.common import (
    attribution,
    changes_shown,
    check_shard,
    common_flags,
    config_of,
    store_flags,
    store_report,
    when,
)
from gpulens.core import flags
from gpulens.core.config import finite_json, parse_duration, write_atomically
from gpulens.core.flags import Subcommands

if TYPE_CHECKING:
    from gpulens.analyzer.judging.classify import Verdict
    from gpulens.analyzer.outputs.actions import Plan
    from gpulens.analyzer.runs.report import Judged


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
    _span_flags(p)
    _output_flags(p)
    _sharing_flags(p)
    _grouping_flags(p)
    common_flags(p)
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
    store_flags(
        p,
        step_help="with --prometheus: seconds between the points read (default: the store's scrape interval, read "
        "from its samples; 30 s where it holds none to read it from)",
        step=0.0,
    )
    p.set_defaults(run=run_report)


def _span_flags(p: argparse.ArgumentParser) -> None:
    """The span read: files, or a store over --since to --until."""
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


def _output_flags(p: argparse.ArgumentParser) -> None:
    """What is written, where, and the window its verdicts are judged over."""
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


def _sharing_flags(p: argparse.ArgumentParser) -> None:
    """How a long report is shared: processes, shards of several runs, and their merge."""
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


def _grouping_flags(p: argparse.ArgumentParser) -> None:
    """How verdicts are grouped, and what says whose each pod is and what changed."""
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


def run_report(args: argparse.Namespace) -> int:
    # pandas and the classifier load here, not at `gpulens` start: the exporter shares this CLI.
    from gpulens.analyzer.inputs.kube_state import KubeStateError
    from gpulens.analyzer.inputs.proposals import read_plan_file
    from gpulens.analyzer.inputs.readers import TraceError
    from gpulens.analyzer.inputs.store import StoreError
    from gpulens.analyzer.inputs.window import Shard
    from gpulens.analyzer.judging.history import check_slide
    from gpulens.analyzer.runs import report as run

    try:
        thresholds, prices = config_of(args)
        window = parse_duration(args.window, "--window") if args.window else None
        step = parse_duration(args.step, "--step") if args.step else None
        if window is not None and step is not None:
            check_slide(window, step)  # said before a long read, not after
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
            written = run.shard_from_store(store_report(args, thresholds, args.since, args.until), how, shard, args.out)
            print(
                f"gpulens report: {shard}: {len(written)} verdicts of {len({v.node for v in written})} nodes written "
                f"to {args.out}; merge every shard's file with --merge",
                file=sys.stderr,
            )
            return 0
        if args.prometheus:
            judged = run.from_store(store_report(args, thresholds, args.since, args.until), how, kept)
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
                attribution(args, thresholds),
                changes=changes_shown(args),
            )
            judged = run.from_files(files, how, kept)
    except (TraceError, ValueError, StoreError, KubeStateError) as e:
        print(f"gpulens report: {e}", file=sys.stderr)
        return 2
    verdicts, plan = run.concluded(judged, how)
    text = _written(args, verdicts, plan, judged, prices)
    if args.out:
        try:
            write_atomically(args.out, text)
        except ValueError as e:
            print(f"gpulens report: {e}", file=sys.stderr)
            return 2
    else:
        sys.stdout.write(text)
    return 0


def _written(
    args: argparse.Namespace, verdicts: list[Verdict], plan: Plan, judged: Judged, prices: dict[str, float]
) -> str:
    """The report in the format `args` asks (--format, --by), with the charges and their checks."""
    from gpulens.analyzer.outputs import formats, showback

    scheduling, changes, timelines, trace = judged.scheduling, judged.changes, judged.timelines, judged.trace
    requested = scheduling.requested if scheduling is not None else None
    bills = showback.charges(verdicts, prices, requested, judged.node_prices)
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
    return text


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
    check_shard(args.shard_count, args.shard_index)
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


def _scrape_start(args: argparse.Namespace) -> float | None:
    """--scrape-start as unix seconds; None: the first scrape file's modification time."""
    return when(args.scrape_start, "--scrape-start") if args.scrape_start else None
