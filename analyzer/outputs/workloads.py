"""Which workload a verdict's pod is one replica of, as kube-state-metrics says (its owner) or, where nothing
says, as its pod's name does (a Deployment's, a StatefulSet's); and whether it is a notebook's kernel."""

from __future__ import annotations

import re

from gpulens.analyzer.judging.classify import Verdict

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
