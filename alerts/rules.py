"""The Prometheus alerting rules and their runbooks.

Generated from gpulens/core/mixin.py (selectors, recording rules, links) and gpulens/core/thresholds.py (every
threshold and duration), so `gpulens alerts --out DIR` with a `--thresholds` file gives rules that
agree with the analyzer. Each alert carries `severity` (critical pages, warning makes a ticket; a
deployment overrides it per alert, alerts/routing.py) and `component` (pod, gpu, exporter, analyzer:
what routing and inhibition match on), and annotations `summary`, `description`, `runbook_url` and
`dashboard_url`. Pod alerts also carry the analyzer's verdict for the pod (`confidence`, `evidence`,
`recommendation`), looked up when the alert is evaluated, so the page already says why and what to
try; the low-SM page carries the cause as its `bottleneck` annotation (not a label: a changing verdict
must not restart its `for:`), and the namespace's waste for that cause.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from gpulens.core import metrics as m
from gpulens.core import mixin
from gpulens.core.bottlenecks import DATA_STARVATION, HOST_STALL, MEMORY_FRAGMENTATION, RECOMMENDATIONS
from gpulens.core.config import duration_seconds, prometheus_duration
from gpulens.core.mixin import MixinConfig, metric

#: XIDs the application causes, as the texts list them (core/metrics.py has the catalogue).
APPLICATION_XIDS = ", ".join(str(code) for code in m.APPLICATION_XIDS)


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_seconds: float
    severity: str  # "critical" pages a human, "warning" opens a ticket
    component: str  # "pod" | "gpu" | "exporter" | "analyzer"
    summary: str
    description: str
    runbook: str  # Markdown: what it means, how to confirm, what to do
    dashboard_url: str
    #: Labels beyond severity and component, fixed for the alert (a ticket's bottleneck class).
    labels: dict[str, str] = field(default_factory=dict)
    #: Annotations beyond summary, description and the links (the analyzer's verdict, the waste).
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def for_(self) -> str:
        """The `for:` duration, written as Prometheus writes durations (5m, 1h30m)."""
        return prometheus_duration(self.for_seconds)

    def anchor(self) -> str:
        return self.name.lower()


POD = "{{ $labels.namespace }}/{{ $labels.pod }}"
GPU = "GPU {{ $labels.gpu }} ({{ $labels.uuid }}) on {{ $labels.node }}"
#: The low-SM page's cause label when the analyzer has no verdict for the pod (it is down, or new).
NO_VERDICT = "unknown"


def _written(duration: str) -> str:
    """A thresholds-file duration as Prometheus writes durations ("1800s" -> "30m")."""
    return prometheus_duration(duration_seconds(duration))


def _query_first(selector: str, args: str, value: str, missing: str) -> str:
    """Alert template: `value` (a template pipeline on the first result) of a PromQL query built with
    printf from `selector` and `args`, or `missing` when the query returns nothing."""
    return (
        f"{{{{ with printf `{selector}` {args} | query }}}}{{{{ . | first | {value} }}}}"
        f"{{{{ else }}}}{missing}{{{{ end }}}}"
    )


def _verdict(c: MixinConfig, label: str, missing: str) -> str:
    """Alert template: one label of the analyzer's current verdict for the alert's pod."""
    selector = f"{metric('pod_bottleneck_info')}{{{c.analyzer},namespace=%q,pod=%q}}"
    return _query_first(selector, "$labels.namespace $labels.pod", f'label "{label}"', missing)


#: A ratio as a percentage to a tenth at most ("17.4%", "7.6%", "80%"): humanizePercentage alone writes four
#: significant digits, "17.44%" beside "7.607%".
PERCENT = 'humanizePercentage | reReplaceAll `(\\.\\d)\\d+%` "${1}%"'


def _confidence(c: MixinConfig) -> str:
    selector = f"{metric('pod_bottleneck_confidence')}{{{c.analyzer},namespace=%q,pod=%q}}"
    return _query_first(selector, "$labels.namespace $labels.pod", f"value | {PERCENT}", "unknown")


def _verdict_sentence(c: MixinConfig) -> str:
    """How pod alerts' descriptions end: what the analyzer says and what to try."""
    return (
        f"The analyzer's verdict: {_verdict(c, 'bottleneck', 'none yet')} ({_confidence(c)} confidence). "
        f"Try: {_verdict(c, 'recommendation', 'see the runbook')}"
    )


def verdict_annotations(c: MixinConfig) -> dict[str, str]:
    """The analyzer's verdict for the alert's pod, as annotations."""
    return {
        "confidence": _confidence(c),
        "evidence": _verdict(c, "evidence", "none: the analyzer has no verdict for this pod"),
        "recommendation": _verdict(
            c, "recommendation", "Check the analyzer: it has no verdict for this pod (GpulensAnalyzerDown?)."
        ),
    }


def waste_annotation(c: MixinConfig, cause: str = "$labels.bottleneck") -> str:
    """What the alert's namespace loses to a cause (`cause`: a template value, the alert's bottleneck label
    by default) a day, in GPU-hours and money, from the analyzer's waste counters over the alert rate window
    (the analyzer adds to them every cycle, so a short window is smooth and needs no hour of history): the
    same for every pod of the namespace with that cause."""
    window = c.thresholds.alert_rate_window
    labels = f"{c.analyzer},namespace=%q,bottleneck=%q"
    args = f"$labels.namespace {cause}"
    hours = f"sum(rate({metric('wasted_gpu_seconds_total')}{{{labels}}}[{window}])) * 86400 / 3600"
    money = f"sum(rate({metric('wasted_cost_dollars_total')}{{{labels}}}[{window}])) * 86400"
    return (
        f"{{{{ with printf `{hours}` {args} | query }}}}"
        f"Pods of {{{{ $labels.namespace }}}} whose cause is {{{{ {cause} }}}} waste "
        '{{ . | first | value | printf "%.1f" }} GPU-hours'
        f"{{{{ with printf `{money}` {args} | query }}}}"
        ' (${{ . | first | value | printf "%.2f" }})'
        f"{{{{ end }}}} a day (the analyzer's count over the last {window})."
        f"{{{{ else }}}}The analyzer has counted no waste for {{{{ $labels.namespace }}}} and {{{{ {cause} }}}} yet."
        "{{ end }}"
    )


def alerts(c: MixinConfig) -> list[Alert]:
    """Every alert, in the order of the rule file and the runbooks, with the deployment's severities."""
    out = [
        *_pod_alerts(c),
        *_gpu_alerts(c),
        *_cluster_alerts(c),
        *_change_alerts(c),
        *_budget_alerts(c),
        *_exporter_alerts(c),
        *_analyzer_alerts(c),
    ]
    return [dataclasses.replace(a, severity=c.severities.get(a.name, a.severity)) for a in out]


def _pod_link(c: MixinConfig, panel: mixin.Panel) -> str:
    return mixin.dashboard_link(c, panel, namespace="namespace", pod="pod")


def _gpu_link(c: MixinConfig, panel: mixin.Panel) -> str:
    return mixin.dashboard_link(c, panel, node="node", gpu="gpu")


def _node_link(c: MixinConfig, panel: mixin.Panel) -> str:
    return mixin.dashboard_link(c, panel, node="node")


def _verdict_alert(c: MixinConfig, name: str, bottleneck: str, summary: str, runbook: str) -> Alert:
    """A ticket when the analyzer has held `bottleneck` for a pod long enough."""
    t = c.thresholds
    held = _written(t.alert_verdict_for)
    return Alert(
        name,
        f'max by (node, namespace, pod) ({metric("pod_bottleneck")}{{{c.analyzer},bottleneck="{bottleneck}"}}) == 1',
        duration_seconds(t.alert_verdict_for),
        "warning",
        "pod",
        summary,
        f"The analyzer has classified {POD} on {{{{ $labels.node }}}} as {bottleneck} for {held}. "
        + _verdict_sentence(c),
        runbook,
        _pod_link(c, mixin.POD_MEMORY_PANEL if bottleneck == MEMORY_FRAGMENTATION else mixin.POD_VERDICT_PANEL),
        {"bottleneck": bottleneck},
        verdict_annotations(c),
    )


def low_activity_page(c: MixinConfig) -> str:
    """The page's expression: pods whose mean activity is under alert_low_sm, on activity alone. The
    analyzer's verdict is in the annotations, read when the alert is evaluated: as a label it would be part
    of the alert's identity, and a verdict that changes between two causes would restart the `for:` each
    time, so that the pod is never paged."""
    return f"{mixin.POD_ACTIVITY_AVG} < {c.thresholds.alert_low_sm}"


def _cause_waste(c: MixinConfig) -> str:
    """What the alert pod's current cause costs its namespace a day (waste_annotation for the class the
    analyzer now gives the pod), or why it cannot be said."""
    selector = f"{metric('pod_bottleneck_info')}{{{c.analyzer},namespace=%q,pod=%q}}"
    cause = f"{{{{ with printf `{selector}` $labels.namespace $labels.pod | query }}}}"
    return (
        cause
        + '{{ $cause := . | first | label "bottleneck" }}'
        + waste_annotation(c, "$cause")
        + "{{ else }}The analyzer has no verdict for this pod: its cause's waste is unknown.{{ end }}"
    )


def _pod_alerts(c: MixinConfig) -> list[Alert]:
    """Pods whose GPUs are underused: the page on low SM activity, and a ticket per verdict (muted by
    Alertmanager while the page for the same pod fires: one notification per cause)."""
    t = c.thresholds
    w = t.alert_rate_window
    pct = f"{t.alert_low_sm:.0%}"
    low_for = _written(t.alert_low_sm_for)
    idle_for = _written(t.alert_idle_for)
    held = _written(t.alert_verdict_for)
    return [
        Alert(
            "GpulensPodLowSmActivity",
            low_activity_page(c),
            duration_seconds(t.alert_low_sm_for),
            "critical",
            "pod",
            f"{POD} keeps its GPUs' SMs busy only {{{{ $value | {PERCENT} }}}} of the time: "
            + _verdict(c, "bottleneck", NO_VERDICT),
            f"SM activity of {POD} on {{{{ $labels.node }}}} has stayed under {pct} for {low_for}. "
            + _verdict_sentence(c),
            f"""The pod holds GPUs but uses a small part of them: averaged over its GPUs and {w}, SMs held a
warp less than {pct} of the time, for {low_for}. NVIDIA: SM activity >= 0.8 is necessary for
effective use, < 0.5 likely ineffective.

The page fires on SM activity alone: the analyzer's verdict (its class in the `bottleneck` annotation,
`{NO_VERDICT}` without one, with its confidence, evidence and fix) is read each time the alert is evaluated,
so a verdict that changes while the pod stays underused never postpones the page. Alertmanager groups
these pages by namespace, so a hundred replicas make one notification. The `waste` annotation says what
the pod's current cause costs the namespace a day.

1. Read the `bottleneck` label and the `recommendation` annotation: the analyzer's verdict for this pod
   (`gpulens_pod_bottleneck_info`), with the `evidence` and thresholds it crossed.
2. Open the pod dashboard (the alert's `dashboard_url`): the state timeline shows since when the class
   holds; SM, tensor and DRAM activity, memory, PCIe/NVLink and CPU panels show the signature.
3. Apply the recommendation (every class's fix is listed at the end of this page).
   `idle` or `wrong_gpu_type`: give the GPU back or move the pod to a smaller GPU or a MIG slice.
   `overprovisioned_serving`: the replica serves requests in bursts; run fewer replicas or share the GPU
   (MIG, time-slicing), but do not simply delete it: that would take the service down.
   The `workload` evidence says what the pod is (notebook, serving with its engine, job; from
   kube-state-metrics or your --analysis.config rules, docs/workloads.md): a notebook is never called
   serving (its kernel holds the GPU between cells: cull it), a replica whose engine (vLLM, TGI, Triton,
   SGLang) finished requests is never called idle, and the `engine` evidence gives its requests, queue and KV
   cache over the analyzer's history. `unknown` says which series would settle it.
4. If the cause is `{NO_VERDICT}`, the analyzer is down or has not seen the pod: see GpulensAnalyzerDown.
   When the analyzer changes its verdict, the page stays and its annotations follow the new cause.""",
            _pod_link(c, mixin.POD_SM_PANEL),
            annotations={
                "bottleneck": _verdict(c, "bottleneck", NO_VERDICT),
                **verdict_annotations(c),
                "waste": _cause_waste(c),
            },
        ),
        Alert(
            "GpulensPodGpuIdle",
            f"{mixin.POD_ACTIVITY_MAX} < {t.idle_activity}",
            duration_seconds(t.alert_idle_for),
            "warning",
            "pod",
            f"{POD} holds GPUs that have done no work for {idle_for}",
            f"Every GPU of {POD} on {{{{ $labels.node }}}} has been idle (activity under {t.idle_activity}) for "
            f"{idle_for}. " + _verdict_sentence(c),
            f"""Every GPU allocated to the pod has had activity under {t.idle_activity} for {idle_for}:
an idle notebook, a job waiting on something, or a process that finished but whose pod was never deleted.
(Princeton Job Defense Shield warns at 60 minutes.) Muted while GpulensPodLowSmActivity pages for the pod.

1. Check with the pod's owner whether it still needs the GPUs; `kubectl describe pod` shows its age. The
   `workload` evidence of the verdict says what the pod is (notebook, serving, job) and what said so.
2. Stop it or scale it to zero; for notebooks, enable an idle culler (JupyterHub's jupyterhub-idle-culler,
   Kubeflow's culling of idle notebooks). A serving replica whose engine finished no request in the
   analyzer's history (its `engine` evidence) loaded a model and never served: scale it to zero.
3. If the memory stays held after the pod is gone, see GpulensGpuMemoryHeldWithoutPod.""",
            _pod_link(c, mixin.POD_BUSY_PANEL),
            annotations=verdict_annotations(c),
        ),
        _verdict_alert(
            c,
            "GpulensPodDataStarvation",
            DATA_STARVATION,
            f"{POD} waits on its input pipeline: the GPU stalls between batches",
            f"""The analyzer sees the data-starvation signature for {held}: activity oscillates
between bursts near the model's level and dips to almost nothing every step (more than
{t.starvation_tail:.0%} of samples above {t.starvation_high} and below {t.starvation_low}; SageMaker Debugger's
LowGPUUtilization rule), often with the pod's CPU at its limit. Muted while GpulensPodLowSmActivity pages
for the pod: the page carries the same verdict.

1. Open the pod dashboard: SM activity saw-tooths, and the CPU panel shows whether the pod sits at its limit.
2. {RECOMMENDATIONS[DATA_STARVATION]}""",
        ),
        _verdict_alert(
            c,
            "GpulensPodMemoryFragmentation",
            MEMORY_FRAGMENTATION,
            f"{POD} fills its GPU memory and restarts: out-of-memory risk",
            f"""The analyzer sees GPU memory near full (over {t.memory_full:.0%} of capacity) and growing, with drops
where the process died and restarted, for {held}. Pre-allocators (vLLM, JAX, TensorRT-LLM)
hold memory flat and are exempt. Muted while GpulensPodLowSmActivity pages for the pod.

1. `kubectl describe pod`: restarts with CUDA out-of-memory in the previous container's log confirm it.
2. {RECOMMENDATIONS[MEMORY_FRAGMENTATION]}""",
        ),
        _verdict_alert(
            c,
            "GpulensPodHostStall",
            HOST_STALL,
            f"{POD} waits on its host or a peer: its GPUs stall while utilization looks busy",
            f"""The analyzer sees the pod's GPUs waiting for {held}: busy at under {t.waiting_power_share:.0%} of
their power limit (a kernel spinning in a collective reports 100% utilization) or without a kernel while
their peers wait, on at least {t.stall_share:.0%} of samples. Utilization alone says these GPUs are busy, so
the low-SM page may never fire: this ticket is how the stall reaches you. The verdict's evidence names the
GPU the others wait for and the stalls' shape.

1. Read the verdict's evidence (`stalling_gpu`, `stalls`, `straggler_gpu`, `waiting_fraction`) on the pod
   dashboard; its recommendation is the fix for the cause it found.
2. {RECOMMENDATIONS[HOST_STALL]}""",
        ),
        _application_xid_alert(c),
    ]


def _xid_selector(c: MixinConfig, match: str) -> str:
    return f"{metric('gpu_xid_errors_total')}{{{c.exporter},{mixin.xid_matcher(match)}}}"


def _application_xid_alert(c: MixinConfig) -> Alert:
    """XIDs the application causes, as a ticket to the namespace of the pod on the GPU. A GPU several
    pods share (time-slicing) tickets each of them; a GPU no pod holds keeps its node and GPU labels."""
    w = c.thresholds.alert_rate_window
    xids = _xid_selector(c, "=~")
    recent = mixin.new_errors(xids, w)
    pods = f"max by (node, namespace, pod, gpu, uuid) ({metric('gpu_pod_info')}{{{c.exporter}}})"
    codes_query = mixin.new_errors(xids.replace("}", ",uuid=%[1]q}"), w)
    codes = (
        f"{{{{ range $i, $x := printf `{codes_query}` $labels.uuid | query }}}}"
        "{{ if $i }}, {{ end }}{{ $x.Labels.xid }}{{ end }}"
    )
    holder = "{{ with $labels.pod }}{{ $labels.namespace }}/{{ . }}{{ else }}no pod{{ end }}"
    return Alert(
        "GpulensPodApplicationXid",
        f"{pods} * on (uuid) group_left () (sum by (uuid) {recent})"
        f" or (sum by (node, gpu, uuid) {recent} unless on (uuid) {metric('gpu_pod_info')}{{{c.exporter}}})",
        0,
        "warning",
        "pod",
        f"{holder} made {GPU} report application XIDs",
        f'The driver reported XID {codes} ({{{{ $value | printf "%.0f" }}}} in the last {w}) on {GPU}, held by '
        f"{holder}: the program on it faulted. The GPU itself is fine.",
        f"""XIDs {APPLICATION_XIDS} are the application's (NVIDIA's XID catalogue): 13 an exception in a
kernel (an illegal address, an assert), 31 a GPU memory page fault, 43 the GPU stopped the faulting program,
45 the process was killed and its work cleaned up. The node is healthy; the ticket goes to the namespace.

1. The pod's log (and `dmesg | grep -i xid` on the node, which names the PID) shows the failing process.
2. Run the program with `compute-sanitizer` or `CUDA_LAUNCH_BLOCKING=1` to find the faulting kernel;
   a recent change of framework, driver or CUDA version is the usual cause.
3. If the same code runs on other GPUs and only this one reports XIDs, treat it as hardware: see
   GpulensGpuXidFault.""",
        _gpu_link(c, mixin.NODE_XID_PANEL),
    )


def _gpu_alerts(c: MixinConfig) -> list[Alert]:
    """GPUs in trouble whatever runs on them: memory held by no pod, throttling, XIDs, NVLinks, lost."""
    t = c.thresholds
    w = t.alert_rate_window
    nvlink_errors = metric("gpu_nvlink_errors_total")
    return [
        Alert(
            "GpulensGpuMemoryHeldWithoutPod",
            f"({metric('gpu_memory_used_bytes')}{{{c.exporter}}} > {t.alert_memory_held_bytes:.0f})"
            f" and on (uuid) ({metric('gpu_pods')}{{{c.exporter}}} == 0)",
            duration_seconds(t.alert_memory_held_for),
            "warning",
            "gpu",
            f"{GPU} holds {{{{ $value | humanize1024 }}}}B of memory but no pod has it",
            f"{GPU} has had {{{{ $value | humanize1024 }}}}B of memory in use for "
            f"{_written(t.alert_memory_held_for)} while "
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
            _gpu_link(c, mixin.NODE_MEMORY_PANEL),
        ),
        Alert(
            "GpulensGpuThrottled",
            f'rate({metric("gpu_clock_event_seconds_total")}{{{c.exporter},reason=~"{c.throttle_reasons}"}}[{w}])'
            f" > {t.alert_throttled_fraction}",
            t.throttle_seconds,
            "warning",
            "gpu",
            f"{GPU} is slowed down by {{{{ $labels.reason }}}}",
            f"{GPU} has been held back by {{{{ $labels.reason }}}} {{{{ $value | {PERCENT} }}}} of the "
            f"time. Every pod on it runs slower than it should.",
            f"""The GPU lowers its clocks because of {c.throttle_reasons.replace("|", ", ")} for more than
{t.alert_throttled_fraction:.0%} of the time, for {prometheus_duration(t.throttle_seconds)} (canonical
hardware-observer, nvidia_gpu_exporter). The software power cap (`sw_power_cap`) is normal boost behaviour and
never alerts.

1. Node dashboard: temperature, power against limit and SM clock against max show which one.
2. Thermal (`sw_thermal`, `hw_thermal`): check fans, airflow, the data-centre inlet temperature.
3. `hw_slowdown`, `hw_power_brake`: the power supply or the board signals a fault; ask the hardware team.
4. Cordon the node until it is fixed if the pods on it are latency-sensitive.""",
            _gpu_link(c, mixin.NODE_CLOCK_EVENTS_PANEL),
        ),
        Alert(
            "GpulensGpuXidFault",
            mixin.new_errors(_xid_selector(c, "!~"), w),
            60,
            "critical",
            "gpu",
            f"{GPU} reported XID {{{{ $labels.xid }}}}: a hardware or driver fault",
            f"The driver reported XID {{{{ $labels.xid }}}} on {GPU} within the last {w}. It is not one an "
            f"application causes: the GPU, its memory, its links or the driver are at fault.",
            f"""The NVIDIA driver logged an XID that points at the GPU, its memory, NVLink or the driver (every XID but
the application's {APPLICATION_XIDS}, which ticket the namespace as GpulensPodApplicationXid). It fires
after one minute, so a fault is on the node owner's screen before the next job lands on the GPU.

1. `dmesg | grep -i xid` on the node; NVIDIA's XID catalogue says what the code means.
2. 48 (double-bit ECC), 94/95 (contained/uncontained ECC), 63/64 (row remapping event/failure): drain the node
   and reset the GPU (`nvidia-smi -r`); `nvidia-smi -q -d ROW_REMAPPER` shows pending remaps.
3. 74 (NVLink): see GpulensGpuNvlinkDegraded. 79 (fallen off the bus): see GpulensGpuLost.
   92 (high single-bit ECC rate), 119/120 (GSP): reset; update the driver if it recurs.
4. If the same GPU reports again after a reset, file a hardware ticket with the vendor.""",
            _gpu_link(c, mixin.NODE_XID_PANEL),
        ),
        Alert(
            "GpulensGpuNvlinkDegraded",
            f"{metric('gpu_nvlink_links_down')}{{{c.exporter}}} > 0"
            f' or sum without (type) (rate({nvlink_errors}{{{c.exporter},type=~"crc_flit|crc_data"}}[{w}]))'
            f" >= {t.nvlink_crc_errors_per_second:g}"
            f' or sum without (type) (increase({nvlink_errors}{{{c.exporter},type=~"replay|recovery"}}[{w}]))'
            f" > {t.nvlink_errors:g}",
            duration_seconds(t.alert_nvlink_for),
            "warning",
            "gpu",
            f"{GPU} has NVLinks down or failing",
            f"{GPU} has had NVLinks down, or NVLink errors above DCGM's limits, for {_written(t.alert_nvlink_for)}: "
            f"the peer "
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
            _gpu_link(c, mixin.NODE_NVLINK_PANEL),
        ),
        Alert(
            "GpulensGpuLost",
            f"{metric('gpu_up')}{{{c.exporter}}} == 0",
            60,
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
            _gpu_link(c, mixin.NODE_UP_PANEL),
        ),
    ]


def _cluster_alerts(c: MixinConfig) -> list[Alert]:
    """The cluster's share (the analyzer's gpulens_cluster_* series, docs/cluster.md): a pod that waits for
    GPUs a pool has free in total but spread over nodes."""
    t = c.thresholds
    waited = duration_seconds(t.alert_waiting_for)
    pool = "pool {{ $labels.pool }} ({{ $labels.gpu_model }})"
    args = "$labels.pool $labels.gpu_model"

    def now(name: str) -> str:
        return _query_first(f"{metric(name)}{{{c.analyzer},pool=%q,gpu_model=%q}}", args, "value", "unknown")

    return [
        Alert(
            "GpulensGpuPodWaitingWhileGpusFree",
            f"max by (pool, gpu_model) ({metric('cluster_waiting_longest_seconds')}{{{c.analyzer},"
            f'reason="fragmented"}}) > {waited:.0f}',
            0,
            "warning",
            "cluster",
            f"A pod has waited {{{{ $value | humanizeDuration }}}} for GPUs of {pool} while enough are free, "
            "spread over nodes",
            f"A GPU pod has waited {{{{ $value | humanizeDuration }}}} for {pool}: {now('cluster_stranded_gpus')} "
            f"GPUs are free there in total, but no node has as many free as it asked (the most on one node: "
            f"{now('cluster_largest_free_gpus')}). Moving a few pods frees a node for it; packing GPU pods onto "
            "the fullest nodes keeps it from happening again.",
            f"""A pod asking for GPUs has waited more than {_written(t.alert_waiting_for)} for a node, while its pool
has enough GPUs free in total: they are spread over nodes, none with as many free as the pod asked. The GPUs
are paid for and idle, and the job waits (the analyzer's `gpulens_cluster_stranded_gpus`).

1. `gpulens report --prometheus URL --since 1d` names the pod, how long it waited, each node's free GPUs at
   its worst moment, and the pods to move so that one node is free for it (the plan's `consolidate` action;
   `bin_pack` where it recurs). Move them (delete the pods of a Deployment; a Job's pod restarts from its
   checkpoint), or wait for pods to end.
2. Keep it from recurring: score nodes with kube-scheduler's `NodeResourcesFit` `MostAllocated` strategy for
   `nvidia.com/gpu` (docs/cluster.md), so GPU pods fill a node before starting another.
3. If the pool's nodes are cordoned or their GPUs unhealthy, the free GPUs are not free: check
   `kubectl describe node`.""",
            mixin.dashboard_link(c, mixin.FLEET_CLUSTER_PANEL),
        ),
    ]


def _change_alerts(c: MixinConfig) -> list[Alert]:
    """The workloads' changes (the analyzer's gpulens_change_* series, docs/changes.md): a change that hurt what
    the workload serves, routed to its team (alerts/routing.py: owners.teams) or its namespace's owner."""
    saving = _query_first(
        f"{metric('change_daily_saving_dollars')}{{{c.analyzer},owner=%q,what=%q}}",
        "$labels.owner $labels.what",
        "value | printf `%.2f`",
        "unknown",
    )
    return [
        Alert(
            "GpulensWorkloadChangeRegressed",
            f'{metric("change_outcome")}{{{c.analyzer},outcome="regressed"}} == 1',
            duration_seconds(c.thresholds.alert_change_regressed_for),
            "warning",
            "workload",
            "{{ $labels.owner }}'s latest change ({{ $labels.what }}) regressed",
            "gpulens compared {{ $labels.owner }}{{ if $labels.team }} (team {{ $labels.team }}){{ end }} over equal "
            "windows before and after its "
            "latest {{ $labels.what }} change: what it serves got worse (its queue or latency rose past their "
            "spread before the change), or its user came back within the cull timeout of a cull. The change saves "
            f"${saving} a day. Why, and the replicas that would have held the load: the analyzer's "
            "/api/v1/changes, or gpulens report over the span.",
            """A change the workload went through (replicas cut, an autoscaler's bound, another GPU or a MIG slice,
a notebook culled) made what it serves worse, judged over equal windows before and after it (docs/changes.md):

- serving: the requests waiting, or the p95 time to first token or request latency, rose to a median past
  the p95 they held before the change;
- a notebook: its user came back within the cull timeout (`plan_cull_seconds`): a cull shorter than their
  pauses.

1. Read why: `curl ANALYZER/api/v1/changes` (or `gpulens report --prometheus URL --since 2d`, its "What
   changed" section): the figures before and after, and for a cut too far the replicas that would have held
   the load after (as many as the load needs at the before's load per replica, which held).
2. Serving: scale to those replicas, or let an autoscaler on queue depth or request rate set them (KEDA,
   HPA) with that as its minimum; the saving shrinks by what the extra replicas cost.
3. A notebook: set the culler's timeout past the user's pauses, or move the kernel off the GPU between uses.""",
            mixin.dashboard_link(c, mixin.FLEET_CHANGES_PANEL),
        ),
    ]


def _wasters(c: MixinConfig, scope: str) -> str:
    """Alert template: the scope's three workloads that wasted the most money over the last day (the analyzer's
    gpulens_workload_wasted_cost_dollars_total), each with its class and the plan's fix for it where it has one
    (gpulens_plan_monthly_saving_dollars, whose owner is namespace/Kind/name: the waste's labels joined so)."""
    waste = (
        f"sort_desc(topk(3, label_join(sum by (namespace, owner_kind, owner, bottleneck) (increase("
        f"{metric('workload_wasted_cost_dollars_total')}{{{c.analyzer},{scope}=%q}}[1d])), "
        '"workload", "/", "namespace", "owner_kind", "owner")))'
    )
    fix = f"{metric('plan_monthly_saving_dollars')}{{{c.analyzer},owner=%q}}"
    return (
        f"{{{{ range printf `{waste}` $labels.{scope} | query }}}}"
        "{{ .Labels.workload }} wasted ${{ .Value | printf `%.2f` }} in the last day ({{ .Labels.bottleneck }}); "
        f"{{{{ with printf `{fix}` .Labels.workload | query }}}}"
        "fix: {{ with first . }}{{ .Labels.action }}, saving ${{ .Value | printf `%.0f` }} a month{{ end }}"
        "{{ else }}no fix planned yet{{ end }}. {{ else }}none wasted money in the last day.{{ end }}"
    )


def _budget_alerts(c: MixinConfig) -> list[Alert]:
    """Each team's and namespace's GPU spend against its budget (an alert settings file's `budgets`), by the SRE
    workbook's multiwindow, multi-burn-rate alerts: a fast burn pages, a slow one tickets, routed to the team (or
    the namespace's owner), with the three that wasted the most and their fixes. Silent where no budget is set."""
    t = c.thresholds
    fast, fast_6h = f"{t.budget_burn_1h_page_factor:g}", f"{t.budget_burn_6h_page_factor:g}"
    slow = f"{t.budget_burn_3d_ticket_factor:g}"
    out = []
    for scope in mixin.BUDGET_SCOPES:
        burn = {window: mixin.burn_rule(scope, window) for window in mixin.BURN_WINDOWS}
        spend = _query_first(
            f"{mixin.spend_rule(scope, '1h')}{{{scope}=%q}} * 86400", f"$labels.{scope}", "value | printf `%.2f`", "?"
        )
        budget = _query_first(
            f"{mixin.budget_rule(scope)}{{{scope}=%q}} * {mixin.MONTH_SECONDS}",
            f"$labels.{scope}",
            "value | printf `%.0f`",
            "?",
        )
        who = f"{scope.capitalize()} {{{{ $labels.{scope} }}}}"
        name = f"Gpulens{scope.capitalize()}Budget"
        annotations = {"wasters": _wasters(c, scope)}
        runbook = f"""The {scope}'s GPU spend (the analyzer's `gpulens_workload_allocated_cost_dollars_total`: the GPUs
its pods held, at the prices in use) is running past its budget's pace: its monthly budget over 30 days
(docs/showback.md, "Budgets"). A burn rate of 1 spends the budget exactly in its month; the page fires at
{fast} over an hour (2% of the budget in an hour) or {fast_6h} over 6 hours, the ticket at {slow} over 3 days,
each confirmed by a shorter window so that it ends soon after the spend does (the Google SRE workbook's
multiwindow, multi-burn-rate alerts).

1. Read `wasters`: the {scope}'s three workloads that wasted the most in the last day, and the plan's fix for each.
2. What it holds and what it costs: `gpulens report --prometheus URL --since 7d` ("What the GPUs cost"), or the
   fleet dashboard's spend panel.
3. Spend that is work (a training run the {scope} planned) is a budget to raise in the settings; spend that is
   waste is the fix's."""
        out += [
            Alert(
                f"{name}BurningFast",
                f"({burn['1h']} > {fast} and {burn['5m']} > {fast})"
                f" or ({burn['6h']} > {fast_6h} and {burn['30m']} > {fast_6h})",
                0,
                "critical",
                "workload",
                f"{who} is spending its GPU budget {{{{ $value | printf `%.1f` }}}}x as fast as its month allows",
                f"{who} spends ${spend} a day on GPUs against a budget of ${budget} a month: at {{{{ $value | "
                "printf `%.1f` }} times the pace that spends it in 30 days, the month's budget is gone within "
                "days. What wasted the most: see `wasters`.",
                runbook,
                mixin.dashboard_link(c, mixin.FLEET_SPEND_PANEL),
                annotations=annotations,
            ),
            Alert(
                f"{name}BurningSlowly",
                f"{burn['3d']} > {slow} and {burn['6h']} > {slow}",
                0,
                "warning",
                "workload",
                f"{who} will spend its GPU budget before the month ends",
                f"{who} has spent {{{{ $value | printf `%.2f` }}}} times its budget's pace over 3 days: ${spend} a "
                f"day on GPUs against ${budget} a month. What wasted the most: see `wasters`.",
                runbook,
                mixin.dashboard_link(c, mixin.FLEET_SPEND_PANEL),
                annotations=annotations,
            ),
        ]
    return out


def _exporter_alerts(c: MixinConfig) -> list[Alert]:
    """The exporters themselves: down, absent, failing a collector, stale. Without them every GPU alert is blind."""
    t = c.thresholds
    down_for = _written(t.alert_target_down_for)
    return [
        Alert(
            "GpulensExporterDown",
            f"up{{{c.exporter}}} == 0",
            duration_seconds(t.alert_target_down_for),
            "critical",
            "exporter",
            "The gpulens exporter on {{ $labels.node }} is down",
            f"Prometheus has failed to scrape {{{{ $labels.instance }}}} for {down_for}. Every GPU "
            f"alert for {{{{ $labels.node }}}} is blind meanwhile (pod alerts there are inhibited).",
            """Prometheus cannot scrape the exporter. While it is down, no GPU or pod alert on the node can fire.

1. `kubectl -n gpulens get pods -o wide` for the DaemonSet pod on the node; `kubectl logs` it: the exporter
   names the problem (NVML missing, the kubelet socket absent, a bad flag) and how to fix it.
2. From Prometheus' Targets page: the scrape error (connection refused, timeout, TLS).
3. `curl http://<node>:9848/healthz` answers 503 with the reason when sampling is stale.""",
            _node_link(c, mixin.NODE_EXPORTER_UP_PANEL),
        ),
        Alert(
            "GpulensExporterAbsent",
            f"absent(up{{{c.exporter}}})",
            duration_seconds(t.alert_target_down_for),
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
            mixin.dashboard_link(c, mixin.FLEET_DASHBOARD),
        ),
        Alert(
            "GpulensExporterCollectorFailing",
            f"{metric('exporter_collector_success')}{{{c.exporter}}} == 0",
            duration_seconds(t.alert_target_down_for),
            "warning",
            "exporter",
            "The {{ $labels.collector }} collector of the exporter on {{ $labels.node }} is failing",
            f"gpulens' {{{{ $labels.collector }}}} collector on {{{{ $labels.node }}}} has failed for "
            f"{down_for}; its series are missing or stale. The exporter's log names the cause.",
            """One of the exporter's inputs fails: `nvml` (the driver), `kubelet` (pod attribution: the pod-resources
socket), or `dcgm` (the node's dcgm-exporter). The others keep working.

1. `kubectl logs` the exporter pod: it logs the failure once with the fix (socket path, URL, timeout).
2. `kubelet`: is `/var/lib/kubelet/pod-resources` mounted? `dcgm`: does `--dcgm.url` answer?""",
            _node_link(c, mixin.NODE_COLLECTORS_PANEL),
        ),
        Alert(
            "GpulensExporterStale",
            f"{metric('exporter_sample_age_seconds')}{{{c.exporter}}} > 3 * "
            f"{metric('exporter_sample_interval_seconds')}{{{c.exporter}}}",
            duration_seconds(t.alert_target_down_for),
            "warning",
            "exporter",
            "The exporter on {{ $labels.node }} serves old samples",
            "The exporter on {{ $labels.node }} answers scrapes but its last sample is "
            "{{ $value | humanizeDuration }} old: NVML calls hang.",
            """The exporter answers but its sampler has not completed for more than three intervals: an NVML call
hangs (a GPU in a bad state, the driver being upgraded). `/healthz` answers 503 meanwhile.

1. `nvidia-smi` on the node: does it hang too? Then the driver or a GPU is stuck: see GpulensGpuLost.
2. Restart the exporter pod once the driver answers again.""",
            _node_link(c, mixin.NODE_SAMPLE_AGE_PANEL),
        ),
    ]


def _analyzer_alerts(c: MixinConfig) -> list[Alert]:
    """The analyzer: without it, pod alerts come without a verdict."""
    t = c.thresholds
    down_for = _written(t.alert_target_down_for)
    return [
        Alert(
            "GpulensAnalyzerDown",
            f"up{{{c.analyzer}}} == 0 or absent(up{{{c.analyzer}}})",
            duration_seconds(t.alert_target_down_for),
            "warning",
            "analyzer",
            "The gpulens analyzer is down or not scraped",
            f"Prometheus has not scraped the analyzer (job {c.analyzer_job}) for {down_for}: pod "
            f"alerts come without a verdict and the waste counters stop.",
            """The analyzer is not scraped. GPU alerts keep working; pod alerts lose their `bottleneck` and
`recommendation` annotations and the dashboards' verdict panels go empty.

1. `kubectl -n gpulens get deploy gpulens-analyzer`; `kubectl logs` it.
2. Check its ServiceMonitor and that the Service selects the pod.""",
            mixin.dashboard_link(c, mixin.NODE_ANALYZER_PANEL),
        ),
        Alert(
            "GpulensAnalyzerStale",
            f"time() - {metric('analyzer_last_success_timestamp_seconds')}{{{c.analyzer}}}"
            f" > {duration_seconds(t.alert_target_down_for):.0f}",
            0,
            "warning",
            "analyzer",
            "The gpulens analyzer's verdicts are {{ $value | humanizeDuration }} old",
            "The analyzer runs but has not completed an analysis for {{ $value | humanizeDuration }}: its input "
            "(Prometheus or the exporters) does not answer. It keeps serving the last verdicts, marked stale.",
            """The analyzer cannot read its input. It keeps the last verdicts (`gpulens_analyzer_verdict_age_seconds`
grows) and never replaces them with guesses.

1. `kubectl logs` the analyzer: it names the input and the error (connection refused, timeout, bad query).
2. Check that `--input.prometheus` points to a Prometheus that answers.""",
            mixin.dashboard_link(c, mixin.NODE_ANALYZER_PANEL),
        ),
    ]


def rule_groups(c: MixinConfig) -> dict:
    """The rule file: recording rules first, then the alerts."""
    rules = []
    for a in alerts(c):
        rule: dict[str, object] = {"alert": a.name, "expr": a.expr}
        if a.for_seconds:
            rule["for"] = a.for_
        rule["labels"] = {"severity": a.severity, "component": a.component, **a.labels}
        rule["annotations"] = {
            "summary": a.summary,
            "description": a.description,
            "runbook_url": f"{c.runbook_url}#{a.anchor()}",
            "dashboard_url": a.dashboard_url,
            **a.annotations,
        }
        rules.append(rule)
    return {
        "groups": [
            {"name": "gpulens.recording", "rules": mixin.recording_rules(c)},
            {"name": "gpulens.budgets", "rules": mixin.budget_rules(c)},
            {"name": "gpulens.alerts", "rules": rules},
        ]
    }


def readable(template: str) -> str:
    """An alert template as a person reads it in a document: `{{ $labels.pod }}` -> `{pod}`, a value ->
    `{value}`, a conditional -> its first branch, a label read by a query -> `{the analyzer's <label>}`;
    Markdown table pipes escaped. (Not `<pod>`: Markdown renders that as an HTML tag, which shows nothing.)"""
    text = re.sub(
        r"\{\{ with printf .*? \| query \}\}\{\{ \. \| first \| label \"(\w+)\" \}\}\{\{ else \}\}.*?\{\{ end \}\}",
        r"{the analyzer's \1}",
        template,
    )
    text = re.sub(
        r"\{\{ with \$labels\.(\w+) \}\}(.*?)\{\{ else \}\}.*?\{\{ end \}\}",
        lambda m: m[2].replace("{{ . }}", f"{{{m[1]}}}"),
        text,
    )
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", r"{\1}", text)
    text = re.sub(r"\{\{ \$value.*? \}\}", "{value}", text)
    return text.replace("|", "\\|")


#: The section of docs/alerts.md that explains routing, severities and the settings file (the runbooks link to it).
ALERTS_ROUTING = "https://github.com/gpulens/gpulens/blob/main/docs/alerts.md#alerts-routing-and-settings"


def runbooks_markdown(c: MixinConfig) -> str:
    lines = [
        "# gpulens alert runbooks",
        "",
        "Generated by `gpulens alerts` from alerts/rules.py with the default thresholds "
        "(gpulens/core/thresholds.py); do not edit by hand. Who receives which alert, how alerts are grouped "
        f"and muted, and how to change severities and owners: [docs/alerts.md]({ALERTS_ROUTING}).",
        "",
        "| alert | severity | for | says |",
        "|---|---|---|---|",
    ]
    for a in alerts(c):
        lines.append(
            f"| [{a.name}](#{a.anchor()}) | {a.severity} | {a.for_ if a.for_seconds else 'at once'} "
            f"| {readable(a.summary)} |"
        )
    for a in alerts(c):
        lines += [
            "",
            f"## {a.name}",
            "",
            f"Severity: **{a.severity}**. Fires when `{a.expr}`" + (f" for {a.for_}." if a.for_seconds else "."),
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
