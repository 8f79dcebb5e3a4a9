"""The changes a fleet's GPU workloads went through, found in kube-state-metrics' history as a real Prometheus keeps
it (backfilled with promtool), and in the same history recorded as a file beside a trace (--kube-state): each
change at the step it was first seen, a scale made in steps as one change, an autoscaled workload's replicas
not a change, its autoscaler's bounds a change, a workload that held its size none, and a workload that holds
no GPU left out (issue 74, part 1)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.inputs import frame as fr
from tests import store_history as history
from tests.helpers import BackfilledPrometheus, report_json

pytestmark = pytest.mark.slow

STEP = 60.0
HOURS = 6
START = history.START
TIMES = START + STEP * np.arange(HOURS * 60)
KSM = {"job": "kube-state-metrics", "instance": "10.0.0.3:8080"}
ONES = np.ones(len(TIMES))
#: When each change was made (kube-state-metrics shows it from its next scrape: these minutes).
SCALED = START + 90 * STEP  # ranker: 8 -> 6 -> 4 -> 2, a minute apart
CAPPED = START + 150 * STEP  # chat's autoscaler: at most 10 replicas, then 4
CULLED = START + 200 * STEP  # a Kubeflow notebook's StatefulSet stopped by its culler: 1 -> 0


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in {**labels, **KSM}.items()) + "}"


#: The GPU pods, each with its controller, and a ReplicaSet's Deployment (kube_pod_owner, kube_replicaset_owner).
PODS = {
    ("serve", "ranker-6f7d9c8b5-x2k4p"): ("ReplicaSet", "ranker-6f7d9c8b5", "serving"),
    ("serve", "chat-5d4f8b7c9-m2k9q"): ("ReplicaSet", "chat-5d4f8b7c9", "serving"),
    ("research", "notebook-bob-0"): ("StatefulSet", "notebook-bob", "notebook"),
}


def _trace() -> pd.DataFrame:
    """The GPU pods' samples for six hours."""
    workloads = [
        {"profile": profile, "gpus": [k], "pod": f"{namespace}/{pod}/main"}
        for k, ((namespace, pod), (_, _, profile)) in enumerate(PODS.items())
    ]
    return history.simulated_trace(workloads, len(PODS), START, HOURS * 3600, STEP)


def _owners() -> dict[str, list[tuple[str, np.ndarray]]]:
    """kube-state-metrics' owner series of the GPU pods."""
    pods = [
        (_labels(namespace=ns, pod=pod, owner_kind=kind, owner_name=name, owner_is_controller="true"), ONES)
        for (ns, pod), (kind, name, _) in PODS.items()
    ]
    replicasets = [
        (_labels(namespace=ns, replicaset=name, owner_kind="Deployment", owner_name=name.rsplit("-", 1)[0]), ONES)
        for (ns, _), (kind, name, _) in PODS.items()
        if kind == "ReplicaSet"
    ]
    return {"kube_pod_owner": pods, "kube_replicaset_owner": replicasets}


def _families() -> history.Families:
    """The GPUs' samples as dcgm-exporter's series, and kube-state-metrics' workloads."""
    families = history.series_lines(_trace(), "dcgm-exported")
    ranker = np.select([TIMES < SCALED, TIMES < SCALED + STEP, TIMES < SCALED + 2 * STEP], [8, 6, 4], 2)
    # The HPA's replicas follow the load all day: its doing, not a change.
    chat = np.round(3 + 2 * np.sin((TIMES - START) / 3600.0))
    series = {
        "kube_deployment_spec_replicas": [
            (_labels(namespace="serve", deployment="ranker"), ranker),
            (_labels(namespace="serve", deployment="chat"), chat),
            (_labels(namespace="serve", deployment="quiet"), np.full(len(TIMES), 3.0)),
            # A web front end with no GPU, scaled up: a change, but none of a GPU workload's.
            (_labels(namespace="serve", deployment="web"), np.where(TIMES < CAPPED, 2.0, 5.0)),
        ],
        "kube_statefulset_replicas": [
            (_labels(namespace="research", statefulset="notebook-bob"), np.where(TIMES < CULLED, 1.0, 0.0)),
        ],
        "kube_horizontalpodautoscaler_spec_min_replicas": [
            (_labels(namespace="serve", horizontalpodautoscaler="keda-hpa-chat"), np.full(len(TIMES), 1.0)),
        ],
        "kube_horizontalpodautoscaler_spec_max_replicas": [
            (_labels(namespace="serve", horizontalpodautoscaler="keda-hpa-chat"), np.where(TIMES < CAPPED, 10.0, 4.0)),
        ],
        "kube_horizontalpodautoscaler_info": [
            (
                _labels(
                    namespace="serve",
                    horizontalpodautoscaler="keda-hpa-chat",
                    scaletargetref_api_version="apps/v1",
                    scaletargetref_kind="Deployment",
                    scaletargetref_name="chat",
                ),
                ONES,
            ),
        ],
    }
    for name, rows in {**series, **_owners()}.items():
        families[name] = [
            (labels, float(t), float(v)) for labels, values in rows for t, v in zip(TIMES, values, strict=True)
        ]
    return families


#: What the report must find: exactly these, at the minute each was first seen.
EXPECTED = [
    {
        "namespace": "serve",
        "workload": "serve/Deployment/ranker",
        "what": "replicas",
        "before": 8.0,
        "after": 2.0,
        "start": SCALED,
        "end": SCALED + 2 * STEP,
        "source": "kube-state-metrics: kube_deployment_spec_replicas",
    },
    {
        "namespace": "serve",
        "workload": "serve/Deployment/chat",
        "what": "autoscaler_max_replicas",
        "before": 10.0,
        "after": 4.0,
        "start": CAPPED,
        "end": CAPPED,
        "source": "kube-state-metrics: kube_horizontalpodautoscaler_spec_max_replicas",
    },
    {
        "namespace": "research",
        "workload": "research/StatefulSet/notebook-bob",
        "what": "replicas",
        "before": 1.0,
        "after": 0.0,
        "start": CULLED,
        "end": CULLED,
        "source": "kube-state-metrics: kube_statefulset_replicas",
    },
]


def test_each_change_is_found_once_at_the_step_it_was_first_seen_in_a_store(tmp_path):
    families = _families()
    prometheus = BackfilledPrometheus(tmp_path, history.families_openmetrics(families))
    try:
        document = report_json(
            "--prometheus",
            prometheus.url,
            *("--since", "2025-11-09T00:00:00Z", "--until", str(TIMES[-1]), "--prometheus.step", "1m"),
            *("--prometheus.dcgm-selector", 'job="dcgm-exported"'),
        )
    finally:
        prometheus.stop()
    assert document["changes"] == EXPECTED


def test_the_same_changes_are_found_in_kube_state_metrics_recorded_beside_a_trace(tmp_path):
    fr.write_trace(_trace(), tmp_path / "trace.csv")
    recorded = {name: samples for name, samples in _families().items() if name.startswith("kube_")}
    (tmp_path / "kube-state.om").write_text(history.families_openmetrics(recorded))
    document = report_json(str(tmp_path / "trace.csv"), "--kube-state", str(tmp_path / "kube-state.om"))
    assert document["changes"] == EXPECTED
    # Without kube-state-metrics nothing is known of changes: null, not "none found".
    assert report_json(str(tmp_path / "trace.csv"))["changes"] is None
