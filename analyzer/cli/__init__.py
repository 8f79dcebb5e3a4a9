"""The analyzer's commands: `gpulens report` (`analyze`), `analyzer`, `digest` and `eval`. Each module holds a
command's flags and the wiring that makes a run of them (analyzer/runs/); common.py what the commands that read
a store share."""

from __future__ import annotations

from gpulens.analyzer.cli import digest, evaluation, report, service
from gpulens.core.flags import Subcommands


def register(commands: Subcommands) -> None:
    """Every command of the analyzer, in the order `gpulens --help` lists them."""
    report.register(commands)
    service.register(commands)
    digest.register(commands)
    evaluation.register(commands)
