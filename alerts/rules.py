"""The Prometheus alerting rules, their runbooks, and the demo's Alertmanager routing.

Generated from gpulens/core/mixin.py (selectors, recording rules, links) and gpulens/core/thresholds.py (every
threshold and duration), so `gpulens alerts --out DIR` with a `--thresholds` file gives rules that
agree with the analyzer. Each alert carries `severity` (critical pages, warning makes a ticket) and
`component` (pod, gpu, exporter, analyzer: what the inhibition rules match on), and annotations
`summary`, `description`, `runbook_url` and `dashboard_url`. Pod alerts also carry the analyzer's
verdict for the pod (`bottleneck`, `confidence`, `evidence`, `recommendation`), looked up when the
alert is evaluated, so the page already says why and what to try.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpulens.core import mixin
from gpulens.core.bottlenecks import RECOMMENDATIONS
from gpulens.core.config import duration_seconds
from gpulens.core.mixin import MixinConfig, metric


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str  # "critical" pages a human, "warning" opens a ticket
    component: str  # "pod" | "gpu" | "exporter" | "analyzer"
    summary: str
    description: str
    runbook: str  # Markdown: what it means, how to confirm, what to do
    dashboard_url: str

    def anchor(self) -> str:
        return self.name.lower()


POD = "{{ $labels.namespace }}/{{ $labels.pod }}"
GPU = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.node }}"


def _verdict(c: MixinConfig, label: str, missing: str) -> str:
    """Alert template: one label of the analyzer's current verdict for the alert's pod."""
    selector = f"{metric('pod_bottleneck_info')}{{{c.analyzer},namespace=%q,pod=%q}}"
    return (
        f"{{{{ with printf `{selector}` $labels.namespace $labels.pod | query }}}}"
        f'{{{{ . | first | label "{label}" }}}}{{{{ else }}}}{missing}{{{{ end }}}}'
    )


def _confidence(c: MixinConfig) -> str:
    selector = f"{metric('pod_bottleneck_confidence')}{{{c.analyzer},namespace=%q,pod=%q}}"
    return (
        f"{{{{ with printf `{selector}` $labels.namespace $labels.pod | query }}}}"
        f"{{{{ . | first | value | humanizePercentage }}}}{{{{ else }}}}unknown{{{{ end }}}}"
    )


def _verdict_sentence(c: MixinConfig) -> str:
    """How pod alerts' descriptions end: what the analyzer says and what to try."""
    return (
        f"The analyzer's verdict: {_verdict(c, 'bottleneck', 'none yet')} ({_confidence(c)} confidence). "
        f"Try: {_verdict(c, 'recommendation', 'see the runbook')}"
    )


def verdict_annotations(c: MixinConfig) -> dict[str, str]:
    """The analyzer's verdict for the alert's pod, as annotations."""
    return {
        "bottleneck": _verdict(c, "bottleneck", "none yet"),
        "confidence": _confidence(c),
        "evidence": _verdict(c, "evidence", "none: the analyzer has no verdict for this pod"),
        "recommendation": _verdict(
            c, "recommendation", "Check the analyzer: it has no verdict for this pod (GpulensAnalyzerDown?)."
        ),
    }


def alerts(c: MixinConfig) -> list[Alert]:
    """Every alert, in the order of the rule file and the runbooks."""
    return [*_pod_alerts(c), *_gpu_alerts(c), *_exporter_alerts(c), *_analyzer_alerts(c)]


def _pod_link(c: MixinConfig) -> str:
    return mixin.dashboard_link(c, mixin.POD_DASHBOARD, namespace="{{ $labels.namespace }}", pod="{{ $labels.pod }}")


def _verdict_alert(c: MixinConfig, name: str, bottleneck: str, summary: str, runbook: str) -> Alert:
    """A ticket when the analyzer has held `bottleneck` for a pod long enough."""
    t = c.thresholds
    return Alert(
        name,
        f'max by (node, namespace, pod) ({metric("pod_bottleneck")}{{{c.analyzer},bottleneck="{bottleneck}"}}) == 1',
        t.alert_verdict_for,
        "warning",
        "pod",
        summary,
        f"The analyzer has classified {POD} on {{{{ $labels.node }}}} as {bottleneck} for {t.alert_verdict_for}. "
        + _verdict_sentence(c),
        runbook,
        _pod_link(c),
    )


def _pod_alerts(c: MixinConfig) -> list[Alert]:
    """Pods whose GPUs are underused: the page on low SM activity, and a ticket per verdict."""
    t = c.thresholds
    w = t.alert_rate_window
    pod_link = _pod_link(c)
    pct = f"{t.alert_low_sm:.0%}"
    return [
        Alert(
            "GpulensPodLowSmActivity",
            f"{mixin.POD_ACTIVITY_AVG} < {t.alert_low_sm}",
            t.alert_low_sm_for,
            "critical",
            "pod",
            f"{POD} keeps its GPUs' SMs busy only {{{{ $value | humanizePercentage }}}} of the time",
            f"SM activity of {POD} on {{{{ $labels.node }}}} has stayed under {pct} for {t.alert_low_sm_for}. "
            + _verdict_sentence(c),
            f"""The pod holds GPUs but uses a small part of them: averaged over its GPUs and {w}, SMs held a
warp less than {pct} of the time, for {t.alert_low_sm_for}. NVIDIA: SM activity >= 0.8 is necessary for
effective use, < 0.5 likely ineffective.

1. Read the `bottleneck` and `recommendation` annotations: they are the analyzer's verdict for this pod
   (`gpulens_pod_bottleneck_info`), with the evidence and thresholds it crossed.
2. Open the pod dashboard (the alert's `dashboard_url`): the state timeline shows since when the class
   holds; SM, tensor and DRAM activity, memory, PCIe/NVLink and CPU panels show the signature.
3. Apply the recommendation (every class's fix is listed at the end of this page).
   `idle` or `wrong_gpu_type`: give the GPU back or move the pod to a smaller GPU or a MIG slice.
   `overprovisioned_serving`: the replica serves requests in bursts; run fewer replicas or share the GPU
   (MIG, time-slicing), but do not simply delete it: that would take the service down.
4. If the bottleneck is `none yet`, the analyzer is down or has not seen the pod: see GpulensAnalyzerDown.""",
            pod_link,
        ),
        Alert(
            "GpulensPodGpuIdle",
            f"{mixin.POD_ACTIVITY_MAX} < {t.idle_activity}",
            t.alert_idle_for,
            "warning",
            "pod",
            f"{POD} holds GPUs that have done no work for {t.alert_idle_for}",
            f"Every GPU of {POD} on {{{{ $labels.node }}}} has been idle (activity under {t.idle_activity}) for "
            f"{t.alert_idle_for}. " + _verdict_sentence(c),
            f"""Every GPU allocated to the pod has had activity under {t.idle_activity} for {t.alert_idle_for}:
an idle notebook, a job waiting on something, or a process that finished but whose pod was never deleted.
(Princeton Job Defense Shield warns at 60 minutes.)

1. Check with the pod's owner whether it still needs the GPUs; `kubectl describe pod` shows its age.
2. Stop it or scale it to zero; for notebooks, enable an idle culler.
3. If the memory stays held after the pod is gone, see GpulensGpuMemoryHeldWithoutPod.""",
            pod_link,
        ),
        _verdict_alert(
            c,
            "GpulensPodDataStarvation",
            "data_starvation",
            f"{POD} waits on its input pipeline: the GPU stalls between batches",
            f"""The analyzer sees the data-starvation signature for {t.alert_verdict_for}: activity oscillates
between bursts near the model's level and dips to almost nothing every step (more than
{t.starvation_tail:.0%} of samples above {t.starvation_high} and below {t.starvation_low}; SageMaker Debugger's
LowGPUUtilization rule), often with the pod's CPU at its limit.

1. Open the pod dashboard: SM activity saw-tooths, and the CPU panel shows whether the pod sits at its limit.
2. {RECOMMENDATIONS["data_starvation"]}""",
        ),
        _verdict_alert(
            c,
            "GpulensPodMemoryFragmentation",
            "memory_fragmentation",
            f"{POD} fills its GPU memory and restarts: out-of-memory risk",
            f"""The analyzer sees GPU memory near full (over {t.memory_full:.0%} of capacity) and growing, with drops
where the process died and restarted, for {t.alert_verdict_for}. Pre-allocators (vLLM, JAX, TensorRT-LLM)
hold memory flat and are exempt.

1. `kubectl describe pod`: restarts with CUDA out-of-memory in the previous container's log confirm it.
2. {RECOMMENDATIONS["memory_fragmentation"]}""",
        ),
    ]


def _gpu_alerts(c: MixinConfig) -> list[Alert]:
    """GPUs in trouble whatever runs on them: memory held by no pod, throttling, XIDs, NVLinks, lost."""
    t = c.thresholds
    w = t.alert_rate_window
    node_link = mixin.dashboard_link(c, mixin.NODE_DASHBOARD, node="{{ $labels.node }}")
    nvlink_errors = metric("gpu_nvlink_errors_total")
    return [
        Alert(
            "GpulensGpuMemoryHeldWithoutPod",
            f"({metric('gpu_memory_used_bytes')}{{{c.exporter}}} > {t.alert_memory_held_bytes:.0f})"
            f" and on (uuid) ({metric('gpu_pods')}{{{c.exporter}}} == 0)",
            t.alert_memory_held_for,
            "warning",
            "gpu",
            f"{GPU} holds {{{{ $value | humanize1024 }}}}B of memory but no pod has it",
            f"{GPU} has had {{{{ $value | humanize1024 }}}}B of memory in use for {t.alert_memory_held_for} while "
            f"the kubelet gives it to no pod: a leftover process holds it, and the next pod scheduled there "
            f"may run out of memory.",
            f"""The kubelet has allocated the GPU to no pod, yet more than {t.alert_memory_held_bytes / 1024**3:g} GiB
of its memory is in use. Known causes: DataLoader worker processes surviving a killed job (pytorch #1085, #5736),
child processes left after a deployment was removed (gpu-operator #2880).

1. On the node: `nvidia-smi --query-compute-apps=pid,used_memory --format=csv`; `gpulens_process_info` shows the
   same with the container ID.
2. Kill the leftover process; if none is listed, the holder may be in another PID namespace: look for
   zombie containers (`crictl ps -a`).
3. If the memory stays, drain the node and reset the GPU (`nvidia-smi -r`).""",
            node_link,
        ),
        Alert(
            "GpulensGpuThrottled",
            f'rate({metric("gpu_clock_event_seconds_total")}{{{c.exporter},reason=~"{c.throttle_reasons}"}}[{w}])'
            f" > {t.alert_throttled_fraction}",
            f"{t.throttle_seconds:.0f}s",
            "warning",
            "gpu",
            f"{GPU} is slowed down by {{{{ $labels.reason }}}}",
            f"{GPU} has been held back by {{{{ $labels.reason }}}} {{{{ $value | humanizePercentage }}}} of the "
            f"time. Every pod on it runs slower than it should.",
            f"""The GPU lowers its clocks because of {c.throttle_reasons.replace("|", ", ")} for more than
{t.alert_throttled_fraction:.0%} of the time, for {t.throttle_seconds / 60:g} minutes (canonical hardware-observer,
nvidia_gpu_exporter). The software power cap (`sw_power_cap`) is normal boost behaviour and never alerts.

1. Node dashboard: temperature, power against limit and SM clock against max show which one.
2. Thermal (`sw_thermal`, `hw_thermal`): check fans, airflow, the data-centre inlet temperature.
3. `hw_slowdown`, `hw_power_brake`: the power supply or the board signals a fault; ask the hardware team.
4. Cordon the node until it is fixed if the pods on it are latency-sensitive.""",
            node_link,
        ),
        Alert(
            "GpulensGpuXidErrors",
            # A counter that appears within the window is new errors too: increase() needs two samples.
            f"increase({metric('gpu_xid_errors_total')}{{{c.exporter}}}[{w}]) > 0 or "
            f"({metric('gpu_xid_errors_total')}{{{c.exporter}}} unless {metric('gpu_xid_errors_total')}"
            f"{{{c.exporter}}} offset {w})",
            "0s",
            "warning",
            "gpu",
            f"{GPU} reported XID {{{{ $labels.xid }}}} errors",
            f"The driver reported XID {{{{ $labels.xid }}}} on {GPU} within the last {w}.",
            """The NVIDIA driver logged XID errors (`dmesg | grep -i xid` on the node). What to do depends on the code
(NVIDIA's XID catalogue): 13, 31, 43 are usually the application's fault (illegal memory access, a kernel
exception): tell the pod's owner. 48 (double-bit ECC), 63/64 (row remapping), 74 (NVLink), 79 (fallen off the
bus), 92, 94, 95 (ECC) are hardware: drain the node, reset the GPU, and file a hardware ticket if they recur.""",
            node_link,
        ),
        Alert(
            "GpulensGpuNvlinkDegraded",
            f"{metric('gpu_nvlink_links_down')}{{{c.exporter}}} > 0"
            f' or sum without (type) (rate({nvlink_errors}{{{c.exporter},type=~"crc_flit|crc_data"}}[{w}]))'
            f" >= {t.nvlink_crc_errors_per_second:g}"
            f' or sum without (type) (increase({nvlink_errors}{{{c.exporter},type=~"replay|recovery"}}[{w}]))'
            f" > {t.nvlink_errors:g}",
            t.alert_nvlink_for,
            "warning",
            "gpu",
            f"{GPU} has NVLinks down or failing",
            f"{GPU} has had NVLinks down, or NVLink errors above DCGM's limits, for {t.alert_nvlink_for}: the peer "
            f"traffic of multi-GPU pods on it is slow or falls back to PCIe.",
            f"""An NVLink of the GPU is down (`gpulens_gpu_nvlink_links_down`; the exporter's log names the links), or
its CRC errors reach {t.nvlink_crc_errors_per_second:g}/s, or it counts more than {t.nvlink_errors:g} replay or
recovery errors in {w} (DCGM's limits, dcgm_gpu_hardware_limits.h). The analyzer calls multi-GPU pods on it
`poor_placement` with the GPU named in the evidence.

1. On the node: `nvidia-smi nvlink -s` (a down link shows `<inactive>`) and `nvidia-smi nvlink -e` (error counters);
   `dmesg | grep -i xid` (XID 74: NVLink error).
2. On NVSwitch systems, check that the Fabric Manager runs (`systemctl status nvidia-fabricmanager`).
3. Cordon the node for multi-GPU jobs, drain it, reset the GPUs; if links stay down or errors recur, it is
   hardware (the GPU, the baseboard or the NVSwitch): open a ticket with the vendor.""",
            node_link,
        ),
        Alert(
            "GpulensGpuLost",
            f"{metric('gpu_up')}{{{c.exporter}}} == 0",
            "1m",
            "critical",
            "gpu",
            f"{GPU} stopped answering: it may have fallen off the bus",
            f"NVML can no longer read {GPU} (for example NVML_ERROR_GPU_IS_LOST, XID 79). Pods on it are stuck "
            f"or failing.",
            """NVML reports the GPU as lost or failing on every sample. The pods on it cannot make progress.

1. On the node: `nvidia-smi` (it will list the GPU as lost or with an error) and `dmesg | grep -i xid` (XID 79:
   fallen off the bus).
2. Cordon and drain the node; a GPU reset (`nvidia-smi -r`) or a reboot is usually needed.
3. If it recurs, it is hardware (PCIe riser, power, the GPU itself): open a ticket with the vendor.""",
            node_link,
        ),
    ]


def _exporter_alerts(c: MixinConfig) -> list[Alert]:
    """The exporters themselves: down, absent, failing a collector, stale. Without them every GPU alert is blind."""
    t = c.thresholds
    node_link = mixin.dashboard_link(c, mixin.NODE_DASHBOARD, node="{{ $labels.node }}")
    fleet_link = mixin.dashboard_link(c, mixin.FLEET_DASHBOARD)
    return [
        Alert(
            "GpulensExporterDown",
            f"up{{{c.exporter}}} == 0",
            t.alert_target_down_for,
            "critical",
            "exporter",
            "The gpulens exporter on {{ $labels.node }} is down",
            f"Prometheus has failed to scrape {{{{ $labels.instance }}}} for {t.alert_target_down_for}. Every GPU "
            f"alert for {{{{ $labels.node }}}} is blind meanwhile (pod alerts there are inhibited).",
            """Prometheus cannot scrape the exporter. While it is down, no GPU or pod alert on the node can fire.

1. `kubectl -n gpulens get pods -o wide` for the DaemonSet pod on the node; `kubectl logs` it: the exporter
   names the problem (NVML missing, the kubelet socket absent, a bad flag) and how to fix it.
2. From Prometheus' Targets page: the scrape error (connection refused, timeout, TLS).
3. `curl http://<node>:9848/healthz` answers 503 with the reason when sampling is stale.""",
            node_link,
        ),
        Alert(
            "GpulensExporterAbsent",
            f"absent(up{{{c.exporter}}})",
            t.alert_target_down_for,
            "critical",
            "exporter",
            "No gpulens exporter is being scraped",
            f"Prometheus has no target of job {c.exporter_job} at all: no GPU in the fleet is watched.",
            f"""Prometheus has no target of job `{c.exporter_job}`: the DaemonSet is gone, or the ServiceMonitor or
scrape config does not select it. A rule on a series that does not exist never fires, so this alert guards
every other one.

1. `kubectl -n gpulens get daemonset,servicemonitor`.
2. Prometheus' Service Discovery page: is the ServiceMonitor picked up (its labels must match the Prometheus
   resource's `serviceMonitorSelector`)?""",
            fleet_link,
        ),
        Alert(
            "GpulensExporterCollectorFailing",
            f"{metric('exporter_collector_success')}{{{c.exporter}}} == 0",
            t.alert_target_down_for,
            "warning",
            "exporter",
            "The {{ $labels.collector }} collector of the exporter on {{ $labels.node }} is failing",
            f"gpulens' {{{{ $labels.collector }}}} collector on {{{{ $labels.node }}}} has failed for "
            f"{t.alert_target_down_for}; its series are missing or stale. The exporter's log names the cause.",
            """One of the exporter's inputs fails: `nvml` (the driver), `kubelet` (pod attribution: the pod-resources
socket), or `dcgm` (the node's dcgm-exporter). The others keep working.

1. `kubectl logs` the exporter pod: it logs the failure once with the fix (socket path, URL, timeout).
2. `kubelet`: is `/var/lib/kubelet/pod-resources` mounted? `dcgm`: does `--dcgm.url` answer?""",
            node_link,
        ),
        Alert(
            "GpulensExporterStale",
            f"{metric('exporter_sample_age_seconds')}{{{c.exporter}}} > 3 * "
            f"{metric('exporter_sample_interval_seconds')}{{{c.exporter}}}",
            t.alert_target_down_for,
            "warning",
            "exporter",
            "The exporter on {{ $labels.node }} serves old samples",
            "The exporter on {{ $labels.node }} answers scrapes but its last sample is "
            "{{ $value | humanizeDuration }} old: NVML calls hang.",
            """The exporter answers but its sampler has not completed for more than three intervals: an NVML call
hangs (a GPU in a bad state, the driver being upgraded). `/healthz` answers 503 meanwhile.

1. `nvidia-smi` on the node: does it hang too? Then the driver or a GPU is stuck: see GpulensGpuLost.
2. Restart the exporter pod once the driver answers again.""",
            node_link,
        ),
    ]


def _analyzer_alerts(c: MixinConfig) -> list[Alert]:
    """The analyzer: without it, pod alerts come without a verdict."""
    t = c.thresholds
    fleet_link = mixin.dashboard_link(c, mixin.FLEET_DASHBOARD)
    return [
        Alert(
            "GpulensAnalyzerDown",
            f"up{{{c.analyzer}}} == 0 or absent(up{{{c.analyzer}}})",
            t.alert_target_down_for,
            "warning",
            "analyzer",
            "The gpulens analyzer is down or not scraped",
            f"Prometheus has not scraped the analyzer (job {c.analyzer_job}) for {t.alert_target_down_for}: pod "
            f"alerts come without a verdict and the waste counters stop.",
            """The analyzer is not scraped. GPU alerts keep working; pod alerts lose their `bottleneck` and
`recommendation` annotations and the dashboards' verdict panels go empty.

1. `kubectl -n gpulens get deploy gpulens-analyzer`; `kubectl logs` it.
2. Check its ServiceMonitor and that the Service selects the pod.""",
            fleet_link,
        ),
        Alert(
            "GpulensAnalyzerStale",
            f"time() - {metric('analyzer_last_success_timestamp_seconds')}{{{c.analyzer}}}"
            f" > {duration_seconds(t.alert_target_down_for):.0f}",
            "0s",
            "warning",
            "analyzer",
            "The gpulens analyzer's verdicts are {{ $value | humanizeDuration }} old",
            "The analyzer runs but has not completed an analysis for {{ $value | humanizeDuration }}: its input "
            "(Prometheus or the exporters) does not answer. It keeps serving the last verdicts, marked stale.",
            """The analyzer cannot read its input. It keeps the last verdicts (`gpulens_analyzer_verdict_age_seconds`
grows) and never replaces them with guesses.

1. `kubectl logs` the analyzer: it names the input and the error (connection refused, timeout, bad query).
2. Check that `--input.prometheus` points to a Prometheus that answers.""",
            fleet_link,
        ),
    ]


def rule_groups(c: MixinConfig) -> dict:
    """The rule file: recording rules first, then the alerts."""
    rules = []
    for a in alerts(c):
        annotations = {
            "summary": a.summary,
            "description": a.description,
            "runbook_url": f"{c.runbook_url}#{a.anchor()}",
            "dashboard_url": a.dashboard_url,
        }
        if a.component == "pod":
            annotations.update(verdict_annotations(c))
        rule: dict[str, object] = {"alert": a.name, "expr": a.expr}
        if a.for_ != "0s":
            rule["for"] = a.for_
        rule["labels"] = {"severity": a.severity, "component": a.component}
        rule["annotations"] = annotations
        rules.append(rule)
    return {
        "groups": [
            {"name": "gpulens.recording", "rules": mixin.recording_rules(c)},
            {"name": "gpulens.alerts", "rules": rules},
        ]
    }


def runbooks_markdown(c: MixinConfig) -> str:
    lines = [
        "# gpulens alert runbooks",
        "",
        "Generated by `gpulens alerts` from alerts/rules.py with the default thresholds "
        "(gpulens/core/thresholds.py); do not edit by hand.",
        "",
        "| alert | severity | summary |",
        "|---|---|---|",
    ]
    for a in alerts(c):
        lines.append(f"| [{a.name}](#{a.anchor()}) | {a.severity} | {a.summary} |")
    for a in alerts(c):
        lines += [
            "",
            f"## {a.name}",
            "",
            f"Severity: **{a.severity}**. Fires when `{a.expr}`" + (f" for {a.for_}." if a.for_ != "0s" else "."),
            "",
            a.runbook,
        ]
    lines += [
        "",
        "## What to do for each class",
        "",
        "The analyzer's recommendation for each bottleneck class, as "
        "its verdicts and the alerts' `recommendation` annotation carry it.",
        "",
    ]
    lines += [f"- `{name}`: {text}" for name, text in RECOMMENDATIONS.items()]
    return "\n".join(lines) + "\n"


def alertmanager_config(webhook_url: str) -> dict:
    """Alertmanager routing for the demo: critical alerts page, warnings make tickets; both go to
    the same webhook (the demo's receiver) under different paths, so a user sees which is which.
    Pod and GPU alerts of a node whose exporter is down are inhibited: they would be noise."""
    base = webhook_url.rstrip("/")
    return {
        "route": {
            "receiver": "tickets",
            "group_by": ["namespace", "alertname"],
            "group_wait": "10s",
            "group_interval": "1m",
            "repeat_interval": "4h",
            "routes": [{"receiver": "pages", "matchers": ['severity="critical"']}],
        },
        "receivers": [
            {"name": "pages", "webhook_configs": [{"url": f"{base}/pages", "send_resolved": True}]},
            {"name": "tickets", "webhook_configs": [{"url": f"{base}/tickets", "send_resolved": True}]},
        ],
        "inhibit_rules": [
            {
                "source_matchers": ['alertname="GpulensExporterDown"'],
                "target_matchers": ['component=~"pod|gpu"'],
                "equal": ["node"],
            },
            {
                "source_matchers": ['alertname="GpulensGpuLost"'],
                "target_matchers": ['alertname=~"GpulensGpuThrottled|GpulensGpuXidErrors"'],
                "equal": ["uuid"],
            },
        ],
    }
