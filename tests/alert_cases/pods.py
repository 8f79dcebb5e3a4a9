"""The pod alerts: the low-SM page with the analyzer's verdict, and each class's ticket."""

from gpulens.core import mixin
from tests.alert_cases.common import (
    ANALYZER,
    IDLE,
    NO_VERDICT,
    STARVING,
    STARVING_FIX,
    UNKNOWN_WASTE,
    annotations,
    gpu,
    low_sm,
    no_waste,
    pod_link,
    ticket_without_verdict,
)

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
