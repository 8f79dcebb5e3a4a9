"""The generated alert rules: promtool checks them, and `promtool test rules` proves every alert fires
on its signature (positive case) and not on a healthy target or a brief dip (negative case), with the
analyzer's verdict in the annotations. Default thresholds: 30 % SM for 30 min, 5 min rate window."""

import dataclasses
import re
import subprocess
import time
import urllib.parse

import pytest
import requests
import yaml

from gpulens.alerts import cli, routing, rules
from gpulens.cli import main
from gpulens.core import mixin
from gpulens.core.mixin import MixinConfig
from gpulens.receiver import AlertReceiver
from tests.helpers import REPO, Alertmanager, VictoriaMetrics, free_port, require_binary, wait_until

EXPORTER = 'job="gpulens-exporter",instance="n1:9848",node="n1"'
ANALYZER = 'job="gpulens-analyzer",instance="analyzer:9849"'
RUNBOOKS = "https://github.com/gpulens/gpulens/blob/main/alerts/generated/runbooks.md"
#: Links open the panel that shows the alert's signal (viewPanel), for the alert's cluster (empty here).
FLEET_DASHBOARD = "http://localhost:3000/d/gpulens-fleet?var-cluster="
ANALYZER_PANEL = f"http://localhost:3000/d/gpulens-node?var-cluster=&viewPanel={mixin.NODE_ANALYZER_PANEL.id}"


def pod_link(ns, pod, panel):
    return f"http://localhost:3000/d/gpulens-pod?var-cluster=&var-namespace={ns}&var-pod={pod}&viewPanel={panel.id}"


def gpu_link(n, panel, cluster=""):
    query = urllib.parse.urlencode({"var-cluster": cluster, "var-node": "n1", "var-gpu": n})  # Go's urlquery's
    return f"http://localhost:3000/d/gpulens-node?{query}&viewPanel={panel.id}"


CLUSTER = "eu west&1#b"


def node_link(node, panel):
    return f"http://localhost:3000/d/gpulens-node?var-cluster=&var-node={node}&viewPanel={panel.id}"


STARVING_FIX = "Raise DataLoader num_workers."


def gpu(n, **extra):
    labels = f'{EXPORTER},gpu="{n}",uuid="GPU-{n}"'
    return labels + "".join(f',{k}="{v}"' for k, v in extra.items())


def annotations(name, summary, description, dashboard, **verdict):
    out = {
        "summary": summary,
        "description": description,
        "runbook_url": f"{RUNBOOKS}#{name.lower()}",
        "dashboard_url": dashboard,
    }
    out.update(verdict)
    return out


def verdict_of(confidence, evidence, recommendation):
    return {"confidence": confidence, "evidence": evidence, "recommendation": recommendation}


NO_VERDICT = verdict_of(
    "unknown",
    "none: the analyzer has no verdict for this pod",
    "Check the analyzer: it has no verdict for this pod (GpulensAnalyzerDown?).",
)
STARVING = verdict_of("95%", "switches_per_minute=12.0 >= 2.0", STARVING_FIX)
IDLE = verdict_of("85%", "idle_for_seconds=600 >= 300", "Release the GPU.")


def low_sm(ns, pod, value, verdict, cause, bottleneck_text, confidence_text, fix, waste):
    return {
        "exp_labels": {
            "severity": "critical",
            "component": "pod",
            "node": "n1",
            "namespace": ns,
            "pod": pod,
        },
        "exp_annotations": annotations(
            "GpulensPodLowSmActivity",
            f"{ns}/{pod} keeps its GPUs' SMs busy only {value} of the time: {cause}",
            f"SM activity of {ns}/{pod} on n1 has stayed under 30% for 30m. The analyzer's verdict: "
            f"{bottleneck_text} ({confidence_text} confidence). Try: {fix}",
            pod_link(ns, pod, mixin.POD_SM_PANEL),
            **verdict,
            bottleneck=cause,
            waste=waste,
        ),
    }


def ticket_without_verdict(alertname, pod, bottleneck, summary, panel):
    """The firing case at 35m of a class ticket for nlp/<pod> on n1, held since the start, with no verdict
    info series for the pod."""
    return {
        "eval_time": "35m",
        "alertname": alertname,
        "exp_alerts": [
            {
                "exp_labels": {
                    "severity": "warning",
                    "component": "pod",
                    "node": "n1",
                    "namespace": "nlp",
                    "pod": pod,
                    "bottleneck": bottleneck,
                },
                "exp_annotations": annotations(
                    alertname,
                    summary,
                    f"The analyzer has classified nlp/{pod} on n1 as {bottleneck} for 30m. The analyzer's "
                    "verdict: none yet (unknown confidence). Try: see the runbook",
                    pod_link("nlp", pod, panel),
                    **NO_VERDICT,
                ),
            }
        ],
    }


def no_waste(ns, cause):
    return f"The analyzer has counted no waste for {ns} and {cause} yet."


#: The page's waste annotation for a pod the analyzer has no verdict for.
UNKNOWN_WASTE = "The analyzer has no verdict for this pod: its cause's waste is unknown."


POD_TESTS = {
    "interval": "1m",
    "input_series": [
        # nlp/bert: SM 10 % (data-starved); vision/resnet: 90 %; science/dip: 90 % with 10 low minutes;
        # serving/embedder: no SM counter, kernels 20 % of the time; research/notebook: nothing at all.
        {"series": f"gpulens_gpu_sm_active_seconds_total{{{gpu(0)}}}", "values": "0+6x80"},
        {"series": f"gpulens_gpu_sm_active_seconds_total{{{gpu(1)}}}", "values": "0+54x80"},
        {"series": f"gpulens_gpu_sm_active_seconds_total{{{gpu(2)}}}", "values": "0+54x20 1086+6x10 1146+54x50"},
        {"series": f"gpulens_gpu_busy_seconds_total{{{gpu(3)}}}", "values": "0+12x80"},
        {"series": f"gpulens_gpu_sm_active_seconds_total{{{gpu(4)}}}", "values": "0+0x80"},
        *(
            {"series": f"gpulens_gpu_pod_info{{{gpu(n, namespace=ns, pod=pod, container='main')}}}", "values": "1x80"}
            for n, (ns, pod) in enumerate(
                [
                    ("nlp", "bert"),
                    ("vision", "resnet"),
                    ("science", "dip"),
                    ("serving", "embedder"),
                    ("research", "notebook"),
                ]
            )
        ),
        {
            "series": f'gpulens_pod_bottleneck_info{{{ANALYZER},namespace="nlp",pod="bert",node="n1",'
            f'bottleneck="data_starvation",secondary="",evidence="switches_per_minute=12.0 >= 2.0",'
            f'recommendation="{STARVING_FIX}"}}',
            "values": "1x80",
        },
        {
            "series": f'gpulens_pod_bottleneck_confidence{{{ANALYZER},namespace="nlp",pod="bert",node="n1"}}',
            "values": "0.95x80",
        },
        {
            "series": f'gpulens_pod_bottleneck_info{{{ANALYZER},namespace="research",pod="notebook",node="n1",'
            f'bottleneck="idle",secondary="",evidence="idle_for_seconds=600 >= 300",'
            f'recommendation="Release the GPU."}}',
            "values": "1x80",
        },
        {
            "series": f'gpulens_pod_bottleneck_confidence{{{ANALYZER},namespace="research",pod="notebook",node="n1"}}',
            "values": "0.85x80",
        },
        # The analyzer's waste for nlp's data starvation: 0.9 GPU-seconds a second (21.6 GPU-hours a day)
        # costing 5 cents a minute ($72 a day).
        {
            "series": f'gpulens_wasted_gpu_seconds_total{{{ANALYZER},namespace="nlp",bottleneck="data_starvation"}}',
            "values": "0+54x80",
        },
        {
            "series": f'gpulens_wasted_cost_dollars_total{{{ANALYZER},namespace="nlp",bottleneck="data_starvation"}}',
            "values": "0+0.05x80",
        },
        # The analyzer's class per pod: bert starving for good; vision/flaky for 5 minutes only.
        {
            "series": f'gpulens_pod_bottleneck{{{ANALYZER},namespace="nlp",pod="bert",node="n1",'
            f'bottleneck="data_starvation"}}',
            "values": "1x80",
        },
        {
            "series": f'gpulens_pod_bottleneck{{{ANALYZER},namespace="vision",pod="flaky",node="n1",'
            f'bottleneck="data_starvation"}}',
            "values": "1x5 0x75",
        },
        {
            "series": f'gpulens_pod_bottleneck{{{ANALYZER},namespace="vision",pod="resnet",node="n1",'
            f'bottleneck="data_starvation"}}',
            "values": "0x80",
        },
        {
            "series": f'gpulens_pod_bottleneck{{{ANALYZER},namespace="nlp",pod="llm",node="n1",'
            f'bottleneck="memory_fragmentation"}}',
            "values": "1x80",
        },
        {
            "series": f'gpulens_pod_bottleneck{{{ANALYZER},namespace="nlp",pod="bert",node="n1",'
            f'bottleneck="memory_fragmentation"}}',
            "values": "0x80",
        },
        # nlp/gpt: its ranks wait on rank 0's checkpoints at 100% utilization: no low-SM page, a ticket.
        {
            "series": f'gpulens_pod_bottleneck{{{ANALYZER},namespace="nlp",pod="gpt",node="n1",'
            f'bottleneck="host_stall"}}',
            "values": "1x80",
        },
    ],
    "alert_rule_test": [
        # Low since the first rate at 1 minute: 24 minutes are not yet 30.
        {"eval_time": "25m", "alertname": "GpulensPodLowSmActivity", "exp_alerts": []},
        {
            "eval_time": "40m",
            "alertname": "GpulensPodLowSmActivity",
            "exp_alerts": [
                low_sm(
                    "nlp",
                    "bert",
                    "10%",
                    STARVING,
                    "data_starvation",
                    "data_starvation",
                    "95%",
                    STARVING_FIX,
                    "Pods of nlp whose cause is data_starvation waste 21.6 GPU-hours ($72.00) a day (the "
                    "analyzer's count over the last 5m).",
                ),
                low_sm(
                    "research",
                    "notebook",
                    "0%",
                    IDLE,
                    "idle",
                    "idle",
                    "85%",
                    "Release the GPU.",
                    no_waste("research", "idle"),
                ),
                low_sm(
                    "serving",
                    "embedder",
                    "20%",
                    NO_VERDICT,
                    "unknown",
                    "none yet",
                    "unknown",
                    "see the runbook",
                    UNKNOWN_WASTE,
                ),
            ],
        },
        {"eval_time": "40m", "alertname": "GpulensPodGpuIdle", "exp_alerts": []},
        {
            "eval_time": "70m",
            "alertname": "GpulensPodGpuIdle",
            "exp_alerts": [
                {
                    "exp_labels": {
                        "severity": "warning",
                        "component": "pod",
                        "node": "n1",
                        "namespace": "research",
                        "pod": "notebook",
                    },
                    "exp_annotations": annotations(
                        "GpulensPodGpuIdle",
                        "research/notebook holds GPUs that have done no work for 1h",
                        "Every GPU of research/notebook on n1 has been idle (activity under 0.01) for 1h. "
                        "The analyzer's verdict: idle (85% confidence). Try: Release the GPU.",
                        pod_link("research", "notebook", mixin.POD_BUSY_PANEL),
                        **IDLE,
                    ),
                }
            ],
        },
        {
            "eval_time": "35m",
            "alertname": "GpulensPodDataStarvation",
            "exp_alerts": [
                {
                    "exp_labels": {
                        "severity": "warning",
                        "component": "pod",
                        "node": "n1",
                        "namespace": "nlp",
                        "pod": "bert",
                        "bottleneck": "data_starvation",
                    },
                    "exp_annotations": annotations(
                        "GpulensPodDataStarvation",
                        "nlp/bert waits on its input pipeline: the GPU stalls between batches",
                        "The analyzer has classified nlp/bert on n1 as data_starvation for 30m. "
                        f"The analyzer's verdict: data_starvation (95% confidence). Try: {STARVING_FIX}",
                        pod_link("nlp", "bert", mixin.POD_VERDICT_PANEL),
                        **STARVING,
                    ),
                }
            ],
        },
        ticket_without_verdict(
            "GpulensPodMemoryFragmentation",
            "llm",
            "memory_fragmentation",
            "nlp/llm fills its GPU memory and restarts: out-of-memory risk",
            mixin.POD_MEMORY_PANEL,
        ),
        ticket_without_verdict(
            "GpulensPodHostStall",
            "gpt",
            "host_stall",
            "nlp/gpt waits on its host or a peer: its GPUs stall while utilization looks busy",
            mixin.POD_VERDICT_PANEL,
        ),
        # Classified since the start: pending at 25 minutes, not yet firing.
        {"eval_time": "25m", "alertname": "GpulensPodHostStall", "exp_alerts": []},
        {"eval_time": "25m", "alertname": "GpulensPodMemoryFragmentation", "exp_alerts": []},
        {"eval_time": "25m", "alertname": "GpulensPodDataStarvation", "exp_alerts": []},
    ],
}


GPU_PANELS = {
    "GpulensGpuMemoryHeldWithoutPod": mixin.NODE_MEMORY_PANEL,
    "GpulensGpuThrottled": mixin.NODE_CLOCK_EVENTS_PANEL,
    "GpulensGpuXidFault": mixin.NODE_XID_PANEL,
    "GpulensGpuNvlinkDegraded": mixin.NODE_NVLINK_PANEL,
    "GpulensGpuLost": mixin.NODE_UP_PANEL,
}


def gpu_alert(name, n, summary, description, severity="warning", **labels):
    return {
        "exp_labels": {
            "severity": severity,
            "component": "gpu",
            "job": "gpulens-exporter",
            "instance": "n1:9848",
            "node": "n1",
            "gpu": str(n),
            "uuid": f"GPU-{n}",
            **labels,
        },
        "exp_annotations": annotations(
            name, summary, description, gpu_link(n, GPU_PANELS[name], labels.get("cluster", ""))
        ),
    }


GPU_TESTS = {
    "interval": "1m",
    "input_series": [
        # Memory: GPU 5 holds 30 GB with no pod; GPU 6 with a pod; GPU 7 only the driver's 1 MiB.
        {"series": f"gpulens_gpu_memory_used_bytes{{{gpu(5)}}}", "values": "30e9x40"},
        {"series": f"gpulens_gpu_pods{{{gpu(5)}}}", "values": "0x40"},
        {"series": f"gpulens_gpu_memory_used_bytes{{{gpu(6)}}}", "values": "30e9x40"},
        {"series": f"gpulens_gpu_pods{{{gpu(6)}}}", "values": "1x40"},
        {"series": f"gpulens_gpu_memory_used_bytes{{{gpu(7)}}}", "values": "1048576x40"},
        {"series": f"gpulens_gpu_pods{{{gpu(7)}}}", "values": "0x40"},
        # Clock events: GPU 2 thermally throttled 75 % of the time and at its power cap all the time
        # (normal boost, never alerts); GPU 3 slowed down for two minutes only.
        {"series": f"gpulens_gpu_clock_event_seconds_total{{{gpu(2, reason='hw_thermal')}}}", "values": "0+45x40"},
        {"series": f"gpulens_gpu_clock_event_seconds_total{{{gpu(2, reason='sw_power_cap')}}}", "values": "0+60x40"},
        {
            "series": f"gpulens_gpu_clock_event_seconds_total{{{gpu(3, reason='hw_slowdown')}}}",
            "values": "0x10 60 120 120x28",
        },
        # XIDs: GPU 2 (no pod) logs its first XID 31 at minute 10 (a new series); GPU 4, held by nlp/bert,
        # counts an XID 13 at minute 6; GPU 1 a double-bit ECC error (XID 48) at minute 6; GPU 3's XID 79
        # happened before the window and never again.
        {"series": f"gpulens_gpu_xid_errors_total{{{gpu(2, xid='31')}}}", "values": "_x10 1x30"},
        {"series": f"gpulens_gpu_xid_errors_total{{{gpu(4, xid='13')}}}", "values": "0x5 1x35"},
        {
            "series": f"gpulens_gpu_pod_info{{{gpu(4, namespace='nlp', pod='bert', container='main')}}}",
            "values": "1x40",
        },
        {"series": f"gpulens_gpu_xid_errors_total{{{gpu(1, xid='48')}}}", "values": "0x5 1x35"},
        {"series": f"gpulens_gpu_xid_errors_total{{{gpu(3, xid='79')}}}", "values": "1x40"},
        # NVLink: GPU 6 has two links down from minute 2; GPU 7 counts 2 replay errors a minute from minute 10;
        # GPU 5 counts 10 CRC errors a second (under DCGM's 100/s) with every link up.
        {"series": f"gpulens_gpu_nvlink_links_down{{{gpu(6)}}}", "values": "0 0 2x38"},
        {"series": f"gpulens_gpu_nvlink_links_down{{{gpu(7)}}}", "values": "0x40"},
        {"series": f"gpulens_gpu_nvlink_errors_total{{{gpu(7, type='replay')}}}", "values": "0x10 2+2x30"},
        {"series": f"gpulens_gpu_nvlink_links_down{{{gpu(5)}}}", "values": "0x40"},
        {"series": f"gpulens_gpu_nvlink_errors_total{{{gpu(5, type='crc_flit')}}}", "values": "0+600x40"},
        # GPU 0 lost from minute 6; GPU 1 one failed sample at minute 6.
        # In a cluster whose name (a Thanos external label: any text) would cut a link: it is percent-encoded.
        {"series": f"gpulens_gpu_up{{{gpu(0, cluster=CLUSTER)}}}", "values": "1x5 0x30"},
        {"series": f"gpulens_gpu_up{{{gpu(1)}}}", "values": "1x5 0 1x30"},
    ],
    "alert_rule_test": [
        {"eval_time": "10m", "alertname": "GpulensGpuMemoryHeldWithoutPod", "exp_alerts": []},
        {
            "eval_time": "20m",
            "alertname": "GpulensGpuMemoryHeldWithoutPod",
            "exp_alerts": [
                gpu_alert(
                    "GpulensGpuMemoryHeldWithoutPod",
                    5,
                    "GPU 5 (GPU-5) on n1 holds 27.94GiB of memory but no pod has it",
                    "GPU 5 (GPU-5) on n1 has had 27.94GiB of memory in use for 15m while the kubelet gives it to "
                    "no pod: a leftover process holds it, and the next pod scheduled there may run out of memory.",
                )
            ],
        },
        {"eval_time": "4m", "alertname": "GpulensGpuThrottled", "exp_alerts": []},
        {"eval_time": "6m", "alertname": "GpulensGpuLost", "exp_alerts": []},
        {
            "eval_time": "15m",
            "alertname": "GpulensGpuThrottled",
            "exp_alerts": [
                gpu_alert(
                    "GpulensGpuThrottled",
                    2,
                    "GPU 2 (GPU-2) on n1 is slowed down by hw_thermal",
                    "GPU 2 (GPU-2) on n1 has been held back by hw_thermal 75% of the time. Every pod on it runs "
                    "slower than it should.",
                    reason="hw_thermal",
                )
            ],
        },
        # Application XIDs: a ticket to the pod's namespace at once; on a GPU without a pod, by node and GPU.
        {
            "eval_time": "7m",
            "alertname": "GpulensPodApplicationXid",
            "exp_alerts": [
                {
                    "exp_labels": {
                        "severity": "warning",
                        "component": "pod",
                        "node": "n1",
                        "namespace": "nlp",
                        "pod": "bert",
                        "gpu": "4",
                        "uuid": "GPU-4",
                    },
                    "exp_annotations": annotations(
                        "GpulensPodApplicationXid",
                        "nlp/bert made GPU 4 (GPU-4) on n1 report application XIDs",
                        "The driver reported XID 13 (1 in the last 5m) on GPU 4 (GPU-4) on n1, held by nlp/bert: "
                        "the program on it faulted. The GPU itself is fine.",
                        gpu_link(4, mixin.NODE_XID_PANEL),
                    ),
                }
            ],
        },
        {
            "eval_time": "12m",
            "alertname": "GpulensPodApplicationXid",
            "exp_alerts": [
                {
                    "exp_labels": {
                        "severity": "warning",
                        "component": "pod",
                        "node": "n1",
                        "gpu": "2",
                        "uuid": "GPU-2",
                    },
                    "exp_annotations": annotations(
                        "GpulensPodApplicationXid",
                        "no pod made GPU 2 (GPU-2) on n1 report application XIDs",
                        "The driver reported XID 31 (1 in the last 5m) on GPU 2 (GPU-2) on n1, held by no pod: "
                        "the program on it faulted. The GPU itself is fine.",
                        gpu_link(2, mixin.NODE_XID_PANEL),
                    ),
                }
            ],
        },
        {"eval_time": "25m", "alertname": "GpulensPodApplicationXid", "exp_alerts": []},
        # Hardware faults: to the node's owner after a minute, never for the application's XIDs.
        {"eval_time": "6m", "alertname": "GpulensGpuXidFault", "exp_alerts": []},
        {
            "eval_time": "8m",
            "alertname": "GpulensGpuXidFault",
            "exp_alerts": [
                gpu_alert(
                    "GpulensGpuXidFault",
                    1,
                    "GPU 1 (GPU-1) on n1 reported XID 48: a hardware or driver fault",
                    "The driver reported XID 48 on GPU 1 (GPU-1) on n1 within the last 5m. It is not one an "
                    "application causes: the GPU, its memory, its links or the driver are at fault.",
                    severity="critical",
                    xid="48",
                )
            ],
        },
        {"eval_time": "25m", "alertname": "GpulensGpuXidFault", "exp_alerts": []},
        {"eval_time": "5m", "alertname": "GpulensGpuNvlinkDegraded", "exp_alerts": []},
        {
            "eval_time": "20m",
            "alertname": "GpulensGpuNvlinkDegraded",
            "exp_alerts": [
                gpu_alert(
                    "GpulensGpuNvlinkDegraded",
                    n,
                    f"GPU {n} (GPU-{n}) on n1 has NVLinks down or failing",
                    f"GPU {n} (GPU-{n}) on n1 has had NVLinks down, or NVLink errors above DCGM's limits, for 5m: "
                    "the peer traffic of multi-GPU pods on it is slow or falls back to PCIe.",
                )
                for n in (6, 7)
            ],
        },
        {
            "eval_time": "8m",
            "alertname": "GpulensGpuLost",
            "exp_alerts": [
                gpu_alert(
                    "GpulensGpuLost",
                    0,
                    "GPU 0 (GPU-0) on n1 stopped answering: it may have fallen off the bus",
                    "NVML can no longer read GPU 0 (GPU-0) on n1 (for example NVML_ERROR_GPU_IS_LOST, XID 79). "
                    "Pods on it are stuck or failing.",
                    severity="critical",
                    cluster=CLUSTER,
                )
            ],
        },
    ],
}


def target_alert(name, summary, description, dashboard, severity, component, **labels):
    return {
        "exp_labels": {"severity": severity, "component": component, **labels},
        "exp_annotations": annotations(name, summary, description, dashboard),
    }


TARGET_TESTS = {
    "interval": "1m",
    "input_series": [
        {"series": 'up{job="gpulens-exporter",instance="n1:9848",node="n1"}', "values": "1x5 0x20"},
        {"series": 'up{job="gpulens-exporter",instance="n2:9848",node="n2"}', "values": "1x25"},
        {
            "series": 'gpulens_exporter_collector_success{job="gpulens-exporter",instance="n2:9848",node="n2",'
            'collector="kubelet"}',
            "values": "0x25",
        },
        {
            "series": 'gpulens_exporter_collector_success{job="gpulens-exporter",instance="n2:9848",node="n2",'
            'collector="nvml"}',
            "values": "1x25",
        },
        {
            "series": 'gpulens_exporter_sample_age_seconds{job="gpulens-exporter",instance="n2:9848",node="n2"}',
            "values": "1x5 30x20",
        },
        {
            "series": 'gpulens_exporter_sample_interval_seconds{job="gpulens-exporter",instance="n2:9848",node="n2"}',
            "values": "1x25",
        },
        {"series": f"up{{{ANALYZER}}}", "values": "1x5 0x20"},
        # The analyzer's last good cycle at 5 minutes (300 s): stale after 5 more minutes.
        {"series": f"gpulens_analyzer_last_success_timestamp_seconds{{{ANALYZER}}}", "values": "0+60x5 300x20"},
    ],
    "alert_rule_test": [
        {"eval_time": "9m", "alertname": "GpulensExporterDown", "exp_alerts": []},
        {
            "eval_time": "12m",
            "alertname": "GpulensExporterDown",
            "exp_alerts": [
                target_alert(
                    "GpulensExporterDown",
                    "The gpulens exporter on n1 is down",
                    "Prometheus has failed to scrape n1:9848 for 5m. Every GPU alert for n1 is blind meanwhile "
                    "(pod alerts there are inhibited).",
                    node_link("n1", mixin.NODE_EXPORTER_UP_PANEL),
                    "critical",
                    "exporter",
                    job="gpulens-exporter",
                    instance="n1:9848",
                    node="n1",
                )
            ],
        },
        {"eval_time": "12m", "alertname": "GpulensExporterAbsent", "exp_alerts": []},
        {"eval_time": "3m", "alertname": "GpulensExporterCollectorFailing", "exp_alerts": []},
        {"eval_time": "4m", "alertname": "GpulensAnalyzerDown", "exp_alerts": []},
        {
            "eval_time": "12m",
            "alertname": "GpulensExporterCollectorFailing",
            "exp_alerts": [
                target_alert(
                    "GpulensExporterCollectorFailing",
                    "The kubelet collector of the exporter on n2 is failing",
                    "gpulens' kubelet collector on n2 has failed for 5m; its series are missing or stale. The "
                    "exporter's log names the cause.",
                    node_link("n2", mixin.NODE_COLLECTORS_PANEL),
                    "warning",
                    "exporter",
                    job="gpulens-exporter",
                    instance="n2:9848",
                    node="n2",
                    collector="kubelet",
                )
            ],
        },
        {
            "eval_time": "12m",
            "alertname": "GpulensExporterStale",
            "exp_alerts": [
                target_alert(
                    "GpulensExporterStale",
                    "The exporter on n2 serves old samples",
                    "The exporter on n2 answers scrapes but its last sample is 30s old: NVML calls hang.",
                    node_link("n2", mixin.NODE_SAMPLE_AGE_PANEL),
                    "warning",
                    "exporter",
                    job="gpulens-exporter",
                    instance="n2:9848",
                    node="n2",
                )
            ],
        },
        {"eval_time": "4m", "alertname": "GpulensExporterStale", "exp_alerts": []},
        {
            "eval_time": "12m",
            "alertname": "GpulensAnalyzerDown",
            "exp_alerts": [
                target_alert(
                    "GpulensAnalyzerDown",
                    "The gpulens analyzer is down or not scraped",
                    "Prometheus has not scraped the analyzer (job gpulens-analyzer) for 5m: pod alerts come "
                    "without a verdict and the waste counters stop.",
                    ANALYZER_PANEL,
                    "warning",
                    "analyzer",
                    job="gpulens-analyzer",
                    instance="analyzer:9849",
                )
            ],
        },
        {"eval_time": "8m", "alertname": "GpulensAnalyzerStale", "exp_alerts": []},
        {
            "eval_time": "12m",
            "alertname": "GpulensAnalyzerStale",
            "exp_alerts": [
                target_alert(
                    "GpulensAnalyzerStale",
                    "The gpulens analyzer's verdicts are 7m 0s old",
                    "The analyzer runs but has not completed an analysis for 7m 0s: its input (Prometheus or the "
                    "exporters) does not answer. It keeps serving the last verdicts, marked stale.",
                    ANALYZER_PANEL,
                    "warning",
                    "analyzer",
                    job="gpulens-analyzer",
                    instance="analyzer:9849",
                )
            ],
        },
    ],
}

NOTHING_SCRAPED = {
    "interval": "1m",
    "input_series": [{"series": 'up{job="prometheus"}', "values": "1x20"}],
    "alert_rule_test": [
        {"eval_time": "3m", "alertname": "GpulensExporterAbsent", "exp_alerts": []},
        {
            "eval_time": "10m",
            "alertname": "GpulensExporterAbsent",
            "exp_alerts": [
                target_alert(
                    "GpulensExporterAbsent",
                    "No gpulens exporter is being scraped",
                    "Prometheus has no target of job gpulens-exporter at all: no GPU in the fleet is watched.",
                    FLEET_DASHBOARD,
                    "critical",
                    "exporter",
                    job="gpulens-exporter",
                )
            ],
        },
        {
            "eval_time": "10m",
            "alertname": "GpulensAnalyzerDown",
            "exp_alerts": [
                target_alert(
                    "GpulensAnalyzerDown",
                    "The gpulens analyzer is down or not scraped",
                    "Prometheus has not scraped the analyzer (job gpulens-analyzer) for 5m: pod alerts come "
                    "without a verdict and the waste counters stop.",
                    ANALYZER_PANEL,
                    "warning",
                    "analyzer",
                    job="gpulens-analyzer",
                )
            ],
        },
    ],
}

DCGM = 'job="nvidia-dcgm-exporter",instance="10.0.0.9:9400",Hostname="n1",modelName="NVIDIA H100 80GB HBM3"'
DCGM_EXPORTER_POD = 'namespace="gpu-operator",pod="nvidia-dcgm-exporter-x7k2p",container="nvidia-dcgm-exporter"'
#: A fleet that runs only dcgm-exporter pages too: the GPU Operator's layout (exported_pod), honorLabels'
#: (pod), a GPU no pod holds (honorLabels gives it the dcgm-exporter pod's labels: never paged), and a GPU
#: that gpulens' exporter reports as well (its series win).
DCGM_TESTS = {
    "interval": "1m",
    "input_series": [
        {
            "series": f'DCGM_FI_DEV_GPU_UTIL{{{DCGM},gpu="0",UUID="GPU-d0",{DCGM_EXPORTER_POD},'
            'exported_namespace="inference",exported_pod="llm-0",exported_container="server"}',
            "values": "7.607x80",  # a percentage as people write it: 7.6%, not humanizePercentage's 7.607%
        },
        {
            "series": f'DCGM_FI_PROF_SM_ACTIVE{{{DCGM},gpu="1",UUID="GPU-d1",namespace="batch",pod="etl-0",'
            'container="main"}',
            "values": "0.1x80",
        },
        {
            "series": f'DCGM_FI_DEV_GPU_UTIL{{{DCGM},gpu="1",UUID="GPU-d1",namespace="batch",pod="etl-0",'
            'container="main"}',
            "values": "95x80",
        },
        {"series": f'DCGM_FI_DEV_GPU_UTIL{{{DCGM},gpu="2",UUID="GPU-d2",{DCGM_EXPORTER_POD}}}', "values": "0x80"},
        {
            "series": f'DCGM_FI_DEV_GPU_UTIL{{{DCGM},gpu="3",UUID="GPU-3",{DCGM_EXPORTER_POD},'
            'exported_namespace="vision",exported_pod="both",exported_container="main"}',
            "values": "5x80",
        },
        {"series": f"gpulens_gpu_up{{{gpu(3)}}}", "values": "1x80"},
        {"series": f"gpulens_gpu_busy_seconds_total{{{gpu(3)}}}", "values": "0+54x80"},
        {
            "series": f"gpulens_gpu_pod_info{{{gpu(3, namespace='vision', pod='both', container='main')}}}",
            "values": "1x80",
        },
    ],
    "alert_rule_test": [
        {"eval_time": "25m", "alertname": "GpulensPodLowSmActivity", "exp_alerts": []},
        {
            "eval_time": "40m",
            "alertname": "GpulensPodLowSmActivity",
            "exp_alerts": [
                low_sm(
                    ns,
                    pod,
                    value,
                    NO_VERDICT,
                    "unknown",
                    "none yet",
                    "unknown",
                    "see the runbook",
                    UNKNOWN_WASTE,
                )
                for ns, pod, value in (("batch", "etl-0", "10%"), ("inference", "llm-0", "7.6%"))
            ],
        },
    ],
}


def _every_other(period: int, minutes: int, first: bool) -> str:
    """promtool values: 1 in alternate `period`-minute spells (the first spell if `first`), each spell's end
    marked stale as the analyzer's series end, so that the store holds one verdict at a time."""
    values, on_before = [], False
    for minute in range(minutes):
        on = ((minute // period) % 2 == 0) == first
        values.append("1" if on else "stale" if on_before else "_")
        on_before = on
    return " ".join(values)


FLAPPING = {"data_starvation": "Raise DataLoader num_workers.", "host_stall": "Save checkpoints asynchronously."}
#: A pod whose SMs stay at 10% while the analyzer's verdict flips between two causes every 10 minutes: the
#: page fires on activity alone, after its 30 minutes (low from the first rate at 1 minute), and its
#: annotations carry the verdict of the minute it is evaluated at (host_stall from 30 to 40 minutes).
FLAPPING_TESTS = {
    "interval": "1m",
    "input_series": [
        {"series": f"gpulens_gpu_sm_active_seconds_total{{{gpu(0)}}}", "values": "0+6x80"},
        {
            "series": f"gpulens_gpu_pod_info{{{gpu(0, namespace='nlp', pod='flappy', container='main')}}}",
            "values": "1x80",
        },
        *(
            {
                "series": f'gpulens_pod_bottleneck_info{{{ANALYZER},namespace="nlp",pod="flappy",node="n1",'
                f'bottleneck="{cause}",secondary="",evidence="{cause} seen",recommendation="{fix}"}}',
                "values": _every_other(10, 81, first=cause == "data_starvation"),
            }
            for cause, fix in FLAPPING.items()
        ),
    ],
    "alert_rule_test": [
        {"eval_time": "29m", "alertname": "GpulensPodLowSmActivity", "exp_alerts": []},
        {
            "eval_time": "31m",
            "alertname": "GpulensPodLowSmActivity",
            "exp_alerts": [
                low_sm(
                    "nlp",
                    "flappy",
                    "10%",
                    verdict_of("unknown", "host_stall seen", FLAPPING["host_stall"]),
                    "host_stall",
                    "host_stall",
                    "unknown",
                    FLAPPING["host_stall"],
                    no_waste("nlp", "host_stall"),
                )
            ],
        },
    ],
}

POOL = 'pool="training",gpu_model="NVIDIA A100-SXM4-80GB"'
#: The analyzer's cluster series: a pod waiting on a fragmented pool since 10 minutes before the test began
#: (600 s, a minute more each minute), 10 GPUs free there with 3 at most on a node; and a pod no node can
#: hold (too_large), waiting longer, which no free GPU would help: never paged.
CLUSTER_TESTS = {
    "interval": "1m",
    "input_series": [
        {
            "series": f'gpulens_cluster_waiting_longest_seconds{{{ANALYZER},{POOL},reason="fragmented"}}',
            "values": "600+60x30",
        },
        {
            "series": f'gpulens_cluster_waiting_longest_seconds{{{ANALYZER},pool="training",gpu_model="",'
            'reason="too_large"}',
            "values": "3600+60x30",
        },
        {"series": f"gpulens_cluster_stranded_gpus{{{ANALYZER},{POOL}}}", "values": "10x30"},
        {"series": f"gpulens_cluster_largest_free_gpus{{{ANALYZER},{POOL}}}", "values": "3x30"},
    ],
    "alert_rule_test": [
        # At 5 minutes it has waited 900 s: not yet more than 15 minutes.
        {"eval_time": "5m", "alertname": "GpulensGpuPodWaitingWhileGpusFree", "exp_alerts": []},
        {
            "eval_time": "10m",
            "alertname": "GpulensGpuPodWaitingWhileGpusFree",
            "exp_alerts": [
                {
                    "exp_labels": {
                        "severity": "warning",
                        "component": "cluster",
                        "pool": "training",
                        "gpu_model": "NVIDIA A100-SXM4-80GB",
                    },
                    "exp_annotations": annotations(
                        "GpulensGpuPodWaitingWhileGpusFree",
                        "A pod has waited 20m 0s for GPUs of pool training (NVIDIA A100-SXM4-80GB) while enough "
                        "are free, spread over nodes",
                        "A GPU pod has waited 20m 0s for pool training (NVIDIA A100-SXM4-80GB): 10 GPUs are free "
                        "there in total, but no node has as many free as it asked (the most on one node: 3). Moving "
                        "a few pods frees a node for it; packing GPU pods onto the fullest nodes keeps it from "
                        "happening again.",
                        f"{FLEET_DASHBOARD}&viewPanel={mixin.FLEET_CLUSTER_PANEL.id}",
                    ),
                }
            ],
        },
    ],
}

ALL_TESTS = [POD_TESTS, GPU_TESTS, TARGET_TESTS, NOTHING_SCRAPED, DCGM_TESTS, FLAPPING_TESTS, CLUSTER_TESTS]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    out = tmp_path_factory.mktemp("alerts")
    for name, text in cli.generate(MixinConfig()).items():
        (out / name).write_text(text)
    return out


def test_promtool_checks_the_rules(generated):
    promtool = require_binary("promtool")
    result = subprocess.run(
        [promtool, "check", "rules", str(generated / cli.RULES_FILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 25 rules found" in result.stdout


def test_amtool_checks_the_alertmanager_config(generated):
    amtool = require_binary("amtool")
    result = subprocess.run(
        [amtool, "check-config", str(generated / cli.ALERTMANAGER_FILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 inhibit rules" in result.stdout and "2 receivers" in result.stdout


def test_routing_pages_critical_and_tickets_warnings(generated):
    """amtool's routing test on the real config: which receiver each severity reaches."""
    amtool = require_binary("amtool")
    config = str(generated / cli.ALERTMANAGER_FILE)
    for labels, receiver in (
        (["alertname=GpulensPodLowSmActivity", "severity=critical", "namespace=nlp"], "pages"),
        (["alertname=GpulensPodDataStarvation", "severity=warning", "namespace=nlp"], "tickets"),
    ):
        result = subprocess.run(
            [amtool, "config", "routes", "test", f"--config.file={config}", *labels], capture_output=True, text=True
        )
        assert result.stdout.strip() == receiver, result.stdout + result.stderr


def test_every_alert_fires_on_its_signature_and_not_otherwise(generated):
    """`promtool test rules`: every alert has a case where it fires with exact labels and annotations
    and a case where it must not (a brief dip, a healthy target, the normal power cap)."""
    promtool = require_binary("promtool")
    fired, silent = set(), set()
    for group in ALL_TESTS:
        for case in group["alert_rule_test"]:
            (fired if case["exp_alerts"] else silent).add(case["alertname"])
    names = {a.name for a in rules.alerts(MixinConfig())}
    assert fired == names, f"alerts without a firing case: {names - fired}"
    assert silent == names, f"alerts without a case where they must stay silent: {names - silent}"
    test_file = generated / "rules.test.yaml"
    test_file.write_text(
        yaml.safe_dump(
            {
                "rule_files": [cli.RULES_FILE],
                "evaluation_interval": "1m",
                # As Prometheus does in a rule file's order: without it, promtool picks an order per run,
                # and an alert evaluated before the recording rules sees them a minute late.
                "group_eval_order": [g["name"] for g in rules.rule_groups(MixinConfig())["groups"]],
                "tests": ALL_TESTS,
            },
            sort_keys=False,
            width=10_000,
        )
    )
    result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_committed_rules_are_current():
    """alerts/generated/ is what `gpulens alerts --out alerts/generated` writes today."""
    for name, text in cli.generate(MixinConfig()).items():
        assert (REPO / "alerts" / "generated" / name).read_text() == text, (
            f"alerts/generated/{name} is stale: run `gpulens alerts --out alerts/generated`"
        )


def test_thresholds_file_changes_the_rules(tmp_path):
    """A deployment's thresholds reach the rules: a 20 % / 10 min page, its duration written as
    Prometheus writes durations whatever form the file used."""
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text("alert_low_sm: 0.2\nalert_low_sm_for: 600s\nalert_rate_window: 2m\n")
    assert main(["alerts", "--out", str(tmp_path / "out"), "--thresholds", str(thresholds)]) == 0
    groups = yaml.safe_load((tmp_path / "out" / cli.RULES_FILE).read_text())["groups"]
    page = next(r for r in groups[1]["rules"] if r["alert"] == "GpulensPodLowSmActivity")
    assert page["expr"] == "namespace_pod:gpulens_gpu_activity:avg_ratio_rate < 0.2"
    assert page["for"] == "10m"
    assert "has stayed under 20% for 10m" in page["annotations"]["description"]
    busy = groups[0]["rules"][0]["expr"]
    assert busy.startswith('rate(gpulens_gpu_busy_seconds_total{job="gpulens-exporter"}[2m]) or ')
    assert 'DCGM_FI_DEV_GPU_UTIL_RATIO", job="nvidia-dcgm-exporter"}[2m]) * 0.01' in busy  # dcgm-exporter's too


def test_every_duration_is_written_one_way():
    """`for:` and the durations in texts read as Prometheus writes them (5m, 1h30m), never 300s."""
    groups = rules.rule_groups(MixinConfig())["groups"]
    durations = [r["for"] for r in groups[1]["rules"] if "for" in r]
    assert sorted(set(durations)) == ["15m", "1h", "1m", "30m", "5m"]
    text = yaml.safe_dump(groups)
    assert not re.search(r"\b\d+0s\b", text), re.search(r".{40}\b\d+0s\b.{40}", text)


def test_bad_thresholds_file_is_refused(tmp_path, capsys):
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text("alert_low_sm_for: half an hour\n")
    assert main(["alerts", "--out", str(tmp_path / "out"), "--thresholds", str(thresholds)]) == 2
    assert (
        "alert_low_sm_for: expected a Prometheus duration such as 30s, 5m or 1h, at most 10y, got 'half an hour'"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


# --- routing: severities and owners are settings -------------------------------------------------

SETTINGS = REPO / "alerts" / "settings.example.yaml"


def routed_to(amtool: str, config, *labels: str) -> str:
    result = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={config}", *labels], capture_output=True, text=True
    )
    return result.stdout.strip()


def test_settings_route_each_alert_to_its_owner(tmp_path):
    """The example settings file: namespace owners get their pods' pages and tickets, the nodes' owner
    hardware faults and exporters, the default owner the rest; a severity changed without a code edit."""
    amtool = require_binary("amtool")
    assert main(["alerts", "--out", str(tmp_path), "--alerting.config", str(SETTINGS)]) == 0
    config = tmp_path / cli.ALERTMANAGER_FILE
    checked = subprocess.run([amtool, "check-config", str(config)], capture_output=True, text=True)
    assert checked.returncode == 0 and "6 receivers" in checked.stdout, checked.stdout + checked.stderr
    # The research cluster's choice: the low-SM alert is a ticket there.
    groups = yaml.safe_load((tmp_path / cli.RULES_FILE).read_text())["groups"]
    page = next(r for r in groups[1]["rules"] if r["alert"] == "GpulensPodLowSmActivity")
    assert page["labels"]["severity"] == "warning"
    for labels, receiver in (
        (
            ("alertname=GpulensPodLowSmActivity", "severity=critical", "component=pod", "namespace=nlp-serving"),
            "nlp-pager",
        ),
        (("alertname=GpulensPodApplicationXid", "severity=warning", "component=pod", "namespace=nlp"), "nlp-tickets"),
        (
            ("alertname=GpulensPodLowSmActivity", "severity=critical", "component=pod", "namespace=nlpx"),
            "platform-pager",
        ),
        (
            ("alertname=GpulensPodDataStarvation", "severity=warning", "component=pod", "namespace=vision"),
            "platform-tickets",
        ),
        (("alertname=GpulensGpuXidFault", "severity=critical", "component=gpu", "node=n1"), "hardware-pager"),
        (("alertname=GpulensGpuThrottled", "severity=warning", "component=gpu", "node=n1"), "hardware-tickets"),
        (("alertname=GpulensExporterDown", "severity=critical", "component=exporter", "node=n1"), "hardware-pager"),
        (("alertname=GpulensAnalyzerDown", "severity=warning", "component=analyzer"), "platform-tickets"),
    ):
        assert routed_to(amtool, config, *labels) == receiver, labels


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            "receivers: {a: {webhook_configs: [{url: 'http://x'}]}}\n"
            "owners: {default: {pages: a, tickets: a}, namespaces: [{match: nlp, pages: nlp-pagr, tickets: a}]}\n",
            "owners.namespaces[0].pages: no receiver named 'nlp-pagr'; add it under receivers or use one of a",
        ),
        (
            "receivers: {a: {webhook_configs: [{url: 'http://x'}]}}\n",
            "owners.default missing: say which receivers get what no other owner takes",
        ),
        (
            "severities: {GpulensPodLowSmActivity: page}\n",
            "GpulensPodLowSmActivity: expected one of critical, warning, got 'page'",
        ),
        ("owners: {namespaces: [{match: 'nlp(', pages: pages, tickets: tickets}]}\n", "expected a regular expression"),
        # Python reads them, Alertmanager (Go's RE2) would refuse them after the files are written.
        *(
            (
                f"owners: {{namespaces: [{{match: '{match}', pages: pages, tickets: tickets}}]}}\n",
                "expected a regular expression on the namespace, in the syntax Alertmanager reads (Go's RE2: no "
                "lookaround, backreferences, possessive quantifiers, \\Z or verbose mode)",
            )
            for match in ("nlp(?!-test)", "nlp\\Z", "(?x) nlp", "(nlp)-\\1", "nlp.*+")
        ),
        # What the Prometheus operator's AlertmanagerConfig cannot carry in Alertmanager's form.
        (
            "receivers: {a: {discord_configs: [{webhook_url: 'http://x'}]}}\n"
            "owners: {default: {pages: a, tickets: a}}\n",
            "receivers.a.discord_configs: the Prometheus operator's AlertmanagerConfig is generated for "
            "webhook_configs, slack_configs, pagerduty_configs, email_configs, opsgenie_configs, msteams_configs, "
            "telegram_configs; use one of those or load alertmanager.yml into Alertmanager directly",
        ),
        (
            "receivers: {a: {webhook_configs: [{url: 'http://x', http_config: {proxy_url: 'http://p'}}]}}\n"
            "owners: {default: {pages: a, tickets: a}}\n",
            "receivers.a.webhook_configs[0].http_config: the AlertmanagerConfig takes it in another form",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_fix(tmp_path, capsys, settings, message):
    path = tmp_path / "settings.yaml"
    path.write_text(settings)
    assert main(["alerts", "--out", str(tmp_path / "out"), "--alerting.config", str(path)]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def page(namespace: str, pod: str, cause: str) -> dict:
    return {
        "labels": {
            "alertname": routing.PAGE,
            "severity": "critical",
            "component": "pod",
            "namespace": namespace,
            "pod": pod,
            "node": "n1",
        },
        "annotations": {"summary": f"{namespace}/{pod} is underused: {cause}", "bottleneck": cause},
    }


def ticket(namespace: str, pod: str) -> dict:
    labels = {**page(namespace, pod, "data_starvation")["labels"], "alertname": "GpulensPodDataStarvation"}
    return {"labels": {**labels, "severity": "warning", "bottleneck": "data_starvation"}, "annotations": {}}


@pytest.mark.slow
def test_alertmanager_sends_one_page_per_namespace_and_mutes_the_class_ticket(tmp_path):
    """The generated config in a real Alertmanager: a hundred replicas and a notebook of one namespace are
    one page, whatever their causes (annotations, which a changing verdict may change without splitting
    the group); another namespace is another page; the class ticket of a paged pod is muted while a pod
    without a page still gets its ticket."""
    receiver = AlertReceiver()
    config = routing.alertmanager_config(routing.AlertSettings.load("", f"{receiver.url}/alerts"))
    config["route"]["group_wait"] = "1s"  # the grouping is under test, not the 30 s wait
    path = tmp_path / "alertmanager.yml"
    path.write_text(cli.dump_yaml(config))
    alertmanager = Alertmanager(tmp_path, path)
    try:
        replicas = [page("serving", f"llm-{i}", "overprovisioned_serving") for i in range(100)]
        alertmanager.post([*replicas, page("serving", "notebook", "idle"), page("nlp", "bert", "data_starvation")])
        alertmanager.post([ticket("nlp", "bert"), ticket("nlp", "t5")])
        wait_until(lambda: len(receiver.snapshot()) >= 3, 30, what="three notifications")
        time.sleep(3)  # and no more
        sent = sorted(
            (n.path, n.group_labels.get("namespace"), n.group_labels.get("alertname"), len(n.alerts))
            for n in receiver.snapshot()
        )
        assert sent == [
            ("/alerts/pages", "nlp", "GpulensPodLowSmActivity", 1),
            ("/alerts/pages", "serving", "GpulensPodLowSmActivity", 101),
            ("/alerts/tickets", "nlp", "GpulensPodDataStarvation", 1),
        ]
        [tickets] = [n for n in receiver.snapshot() if n.path == "/alerts/tickets"]
        assert [a.labels["pod"] for a in tickets.alerts] == ["t5"]
        [muted] = [
            a
            for a in alertmanager.alerts()
            if a["labels"]["alertname"] == "GpulensPodDataStarvation" and a["labels"]["pod"] == "bert"
        ]
        assert muted["status"]["state"] == "suppressed" and muted["status"]["inhibitedBy"]
    finally:
        alertmanager.stop()
        receiver.stop()


def test_muting_names_alerts_that_exist():
    """An inhibition naming a renamed alert would silently mute nothing."""
    names = {a.name for a in rules.alerts(MixinConfig())}
    config = routing.alertmanager_config(routing.AlertSettings())
    for rule in config["inhibit_rules"]:
        for matcher in rule["source_matchers"] + rule["target_matchers"]:
            label, _, value = matcher.partition("=")
            if label == "alertname":
                assert set(value.strip('~"').split("|")) <= names, matcher


def test_the_runbooks_point_to_a_docs_section_that_exists():
    """The runbooks send readers to docs/alerts.md for routing and settings: that heading must exist."""
    anchor = rules.ALERTS_ROUTING.partition("#")[2]
    headings = re.findall(r"^#+ (.+)$", (REPO / "docs" / "alerts.md").read_text(), re.M)
    slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-") for h in headings}
    assert anchor in slugs
    assert f"]({rules.ALERTS_ROUTING})" in (REPO / "alerts" / "generated" / "runbooks.md").read_text()


def test_the_runbooks_table_reads_as_words_not_templates():
    """Each alert's summary in the runbooks' table as a person reads it: labels as {pod}, the value as {value},
    the label a query reads as what it is; no Go template left (the low-SM summary showed its whole query)."""
    table = [line for line in rules.runbooks_markdown(mixin.MixinConfig()).splitlines() if line.startswith("| [")]
    assert len(table) == len(rules.alerts(mixin.MixinConfig())) and not [line for line in table if "{{" in line]
    assert table[0].endswith(
        "| {namespace}/{pod} keeps its GPUs' SMs busy only {value} of the time: {the analyzer's bottleneck} |"
    )


def test_the_receiver_reads_the_verdict_of_the_page_from_its_annotations_and_of_a_ticket_from_its_label():
    from gpulens.receiver import Alert, describe

    verdict = {"confidence": "80%", "recommendation": "Save asynchronously.", "summary": "nlp/gpt is underused"}
    page_alert = Alert(
        "firing", {"alertname": routing.PAGE, "namespace": "nlp", "pod": "gpt"}, {**verdict, "bottleneck": "host_stall"}
    )
    ticket_alert = Alert(
        "firing",
        {"alertname": "GpulensPodHostStall", "namespace": "nlp", "pod": "gpt", "bottleneck": "host_stall"},
        verdict,
    )
    assert describe(page_alert, "/alerts/pages") == (
        "[firing] pages: GpulensPodLowSmActivity nlp/gpt | host_stall (80%): Save asynchronously."
    )
    assert describe(ticket_alert, "/alerts/tickets") == (
        "[firing] tickets: GpulensPodHostStall nlp/gpt | host_stall (80%): Save asynchronously."
    )
    unjudged = dataclasses.replace(page_alert, annotations={"summary": "nlp/gpt is underused"})
    assert (
        describe(unjudged, "/alerts/pages") == "[firing] pages: GpulensPodLowSmActivity nlp/gpt | nlp/gpt is underused"
    )


@pytest.mark.slow
def test_victoriametrics_vmalert_loads_the_rules_and_pages_with_the_verdict(generated, tmp_path):
    """The generated rules in vmalert (Debian's victoria-metrics), not only Prometheus: it parses every
    expression and template of the default rules (-dryRun); and rules generated with a 10 s page, evaluated
    by vmalert on a real VictoriaMetrics holding the last ten minutes of two pods (recording rules written
    back through its remote write), page the pod at 10% SM with the analyzer's verdict and links as
    Prometheus renders them, and not the pod at 90%. (Its replay mode cannot run the `query` templates the
    annotations use, so this runs live.)"""
    vmalert = require_binary("vmalert")
    checked = subprocess.run(
        [vmalert, f"-rule={generated / cli.RULES_FILE}", "-dryRun"], capture_output=True, text=True, cwd=tmp_path
    )
    assert checked.returncode == 0 and "fatal" not in checked.stderr, checked.stderr
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text("alert_rate_window: 1m\nalert_low_sm_for: 10s\n")
    fast = tmp_path / "fast"
    assert main(["alerts", "--out", str(fast), "--thresholds", str(thresholds)]) == 0
    now = int(time.time())
    lines = []
    for n, (pod, busy) in enumerate((("bert", 0.1), ("resnet", 0.9))):
        for k in range(-60, 61):  # every 10 s, from ten minutes ago to ten minutes ahead of the test
            ms = (now + 10 * k) * 1000
            lines.append(f"gpulens_gpu_sm_active_seconds_total{{{gpu(n)}}} {busy * 10 * (k + 60):g} {ms}")
            lines.append(f"gpulens_gpu_pod_info{{{gpu(n, namespace='nlp', pod=pod, container='main')}}} 1 {ms}")
    lines.append(
        f'gpulens_pod_bottleneck_info{{{ANALYZER},namespace="nlp",pod="bert",node="n1",bottleneck="data_starvation",'
        f'secondary="",evidence="switches_per_minute=12.0 >= 2.0",recommendation="{STARVING_FIX}"}} 1 {now * 1000}'
    )
    store = VictoriaMetrics(tmp_path, ("-search.latencyOffset=0s",))
    port = free_port()
    log = open(tmp_path / "vmalert.log", "w")
    evaluator = subprocess.Popen(
        [
            vmalert,
            f"-rule={fast / cli.RULES_FILE}",
            f"-datasource.url={store.url}",
            f"-remoteWrite.url={store.url}",
            "-remoteWrite.flushInterval=500ms",
            "-notifier.url=http://127.0.0.1:1",  # delivery is Alertmanager's test; this one reads vmalert's API
            "-evaluationInterval=2s",
            f"-httpListenAddr=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    try:
        store.load("\n".join(lines) + "\n")

        def firing() -> list[dict]:
            try:
                answer = requests.get(f"http://127.0.0.1:{port}/api/v1/alerts", timeout=2).json()
            except (requests.RequestException, ValueError):
                return []
            alerts = answer["data"]["alerts"] or []
            return [a for a in alerts if a["name"] == routing.PAGE and a["state"] == "firing"]

        [page] = wait_until(firing, 60, interval=0.5, what="vmalert to fire the page")
    finally:
        evaluator.terminate()
        evaluator.wait(timeout=10)
        log.close()
        store.stop()
    assert page["labels"] == {
        "alertgroup": "gpulens.alerts",
        "alertname": routing.PAGE,
        "severity": "critical",
        "component": "pod",
        "namespace": "nlp",
        "pod": "bert",
        "node": "n1",
    }
    annotations = page["annotations"]
    assert annotations["summary"] == "nlp/bert keeps its GPUs' SMs busy only 10% of the time: data_starvation"
    assert (annotations["bottleneck"], annotations["recommendation"]) == ("data_starvation", STARVING_FIX)
    assert annotations["dashboard_url"] == pod_link("nlp", "bert", mixin.POD_SM_PANEL)


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        # Each passed promtool and meant something else, or failed only when the rules were loaded.
        (
            "--exporter.job",
            'gpulens-exporter",job!="',
            "a job name may not hold '\"': it would end the PromQL string it is written in",
        ),
        (
            "--analyzer.job",
            "gpulens-%analyzer",
            "a job name may not hold '%': it would be a verb of the printf that builds an alert template's query",
        ),
        (
            "--dcgm.job",
            "dcgm`x",
            "a job name may not hold '`': it would end the raw string of an alert template's query",
        ),
        (
            "--dcgm.job",
            "dcgm{{x}}",
            "a job name may not hold '{': it would open a Go template action or a PromQL selector",
        ),
        ("--grafana.url", "javascript:alert(1)", "give an http:// or https:// URL with a host"),
        (
            "--runbook.url",
            "https://wiki/{{$labels.pod}}",
            "a URL may not hold '{': it would open a Go template action or a PromQL selector; percent-encode it",
        ),
        ("--grafana.url", "https://grafana/a b", "a URL may not hold ' '; percent-encode it"),
    ],
)
def test_settings_that_would_break_the_text_they_land_in_are_refused(tmp_path, capsys, flag, value, message):
    assert main(["alerts", "--out", str(tmp_path / "out"), flag, value]) == 2
    assert capsys.readouterr().err == f"gpulens alerts: {flag} {value!r}: {message}\n"
    assert not (tmp_path / "out").exists()
    # The same settings reach the dashboards, and are refused there too.
    assert main(["dashboards", "--out", str(tmp_path / "out"), flag, value]) == 2
    assert not (tmp_path / "out").exists()


def test_a_job_name_of_a_service_monitor_is_written_as_a_promql_string():
    """Job names of Kubernetes service monitors hold slashes: fine in every text they land in."""
    c = MixinConfig(exporter_job="serviceMonitor/monitoring/gpulens/0")
    assert c.exporter == 'job="serviceMonitor/monitoring/gpulens/0"'
