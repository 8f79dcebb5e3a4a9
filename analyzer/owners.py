"""Who owns each pod, and which team: budgets and owners are per workload (a Deployment's 40 replicas, a
Job, a CronJob's runs), not per pod.

Read from kube-state-metrics as kube-prometheus-stack stores it:
- kube_pod_owner{namespace, pod, owner_kind, owner_name, owner_is_controller}: the pod's controller;
- kube_replicaset_owner{namespace, replicaset, owner_kind, owner_name}: a ReplicaSet's Deployment;
- kube_job_owner{namespace, job_name, owner_kind, owner_name}: a Job's CronJob;
- kube_pod_labels{namespace, pod, label_<name>} and kube_namespace_labels{namespace, label_<name>}: the
  team, from a pod label the user names (--team-label), else the same label on the pod's namespace.
  kube-state-metrics 2.x exports only the labels its --metric-labels-allowlist names.

A pod a ReplicaSet owns belongs to the ReplicaSet's Deployment; a pod a Job owns, to the Job's CronJob;
StatefulSets, DaemonSets and other controllers (Kubeflow's, Ray's) own their pods themselves; a pod with
no controller is its own owner (kind Pod). Where kube-state-metrics is not scraped, the owner is unknown
(kind "") and the pod stands for itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gpulens.analyzer.classify import Verdict
from gpulens.analyzer.store import Store

#: Pod -> (namespace, pod).
PodKey = tuple[str, str]


@dataclass(frozen=True)
class Owner:
    """A pod's workload: its kind (Deployment, StatefulSet, DaemonSet, Job, CronJob, Pod, another
    controller's kind; "" when unknown), its name, and its team ("" when the label is not set)."""

    kind: str
    name: str
    team: str = ""


def label_name(pod_label: str) -> str:
    """The label kube-state-metrics gives a Kubernetes label: label_ and the key with every character
    a Prometheus label name cannot hold made "_" (app.kubernetes.io/team -> label_app_kubernetes_io_team)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", pod_label)


def resolve(
    pods: Iterable[PodKey],
    pod_owners: dict[PodKey, tuple[str, str]],
    replicaset_owners: dict[PodKey, tuple[str, str]],
    job_owners: dict[PodKey, tuple[str, str]],
    pod_teams: dict[PodKey, str],
    namespace_teams: dict[str, str],
    known: bool = True,
) -> dict[PodKey, Owner]:
    """Each pod's Owner from kube-state-metrics' owner series (by (namespace, name): (kind, name)).
    `known` False: kube-state-metrics' owners were not found at all, so no pod's owner is known."""
    out = {}
    for namespace, pod in pods:
        kind, name = pod_owners.get((namespace, pod), ("Pod" if known else "", pod))
        if kind == "ReplicaSet":
            kind, name = replicaset_owners.get((namespace, name), (kind, name))
        elif kind == "Job":
            kind, name = job_owners.get((namespace, name), (kind, name))
        team = pod_teams.get((namespace, pod)) or namespace_teams.get(namespace, "")
        out[(namespace, pod)] = Owner(kind, name, team)
    return out


class OwnerReader:
    """Reads the owners and teams of pods from kube-state-metrics' series in a store."""

    def __init__(self, store: Store, team_label: str = ""):
        self.store = store
        self.team_label = label_name(team_label) if team_label else ""

    def read(self, pods: Iterable[PodKey], at: float, lookback: float) -> dict[PodKey, Owner]:
        """The owners of `pods` as kube-state-metrics said at any time in the `lookback` seconds to `at`."""
        pods = [p for p in pods if p[1]]
        if not pods:
            return {}
        window = f"{max(lookback, 60):.0f}s"

        def pairs(expr: str, key: str) -> dict[PodKey, tuple[str, str]]:
            """(namespace, the `key` label) -> (owner_kind, owner_name) of each series of `expr`."""
            return {
                (s["metric"].get("namespace", ""), s["metric"].get(key, "")): (
                    s["metric"].get("owner_kind", ""),
                    s["metric"].get("owner_name", ""),
                )
                for s in self.store.query(expr, at)
            }

        def owned_by(series: str, key: str) -> str:
            labels = f"namespace, {key}, owner_kind, owner_name"
            return f'max by ({labels}) (last_over_time({series}{{owner_kind!="<none>"}}[{window}]))'

        pod_owners = pairs(
            'max by (namespace, pod, owner_kind, owner_name) (last_over_time(kube_pod_owner{owner_is_controller="true",'
            f'owner_kind!="<none>"}}[{window}]))',
            "pod",
        )
        known = bool(pod_owners) or bool(self.store.query(f"count(last_over_time(kube_pod_owner[{window}]))", at))
        replicasets = pairs(owned_by("kube_replicaset_owner", "replicaset"), "replicaset")
        jobs = pairs(owned_by("kube_job_owner", "job_name"), "job_name")
        pod_teams: dict[PodKey, str] = {}
        namespace_teams: dict[str, str] = {}
        if self.team_label:
            label = self.team_label
            for s in self.store.query(
                f'max by (namespace, pod, {label}) (last_over_time(kube_pod_labels{{{label}!=""}}[{window}]))', at
            ):
                pod_teams[(s["metric"].get("namespace", ""), s["metric"].get("pod", ""))] = s["metric"][label]
            for s in self.store.query(
                f'max by (namespace, {label}) (last_over_time(kube_namespace_labels{{{label}!=""}}[{window}]))', at
            ):
                namespace_teams[s["metric"].get("namespace", "")] = s["metric"][label]
        return resolve(pods, pod_owners, replicasets, jobs, pod_teams, namespace_teams, known)


def apply(verdicts: list[Verdict], owners: dict[PodKey, Owner]) -> list[Verdict]:
    """The verdicts with their pods' owners and teams (unchanged where the owner is not known)."""
    out = []
    for v in verdicts:
        owner = owners.get((v.namespace, v.pod))
        out.append(v if owner is None else replace(v, owner_kind=owner.kind, owner=owner.name, team=owner.team))
    return out
