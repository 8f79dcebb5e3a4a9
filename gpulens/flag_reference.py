"""Generates docs/flags.md from the command line itself: every command's flags, the environment variable of
each that reads one, its default and its help, so the reference can never drift from the flags.

Run: python -m gpulens.flag_reference docs/flags.md   (with no GPULENS_ variable set: one changes the
default it shows). It sits above gpulens.cli, which it documents (docs/architecture.md's layers).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from gpulens.cli import build_parser


def render() -> str:
    """Every command's flags as Markdown: the flag, the environment variable that sets it (flags.add's, where
    it has one), its default and its help, read from the parser `gpulens` runs. Build it with no GPULENS_
    variable set: a variable changes the default it shows."""
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = [
        "# Flag reference",
        "",
        "Generated from the command line by `python -m gpulens.flag_reference docs/flags.md`; do not edit by "
        "hand. A flag given on the command line wins over its environment variable; a flag without one is set "
        "on the command line only. `gpulens COMMAND --help` says the same.",
        "",
    ]
    seen: set[int] = set()
    for name, command in commands.choices.items():
        if id(command) in seen:  # an alias (analyze: report's old name)
            continue
        seen.add(id(command))
        lines += [f"## gpulens {name}", "", command.description or "", ""]
        lines += ["| flag | environment | default | what it does |", "|---|---|---|---|"]
        for action in command._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS or "--help" in action.option_strings:
                continue
            help_text = action.help or ""
            env = re.search(r"\[env (GPULENS_\w+)\]", help_text)
            help_text = re.sub(r" ?\[env GPULENS_\w+\]", "", help_text)
            said = re.search(r" \(default:? ((?:[^()]|\([^()]*\))*)\)$", help_text)  # the help's own "(default X)"
            if said:
                help_text, shown = help_text[: said.start()], said[1]
            else:
                default = action.default
                shown = "" if default in (None, "", False, argparse.SUPPRESS) else str(default)
            flags = ", ".join(f"`{flag}`" for flag in action.option_strings)
            row = [flags, f"`{env[1]}`" if env else "-", shown or "-", help_text]
            lines.append("| " + " | ".join(cell.replace("|", "/") for cell in map(str, row)) + " |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m gpulens.flag_reference FILE   (docs/flags.md)")
    Path(sys.argv[1]).write_text(render())
