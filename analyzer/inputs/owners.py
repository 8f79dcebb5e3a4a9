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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpulens.analyzer.inputs.kinds import DEFAULT_RULES, KindRule, PodFacts, PodKey, WorkloadKind, kind_of, label_keys
from gpulens.analyzer.inputs.kube_state import KubeState, Matcher, StoreKubeState
from gpulens.analyzer.inputs.store import Store


@dataclass(frozen=True)
class Owner:
    """A pod's workload: its kind (Deployment, StatefulSet, DaemonSet, Job, CronJob, Pod, another
    controller's kind; "" when unknown), its name, its team ("" when the label is not set), and what the
    workload is (analyzer/inputs/kinds.py: notebook, serving, job or unknown)."""

    kind: str
    name: str
    team: str = ""
    workload: WorkloadKind = WorkloadKind()


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
    pod_labels: dict[PodKey, dict[str, str]] | None = None,
    pod_images: dict[PodKey, tuple[str, ...]] | None = None,
    rules: Sequence[KindRule] = DEFAULT_RULES,
) -> dict[PodKey, Owner]:
    """Each pod's Owner from kube-state-metrics' owner series (by (namespace, name): (kind, name)), and what
    its workload is from that kind, its labels (Kubernetes keys) and its images by `rules`.
    `known` False: kube-state-metrics' owners were not found at all, so no pod's owner is known."""
    out = {}
    for namespace, pod in pods:
        kind, name = pod_owners.get((namespace, pod), ("Pod" if known else "", pod))
        if kind == "ReplicaSet":
            kind, name = replicaset_owners.get((namespace, name), (kind, name))
        elif kind == "Job":
            kind, name = job_owners.get((namespace, name), (kind, name))
        team = pod_teams.get((namespace, pod)) or namespace_teams.get(namespace, "")
        facts = PodFacts(
            kind, (pod_labels or {}).get((namespace, pod), {}), (pod_images or {}).get((namespace, pod), ())
        )
        out[(namespace, pod)] = Owner(kind, name, team, kind_of(facts, rules))
    return out


class OwnerReader:
    """Reads the owners, teams and workload kinds of pods from kube-state-metrics' series: in a store, or
    recorded (analyzer/inputs/kube_state.py)."""

    def __init__(
        self,
        source: Store | KubeState,
        team_label: str = "",
        rules: Sequence[KindRule] = DEFAULT_RULES,
        selector: str = "",
    ):
        #: Where the series are read (a Store through PromQL; `selector` adds matchers: kube-state-metrics' job).
        self.source = StoreKubeState(source, selector) if isinstance(source, Store) else source
        self.team_label = label_name(team_label) if team_label else ""
        self.rules = tuple(rules)
        #: kube-state-metrics' label name -> the Kubernetes key the rules read.
        self.rule_labels = {label_name(key): key for key in label_keys(self.rules)}

    def read(self, pods: Iterable[PodKey], at: float, lookback: float) -> dict[PodKey, Owner]:
        """The owners of `pods` as kube-state-metrics said at any time in the `lookback` seconds to `at`."""
        pods = [p for p in pods if p[1]]
        if not pods:
            return {}
        source = self.source
        named: Matcher = ("owner_kind", "!=", "<none>")

        def pairs(name: str, key: str, *matchers: Matcher) -> dict[PodKey, tuple[str, str]]:
            """(namespace, the `key` label) -> (owner_kind, owner_name) of each series of `name`."""
            by = ["namespace", key, "owner_kind", "owner_name"]
            return {
                (labels.get("namespace", ""), labels.get(key, "")): (
                    labels.get("owner_kind", ""),
                    labels.get("owner_name", ""),
                )
                for labels, _ in source.last(name, by, at, lookback, named, *matchers)
            }

        pod_owners = pairs("kube_pod_owner", "pod", ("owner_is_controller", "=", "true"))
        known = bool(pod_owners) or bool(source.last("kube_pod_owner", [], at, lookback))
        replicasets = pairs("kube_replicaset_owner", "replicaset")
        jobs = pairs("kube_job_owner", "job_name")
        pod_teams: dict[PodKey, str] = {}
        namespace_teams: dict[str, str] = {}
        pod_labels: dict[PodKey, dict[str, str]] = {}
        names = sorted({*self.rule_labels, *([self.team_label] if self.team_label else [])})
        for labels, _ in source.last("kube_pod_labels", ["namespace", "pod", *names], at, lookback):
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            pod_labels[key] = {self.rule_labels[n]: v for n, v in labels.items() if n in self.rule_labels}
            if self.team_label and labels.get(self.team_label):
                pod_teams[key] = labels[self.team_label]
        if self.team_label:
            label = self.team_label
            for labels, _ in source.last(
                "kube_namespace_labels", ["namespace", label], at, lookback, (label, "!=", "")
            ):
                namespace_teams[labels.get("namespace", "")] = labels[label]
        images: dict[PodKey, set[str]] = {}
        for labels, _ in source.last("kube_pod_container_info", ["namespace", "pod", "image"], at, lookback):
            key = (labels.get("namespace", ""), labels.get("pod", ""))
            images.setdefault(key, set()).add(labels.get("image", ""))
        return resolve(
            pods,
            pod_owners,
            replicasets,
            jobs,
            pod_teams,
            namespace_teams,
            known,
            pod_labels,
            {key: tuple(sorted(found)) for key, found in images.items()},
            self.rules,
        )
