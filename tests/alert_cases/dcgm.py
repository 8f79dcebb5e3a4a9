"""The alerts on a fleet that runs only NVIDIA's dcgm-exporter (the GPU Operator's series)."""

from tests.alert_cases.common import NO_VERDICT, UNKNOWN_WASTE, gpu, low_sm

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
