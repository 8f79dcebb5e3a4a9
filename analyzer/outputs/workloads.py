"""Which workload a verdict's pod is one replica of, as kube-state-metrics says (its owner) or, where nothing
says, as its pod's name does (a Deployment's, a StatefulSet's); whether it is a notebook's kernel; and the requests
one serving replica carries, from what its engine said (replica_capacity)."""

from __future__ import annotations

import math
import re

from gpulens.analyzer.inputs.engines import EngineLoad
from gpulens.analyzer.judging.classify import Verdict
from gpulens.core.thresholds import Thresholds

#: Owners whose pods are replicas of one another.
REPLICATED = frozenset({"Deployment", "ReplicaSet", "StatefulSet"})
#: Pod names of a Deployment ("name-<replicaset hash>-<5 chars>") and of a StatefulSet ("name-<ordinal>"),
#: to group replicas where kube-state-metrics is not read (files).
_DEPLOYMENT_POD = re.compile(r"^(.+)-[a-z0-9]{6,10}-[a-z0-9]{5}$")
_STATEFULSET_POD = re.compile(r"^(.+)-\d+$")
NOTEBOOK = re.compile(r"notebook|jupyter", re.IGNORECASE)


def workload_of(v: Verdict) -> tuple[str, str, str]:
    """(namespace, owner kind, owner name): kube-state-metrics' where read, else from the pod's name
    (kind "Deployment?" or "StatefulSet?": inferred), else the pod alone."""
    if not v.pod:
        return ("", "", v.unit)
    if v.owner_kind:
        return (v.namespace, v.owner_kind, v.owner)
    for kind, pattern in (("Deployment?", _DEPLOYMENT_POD), ("StatefulSet?", _STATEFULSET_POD)):
        if match := pattern.match(v.pod):
            return (v.namespace, kind, match[1])
    return (v.namespace, "Pod", v.pod)


def is_notebook(v: Verdict) -> bool:
    """A notebook's kernel: as Kubernetes says, or where nothing says, as its pod's name does."""
    return v.workload_kind == "notebook" or (v.workload_kind == "unknown" and bool(NOTEBOOK.search(v.pod)))


def replica_capacity(load: EngineLoad, kv_bound: float) -> float:
    """Requests one replica carries: where its KV cache filled, the requests that fit up to `kv_bound` of it
    (its running peak scaled by kv_bound over the KV cache's peak); without a KV gauge, its running peak,
    which it carried (queued or not)."""
    if not math.isnan(load.kv_cache_peak) and load.kv_cache_peak > 0:
        return load.running_peak * kv_bound / load.kv_cache_peak
    return load.running_peak


def replica_capacity_says(load: EngineLoad, t: Thresholds) -> str:
    """replica_capacity() in words: from what its engine said of its KV cache, or of its running peak."""
    if not math.isnan(load.kv_cache_peak) and load.kv_cache_peak > 0:
        return (
            f"its peak of {load.running_peak:.3g} running filled {load.kv_cache_peak:.0%} of its KV cache; "
            f"{t.plan_kv_cache_bound:.0%} of it holds {replica_capacity(load, t.plan_kv_cache_bound):.3g}"
        )
    return f"the most it ran at once ({load.running_peak:.3g}); its engine says nothing of its KV cache"
