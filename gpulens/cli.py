"""The `gpulens` command: one entry point, a subcommand per job."""

from __future__ import annotations

import argparse
import logging
import sys

from gpulens import __version__
from gpulens.core import flags

LOG_LEVELS = ("debug", "info", "warning", "error")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: every subcommand and its flags."""
    from gpulens import demo, receiver, reference
    from gpulens.alerts import cli as alerts_cli
    from gpulens.analyzer import cli as analyzer_cli
    from gpulens.dashboards import cli as dashboards_cli
    from gpulens.exporter import cli as exporter_cli

    parser = argparse.ArgumentParser(prog="gpulens", description="Find out why your GPUs are idle.")
    parser.add_argument("--version", action="version", version=f"gpulens {__version__}")
    parser.add_argument("--log.level", dest="log_level", default="info", choices=LOG_LEVELS, help="log verbosity")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    exporter_cli.register(commands)
    analyzer_cli.register(commands)
    reference.register(commands)
    alerts_cli.register(commands)
    dashboards_cli.register(commands)
    demo.register(commands)
    receiver.register(commands)
    # Global flags are accepted after the command too. SUPPRESS: a subcommand sets the value only when
    # the flag is given there, so `gpulens --log.level debug exporter` keeps debug.
    for command in {id(p): p for p in commands.choices.values()}.values():
        command.add_argument(
            "--log.level", dest="log_level", default=argparse.SUPPRESS, choices=LOG_LEVELS, help="log verbosity"
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    flags.check(parser, args)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return args.run(args)
