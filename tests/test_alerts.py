"""The generated alert rules: promtool checks them, and `promtool test rules` proves every alert fires
on its signature (positive case) and not on a healthy target or a brief dip (negative case), with the
analyzer's verdict in the annotations. Default thresholds: 30 % SM for 30 min, 5 min rate window."""

import subprocess

import pytest
import yaml

from gpulens.alerts import cli, rules
from gpulens.core.mixin import MixinConfig
from tests.helpers import REPO, require_binary

EXPORTER = 'job="gpulens-exporter",instance="n1:9848",node="n1"'
ANALYZER = 'job="gpulens-analyzer",instance="analyzer:9849"'
RUNBOOKS = "https://github.com/gpulens/gpulens/blob/main/alerts/generated/runbooks.md"
POD_DASHBOARD = "http://localhost:3000/d/gpulens-pod?var-namespace={ns}&var-pod={pod}"
NODE_DASHBOARD = "http://localhost:3000/d/gpulens-node?var-node=n1"
FLEET_DASHBOARD = "http://localhost:3000/d/gpulens-fleet"
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


def verdict_of(bottleneck, confidence, evidence, recommendation):
    return {"bottleneck": bottleneck, "confidence": confidence, "evidence": evidence, "recommendation": recommendation}


NO_VERDICT = verdict_of(
    "none yet",
    "unknown",
    "none: the analyzer has no verdict for this pod",
    "Check the analyzer: it has no verdict for this pod (GpulensAnalyzerDown?).",
)
STARVING = verdict_of("data_starvation", "95%", "switches_per_minute=12.0 >= 2.0", STARVING_FIX)
IDLE = verdict_of("idle", "85%", "idle_for_seconds=600 >= 300", "Release the GPU.")


def low_sm(ns, pod, value, verdict, bottleneck_text, confidence_text, fix):
    return {
        "exp_labels": {"severity": "critical", "component": "pod", "node": "n1", "namespace": ns, "pod": pod},
        "exp_annotations": annotations(
            "GpulensPodLowSmActivity",
            f"{ns}/{pod} keeps its GPUs' SMs busy only {value} of the time",
            f"SM activity of {ns}/{pod} on n1 has stayed under 30% for 30m. The analyzer's verdict: "
            f"{bottleneck_text} ({confidence_text} confidence). Try: {fix}",
            POD_DASHBOARD.format(ns=ns, pod=pod),
            **verdict,
        ),
    }


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
    ],
    "alert_rule_test": [
        # Low since the first rate at 1 minute: 24 minutes are not yet 30.
        {"eval_time": "25m", "alertname": "GpulensPodLowSmActivity", "exp_alerts": []},
        {
            "eval_time": "40m",
            "alertname": "GpulensPodLowSmActivity",
            "exp_alerts": [
                low_sm("nlp", "bert", "10%", STARVING, "data_starvation", "95%", STARVING_FIX),
                low_sm("research", "notebook", "0%", IDLE, "idle", "85%", "Release the GPU."),
                low_sm("serving", "embedder", "20%", NO_VERDICT, "none yet", "unknown", "see the runbook"),
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
                        POD_DASHBOARD.format(ns="research", pod="notebook"),
                        **IDLE,
                    ),
                }
            ],
        },
        {
            "eval_time": "20m",
            "alertname": "GpulensPodDataStarvation",
            "exp_alerts": [
                {
                    "exp_labels": {
                        "severity": "warning",
                        "component": "pod",
                        "node": "n1",
                        "namespace": "nlp",
                        "pod": "bert",
                    },
                    "exp_annotations": annotations(
                        "GpulensPodDataStarvation",
                        "nlp/bert waits on its input pipeline: the GPU stalls between batches",
                        "The analyzer has classified nlp/bert on n1 as data_starvation for 15m. "
                        f"The analyzer's verdict: data_starvation (95% confidence). Try: {STARVING_FIX}",
                        POD_DASHBOARD.format(ns="nlp", pod="bert"),
                        **STARVING,
                    ),
                }
            ],
        },
        {
            "eval_time": "20m",
            "alertname": "GpulensPodMemoryFragmentation",
            "exp_alerts": [
                {
                    "exp_labels": {
                        "severity": "warning",
                        "component": "pod",
                        "node": "n1",
                        "namespace": "nlp",
                        "pod": "llm",
                    },
                    "exp_annotations": annotations(
                        "GpulensPodMemoryFragmentation",
                        "nlp/llm fills its GPU memory and restarts: out-of-memory risk",
                        "The analyzer has classified nlp/llm on n1 as memory_fragmentation for 15m. The analyzer's "
                        "verdict: none yet (unknown confidence). Try: see the runbook",
                        POD_DASHBOARD.format(ns="nlp", pod="llm"),
                        **NO_VERDICT,
                    ),
                }
            ],
        },
        {"eval_time": "10m", "alertname": "GpulensPodMemoryFragmentation", "exp_alerts": []},
        {"eval_time": "10m", "alertname": "GpulensPodDataStarvation", "exp_alerts": []},
    ],
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
        "exp_annotations": annotations(name, summary, description, NODE_DASHBOARD),
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
        # XIDs: GPU 2's first XID 31 at minute 10 (a new series); GPU 4's XID 13 counter steps at minute 6;
        # GPU 3's XID 79 happened before the window and never again.
        {"series": f"gpulens_gpu_xid_errors_total{{{gpu(2, xid='31')}}}", "values": "_x10 1x30"},
        {"series": f"gpulens_gpu_xid_errors_total{{{gpu(4, xid='13')}}}", "values": "0x5 1x35"},
        {"series": f"gpulens_gpu_xid_errors_total{{{gpu(3, xid='79')}}}", "values": "1x40"},
        # NVLink: GPU 6 has two links down from minute 2; GPU 7 counts 2 replay errors a minute from minute 10;
        # GPU 5 counts 10 CRC errors a second (under DCGM's 100/s) with every link up.
        {"series": f"gpulens_gpu_nvlink_links_down{{{gpu(6)}}}", "values": "0 0 2x38"},
        {"series": f"gpulens_gpu_nvlink_links_down{{{gpu(7)}}}", "values": "0x40"},
        {"series": f"gpulens_gpu_nvlink_errors_total{{{gpu(7, type='replay')}}}", "values": "0x10 2+2x30"},
        {"series": f"gpulens_gpu_nvlink_links_down{{{gpu(5)}}}", "values": "0x40"},
        {"series": f"gpulens_gpu_nvlink_errors_total{{{gpu(5, type='crc_flit')}}}", "values": "0+600x40"},
        # GPU 0 lost from minute 6; GPU 1 one failed sample at minute 6.
        {"series": f"gpulens_gpu_up{{{gpu(0)}}}", "values": "1x5 0x30"},
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
        {
            "eval_time": "7m",
            "alertname": "GpulensGpuXidErrors",
            "exp_alerts": [
                gpu_alert(
                    "GpulensGpuXidErrors",
                    4,
                    "GPU 4 (GPU-4) on n1 reported XID 13 errors",
                    "The driver reported XID 13 on GPU 4 (GPU-4) on n1 within the last 5m.",
                    xid="13",
                )
            ],
        },
        {
            "eval_time": "12m",
            "alertname": "GpulensGpuXidErrors",
            "exp_alerts": [
                gpu_alert(
                    "GpulensGpuXidErrors",
                    2,
                    "GPU 2 (GPU-2) on n1 reported XID 31 errors",
                    "The driver reported XID 31 on GPU 2 (GPU-2) on n1 within the last 5m.",
                    xid="31",
                )
            ],
        },
        {"eval_time": "25m", "alertname": "GpulensGpuXidErrors", "exp_alerts": []},
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
                    NODE_DASHBOARD.replace("n1", "n1"),
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
                    NODE_DASHBOARD.replace("n1", "n2"),
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
                    NODE_DASHBOARD.replace("n1", "n2"),
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
                    FLEET_DASHBOARD,
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
                    FLEET_DASHBOARD,
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
                    FLEET_DASHBOARD,
                    "warning",
                    "analyzer",
                    job="gpulens-analyzer",
                )
            ],
        },
    ],
}

ALL_TESTS = [POD_TESTS, GPU_TESTS, TARGET_TESTS, NOTHING_SCRAPED]


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
    assert "SUCCESS: 22 rules found" in result.stdout


def test_amtool_checks_the_alertmanager_config(generated):
    amtool = require_binary("amtool")
    result = subprocess.run(
        [amtool, "check-config", str(generated / cli.ALERTMANAGER_FILE)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 inhibit rules" in result.stdout and "2 receivers" in result.stdout


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
            {"rule_files": [cli.RULES_FILE], "evaluation_interval": "1m", "tests": ALL_TESTS},
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
    """A deployment's thresholds reach the rules: a 20 % / 10 min page."""
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text("alert_low_sm: 0.2\nalert_low_sm_for: 10m\nalert_rate_window: 2m\n")
    from gpulens.cli import main

    assert main(["alerts", "--out", str(tmp_path / "out"), "--thresholds", str(thresholds)]) == 0
    groups = yaml.safe_load((tmp_path / "out" / cli.RULES_FILE).read_text())["groups"]
    page = next(r for r in groups[1]["rules"] if r["alert"] == "GpulensPodLowSmActivity")
    assert page["expr"] == "namespace_pod:gpulens_gpu_activity:avg_ratio_rate < 0.2" and page["for"] == "10m"
    assert groups[0]["rules"][0]["expr"] == 'rate(gpulens_gpu_busy_seconds_total{job="gpulens-exporter"}[2m])'


def test_bad_thresholds_file_is_refused(tmp_path, capsys):
    thresholds = tmp_path / "thresholds.yaml"
    thresholds.write_text("alert_low_sm_for: half an hour\n")
    from gpulens.cli import main

    assert main(["alerts", "--out", str(tmp_path / "out"), "--thresholds", str(thresholds)]) == 2
    assert (
        "alert_low_sm_for: expected a Prometheus duration such as 30s, 5m or 1h, got 'half an hour'"
        in capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()
