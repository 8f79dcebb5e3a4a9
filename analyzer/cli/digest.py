"""`gpulens digest`: each team's period against the last, read from a store, written and delivered."""

from __future__ import annotations

import argparse
import os
import re
import sys

from gpulens.analyzer.cli.common import common_flags, config_of, store_flags, store_report, when
from gpulens.core import flags, mixin
from gpulens.core.config import parse_duration, write_atomically
from gpulens.core.flags import Subcommands

#: A UTC day in seconds: a digest's periods are whole days of them.
DAY = 86400.0


def register(commands: Subcommands) -> None:
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
    common_flags(d)
    store_flags(d, step_help="seconds between the points read (default: the store's scrape interval)", step=0.0)
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
        thresholds, prices = config_of(args)
        settings = delivery.DigestSettings.load(args.digest_config)
        if not args.prometheus:
            raise ValueError("--prometheus URL: give the store to read the periods from")
        period = parse_duration(args.period, "--period")
        if period < DAY or period % DAY:
            raise ValueError(f"--period {args.period}: give whole days (7d): a day's charges fall in one period")
        until = when(args.until, "--until") if args.until else time.time() // DAY * DAY
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
        read = run.from_store(store_report(args, thresholds, rfc3339(periods.start), rfc3339(until)), how, [])
    except (TraceError, ValueError, StoreError) as e:
        print(f"gpulens digest: {e}", file=sys.stderr)
        return 2
    verdicts, plan = run.concluded(read, how)
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
