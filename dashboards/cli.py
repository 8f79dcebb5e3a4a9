"""`gpulens dashboards --out DIR`: write the Grafana dashboards as JSON (see dashboards/gpulens.py)."""
from __future__ import annotations

import sys
from pathlib import Path

from gpulens import mixin
from gpulens.config import ConfigError, write_atomically


def register(commands) -> None:
    p = commands.add_parser("dashboards", help="write the Grafana dashboards (JSON, for file provisioning)")
    mixin.add_flags(p)
    p.set_defaults(run=run)


def run(args) -> int:
    from dashboards import gpulens  # grafanalib: only for this command, not every gpulens process

    try:
        files = gpulens.generate(mixin.config_from(args))
        for name, text in files.items():
            write_atomically(Path(args.out) / name, text)
    except ConfigError as e:
        print(f"gpulens dashboards: {e}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(files)} to {args.out}", file=sys.stderr)
    return 0
