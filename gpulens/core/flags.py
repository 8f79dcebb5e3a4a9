"""Prometheus-style dotted flags with an environment mirror, shared by every gpulens command.

`--web.listen-address` can also be set as GPULENS_WEB_LISTEN_ADDRESS, which is what containers and
Kubernetes manifests use. A flag on the command line wins over the environment. An environment value is
checked as the flag's own value would be (its type, its choices), and a bad one is an error naming the
variable, but only for the command that takes it: `gpulens --version` or another command still works.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TypeAlias

from gpulens.core.config import ConfigError, parse_duration

#: What each part's register() receives: the `gpulens` command's subcommands.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

_TRUE, _FALSE = ("1", "true", "yes"), ("0", "false", "no", "")


def env_name(flag: str) -> str:
    return "GPULENS_" + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def duration(text: str) -> float:
    """An argparse type: seconds from "900" or a Prometheus duration ("30s", "10m", "1h30m", "1d")."""
    try:
        return parse_duration(text, "")
    except ConfigError as e:
        raise argparse.ArgumentTypeError(str(e).strip()) from e


class BadEnvironment:
    """The default of a flag whose environment variable holds a value the flag refuses. Left in place
    only when the flag is not given on the command line; `check` then reports it."""

    def __init__(self, name: str, value: str, reason: str):
        self.message = f"{name}={value!r}: {reason}"

    def __repr__(self) -> str:  # --help shows the default
        return f"<invalid: {self.message}>"


def add(parser: argparse.ArgumentParser, flag: str, **kwargs: Any) -> None:
    """Add a dotted flag whose default comes from its environment variable when set."""
    name = env_name(flag)
    if name in os.environ:
        kwargs["default"] = _from_environment(name, os.environ[name], kwargs)
        kwargs["required"] = False  # a required flag is given by its variable too
    help_text = kwargs.get("help", "")
    if help_text != argparse.SUPPRESS:
        default = kwargs.get("default")
        silent = default in (None, "", False) or kwargs.get("action") == "store_true" or "(default" in help_text
        if kwargs.get("action") is argparse.BooleanOptionalAction:  # --no-NAME is listed beside it
            silent = "(default" in help_text
        shown = "" if silent else f" (default {default})"
        kwargs["help"] = f"{help_text}{shown} [env {name}]"
    parser.add_argument(flag, **kwargs)


def _from_environment(name: str, value: str, kwargs: dict[str, Any]) -> Any:
    if kwargs.get("action") in ("store_true", argparse.BooleanOptionalAction):
        if value.strip().lower() in _TRUE:
            return True
        if value.strip().lower() in _FALSE:
            return False
        return BadEnvironment(name, value, "expected true or false (1/0, yes/no)")
    convert = kwargs.get("type", str)
    try:
        converted = convert(value)
    except (ValueError, TypeError, argparse.ArgumentTypeError) as e:
        reason = str(e) if isinstance(e, argparse.ArgumentTypeError) else f"not a valid {convert.__name__}"
        return BadEnvironment(name, value, reason)
    choices = kwargs.get("choices")
    if choices is not None and converted not in choices:
        return BadEnvironment(name, value, f"not one of {', '.join(map(str, choices))}")
    return converted


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Exit with a usage error (status 2) naming the variable if a bad environment value is in use."""
    for value in vars(args).values():
        if isinstance(value, BadEnvironment):
            parser.error(f"environment variable {value.message}")
