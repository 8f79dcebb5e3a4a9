"""The `gpulens` command: one entry point, a subcommand per job."""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import os
import sys
from typing import NoReturn

from gpulens import __version__
from gpulens.core import flags

#: What a gpulens process asks of numpy, set before any command imports it, unless the environment sets it:
#: NUMPY_MADVISE_HUGEPAGE=0, no transparent-huge-page mark on its large arrays, whose first touch can otherwise wait
#: for the kernel to compact memory (docs/sizing.md, "Pages", has the measurements and when to set it back).
NUMPY_ENVIRONMENT = {"NUMPY_MADVISE_HUGEPAGE": "0"}
for _name, _value in NUMPY_ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)

LOG_LEVELS = ("debug", "info", "warning", "error")

#: The module that registers each command (its `register(commands)`), in the order `gpulens --help`
#: lists them. A run imports only its command's module: an exporter on a node does not load the demo,
#: the alert builder or the analyzer's data stack to parse its flags.
COMMANDS = {
    "exporter": "gpulens.exporter.cli",
    "report": "gpulens.analyzer.cli",
    "analyze": "gpulens.analyzer.cli",  # report's old name
    "analyzer": "gpulens.analyzer.cli",
    "eval": "gpulens.analyzer.cli",
    "digest": "gpulens.analyzer.cli",
    "metrics-reference": "gpulens.reference",
    "alerts": "gpulens.alerts.cli",
    "dashboards": "gpulens.dashboards.cli",
    "demo": "gpulens.demo",
    "alert-receiver": "gpulens.receiver",
}


class _HelpFormatter(argparse.HelpFormatter):
    """Every flag's help ends with its default, unless it says it already (flags.add does, and some flags
    describe a default no value shows)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or "(default" in text
            or default in (None, "", False, argparse.SUPPRESS)
            or isinstance(action, (argparse._StoreTrueAction, argparse._HelpAction, argparse._VersionAction))
        ):
            return action.help
        return f"{text} (default %(default)s)"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line: every subcommand and its flags, or only those of `command` (a COMMANDS key)."""
    parser = argparse.ArgumentParser(prog="gpulens", description="Find out why your GPUs are idle.")
    parser.add_argument("--version", action="version", version=f"gpulens {__version__}")
    parser.add_argument("--log.level", dest="log_level", default="info", choices=LOG_LEVELS, help="log verbosity")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [COMMANDS[command]] if command else list(dict.fromkeys(COMMANDS.values()))
    for module in modules:
        importlib.import_module(module).register(commands)
    # Each command's --help opens with what it does (its line in `gpulens --help`) and shows defaults.
    summaries = {action.dest: action.help for action in commands._choices_actions}
    for name, subcommand in commands.choices.items():
        subcommand.formatter_class = _HelpFormatter
        subcommand.description = subcommand.description or summaries.get(name)
    # Global flags are accepted after the command too. SUPPRESS: a subcommand sets the value only when
    # the flag is given there, so `gpulens --log.level debug exporter` keeps debug.
    for subcommand in {id(p): p for p in commands.choices.values()}.values():
        subcommand.add_argument(
            "--log.level", dest="log_level", default=argparse.SUPPRESS, choices=LOG_LEVELS, help="log verbosity"
        )
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The command `argv` runs, if it names one after the global flags; None for `--help`, `--version`,
    a typo (the full parser lists the choices) and an empty line."""
    rest = iter(argv)
    for word in rest:
        if word == "--log.level":
            next(rest, None)
        elif not word.startswith("--log.level="):
            return word if word in COMMANDS else None
    return None


def _unknown(parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]) -> NoReturn:
    """Exit with the usage of the command given (not the whole command line's), naming the flags it does
    not take and, for each, the flag of that command it is closest to."""
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    command: argparse.ArgumentParser = commands.choices[args.command]
    known = [option for action in command._actions for option in action.option_strings if option.startswith("--")]
    said = []
    for word in extra:
        flag = word.split("=", 1)[0]
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6) if flag.startswith("-") else []
        said.append(f"{word} (did you mean {close[0]}?)" if close else word)
    command.error(f"unrecognized arguments: {' '.join(said)}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(_command_of(argv))
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unknown(parser, args, extra)
    flags.check(parser, args)
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return args.run(args)
    except MemoryError:
        # The readers refuse what they can see will not fit (readers.REPORT_BYTES_PER_ROW, kube_state's bounds);
        # this is what they could not see, said in one line rather than a traceback.
        print(
            f"{' '.join(filter(None, ['gpulens', _command_of(argv)]))}: out of memory: give a shorter span (--since, "
            "--until) or fewer "
            "files, or run it where more memory is free",
            file=sys.stderr,
        )
        return 2
