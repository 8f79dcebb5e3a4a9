"""`gpulens eval`: the classifier measured on simulated pods whose bottleneck is known."""

from __future__ import annotations

import argparse
import sys

from gpulens.analyzer.cli.common import common_flags, config_of
from gpulens.core.config import parse_duration
from gpulens.core.flags import Subcommands


def register(commands: Subcommands) -> None:
    e = commands.add_parser("eval", help="measure the classifier on simulated pods with known bottlenecks")
    e.add_argument("--seed", type=int, default=1000, help="scenario seed (thresholds were tuned on seeds 0-7)")
    e.add_argument("--per-class", type=int, default=12, help="scenarios per class")
    e.add_argument("--noise", type=float, default=0.03, help="standard deviation of the noise added to every ratio")
    e.add_argument(
        "--intervals", default="1,15,30,60", help="seconds between samples to judge every scenario at, comma-separated"
    )
    e.add_argument("--spans", default="10m,1h,6h,24h", help="spans of the day-scale scenarios, comma-separated")
    e.add_argument("--per-day-profile", type=int, default=3, help="day-scale scenarios per profile, interval and span")
    common_flags(e)
    e.set_defaults(run=run_eval)


def run_eval(args: argparse.Namespace) -> int:
    from gpulens.analyzer.outputs.evaluate import evaluate, render

    try:
        thresholds, _ = config_of(args)
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
