"""The GPU alerts: hardware faults (XIDs, ECC, NVLink), throttling, memory, idle GPUs."""

from gpulens.core import mixin
from tests.alert_cases.common import CLUSTER, annotations, gpu, gpu_link

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
