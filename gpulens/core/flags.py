"""Prometheus-style dotted flags with an environment mirror, shared by every gpulens command.

`--web.listen-address` can also be set as GPULENS_WEB_LISTEN_ADDRESS, which is what containers and
Kubernetes manifests use. A flag on the command line wins over the environment.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, TypeAlias

#: What each part's register() receives: the `gpulens` command's subcommands.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def env_name(flag: str) -> str:
    return "GPULENS_" + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def add(parser: argparse.ArgumentParser, flag: str, **kwargs: Any) -> None:
    """Add a dotted flag whose default comes from its environment variable when set."""
    name = env_name(flag)
    if name in os.environ:
        value = os.environ[name]
        if kwargs.get("action") == "store_true":
            kwargs["default"] = value.lower() in ("1", "true", "yes")
        else:
            kwargs["default"] = kwargs.get("type", str)(value) if kwargs.get("type") else value
    help_text = kwargs.get("help", "")
    if help_text != argparse.SUPPRESS:
        kwargs["help"] = f"{help_text} [env {name}]"
    parser.add_argument(flag, **kwargs)
