"""A week of a small simulated fleet as a store holds it: the trace (the oracle a file report reads) and
the same samples as OpenMetrics in the series layouts fleets scrape, for a real Prometheus (backfilled
with promtool) and a real VictoriaMetrics (imported over its HTTP API).

Layouts, told apart by their `job`, so that one store holds them all and a report picks one by selector:
- `gpulens`: gpulens' exporter, scraped with honor_labels (its namespace/pod/container kept), `node` set.
- `dcgm-exported`: NVIDIA dcgm-exporter as the GPU Operator's ServiceMonitor scrapes it: the GPU's pod in
  exported_namespace/exported_pod/exported_container, the target's own namespace/pod/container (the
  dcgm-exporter pod) on every series.
- `dcgm-plain`: dcgm-exporter scraped with honorLabels: the GPU's pod in namespace/pod/container, and the
  dcgm-exporter pod's labels on the series of GPUs no pod holds (Prometheus adds a target label where the
  series has none).
- `dcgm-basic`: dcgm-exporter without profiling fields (no DCGM profiling module, or consumer GPUs), as
  the GPU Operator scrapes it: utilization, memory and power only.
- `dcgm-no-free`: dcgm-exporter as the GPU Operator scrapes it, with a counters file that leaves out
  DCGM_FI_DEV_FB_FREE: no memory capacity in the store (not in LAYOUTS: a test asks for it by name).
dcgm-exporter's units are its own: percent, MiB, MHz; gpulens' are ratios, bytes and hertz.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from prometheus_client.parser import text_string_to_metric_families

from gpulens.analyzer.inputs import frame as fr
from gpulens.core.dcgm import MIB
from gpulens.simulator.fleet import load_fleet
from gpulens.simulator.workloads import PROFILES

#: The week: Sunday 2025-11-09 00:00 UTC to Sunday 2025-11-16 00:00 UTC, sampled every STEP seconds.
START = 1_762_646_400.0
DAYS = 7
STEP = 300.0
NODE = "gpu-node-a"
#: GPU 1's notebook pod is replaced by another halfway through the week: a GPU passes between pods.
HANDOVER = START + DAYS * 86400 / 2
LAYOUTS = ("gpulens", "dcgm-exported", "dcgm-plain", "dcgm-basic")
DCGM_EXPORTER_POD = ("gpu-operator", "nvidia-dcgm-exporter-7xk2p", "nvidia-dcgm-exporter")


@dataclass(frozen=True)
class Series:
    """One signal in each family: gpulens' name, dcgm-exporter's, and the factor from the trace's unit
    to dcgm-exporter's."""

    column: str
    gpulens: str
    dcgm: str
    to_dcgm: float


SIGNALS = (
    Series("gpu_util", "gpulens_gpu_utilization_ratio", "DCGM_FI_DEV_GPU_UTIL", 100.0),
    Series("sm_active", "gpulens_gpu_sm_active_ratio", "DCGM_FI_PROF_SM_ACTIVE", 1.0),
    Series("memory_used_bytes", "gpulens_gpu_memory_used_bytes", "DCGM_FI_DEV_FB_USED", 1 / MIB),
    Series("power_watts", "gpulens_gpu_power_watts", "DCGM_FI_DEV_POWER_USAGE", 1.0),
)


def week_trace() -> pd.DataFrame:
    """The fleet's week as a trace: a training pod, notebooks handed over, a serving replica, and a GPU no
    pod holds, on one H100 node with profiling."""
    workloads = [
        {"profile": "healthy_training", "gpus": [0], "pod": "ml/trainer-0/train"},
        {"profile": "notebook", "gpus": [1], "pod": "research/notebook-a/jupyter"},
        {"profile": "serving", "gpus": [2], "pod": "serve/llm-0/server"},
    ]
    trace = simulated_trace(workloads, 4, START, DAYS * 86400, STEP)
    handed_over = (trace["pod"] == "notebook-a") & (trace["timestamp"] >= HANDOVER)
    trace["pod"] = trace["pod"].astype(str).where(~handed_over, "notebook-b")
    return fr.normalize(trace)


def simulated_trace(workloads: list[dict], gpus: int, start: float, seconds: float, step: float) -> pd.DataFrame:
    """The simulator's `workloads` (as a fleet file names them) on one H100 node of `gpus` GPUs with profiling,
    sampled every `step` seconds for `seconds` from `start`, with the values dcgm-exporter rounds to."""
    node = load_fleet(
        {"seed": 7, "nodes": [{"name": NODE, "model": "H100-SXM5-80GB", "gpus": gpus, "workloads": workloads}]}
    )[0]
    rows = []
    times = start + step * np.arange(int(seconds / step))
    for gpu in node.gpus:
        model = gpu.model
        usable = model.memory_total_bytes - model.memory_reserved_bytes
        idle = model.idle_power_watts
        pod = gpu.pod
        for t in times:
            a = PROFILES[gpu.profile](gpu, float(t), step)
            rows.append(
                {
                    "timestamp": float(t),
                    "gpu": gpu.uuid,
                    "node": NODE,
                    "gpu_model": model.name,
                    "namespace": pod.namespace if pod else "",
                    "pod": pod.pod if pod else "",
                    "container": pod.container if pod else "",
                    "gpu_util": round(a.busy, 2),
                    "sm_active": round(a.sm_active, 4),
                    "memory_used_bytes": float(round(a.memory_fraction * usable / MIB) * MIB),
                    "memory_total_bytes": float(model.memory_total_bytes),
                    "power_watts": round(idle + a.power_fraction * (model.power_limit_watts - idle), 1),
                }
            )
    return fr.normalize(pd.DataFrame(rows))


def day_row(gpu, node: str, t: float, a, power_span: float) -> dict:
    """A trace row of simulated `gpu` on `node` at `t` (unix seconds) from its Activity `a`, rounded as
    dcgm-exporter reports it: its power `power_span` watts above idle at full draw."""
    usable = gpu.model.memory_total_bytes - gpu.model.memory_reserved_bytes
    return {
        "timestamp": float(t),
        "gpu": gpu.uuid,
        "node": node,
        "gpu_model": gpu.model.name,
        "namespace": gpu.pod.namespace,
        "pod": gpu.pod.pod,
        "container": gpu.pod.container,
        "gpu_util": round(a.busy, 2),
        "sm_active": round(a.sm_active, 3),
        "memory_used_bytes": float(round(a.memory_fraction * usable / MIB) * MIB),
        "memory_total_bytes": float(gpu.model.memory_total_bytes),
        "power_watts": round(gpu.model.idle_power_watts + a.power_fraction * power_span, 1),
    }


def exposition_samples(text: str, target: dict[str, str]) -> list[tuple[str, str, float]]:
    """The samples of an exposition the simulator wrote, read by prometheus_client's parser, as (name, labels
    text with the scrape's target labels, value): what a scrape of it stores."""
    return [
        (sample.name, _labels(sample.labels | target), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value))


def series_lines(trace: pd.DataFrame, layout: str) -> dict[str, list[tuple[str, float, float]]]:
    """Metric name -> its samples (labels text, unix seconds, value) in `layout`. Each node's exporters
    are at addresses of their own (gpulens' at 10.0.N.1:9835, dcgm-exporter's at 10.0.N.2:9400, N the
    node's place in name order)."""
    out: dict[str, list[tuple[str, float, float]]] = {}
    gpus = {uuid: rows for uuid, rows in trace.groupby("gpu", observed=True, sort=True)}
    nodes = sorted(trace["node"].astype(str).unique())
    for index, (uuid, rows) in enumerate(gpus.items()):
        model = str(rows["gpu_model"].iloc[0])
        node = str(rows["node"].iloc[0])
        subnet = f"10.0.{nodes.index(node)}"
        ts = rows["timestamp"].to_numpy()
        pods = list(rows[["namespace", "pod", "container"]].astype(str).itertuples(index=False, name=None))
        if layout == "gpulens":
            base = {"job": "gpulens", "instance": f"{subnet}.1:9835", "node": node, "gpu": str(index), "uuid": uuid}
            gauges = {s.gpulens: s.column for s in SIGNALS} | {"gpulens_gpu_memory_total_bytes": "memory_total_bytes"}
            for name, column in gauges.items():
                out.setdefault(name, []).extend(
                    (_labels(base), t, v) for t, v in zip(ts, rows[column].to_numpy(), strict=True)
                )
            out.setdefault("gpulens_gpu_info", []).extend((_labels({**base, "model": model}), t, 1.0) for t in ts)
            for t, (namespace, pod, container) in zip(ts, pods, strict=True):
                if pod:
                    labels = {**base, "namespace": namespace, "pod": pod, "container": container}
                    out.setdefault("gpulens_gpu_pod_info", []).append((_labels(labels), t, 1.0))
            continue
        target = {"job": layout, "instance": f"{subnet}.2:9400"}
        gpu_labels = {"gpu": str(index), "UUID": uuid, "device": f"nvidia{index}", "modelName": model, "Hostname": node}
        if "/gi" in uuid:  # a MIG instance ("<uuid>/gi<id>", "<model> MIG <profile>"), as dcgm-exporter labels one
            parent, instance = uuid.split("/gi")
            name, _, profile = model.partition(" MIG ")
            gpu_labels |= {"UUID": parent, "modelName": name, "GPU_I_ID": instance, "GPU_I_PROFILE": profile}
        free = (rows["memory_total_bytes"] - rows["memory_used_bytes"]).to_numpy() / MIB
        for t_index, (t, (namespace, pod, container)) in enumerate(zip(ts, pods, strict=True)):
            if layout in ("dcgm-exported", "dcgm-basic", "dcgm-no-free"):
                own = dict(zip(("namespace", "pod", "container"), DCGM_EXPORTER_POD, strict=True))
                workload = (
                    {"exported_namespace": namespace, "exported_pod": pod, "exported_container": container}
                    if pod
                    else {}
                )
                labels = _labels({**gpu_labels, **workload, **target, **own})
            else:
                held = dict(
                    zip(
                        ("namespace", "pod", "container"),
                        (namespace, pod, container) if pod else DCGM_EXPORTER_POD,
                        strict=True,
                    )
                )
                labels = _labels({**gpu_labels, **held, **target})
            for s in SIGNALS:
                value = rows[s.column].iat[t_index]
                if not math.isnan(value) and not (layout == "dcgm-basic" and s.dcgm.startswith("DCGM_FI_PROF_")):
                    out.setdefault(s.dcgm, []).append((labels, t, value * s.to_dcgm))
            if layout != "dcgm-no-free":
                out.setdefault("DCGM_FI_DEV_FB_FREE", []).append((labels, t, free[t_index]))
    return out


#: kube-state-metrics' view of the pods: each pod's controller, and that controller's owner.
POD_OWNERS = {
    ("ml", "trainer-0"): ("Job", "train-20251109"),
    ("research", "notebook-a"): ("StatefulSet", "jupyter"),
    ("research", "notebook-b"): ("StatefulSet", "jupyter"),
    ("serve", "llm-0"): ("ReplicaSet", "llm-5d8f7c"),
}
REPLICASET_OWNERS = {("serve", "llm-5d8f7c"): ("Deployment", "llm")}
JOB_OWNERS = {("ml", "train-20251109"): ("CronJob", "nightly-train")}
#: The `team` label of pods, and of namespaces (the notebooks' pods have none: their namespace's applies).
POD_TEAMS = {("ml", "trainer-0"): "vision", ("serve", "llm-0"): "platform"}
NAMESPACE_TEAMS = {"research": "research-lab", "serve": "inference"}


def kube_state_metrics(trace: pd.DataFrame) -> dict[str, list[tuple[str, float, float]]]:
    """kube-state-metrics' owner and label series, every step each pod (and its owners) exists."""
    target = {"job": "kube-state-metrics", "instance": "10.0.0.3:8080"}
    out: dict[str, list[tuple[str, float, float]]] = {}
    times = np.unique(trace["timestamp"].to_numpy())
    held = trace[trace["pod"] != ""][["timestamp", "namespace", "pod"]].astype({"namespace": str, "pod": str})
    for (namespace, pod), rows in held.groupby(["namespace", "pod"]):
        kind, name = POD_OWNERS[(namespace, pod)]
        owner = {"namespace": namespace, "pod": pod, "owner_kind": kind, "owner_name": name}
        labels = {"namespace": namespace, "pod": pod}
        team = POD_TEAMS.get((namespace, pod))
        for t in rows["timestamp"].to_numpy():
            out.setdefault("kube_pod_owner", []).append(
                (_labels({**owner, "owner_is_controller": "true", **target}), t, 1.0)
            )
            out.setdefault("kube_pod_labels", []).append(
                (_labels({**labels, **({"label_team": team} if team else {}), **target}), t, 1.0)
            )
    for series, key, owners in (
        ("kube_replicaset_owner", "replicaset", REPLICASET_OWNERS),
        ("kube_job_owner", "job_name", JOB_OWNERS),
    ):
        for (namespace, name), (kind, owner_name) in owners.items():
            labels = {"namespace": namespace, key: name, "owner_kind": kind, "owner_name": owner_name}
            out.setdefault(series, []).extend((_labels({**labels, **target}), t, 1.0) for t in times)
    for namespace, team in NAMESPACE_TEAMS.items():
        labels = _labels({"namespace": namespace, "label_team": team, **target})
        out.setdefault("kube_namespace_labels", []).extend((labels, t, 1.0) for t in times)
    return out


def _families(trace: pd.DataFrame, layouts: tuple[str, ...]) -> dict[str, list[tuple[str, float, float]]]:
    families = kube_state_metrics(trace)
    for layout in layouts:
        for name, samples in series_lines(trace, layout).items():
            families.setdefault(name, []).extend(samples)
    return families


#: Samples by metric name: (labels text, unix seconds, value).
Families = dict[str, list[tuple[str, float, float]]]


def openmetrics(trace: pd.DataFrame, layouts: tuple[str, ...] = LAYOUTS) -> str:
    """The week's samples as OpenMetrics (families_openmetrics)."""
    return families_openmetrics(_families(trace, layouts))


def prometheus_text(trace: pd.DataFrame, layouts: tuple[str, ...] = LAYOUTS) -> str:
    """The week's samples in Prometheus' text format (families_prometheus_text)."""
    return families_prometheus_text(_families(trace, layouts))


def families_openmetrics(families: Families) -> str:
    """Samples as OpenMetrics with timestamps in seconds, as `promtool tsdb create-blocks-from openmetrics`
    reads them: each family's samples together, # EOF at the end."""
    lines = []
    for name, samples in families.items():
        lines.append(f"# TYPE {name} gauge")
        lines.extend(f"{name}{labels} {_number(v)} {t:.0f}" for labels, t, v in samples)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def families_prometheus_text(families: Families) -> str:
    """The same samples in Prometheus' text format with timestamps in milliseconds, as VictoriaMetrics'
    /api/v1/import/prometheus reads them."""
    lines = []
    for name, samples in families.items():
        lines.extend(f"{name}{labels} {_number(v)} {t * 1000:.0f}" for labels, t, v in samples)
    return "\n".join(lines) + "\n"
