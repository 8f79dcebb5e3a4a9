"""Configuration errors and the checks every gpulens command shares."""
from __future__ import annotations

from pathlib import Path

import yaml


class ConfigError(ValueError):
    """A flag or configuration file is wrong. The message names the value and how to fix it."""


def read_yaml(path: str | Path, flag: str):
    """The YAML document in `path`, given with `flag`; ConfigError naming both when it cannot be
    read or parsed."""
    try:
        return yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"{flag} {path}: cannot read it ({e.strerror})") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{flag} {path}: not valid YAML: {e}") from e


def require_positive(*flags: tuple[str, float], unit: str = "number of seconds") -> None:
    """ConfigError for the first (flag, value) that is not a positive number."""
    for flag, value in flags:
        if not value > 0:
            raise ConfigError(f"{flag} must be a positive {unit}, got {value}")


def write_atomically(path: str | Path, text: str, flag: str = "--out") -> None:
    """Write `text` to `path` through a temporary file beside it, so a reader (Prometheus reloading
    its rules, Grafana its dashboards) never sees half a file and a failure leaves the old one whole."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        tmp.replace(path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise ConfigError(f"{flag} {path}: cannot write it ({e.strerror}); choose a writable directory") from e


def write_generated(command: str, out: str | Path, generate) -> int:
    """Run `generate()` ({file name: text}) and write each file into `out`: the body of every
    `gpulens COMMAND --out DIR` command. Returns the exit status; errors name the fix."""
    import sys

    try:
        files = generate()
        for name, text in files.items():
            write_atomically(Path(out) / name, text)
    except ConfigError as e:
        print(f"gpulens {command}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {', '.join(files)} to {out}", file=sys.stderr)
    return 0
