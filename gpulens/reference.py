"""Generates docs/metrics.md from the metric table, so the reference can never drift from the code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpulens.core import metrics as m
from gpulens.core.flags import Subcommands

_GROUPS = {
    "identity": "Identity and health",
    "gpu": "Per GPU and MIG instance",
    "errors": "Errors",
    "pod": "Per pod",
    "process": "Per process",
    "self": "The exporter itself",
    "analyzer": "The analyzer (gpulens analyzer)",
}


def render() -> str:
    lines = [
        "# Metric reference",
        "",
        "Generated from `gpulens/core/metrics.py` by `gpulens metrics-reference`; do not edit by hand.",
        "",
        'Per-device series carry `gpu` (`"0"`, or `"0/gi3"` for a MIG instance) and `uuid`. '
        "Join `gpulens_gpu_info` on `uuid` for the model or MIG profile.",
        "",
    ]
    for group, title in _GROUPS.items():
        lines += [f"## {title}", "", "| name | type | unit | labels | meaning | source |", "|---|---|---|---|---|---|"]
        for spec in m.ALL:
            if spec.group == group:
                labels = ", ".join(f"`{label}`" for label in spec.labels)
                lines.append(
                    f"| `{spec.name}` | {spec.type} | {spec.unit or '-'} | {labels} | {spec.help} | {spec.source} |"
                )
        lines.append("")
    return "\n".join(lines)


def register(commands: Subcommands) -> None:
    p = commands.add_parser("metrics-reference", help="print the metric reference (Markdown)")
    p.add_argument("--out", default="", help="write to this file instead of stdout")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    text = render()
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0
