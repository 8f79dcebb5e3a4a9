"""`gpulens dashboards --out DIR`: write the Grafana dashboards as JSON (see dashboards/gpulens.py)."""

from __future__ import annotations

import argparse

from gpulens.core import mixin
from gpulens.core.config import write_generated
from gpulens.core.flags import Subcommands


def register(commands: Subcommands) -> None:
    p = commands.add_parser(
        "dashboards",
        help="write the Grafana dashboards (JSON, for file provisioning; a kustomization for the Grafana sidecar)",
    )
    mixin.add_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from gpulens.dashboards import gpulens  # grafanalib: only for this command, not every gpulens process

    def generate() -> dict[str, str]:
        boards = gpulens.generate(mixin.config_from(args))
        return {**boards, "kustomization.yaml": gpulens.sidecar_kustomization(list(boards))}

    return write_generated("dashboards", args.out, generate)
