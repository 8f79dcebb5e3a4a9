"""The cluster's alerts: GPUs stranded or waited for, from kube-state-metrics."""

from gpulens.core import mixin
from tests.alert_cases.common import ANALYZER, FLEET_DASHBOARD, annotations

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
