"""Kubernetes pods, as every part of gpulens names them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PodRef:
    """A container of a Kubernetes pod. `container` is "" when only the pod is known."""

    namespace: str
    pod: str
    container: str
