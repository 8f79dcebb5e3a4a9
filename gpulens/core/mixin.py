"""The one home of gpulens' PromQL: selectors, recording rules, and the names the dashboards and the
alert rules are generated from.

This is the kubernetes-mixin pattern: one config block (`MixinConfig`: job names, thresholds,
links) and one module of PromQL, so that a renamed metric or a new threshold reaches the Grafana
dashboards (dashboards/) and the Prometheus rules (alerts/) together. Every metric name goes
through `metric()`, which checks it against the exporter's metric table: a rename there fails the
generation here instead of leaving a dashboard silently empty.

Label conventions the queries rely on:
- Exporter series get `node` from the scrape (`gpulens demo`'s Prometheus config, the compose
  file and the ServiceMonitor all set it); the analyzer's series carry `node` themselves.
- Exporters are scraped with `honor_labels: true`, so the pod labels gpulens sets
  (`namespace`, `pod`, `container`) are not renamed to `exported_*` by the scrape.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from gpulens.core import dcgm, trace
from gpulens.core.config import ConfigError
from gpulens.core.metrics import APPLICATION_XIDS, BY_NAME, CLOCK_EVENT_REASONS, PREFIX
from gpulens.core.thresholds import Thresholds


def metric(name: str) -> str:
    """The full name of a gpulens metric (`metric("gpu_up")` -> `gpulens_gpu_up`), checked against
    the metric table so that generated PromQL can never name a series that does not exist."""
    full = PREFIX + name
    if full not in BY_NAME:
        raise KeyError(f"{full} is not in gpulens/core/metrics.py; rename it here too")
    return full


# --- what settings may hold -------------------------------------------------------------------------
#: The flag of each MixinConfig field a deployment sets (settings.env sets the same flags).
FLAGS = {
    "exporter_job": "--exporter.job",
    "analyzer_job": "--analyzer.job",
    "dcgm_job": "--dcgm.job",
    "cadvisor_job": "--cadvisor.job",
    "kube_state_metrics_job": "--kube-state-metrics.job",
    "grafana_url": "--grafana.url",
    "runbook_url": "--runbook.url",
}
#: Characters a setting written into generated text may not hold, and the text each would break: a job
#: name lands in PromQL strings, in the Go templates of alert annotations (inside printf formats, in raw
#: strings) and in links; a URL in annotations and links.
_BREAKS = {
    '"': "would end the PromQL string it is written in",
    "\\": "would escape the next character of the PromQL string it is written in",
    "`": "would end the raw string of an alert template's query",
    "%": "would be a verb of the printf that builds an alert template's query",
    "{": "would open a Go template action or a PromQL selector",
    "}": "would close a Go template action or a PromQL selector",
}
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_text(value: str, flag: str, what: str) -> None:
    """ConfigError naming `flag` when `value` is empty, over 256 characters, or holds a character that would
    break the PromQL, template or link it is written into (_BREAKS), or a control character."""
    if not value or len(value) > 256:
        raise ConfigError(f"{flag} {value[:80]!r}: give {what} of 1 to 256 characters")
    broken = next((f"{c!r}: it {why}" for c, why in _BREAKS.items() if c in value), None)
    if broken is None and _CONTROL.search(value):
        broken = "a control character: it would end the line it is written in"
    if broken:
        raise ConfigError(f"{flag} {value!r}: {what} may not hold {broken}")


#: The characters a URL setting may not hold: white space and control characters, quotes, angle brackets,
#: backticks, braces and backslashes (each would end or change the alert template, the link or the HTML it
#: is written into); percent-encode them.
_URL_FORBIDDEN = "\\x00-\\x20\"'<>`{}\\\\\\x7f"
#: An http(s) URL with a host, of at most 256 characters, holding none of _URL_FORBIDDEN: the whole of
#: what check_url accepts, in the syntax RE2 and Python read alike, so that the deployment's admission
#: policy (deploy/kubernetes/settings-policy.yaml) checks settings.env with the same rule.
URL_PATTERN = f"https?://[^/?#{_URL_FORBIDDEN}][^{_URL_FORBIDDEN}]{{0,247}}"


def check_url(value: str, flag: str) -> None:
    """ConfigError naming `flag` unless `value` matches URL_PATTERN: what is wrong, and the fix."""
    if re.fullmatch(URL_PATTERN, value):
        return
    if not re.match(f"https?://[^/?#{_URL_FORBIDDEN}]", value):
        raise ConfigError(f"{flag} {value[:80]!r}: give an http:// or https:// URL with a host")
    bad = next((c for c in value if re.fullmatch(f"[{_URL_FORBIDDEN}]", c)), None)
    if bad is None:
        raise ConfigError(f"{flag} {value[:80]!r}...: give a URL of at most 256 characters")
    why = f": it {_BREAKS[bad]}" if bad in _BREAKS else ""
    raise ConfigError(f"{flag} {value!r}: a URL may not hold {bad!r}{why}; percent-encode it")


def promql_string(value: str) -> str:
    """`value` as a PromQL string literal (PromQL reads Go's escapes, which JSON's are a subset of)."""
    return json.dumps(value, ensure_ascii=False)


def matchers(*given: str) -> str:
    """PromQL label matchers (or lists of them) as one list, the empty ones left out: a job's that may be
    "" (any job), a shard's, a selector's."""
    return ",".join(m for m in given if m)


#: The MixinConfig fields naming the jobs of the series gpulens reads (add_job_flags' flags): "" is any job.
JOBS_READ = ("exporter_job", "dcgm_job", "cadvisor_job", "kube_state_metrics_job")


def job_matcher(job: str) -> str:
    """The label matcher of a job's series; "" (none) for "", any job."""
    return f"job={promql_string(job)}" if job else ""


@dataclass(frozen=True)
class MixinConfig:
    """What a deployment may change about the generated dashboards and rules."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    #: Prometheus job names of the per-node exporters and of the analyzer.
    exporter_job: str = "gpulens-exporter"
    analyzer_job: str = "gpulens-analyzer"
    #: Prometheus job name of NVIDIA's dcgm-exporter (the GPU Operator's Service is nvidia-dcgm-exporter).
    dcgm_job: str = "nvidia-dcgm-exporter"
    #: The exporters' and dcgm-exporter's jobs may be "" (any job) where only the analyzer reads them, as
    #: its flags default to (add_job_flags): it finds GPUs however they are scraped. The alerts and the
    #: dashboards need the names (`absent(up{job=...})`): config_from() refuses "" there.
    #: Prometheus job names of cAdvisor (the kubelet's /metrics/cadvisor: kube-prometheus-stack names its job
    #: "kubelet") and of kube-state-metrics, whose series the analyzer and the dashboards read of each pod; ""
    #: (the default): any job, right where each is scraped once. kubernetes-mixin's cadvisorSelector and
    #: kubeStateMetricsSelector.
    cadvisor_job: str = ""
    kube_state_metrics_job: str = ""
    #: Base URL of Grafana, for the dashboard link in every alert.
    grafana_url: str = "http://localhost:3000"
    #: Where no Grafana runs (the native demo): the analyzer's page, which every alert's dashboard link leads
    #: to instead, a pod's alert to the pod's row ("" links to Grafana).
    analyzer_page_url: str = ""
    #: Where alerts/generated/runbooks.md is published; each alert links to its section.
    runbook_url: str = "https://github.com/gpulens/gpulens/blob/main/alerts/generated/runbooks.md"
    #: Alert name -> severity, overriding the rule's own (an alert settings file's `severities`).
    severities: Mapping[str, str] = field(default_factory=dict)
    #: Where dcgm-exporter's series name the GPU's pod: "exported" (exported_namespace, exported_pod,
    #: exported_container: the GPU Operator's ServiceMonitor, which does not honour the exporter's labels),
    #: "plain" (namespace, pod, container: honorLabels), or "auto": exported_* wherever a series has them.
    dcgm_pod_labels: str = "auto"
    #: Pods that are the exporters themselves, never a GPU's workload: with honorLabels, a series without
    #: pod labels gets the scrape target's (the dcgm-exporter pod's) instead. A regex on the pod name.
    exporter_pods: str = "nvidia-dcgm-exporter-.*|dcgm-exporter-.*|gpulens-exporter-.*"
    #: What each team or namespace may spend on GPUs in USD a month of 30 days (an alert settings file's
    #: `budgets`): by scope (BUDGET_SCOPES), by its name. The burn-rate alerts follow each against it.
    budgets: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """Refuse what would end or change the PromQL, the alert templates or the links it is written into:
        the one check of every setting they are generated from, whatever gave it (a flag, settings.env)."""
        check_text(self.analyzer_job, FLAGS["analyzer_job"], "a job name")
        for name in JOBS_READ:  # "" is any job
            if getattr(self, name):
                check_text(getattr(self, name), FLAGS[name], "a job name")
        for name in ("grafana_url", "runbook_url"):
            check_url(getattr(self, name), FLAGS[name])
        if self.analyzer_page_url:
            check_url(self.analyzer_page_url, "the analyzer's page URL")
        for scope, budgets in self.budgets.items():
            if scope not in BUDGET_SCOPES:
                raise ConfigError(f"budgets.{scope}: budgets are kept by {' or '.join(BUDGET_SCOPES)}s")
            for name in budgets:
                check_text(name, f"budgets.{scope}s", f"a {scope}'s name")

    @property
    def exporter(self) -> str:
        """Label matcher selecting the exporters' series ("": any job's)."""
        return job_matcher(self.exporter_job)

    @property
    def dcgm(self) -> str:
        """Label matcher selecting dcgm-exporter's series ("": any job's)."""
        return job_matcher(self.dcgm_job)

    @property
    def cadvisor(self) -> str:
        """Label matcher selecting cAdvisor's series ("": any job's)."""
        return job_matcher(self.cadvisor_job)

    @property
    def kube_state_metrics(self) -> str:
        """Label matcher selecting kube-state-metrics' series ("": any job's)."""
        return job_matcher(self.kube_state_metrics_job)

    @property
    def analyzer(self) -> str:
        """Label matcher selecting the analyzer's series."""
        return job_matcher(self.analyzer_job)

    @property
    def throttle_reasons(self) -> str:
        """Regex of the clock-event reasons that count as throttling (never the normal power-cap bit)."""
        mask = self.thresholds.throttle_reasons_mask
        return "|".join(name for name, bit in CLOCK_EVENT_REASONS.items() if bit & mask)


# --- dcgm-exporter's series --------------------------------------------------------------------
#: The labels of a dcgm-exporter series, as the GPU Operator deploys it: the GPU (its UUID, and for a MIG
#: instance its GPU instance id), its model and node (Hostname is the node's name in Kubernetes; older
#: releases write hostname; a relabelled scrape may add node).
DCGM_GPU_LABELS = ("UUID", "GPU_I_ID")
#: Where a dcgm-exporter series names its node, best first: a `node` label the scrape added (relabelled
#: from __meta_kubernetes_pod_node_name), else Hostname, which dcgm-exporter fills from the NODE_NAME the
#: GPU Operator sets (since dcgm-exporter 3.1.7, NVIDIA/dcgm-exporter#129; before, the exporter pod's own
#: name), else the hostname of older releases.
DCGM_NODE_LABELS = ("node", "Hostname", "hostname")
DCGM_HARDWARE_LABELS = ("modelName", *DCGM_NODE_LABELS, "GPU_I_PROFILE")
DCGM_POD_LABELS = {
    "exported": ("exported_namespace", "exported_pod", "exported_container"),
    "plain": ("namespace", "pod", "container"),
}
#: The series every dcgm-exporter counter set has (default and profiling): the one its identity is read from.
DCGM_IDENTITY_SERIES = "DCGM_FI_DEV_FB_USED"


@dataclass(frozen=True)
class DcgmColumn:
    """A trace column read from dcgm-exporter: the names its field has had (DCGM 4.6 renamed many), and
    the factor from dcgm-exporter's unit (percent, MiB, MHz) to the trace's (ratio, bytes, Hz)."""

    names: tuple[str, ...]
    scale: float

    def selector(self, matchers: str) -> str:
        return names_selector(self.names, matchers)


def names_selector(names: Iterable[str], matchers: str) -> str:
    """The series of any of `names` that `matchers` select, written one way wherever it is built, so that
    a read asking the same series twice asks one query (analyzer/inputs/series.py)."""
    return f'{{__name__=~"{"|".join(names)}"{", " + matchers if matchers else ""}}}'


def dcgm_columns() -> dict[str, DcgmColumn]:
    """Trace column -> its dcgm-exporter series, for every column a DCGM field feeds (core/dcgm.py's
    table), so a field gpulens' exporter maps is read the same way from a store. memory_total_bytes is
    not a field (dcgm-exporter has used and free): dcgm_memory_total() adds them up."""
    specs = {spec.name: column for column, spec in (trace.FROM_GAUGES | trace.FROM_RATES).items()}
    out = {
        specs[f.spec.name]: DcgmColumn(f.names, f.scale)
        for f in dcgm.FIELDS
        if f.spec is not None and f.spec.name in specs and not f.extra and f.kind in ("gauge", "rate")
    }
    out["clock_event_reasons"] = next(DcgmColumn(f.names, 1.0) for f in dcgm.FIELDS if f.spec is None)
    del out["memory_total_bytes"]
    return out


#: The labels of gpulens' device series (core/metrics.py DEVICE_LABELS) and of its pods' GPUs
#: (gpulens_gpu_pod_info, as the recording rules keep it): what dcgm-exporter's series are relabelled to.
DEVICE_BY = ("job", "node", "gpu", "uuid")
POD_GPU_BY = ("node", "namespace", "pod", "uuid")
#: The fields that say how busy a GPU is, best first: SM activity (profiling set), the graphics engine's
#: activity (the GPU Operator's default set), utilization (every set: a kernel ran).
ACTIVITY_FIELDS = ("gpu_sm_active_ratio", "gpu_graphics_engine_active_ratio", "gpu_utilization_ratio")


def dcgm_device(expr: str, board: bool = True, by: tuple[str, ...] = DEVICE_BY, how: str = "max") -> str:
    """`expr` (over dcgm-exporter series) labelled as gpulens' device series are, one series per `by`:
    `node` from the first of DCGM_NODE_LABELS a series has, `uuid` from UUID, `gpu` as dcgm-exporter
    writes it. A MIG instance's fields (board=False) get "/gi<GPU_I_ID>" on both, as the analyzer's
    reader keys them (analyzer/inputs/series.py); board-level fields (power, clocks, temperature, utilization),
    which dcgm-exporter repeats on every instance's row, name the physical GPU."""
    sources = ", ".join(f'"{label}"' for label in DCGM_NODE_LABELS)
    node = f'label_join({expr}, "node", ";", {sources})'
    node = f'label_replace(label_replace({node}, "node", "$1", "node", ";*([^;]+).*"), "node", "", "node", ";*")'
    named = f'label_replace({node}, "uuid", "$1", "UUID", "(.+)")'
    if not board:
        for label in ("uuid", "gpu"):
            joined = f'label_join({named}, "{label}", "/gi", "{label}", "GPU_I_ID")'
            named = f'label_replace({joined}, "{label}", "$1", "{label}", "(.*)/gi")'
    return f"{how} by ({', '.join(by)}) ({named})"


def dcgm_fields(name: str) -> list[dcgm.Field]:
    """The dcgm-exporter fields that gpulens metric `name` (as `metric()` takes it) is read from, by
    core/dcgm.py's table: one, or one per value of the metric's own label (ECC errors by type); KeyError
    if none."""
    full = metric(name)
    fields = [f for f in dcgm.FIELDS if f.spec is not None and f.spec.name == full]
    if not fields:
        raise KeyError(f"no dcgm-exporter field maps to {full} (gpulens/core/dcgm.py)")
    return fields


def dcgm_value(name: str, matchers: str, window: str | None = None, over: str = "avg_over_time") -> str:
    """PromQL of gpulens metric `name` read from dcgm-exporter: each field under any of its names, scaled
    to gpulens' unit, device-labelled (dcgm_device), with `over` (avg_over_time, increase, ...) over
    `window` where one is given. A field that feeds one value of the metric's own label (ECC errors'
    `type`) gets that label."""
    parts = []
    for f in dcgm_fields(name):
        assert f.spec is not None
        own = tuple(label for label in f.spec.labels if label not in DEVICE_BY)[: len(f.extra)]
        value = DcgmColumn(f.names, f.scale).selector(matchers)
        value = f"{over}({value}[{window}])" if window else value
        value = value if f.scale == 1 else f"{value} * {f.scale!r}"
        for label, label_value in zip(own, f.extra, strict=True):
            value = f'label_replace({value}, "{label}", "{label_value}", "", "")'
        parts.append(dcgm_device(value, f.board, (*DEVICE_BY, *own)))
    return parts[0] if len(parts) == 1 else f"({' or '.join(parts)})"


def dcgm_memory_capacity(matchers: str) -> str:
    """Each GPU's (or MIG instance's) memory that workloads can use, in bytes, from dcgm-exporter: used +
    free, which is gpulens' total - reserved."""
    return dcgm_device(f"(DCGM_FI_DEV_FB_USED{{{matchers}}} + DCGM_FI_DEV_FB_FREE{{{matchers}}}) * {dcgm.MIB}", False)


def dcgm_memory_used(matchers: str) -> str:
    """Each GPU's (or MIG instance's) used memory as a share of its capacity, from dcgm-exporter."""
    return f"{dcgm_value('gpu_memory_used_bytes', matchers)} / {dcgm_memory_capacity(matchers)}"


def dcgm_pods(c: MixinConfig) -> str:
    """Each GPU's pods from dcgm-exporter, labelled and valued as gpulens_gpu_pod_info is (node,
    namespace, pod, uuid; 1): exported_pod where the scrape renamed it (the GPU Operator's
    ServiceMonitor), else pod (honorLabels), never one of the exporters' own pods. Read from the
    activity fields' rows, one of which every counter set has."""
    names = "|".join(name for field in ACTIVITY_FIELDS for f in dcgm_fields(field) for name in f.names)
    exported = (
        f'label_replace(label_replace({{__name__=~"{names}",{c.dcgm},exported_pod!=""}}, "namespace", "$1", '
        '"exported_namespace", "(.*)"), "pod", "$1", "exported_pod", "(.*)")'
    )
    plain = f'{{__name__=~"{names}",{c.dcgm},exported_pod="",pod!="",pod!~{promql_string(c.exporter_pods)}}}'
    return " or ".join(dcgm_device(rows, board=False, by=POD_GPU_BY, how="group") for rows in (exported, plain))


def dcgm_only(c: MixinConfig, expr: str) -> str:
    """`expr` (dcgm_device-labelled) for the GPUs gpulens' exporter does not report: where both run, gpulens'
    series win (the activity shape and topology are only there), as in the analyzer."""
    return f"({expr} unless on (uuid) {metric('gpu_up')}{{{c.exporter}}})"


def dcgm_memory_total(matchers: str, by: str) -> str:
    """PromQL of each GPU's memory in bytes from dcgm-exporter: its total where the counter set has it,
    else used + free (+ reserved where reported), as the exporter's DCGM source adds them."""
    sel = f"{{{matchers}}}" if matchers else ""
    total, used, free, reserved = (
        f"max by ({by}) (DCGM_FI_DEV_FB_{kind}{sel})" for kind in ("TOTAL", "USED", "FREE", "RESERVED")
    )
    return f"({total} or ({used} + {free} + ({reserved} or {used} * 0))) * {dcgm.MIB}"


def dcgm_memory_selector(matchers: str, kinds: Iterable[str] = ("TOTAL", "USED", "FREE", "RESERVED")) -> str:
    """The series dcgm_memory_total() adds up (or those of `kinds`), in one selector (the analyzer adds them
    up itself when it reads many steps: analyzer/inputs/series.py)."""
    return names_selector((f"DCGM_FI_DEV_FB_{kind}" for kind in kinds), matchers)


def new_errors(selector: str, window: str) -> str:
    """Counter series that grew within `window`, including ones that first appeared in it (increase()
    needs two samples, so a counter born at 1 would be missed)."""
    return f"(increase({selector}[{window}]) > 0 or ({selector} unless {selector} offset {window}))"


def xid_matcher(op: str) -> str:
    """The matcher on gpulens_gpu_xid_errors_total's xid label for the application's codes: `=~` keeps
    them, `!~` the hardware and driver codes (metrics.is_hardware_xid)."""
    return f'xid{op}"{"|".join(str(code) for code in APPLICATION_XIDS)}"'


HARDWARE_XID_MATCHER = xid_matcher("!~")


def hardware_xids(selector: str, window: str, by: str) -> str:
    """1 for each (`by`, xid) whose counter (`selector`, HARDWARE_XID_MATCHER among its matchers) counted an
    XID within `window`: the xid label names the code."""
    return f"max by ({by}, xid) ({new_errors(selector, window)} > bool 0)"


def dcgm_hardware_xid(matchers: str, by: str) -> str:
    """dcgm-exporter's last XID of each GPU, where it is a hardware one (its value is the code)."""
    sel = f"{{{matchers}}}" if matchers else ""
    application = " ".join(f"!= {code}" for code in APPLICATION_XIDS)
    return f"max by ({by}) ({dcgm.XID_FIELD}{sel} > 0 {application})"


# --- serving engines and the Deployments they serve ----------------------------------------------------
@dataclass(frozen=True)
class EngineSeries:
    """One engine's series: its counter of requests finished, its gauges, and its latency histograms in seconds
    (their name without `_bucket`) of the time to the first token and of a request end to end ("" where it has
    none)."""

    engine: str
    requests: str
    running: str = ""
    waiting: str = ""
    kv_cache: tuple[str, ...] = ()
    first_token_seconds: str = ""
    request_seconds: str = ""


#: Each engine's series, as its docs name them (analyzer/inputs/engines.py reads them over a span).
ENGINE_SERIES = (
    EngineSeries(
        "vllm",
        "vllm:request_success_total",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
    ),
    # TGI times requests end to end only; Triton's latencies are counters of microseconds, not histograms.
    EngineSeries(
        "tgi", "tgi_request_count", "tgi_batch_current_size", "tgi_queue_size", (), "", "tgi_request_duration"
    ),
    EngineSeries("triton", "nv_inference_request_success", "", "nv_inference_pending_request_count"),
    EngineSeries(
        "sglang",
        "sglang:num_requests_total",
        "sglang:num_running_reqs",
        "sglang:num_queue_reqs",
        ("sglang:token_usage",),
        "sglang:time_to_first_token_seconds",
        "sglang:e2e_request_latency_seconds",
    ),
)


def engine_request_rate(selector: str, window: str) -> str:
    """Requests each serving pod's engine finished per second over `window`, by (namespace, pod): the first
    engine's counter a pod has. `selector`: PromQL matchers (the cluster's, a namespace's)."""
    return " or ".join(f"sum by (namespace, pod) (rate({e.requests}{{{selector}}}[{window}]))" for e in ENGINE_SERIES)


def pod_deployment(selector: str) -> str:
    """Each Deployment's pods as kube-state-metrics says (through their ReplicaSets): 1 by (namespace, pod,
    deployment). `selector`: PromQL matchers (the cluster's, a namespace's, kube-state-metrics' job)."""
    pods = f'kube_pod_owner{{{selector},owner_kind="ReplicaSet"}}'
    replicasets = f'kube_replicaset_owner{{{selector},owner_kind="Deployment"}}'
    return (
        f'max by (namespace, pod, deployment) (label_replace({pods}, "replicaset", "$1", "owner_name", "(.+)") '
        "* on (namespace, replicaset) group_left (deployment) max by (namespace, replicaset, deployment) ("
        f'label_replace({replicasets}, "deployment", "$1", "owner_name", "(.+)")))'
    )


# --- recording rules: level:metric:operations ------------------------------------------------------
# The names carry no window, so the dashboards read them whatever alert_rate_window a deployment sets.
GPU_BUSY = "gpu:gpulens_gpu_busy:ratio_rate"
GPU_SM_ACTIVE = "gpu:gpulens_gpu_sm_active:ratio_rate"
GPU_ACTIVITY = "gpu:gpulens_gpu_activity:ratio_rate"
GPU_MEMORY_USED = "gpu:gpulens_gpu_memory_used:ratio"
POD_GPU_ACTIVITY = "pod_gpu:gpulens_gpu_activity:ratio_rate"
POD_ACTIVITY_AVG = "namespace_pod:gpulens_gpu_activity:avg_ratio_rate"
POD_ACTIVITY_MAX = "namespace_pod:gpulens_gpu_activity:max_ratio_rate"


def recording_rules(c: MixinConfig) -> list[dict[str, str]]:
    """The recording rules, in dependency order. "Activity" is SM activity where the GPU has it
    (GPM on Hopper, or DCGM profiling), else the share of time a kernel ran: the best signal each
    GPU offers, so that one alert covers a mixed fleet. Each per-GPU rule covers the GPUs that only
    dcgm-exporter reports too (dcgm_only), labelled as gpulens' are, so the dashboards and alerts read one
    series per GPU whichever exporter a node runs."""
    w = c.thresholds.alert_rate_window
    pod_info = metric("gpu_pod_info")

    def from_dcgm(name: str) -> str:
        return dcgm_only(c, dcgm_value(name, c.dcgm, w))

    sm_active, engine_active, busy = (from_dcgm(name) for name in ACTIVITY_FIELDS)
    return [
        {
            "record": GPU_BUSY,
            "expr": f"rate({metric('gpu_busy_seconds_total')}{{{c.exporter}}}[{w}]) or {busy}",
        },
        {
            "record": GPU_SM_ACTIVE,
            "expr": f"rate({metric('gpu_sm_active_seconds_total')}{{{c.exporter}}}[{w}]) or {sm_active}",
        },
        {"record": GPU_ACTIVITY, "expr": f"{GPU_SM_ACTIVE} or on (uuid) {engine_active} or on (uuid) {GPU_BUSY}"},
        {
            "record": GPU_MEMORY_USED,
            "expr": f"{metric('gpu_memory_used_bytes')}{{{c.exporter}}} / "
            f"({metric('gpu_memory_total_bytes')}{{{c.exporter}}}"
            f" - ({metric('gpu_memory_reserved_bytes')}{{{c.exporter}}} or {metric('gpu_memory_total_bytes')}"
            f"{{{c.exporter}}} * 0))"
            f" or {dcgm_only(c, dcgm_memory_used(c.dcgm))}",
        },
        # Several pods may share a GPU (time-slicing): the pods are the "many" side of the join.
        {
            "record": POD_GPU_ACTIVITY,
            "expr": f"(max by ({', '.join(POD_GPU_BY)}) ({pod_info}{{{c.exporter}}}) or {dcgm_only(c, dcgm_pods(c))})"
            f" * on (uuid) group_left (gpu) {GPU_ACTIVITY}",
        },
        {"record": POD_ACTIVITY_AVG, "expr": f"avg by (node, namespace, pod) ({POD_GPU_ACTIVITY})"},
        {"record": POD_ACTIVITY_MAX, "expr": f"max by (node, namespace, pod) ({POD_GPU_ACTIVITY})"},
    ]


# --- budgets (docs/showback.md, "Budgets") -------------------------------------------------------
#: What a budget is kept by: a label of the analyzer's showback counters.
BUDGET_SCOPES = ("team", "namespace")
#: A budget's month: 30 days, as the SRE workbook's error budgets are kept.
MONTH_SECONDS = 30 * 86400
#: The windows spend is read over, short and long pairs of the burn-rate alerts (SRE workbook, "Alerting on
#: SLOs": 1h with 5m, 6h with 30m, 3d with 6h).
BURN_WINDOWS = ("5m", "30m", "1h", "6h", "3d")


def spend_rule(scope: str, window: str) -> str:
    """The recording rule of a scope's spend in USD a second over `window` (BURN_WINDOWS)."""
    return f"{scope}:{metric('workload_allocated_cost_dollars_total').removesuffix('_total')}:rate{window}"


def budget_rule(scope: str) -> str:
    """The recording rule of each budgeted team's (or namespace's) budget, in USD a second."""
    return f"{scope}:gpulens_budget_dollars:per_second"


def burn_rule(scope: str, window: str) -> str:
    """The recording rule of a scope's burn rate over `window`: its spend over its budget's steady pace (1: the
    budget is spent exactly in its month)."""
    return f"{scope}:gpulens_budget_burn:ratio_rate{window}"


def budget_rules(c: MixinConfig) -> list[dict]:
    """The spend of every team and namespace over each window (the analyzer's showback counter), each budget
    of the settings as a constant series, and the burn rates of those with one. The 3-day spend is the sum of the
    hourly one at each of the 72 hours of 3 days, over 72: the spend of 3 days over 3 days, as rate() would say
    it (a team younger than 3 days has spent less in them), without reading every sample of every workload's
    counter over 3 days each minute."""
    cost = f"{metric('workload_allocated_cost_dollars_total')}{{{c.analyzer}}}"
    rules: list[dict] = []
    for scope in BUDGET_SCOPES:
        for window in BURN_WINDOWS:
            expr = (
                f"sum_over_time({spend_rule(scope, '1h')}[{window}:1h]) / 72"
                if window == "3d"
                else f"sum by ({scope}) (rate({cost}[{window}]))"
            )
            rules.append({"record": spend_rule(scope, window), "expr": expr})
        for name, monthly in sorted(c.budgets.get(scope, {}).items()):
            rules.append(
                {"record": budget_rule(scope), "expr": f"vector({monthly / MONTH_SECONDS!r})", "labels": {scope: name}}
            )
        for window in BURN_WINDOWS:
            rules.append(
                {
                    "record": burn_rule(scope, window),
                    "expr": f"{spend_rule(scope, window)} / on ({scope}) {budget_rule(scope)}",
                }
            )
    return rules


# --- dashboards ---------------------------------------------------------------------------------
#: Stable dashboard uids: alert links and bookmarks depend on them.
FLEET_DASHBOARD = ("gpulens-fleet", "gpulens / Fleet overview")
POD_DASHBOARD = ("gpulens-pod", "gpulens / Pod bottlenecks")
NODE_DASHBOARD = ("gpulens-node", "gpulens / Node and GPU health")


@dataclass(frozen=True)
class Panel:
    """A panel alerts link to: its dashboard, its title, and the id Grafana's `viewPanel` opens it by,
    fixed here so that a new panel never moves an alert's link to another one."""

    dashboard: tuple[str, str]
    title: str
    id: int


POD_SM_PANEL = Panel(POD_DASHBOARD, "SM activity and occupancy", 101)
POD_BUSY_PANEL = Panel(POD_DASHBOARD, "Kernel-busy time", 102)
POD_VERDICT_PANEL = Panel(POD_DASHBOARD, "Verdict, evidence and what to try", 103)
POD_MEMORY_PANEL = Panel(POD_DASHBOARD, "GPU memory used against capacity", 104)
NODE_UP_PANEL = Panel(NODE_DASHBOARD, "GPU answering", 201)
NODE_MEMORY_PANEL = Panel(NODE_DASHBOARD, "Memory used", 202)
NODE_CLOCK_EVENTS_PANEL = Panel(NODE_DASHBOARD, "Clock events by reason", 203)
NODE_XID_PANEL = Panel(NODE_DASHBOARD, "XID errors", 204)
NODE_NVLINK_PANEL = Panel(NODE_DASHBOARD, "NVLink links down and errors", 205)
NODE_EXPORTER_UP_PANEL = Panel(NODE_DASHBOARD, "Exporter scrapes", 206)
NODE_COLLECTORS_PANEL = Panel(NODE_DASHBOARD, "Exporter collectors", 207)
NODE_SAMPLE_AGE_PANEL = Panel(NODE_DASHBOARD, "Exporter sample age", 208)
NODE_ANALYZER_PANEL = Panel(NODE_DASHBOARD, "Analyzer verdict age", 209)
FLEET_CLUSTER_PANEL = Panel(FLEET_DASHBOARD, "Free GPUs against GPUs waited for, by pool", 301)
FLEET_CHANGES_PANEL = Panel(FLEET_DASHBOARD, "Each workload's latest change and what became of it", 302)
FLEET_SPEND_PANEL = Panel(FLEET_DASHBOARD, "GPU spend a day by team, against its budget", 303)
PANELS = (
    POD_SM_PANEL,
    POD_BUSY_PANEL,
    POD_VERDICT_PANEL,
    POD_MEMORY_PANEL,
    NODE_UP_PANEL,
    NODE_MEMORY_PANEL,
    NODE_CLOCK_EVENTS_PANEL,
    NODE_XID_PANEL,
    NODE_NVLINK_PANEL,
    NODE_EXPORTER_UP_PANEL,
    NODE_COLLECTORS_PANEL,
    NODE_SAMPLE_AGE_PANEL,
    NODE_ANALYZER_PANEL,
    FLEET_CLUSTER_PANEL,
    FLEET_CHANGES_PANEL,
    FLEET_SPEND_PANEL,
)


def panel_ids(dashboard: tuple[str, str]) -> dict[str, int]:
    """Title -> fixed id of the panels of `dashboard` that alerts link to."""
    return {p.title: p.id for p in PANELS if p.dashboard == dashboard}


def dashboard_link(c: MixinConfig, target: tuple[str, str] | Panel, **labels: str) -> str:
    """An alert annotation's URL of a dashboard (or of one panel of it, opened alone), each variable set to
    the alert's label named (`pod="pod"`: var-pod is the alert's pod), percent-encoded (text/template's
    urlquery): a value with & or # would otherwise set another variable or cut the link. The alert's
    `cluster` label (set by Thanos or Mimir users' external labels; empty otherwise) selects the
    dashboard's cluster. Labels are written `with`, not printed as they are: an absent label prints as ""
    in Prometheus but as "<no value>" in vmalert. Without Grafana (`analyzer_page_url`), the analyzer's page:
    a pod's alert at the pod's row (#namespace/pod), any other at the top."""
    if c.analyzer_page_url:
        page = c.analyzer_page_url.rstrip("/") + "/"
        if {"namespace", "pod"} <= labels.keys():
            return page + f"#{{{{ $labels.{labels['namespace']} }}}}/{{{{ $labels.{labels['pod']} }}}}"
        return page
    (uid, _), view = (target.dashboard, f"&viewPanel={target.id}") if isinstance(target, Panel) else (target, "")
    query = "&".join(
        f"var-{name}={{{{ with $labels.{label} }}}}{{{{ . | urlquery }}}}{{{{ end }}}}"
        for name, label in {"cluster": "cluster", **labels}.items()
    )
    return f"{c.grafana_url}/d/{uid}?{query}{view}"


#: What the analyzer reads unless told otherwise: every job's series of gpulens' exporters and of
#: dcgm-exporter, however a fleet scrapes them (MixinConfig's own defaults name the jobs, as the alerts
#: and dashboards need).
ANY_JOB = MixinConfig(exporter_job="", dcgm_job="")


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The flags `gpulens alerts` and `gpulens dashboards` share: what MixinConfig holds."""
    from gpulens.core import flags

    defaults = MixinConfig()
    flags.add(parser, "--out", required=True, help="directory to write the generated files to")
    flags.add(
        parser,
        "--thresholds",
        default="",
        help="YAML overriding thresholds and alert durations (gpulens/core/thresholds.py)",
    )
    add_job_flags(lambda flag, **given: flags.add(parser, flag, **given), named=True)
    flags.add(
        parser,
        "--analyzer.job",
        dest="analyzer_job",
        default=defaults.analyzer_job,
        help="Prometheus job name of the analyzer",
    )
    flags.add(
        parser,
        "--grafana.url",
        dest="grafana_url",
        default=defaults.grafana_url,
        help="Grafana's base URL, for the dashboard link in each alert",
    )
    flags.add(
        parser,
        "--runbook.url",
        dest="runbook_url",
        default=defaults.runbook_url,
        help="where the runbooks are published; each alert links to its section",
    )


def add_job_flags(add: Callable[..., None], named: bool) -> None:
    """The job of every series gpulens reads (its exporters', dcgm-exporter's, cAdvisor's and
    kube-state-metrics'), as the same flags for the analyzer, the alerts and the dashboards, through
    `add(flag, **argparse's keywords)`. `named`: the exporters' and dcgm-exporter's jobs default to
    MixinConfig's names (the alerts and dashboards need them); else to "" (any job: the analyzer)."""
    defaults = MixinConfig() if named else ANY_JOB
    any_job = "" if named else "; empty (the analyzer's default): any job"
    add(
        "--exporter.job",
        dest="exporter_job",
        default=defaults.exporter_job,
        help=f"Prometheus job name of gpulens' exporters{any_job}",
    )
    add(
        "--dcgm.job",
        dest="dcgm_job",
        default=defaults.dcgm_job,
        help=f"Prometheus job name of NVIDIA's dcgm-exporter (the GPU Operator's: nvidia-dcgm-exporter){any_job}",
    )
    add(
        "--cadvisor.job",
        dest="cadvisor_job",
        default="",
        help='Prometheus job name of cAdvisor\'s series (kube-prometheus-stack: "kubelet"); empty: any job',
    )
    add(
        "--kube-state-metrics.job",
        dest="kube_state_metrics_job",
        default="",
        help="Prometheus job name of kube-state-metrics' series; empty: any job",
    )


def config_from(args: argparse.Namespace) -> MixinConfig:
    """MixinConfig from add_flags' arguments; ConfigError on a bad thresholds file, or a job left empty."""
    for name in ("exporter_job", "dcgm_job"):
        if not getattr(args, name):
            raise ConfigError(
                f"{FLAGS[name]} '': the alerts and dashboards select its series by their job "
                "(an alert on every target gone needs it); give the job's name (any job is the analyzer's alone)"
            )
    return MixinConfig(
        thresholds=Thresholds.load(args.thresholds),
        exporter_job=args.exporter_job,
        analyzer_job=args.analyzer_job,
        dcgm_job=args.dcgm_job,
        cadvisor_job=args.cadvisor_job,
        kube_state_metrics_job=args.kube_state_metrics_job,
        grafana_url=args.grafana_url.rstrip("/"),
        runbook_url=args.runbook_url,
    )
