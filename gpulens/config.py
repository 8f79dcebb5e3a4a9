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
