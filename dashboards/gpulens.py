"""The three gpulens dashboards: fleet overview, pod bottlenecks, node and GPU health.

Built from gpulens/core/mixin.py (metric names checked against the metric table, recording rules, uids)
through the house style in dashboards/style.py. `gpulens dashboards --out DIR` writes them as JSON
for Grafana's file provisioning; the committed copies in dashboards/generated/ are drift-tested.
"""

from __future__ import annotations

from collections.abc import Callable

import grafanalib.core as G

from gpulens.core import mixin
from gpulens.core.mixin import MixinConfig, metric
from gpulens.dashboards import style as s
from gpulens.dashboards.style import target

#: Every selector starts with the cluster: Thanos and Mimir users query many clusters through one
#: datasource, told apart by a `cluster` external label; without one, `cluster=~""` or `.*` match all.
CLUSTER = 'cluster=~"$cluster"'
JOB = f'{CLUSTER},job=~"$job"'
#: Selectors over the exporters' series, narrowed by the dashboard variables.
EXPORTERS = f'{JOB},node=~"$node"'
POD = f'{CLUSTER},namespace="$namespace",pod="$pod"'
CPU_CORES = "suffix: cores"
#: The series that list GPUs: gpulens' exporters' (gpu_up: lost GPUs too) and the per-GPU recording rule,
#: which holds the GPUs that only dcgm-exporter reports as well (core/mixin.py recording_rules).
GPUS = f'__name__=~"{metric("gpu_up")}|{mixin.GPU_ACTIVITY}"'
#: The series that name the pods holding each GPU: gpulens' pod info, and the per-pod recording rule,
#: which holds dcgm-exporter's pods as well (it has no job label: the pod variables ignore $job).
PODS = f'__name__=~"{metric("gpu_pod_info")}|{mixin.POD_GPU_ACTIVITY}"'
#: dcgm-exporter's series. Its node is in a label that differs by release (mixin.DCGM_NODE_LABELS), so
#: the dashboards narrow them to the selected nodes by a join on the node dcgm_device() derives.
DCGM = f'{CLUSTER},job=~"$job"'


#: How a panel's description says it stays empty where only dcgm-exporter reports a GPU (tests find it).
DCGM_EMPTY = "Empty for GPUs that only dcgm-exporter reports"


def _gpulens_only(description: str, reason: str) -> str:
    """A panel's description, with why it has nothing for the GPUs that only dcgm-exporter reports."""
    return f"{description} {DCGM_EMPTY}: {reason}."


def _pod_gpus(expr: str) -> str:
    """Restrict a per-GPU expression to the GPUs of the selected pod (several pods may share one)."""
    return f"({expr}) * on (uuid) group_left () max by (uuid) ({{{PODS},{POD}}})"


def _rate(name: str, selector: str) -> str:
    return f"rate({metric(name)}{{{selector}}}[$__rate_interval])"


def _either(gpulens: str, dcgm: str, nodes: str = "") -> str:
    """A device series from gpulens' exporter, else from dcgm-exporter (`dcgm`: mixin.dcgm_value or the
    like, in gpulens' unit and labels) for the GPUs that only it reports, narrowed to `nodes` (a
    selector over GPUS) where given."""
    if nodes:
        dcgm = f"({dcgm} and on (node) group by (node) ({{{nodes}}}))"
    return f"({gpulens} or on (uuid) {dcgm})"


def _variables(*names: str, single: tuple[str, ...] = ()) -> list[G.Template]:
    """The shared variables, chained so each lists only what the ones before it select; those in
    `single` pick one value (the pod dashboard shows one pod)."""
    sources = {
        "cluster": ("Cluster", f"{{{GPUS}}}"),
        "job": ("Exporter job", f"{{{GPUS},{CLUSTER}}}"),
        "node": ("Node", f"{{{GPUS},{JOB}}}"),
        "gpu": ("GPU", f"{{{GPUS},{EXPORTERS}}}"),
        "namespace": ("Namespace", f"{{{PODS},{CLUSTER}}}"),
        "pod": ("Pod", f'{{{PODS},{CLUSTER},namespace="$namespace"}}'),
    }
    return [
        s.query_variable(
            name, sources[name][0], sources[name][1], multi=name not in single, include_all=name not in single
        )
        for name in names
    ]


def sm_levels(c: MixinConfig) -> s.Levels:
    """SM activity's bands, the analyzer's own thresholds (NVIDIA: < 0.5 likely ineffective, >= 0.8
    necessary for effective use)."""
    return (("red", None), ("orange", c.thresholds.ineffective_sm), ("green", c.thresholds.healthy_sm))


def fleet(c: MixinConfig) -> G.Dashboard:
    uid, title = mixin.FLEET_DASHBOARD
    analyzer = f'{CLUSTER},namespace=~"$namespace"'
    # GPUs given to pods of the selected namespaces (a shared GPU counts once).
    pods = f'{{{PODS},{CLUSTER},node=~"$node",namespace=~"$namespace"}}'
    allocated = f"max by (uuid) ({pods})"
    gpus = f'count(count by (uuid) ({{{GPUS},{EXPORTERS},gpu!~".*/.*"}}))'
    # Idle time: gpulens' exact idle-seconds counter, else (1 - utilization) over the range (dcgm-exporter).
    idle = _either(
        f"increase({metric('gpu_idle_seconds_total')}{{{EXPORTERS}}}[$__range])",
        f"(1 - avg_over_time({mixin.GPU_BUSY}{{{EXPORTERS}}}[$__range])) * $__range_s",
    )
    # Each serving pod's engine's requests per second, and the Deployment it belongs to.
    served = mixin.engine_request_rate(f'{CLUSTER},namespace=~"$namespace"', "$__rate_interval")
    deployments = mixin.pod_deployment(mixin.matchers(f'{CLUSTER},namespace=~"$namespace"', c.kube_state_metrics))
    pod_link = (
        f"/d/{mixin.POD_DASHBOARD[0]}?${{cluster:queryparam}}&var-namespace=${{__data.fields.namespace}}"
        f"&var-pod=${{__data.fields.pod}}&${{__url_time_range}}"
    )
    panels = [
        *_fleet_now(c, analyzer, allocated, gpus),
        *_fleet_allocation_and_activity(allocated, gpus),
        *_fleet_savings(analyzer),
        *_fleet_costs(analyzer),
        *_fleet_changes(analyzer),
        *_fleet_serving(served, deployments),
        *_fleet_waste(analyzer, pods, idle, pod_link),
        *_fleet_cluster_share(),
    ]
    return s.dashboard(
        uid,
        title,
        "Where the fleet's GPU time goes: allocation against use, waste by "
        "namespace and cause, and the pods that waste most.",
        _variables("cluster", "job", "node", "namespace"),
        panels,
        panel_ids=mixin.panel_ids(mixin.FLEET_DASHBOARD),
    )


def pod(c: MixinConfig) -> G.Dashboard:
    uid, title = mixin.POD_DASHBOARD
    verdict = f"{{{POD}}}"
    cadvisor, kube_state_metrics = mixin.matchers(POD, c.cadvisor), mixin.matchers(POD, c.kube_state_metrics)
    per_gpu = "GPU {{gpu}}"

    def either(name: str) -> str:
        return _either(f"{metric(name)}{{{JOB}}}", mixin.dcgm_value(name, DCGM))

    def either_rate(counter: str, gauge: str = "") -> str:
        """gpulens' counter as a rate, else dcgm-exporter's field (per second or a ratio) for `gauge`."""
        return _either(_rate(counter, JOB), mixin.dcgm_value(gauge or counter, DCGM))

    panels = [
        *_pod_verdict(c, verdict),
        *_pod_compute(c, per_gpu, either, either_rate),
        *_pod_memory_transfers_cpu(c, cadvisor, kube_state_metrics, per_gpu, either, either_rate),
    ]
    return s.dashboard(
        uid,
        title,
        "Why one pod's GPUs are underused: the analyzer's verdict over the day, with the signals behind it.",
        _variables("cluster", "job", "namespace", "pod", single=("namespace", "pod")),
        panels,
        panel_ids=mixin.panel_ids(mixin.POD_DASHBOARD),
    )


def node(c: MixinConfig) -> G.Dashboard:
    uid, title = mixin.NODE_DASHBOARD
    gpus = f'{EXPORTERS},gpu=~"$gpu"'
    per_gpu = "{{node}} GPU {{gpu}}"

    def either(name: str, over: str = "") -> str:
        """A board's series from gpulens (its `over` over the rate interval, where given), else from
        dcgm-exporter, whose raw `gpu` label is the board's index."""
        dcgm = f'{DCGM},gpu=~"$gpu"'
        if over:
            gpulens = f"{over}({metric(name)}{{{gpus}}}[$__rate_interval])"
            return _either(gpulens, mixin.dcgm_value(name, dcgm, "$__rate_interval", over), f"{GPUS},{gpus}")
        return _either(f"{metric(name)}{{{gpus}}}", mixin.dcgm_value(name, dcgm), f"{GPUS},{gpus}")

    def share(name: str, of: str) -> str:
        return f"{either(name)} / on (uuid) group_left () ({either(of)})"

    panels = [
        *_node_gpus(c, gpus, per_gpu, either, share),
        *_node_errors(gpus, per_gpu, either, share),
        *_node_gpulens_itself(c),
    ]
    return s.dashboard(
        uid,
        title,
        "Is the hardware, and is gpulens, healthy: temperature, power, clocks, "
        "throttling, XID and ECC errors, and the exporters and analyzer themselves.",
        _variables("cluster", "job", "node", "gpu"),
        panels,
        time_from="now-6h",
        panel_ids=mixin.panel_ids(mixin.NODE_DASHBOARD),
    )


def _fleet_now(c: MixinConfig, analyzer: str, allocated: str, gpus: str) -> list[G.Panel]:
    """The fleet dashboard's row "Now"."""
    return [
        s.row("Now"),
        s.stat(
            "GPUs",
            "GPUs gpulens' exporters or dcgm-exporter report, in every namespace (MIG instances not counted "
            "separately).",
            [target(gpus)],
            s.COUNT,
        ),
        s.stat(
            "Allocated to pods",
            "GPUs the kubelet has given to at least one pod of the selected namespaces.",
            [target(f"count({allocated})")],
            s.COUNT,
        ),
        s.stat(
            "GPUs no pod holds",
            "GPUs (and MIG instances) the analyzer finds no pod holds, on the selected nodes: unallocated "
            "capacity nobody uses (the scheduler, quotas, the node pool), and GPUs a process outside any pod "
            "uses (held without a pod: find the process on the node).",
            [
                target(
                    f'sum by (bottleneck) ({metric("gpu_without_pod")}{{{CLUSTER},node=~"$node"}})',
                    legend="{{bottleneck}}",
                )
            ],
            s.COUNT,
        ),
        s.stat(
            "Busy (GPUs' worth)",
            "Sum over the allocated GPUs of the share of time a kernel ran: how many GPUs' worth of work "
            "the selected namespaces do.",
            [target(f"sum({mixin.GPU_BUSY}{{{EXPORTERS}}} and on (uuid) ({allocated}))")],
            s.COUNT,
            decimals=1,
        ),
        s.stat(
            "SM activity of allocated GPUs",
            "Mean SM activity (kernel-busy time where the GPU has no SM "
            "counter) of allocated GPUs. NVIDIA: >= 80% is necessary for effective use.",
            [target(f"avg({mixin.GPU_ACTIVITY}{{{EXPORTERS}}} and on (uuid) ({allocated}))")],
            s.RATIO,
            levels=sm_levels(c),
        ),
        s.stat(
            "Wasted GPU-hours",
            "GPU time a problem class left unused, in the time range (healthy headroom is no waste). With "
            "every namespace selected, it includes GPUs no pod holds (bottleneck unallocated or held_without_pod, "
            "namespace empty).",
            [target(f"sum(increase({metric('wasted_gpu_seconds_total')}{{{analyzer}}}[$__range])) / 3600")],
            s.HOURS,
            decimals=2,
        ),
        s.stat(
            "Wasted money",
            "What the wasted GPU time costs at the analyzer's prices, in the time range.",
            [target(f"sum(increase({metric('wasted_cost_dollars_total')}{{{analyzer}}}[$__range]))")],
            s.DOLLARS,
            decimals=2,
        ),
    ]


def _fleet_allocation_and_activity(allocated: str, gpus: str) -> list[G.Panel]:
    """The fleet dashboard's row "Allocation and activity"."""
    return [
        s.row("Allocation and activity"),
        s.timeseries(
            "GPUs allocated vs busy",
            "All GPUs, the GPUs given to pods, and how many GPUs' worth of "
            "kernel time they deliver. The gap between the last two is what this tool is about.",
            [
                target(gpus, "GPUs"),
                target(f"count({allocated})", "allocated"),
                target(f"sum({mixin.GPU_BUSY}{{{EXPORTERS}}} and on (uuid) ({allocated}))", "busy (allocated)"),
            ],
            s.COUNT,
        ),
        s.histogram(
            "SM activity distribution of allocated GPUs",
            "How many allocated GPUs sit at each level of SM activity. A healthy fleet piles up on the right (>= 80%).",
            [
                target(
                    f"{mixin.GPU_ACTIVITY}{{{EXPORTERS}}} and on (uuid) ({allocated})",
                    "{{node}} GPU {{gpu}}",
                    instant=True,
                )
            ],
            s.RATIO,
        ),
    ]


def _fleet_savings(analyzer: str) -> list[G.Panel]:
    """The fleet dashboard's row "What you could save"."""
    return [
        s.row("What you could save"),
        s.stat(
            "Could save per 30 days",
            "What the analyzer's right-sizing plan saves per 30 days, at its prices, if every action is taken: "
            "release idle GPUs, fewer serving replicas, MIG slices, cheaper models, fixes (its /api/v1/plan "
            "says each action's evidence and assumptions; gpulens report gives the plan over any span). Empty "
            "until the analyzer's history holds a day (plan_projection_min_seconds): no month is projected from "
            "minutes.",
            [target(f"sum({metric('plan_monthly_saving_dollars')}{{{analyzer}}})")],
            s.DOLLARS,
            width=6,
        ),
        s.stat(
            "GPUs the plan gives back",
            "GPUs the workloads hold now less those they would hold after the plan's actions (shares of a "
            "GPU count as shares).",
            [
                target(
                    f'sum({metric("plan_gpus")}{{{analyzer},state="now"}}) '
                    f'- sum({metric("plan_gpus")}{{{analyzer},state="after"}})'
                )
            ],
            s.COUNT,
            width=6,
            decimals=1,
        ),
        s.bar_gauge(
            "Could save per 30 days, by team",
            "The plan's savings summed by team (the team label the analyzer reads; empty without it, and until "
            "the analyzer's history holds a day).",
            [
                target(
                    f"sum by (team) ({metric('plan_monthly_saving_dollars')}{{{analyzer}}})", "{{team}}", instant=True
                )
            ],
            s.DOLLARS,
            width=12,
            max_value=None,
        ),
        s.table(
            "The changes that give back the most GPUs",
            "The plan's actions on workloads, the most GPUs given back first (held now less held after; a "
            "share of a GPU for a MIG slice): what to do to which workload. What each saves: the analyzer's "
            "/api/v1/plan, and Could save per 30 days once its history holds a day.",
            [
                target(
                    f'topk(15, {metric("plan_gpus")}{{{analyzer},state="now"}} - ignoring(state) '
                    f'{metric("plan_gpus")}{{{analyzer},state="after"}})',
                    instant=True,
                    table=True,
                )
            ],
            s.COUNT,
            hide=("__name__",),
        ),
    ]


def _fleet_costs(analyzer: str) -> list[G.Panel]:
    """The fleet dashboard's row "What the GPUs cost: spend by team against its budget (docs/showback.md)"."""
    return [
        s.row("What the GPUs cost: spend by team against its budget (docs/showback.md)"),
        s.timeseries(
            mixin.FLEET_SPEND_PANEL.title,
            "What each team's GPUs cost a day at the pace of the last hour (the analyzer's "
            "gpulens_workload_allocated_cost_dollars_total: the GPUs its pods held at the prices in use, a MIG "
            "slice at its share), and its budget a day where the alert settings give one (a month's over 30 "
            "days): a line above its budget burns it (GpulensTeamBudgetBurningFast, ...BurningSlowly).",
            [
                target(f"{mixin.spend_rule('team', '1h')} * 86400", "{{team}}"),
                target(f"{mixin.budget_rule('team')} * 86400", "{{team}} budget"),
            ],
            s.DOLLARS,
            width=12,
        ),
        s.table(
            "Share of the GPU time paid for that worked, by team",
            "Over the last day: the device-seconds each team's GPUs worked (SM activity where profiling fields are "
            "read, else utilization) over those with an activity signal, and what they cost. Low: the team pays "
            "for GPUs that wait; its wasters and their fixes are in the tables above and the analyzer's page.",
            [
                target(
                    f"sum by (team) (increase({metric('workload_worked_gpu_seconds_total')}{{{analyzer}}}[1d])) / "
                    f"sum by (team) (increase({metric('workload_judged_gpu_seconds_total')}{{{analyzer}}}[1d]))",
                    instant=True,
                    table=True,
                ),
            ],
            s.RATIO,
            width=12,
            hide=("__name__",),
        ),
    ]


def _fleet_changes(analyzer: str) -> list[G.Panel]:
    """The fleet dashboard's row "What changed: each workload's latest change, its saving and whether it held"."""
    return [
        s.row("What changed: each workload's latest change, its saving and whether it held"),
        s.stat(
            "Saved a day by the changes made",
            "What the workloads' latest changes in the analyzer's history saved a day for the work done after "
            "them (a fixed size costed as it ran before; a size an autoscaler sets at the before's cost per unit "
            "of work): realised, not proposed. Negative: the changes cost more. docs/changes.md.",
            [target(f"sum({metric('change_daily_saving_dollars')}{{{analyzer}}})")],
            s.DOLLARS,
            width=6,
        ),
        s.stat(
            "Changes that regressed",
            "Workloads whose latest change raised their queue or latency past their spread before it, or "
            "whose culled notebook's user came back within the cull timeout (GpulensWorkloadChangeRegressed).",
            [target(f'sum({metric("change_outcome")}{{{analyzer},outcome="regressed"}}) or vector(0)')],
            s.COUNT,
            width=6,
        ),
        s.table(
            mixin.FLEET_CHANGES_PANEL.title,
            "Per workload and kind of change (replicas, autoscaler bounds, the GPUs each pod holds, a notebook "
            "ended): its outcome (held, regressed, too_early) and what it saved a day. Why, and the replicas "
            "that would have held a regression's load: the analyzer's /api/v1/changes, or gpulens report.",
            [
                target(
                    f"{metric('change_outcome')}{{{analyzer}}} == 1",
                    instant=True,
                    table=True,
                ),
            ],
            s.COUNT,
            width=12,
            hide=("__name__", "Value"),
        ),
    ]


def _fleet_serving(served: str, deployments: str) -> list[G.Panel]:
    """The fleet dashboard's row "Serving"."""
    return [
        s.row("Serving"),
        s.timeseries(
            "Serving load against replicas",
            "By Deployment (kube-state-metrics' kube_pod_owner and kube_replicaset_owner): the requests its "
            "replicas' engines finished per second (vLLM, TGI, Triton, SGLang counters), and how many replicas "
            "report them. Load that stays far below what the replicas carried at their peak is the plan's "
            "fewer_replicas; the analyzer sizes it by the engines' queue and KV cache, not by SM activity.",
            [
                target(
                    f"sum by (namespace, deployment) (({served}) "
                    f"* on (namespace, pod) group_left (deployment) {deployments})",
                    "{{namespace}}/{{deployment}} requests/s",
                ),
                target(
                    f"count by (namespace, deployment) ({deployments} and on (namespace, pod) ({served}))",
                    "{{namespace}}/{{deployment}} replicas",
                ),
            ],
            s.COUNT,
            width=24,
        ),
    ]


def _fleet_waste(analyzer: str, pods: str, idle: str, pod_link: str) -> list[G.Panel]:
    """The fleet dashboard's row "Waste"."""
    return [
        s.row("Waste"),
        s.bar_gauge(
            "Idle GPU-hours by namespace",
            "Time the namespace's GPUs ran no kernel at all, in the time range: from gpulens' idle-seconds "
            "counters, or from dcgm-exporter's utilization where only it reports a GPU.",
            [
                target(
                    f"sum by (namespace) (max by (namespace, pod, uuid) ({pods}) * on (uuid) group_left () ({idle}))"
                    " / 3600",
                    "{{namespace}}",
                    instant=True,
                )
            ],
            s.HOURS,
            width=8,
            max_value=None,
        ),
        s.bar_gauge(
            "Wasted GPU-hours by namespace",
            "Allocated GPU time the analyzer counts as unused ((1 - activity) x GPU time), in the time range.",
            [
                target(
                    f"sum by (namespace) (increase({metric('wasted_gpu_seconds_total')}{{{analyzer}}}"
                    f"[$__range])) / 3600",
                    "{{namespace}}",
                    instant=True,
                )
            ],
            s.HOURS,
            width=8,
            max_value=None,
        ),
        s.bar_gauge(
            "Wasted money by bottleneck",
            "What each cause wastes at the analyzer's prices, in the time range.",
            [
                target(
                    f"sum by (bottleneck) (increase({metric('wasted_cost_dollars_total')}{{{analyzer}}}[$__range]))",
                    "{{bottleneck}}",
                    instant=True,
                )
            ],
            s.DOLLARS,
            width=8,
            max_value=None,
        ),
        s.bar_gauge(
            "Wasted GPU-hours by workload",
            "The workloads (namespace / owner kind / owner, from kube-state-metrics) whose GPUs wasted the most "
            "in the time range: a Deployment's replicas, a CronJob's runs and a notebook's restarts add up.",
            [
                target(
                    f"topk(15, sum by (namespace, owner_kind, owner) (increase("
                    f"{metric('workload_wasted_gpu_seconds_total')}{{{analyzer}}}[$__range]))) / 3600",
                    "{{namespace}}/{{owner_kind}}/{{owner}}",
                    instant=True,
                )
            ],
            s.HOURS,
            width=12,
            max_value=None,
        ),
        s.bar_gauge(
            "Wasted money by team",
            "What each team's workloads wasted at the analyzer's prices, in the time range (the team is the "
            "pod or namespace label named by --analysis.team-label; empty without it).",
            [
                target(
                    f"sum by (team) (increase({metric('workload_wasted_cost_dollars_total')}{{{analyzer}}}[$__range]))",
                    "{{team}}",
                    instant=True,
                )
            ],
            s.DOLLARS,
            width=12,
            max_value=None,
        ),
        s.timeseries(
            "Pods by bottleneck over time",
            "How many pods the analyzer puts in each class.",
            [
                target(
                    f'count by (bottleneck) ({metric("pod_bottleneck")}{{{analyzer},node=~"$node"}} == 1)',
                    "{{bottleneck}}",
                )
            ],
            s.COUNT,
            width=24,
            stacked=True,
        ),
        s.table(
            "Top wasting pods",
            "GPUs' worth each pod wastes now (GPUs x (1 - activity)), what the pod is (notebook, serving and "
            "its engine, job: from kube-state-metrics), the analyzer's verdict and the fix to try. Click a pod "
            "for its dashboard.",
            [
                target(
                    f'topk(10, {metric("pod_gpus")}{{{analyzer},pod!=""}} * (1 - {metric("pod_sm_active_ratio")}'
                    f"{{{analyzer}}}) * on (namespace, pod, node) group_left (bottleneck, recommendation) "
                    f"{metric('pod_bottleneck_info')}{{{analyzer}}} * on (namespace, pod, node) group_left "
                    f"(workload_kind, engine) {metric('pod_workload_info')}{{{analyzer}}})",
                    instant=True,
                    table=True,
                )
            ],
            s.COUNT,
            hide=("__name__",),
            links={"pod": pod_link},
        ),
    ]


def _fleet_cluster_share() -> list[G.Panel]:
    """The fleet dashboard's row "The cluster's share: GPUs free while pods wait"."""
    return [
        s.row("The cluster's share: GPUs free while pods wait"),
        s.timeseries(
            mixin.FLEET_CLUSTER_PANEL.title,
            "Per node pool and GPU model (kube-state-metrics, judged by the analyzer: docs/cluster.md): the GPUs "
            "free on schedulable nodes, those free while a pod that could use them waits for more than any one "
            "node has free (stranded: fragmentation), and the GPUs the pods waiting for the pool ask for.",
            [
                target(f"sum by (pool, gpu_model) ({metric('cluster_free_gpus')}{{{CLUSTER}}})", "{{pool}} free"),
                target(
                    f"sum by (pool, gpu_model) ({metric('cluster_stranded_gpus')}{{{CLUSTER}}})", "{{pool}} stranded"
                ),
                target(f"sum by (pool) ({metric('cluster_waiting_gpus')}{{{CLUSTER}}})", "{{pool}} asked"),
            ],
            s.COUNT,
            width=12,
        ),
        s.table(
            "Pods waiting for GPUs, by pool and reason",
            "The GPU pods waiting now for a node, by the pool and model they ask for and why: fragmented (enough "
            "free, spread over nodes: consolidate, bin-pack), pool_full, too_large (no node holds the request), "
            "no_node, room (a node had the GPUs: taints, affinity, CPU or memory held it). Longest wait in seconds.",
            [
                target(
                    f"max by (pool, gpu_model, reason) ({metric('cluster_waiting_longest_seconds')}{{{CLUSTER}}})",
                    instant=True,
                    table=True,
                )
            ],
            s.SECONDS,
            width=12,
            hide=("__name__",),
        ),
    ]


def _pod_verdict(c: MixinConfig, verdict: str) -> list[G.Panel]:
    """The pod dashboard's row "Verdict"."""
    return [
        s.row("Verdict"),
        s.state_timeline(
            "Bottleneck over time",
            "The analyzer's class for this pod, cycle by cycle.",
            [target(f"max by (bottleneck) ({metric('pod_bottleneck')}{verdict} == 1)", "{{bottleneck}}")],
        ),
        s.stat(
            "Confidence",
            "How sure the analyzer is of the current class.",
            [target(f"max({metric('pod_bottleneck_confidence')}{verdict})")],
            s.RATIO,
        ),
        s.stat(
            "GPUs",
            "GPUs the kubelet gave this pod.",
            [target(f"count(max by (uuid) ({{{PODS},{POD}}}))")],
            s.COUNT,
        ),
        s.stat(
            "Activity (analyzer window)",
            "Mean SM activity over the analyzer's window (kernel-busy time where the GPU has no SM counter).",
            [target(f"max({metric('pod_sm_active_ratio')}{verdict})")],
            s.RATIO,
            levels=sm_levels(c),
        ),
        s.stat(
            "Idle share (analyzer window)",
            "Share of the window with no kernel running.",
            [target(f"max({metric('pod_idle_ratio')}{verdict})")],
            s.RATIO,
        ),
        s.bar_gauge(
            "Time by class (analyzer history)",
            "Share of the analyzer's history (--analysis.history, a day by default) this pod spent in each "
            "class: a serving replica's quiet hours next to its working ones, or a job that finished hours ago.",
            [target(f"max by (bottleneck) ({metric('pod_bottleneck_time_ratio')}{verdict})", "{{bottleneck}}")],
            s.RATIO,
            width=24,
            height=5,
        ),
        s.table(
            "Verdict, evidence and what to try",
            "The analyzer's current verdict: what the pod is (workload_kind, engine), the class, any secondary "
            "findings, the evidence (thresholds crossed) and the recommendation.",
            [
                target(
                    f"{metric('pod_bottleneck_info')}{verdict} * on (namespace, pod, node) group_left "
                    f"(workload_kind, engine) {metric('pod_workload_info')}{verdict}",
                    instant=True,
                    table=True,
                )
            ],
            s.COUNT,
            width=24,
            height=5,
            hide=("Value", "namespace", "pod"),
        ),
    ]


def _pod_compute(
    c: MixinConfig, per_gpu: str, either: Callable[..., str], either_rate: Callable[..., str]
) -> list[G.Panel]:
    """The pod dashboard's row "Compute"."""
    return [
        s.row("Compute"),
        s.timeseries(
            "SM activity and occupancy",
            "SM activity: share of time a warp was resident (NVIDIA: >= 80% "
            "necessary for effective use). Occupancy: resident warps against the maximum. Activity: what the "
            "low-SM alerts read, SM activity where the GPU has it, else the graphics engine's, else kernel-busy "
            "time.",
            [
                target(_pod_gpus(f"{mixin.GPU_ACTIVITY}{{{JOB}}}"), f"{per_gpu} activity"),
                target(
                    _pod_gpus(either_rate("gpu_sm_active_seconds_total", "gpu_sm_active_ratio")), f"{per_gpu} SM active"
                ),
                target(_pod_gpus(either("gpu_sm_occupancy_ratio")), f"{per_gpu} occupancy"),
            ],
            s.RATIO,
            max_value=1,
            levels=sm_levels(c),
        ),
        s.timeseries(
            "Tensor and DRAM activity",
            "Tensor pipes busy, and DRAM moving data (about 80% is the "
            "practical peak: higher means memory-bandwidth bound).",
            [
                target(_pod_gpus(either("gpu_tensor_active_ratio")), f"{per_gpu} tensor"),
                target(_pod_gpus(either("gpu_dram_active_ratio")), f"{per_gpu} DRAM"),
            ],
            s.RATIO,
            max_value=1,
        ),
        s.timeseries(
            "Kernel-busy time",
            "Share of time any kernel ran (nvidia-smi utilization.gpu). One tiny "
            "kernel keeps it at 100%: read SM activity for how much of the GPU works.",
            [target(_pod_gpus(either_rate("gpu_busy_seconds_total", "gpu_utilization_ratio")), per_gpu)],
            s.RATIO,
            max_value=1,
        ),
        s.bar_gauge(
            "Activity per GPU",
            "Each GPU's activity over the rate window: in a multi-GPU pod, one GPU "
            "far busier than the others means poor placement or unbalanced ranks.",
            [target(_pod_gpus(f"{mixin.GPU_ACTIVITY}{{{JOB}}}"), per_gpu, instant=True)],
            s.RATIO,
            levels=sm_levels(c),
        ),
    ]


def _pod_memory_transfers_cpu(
    c: MixinConfig,
    cadvisor: str,
    kube_state_metrics: str,
    per_gpu: str,
    either: Callable[..., str],
    either_rate: Callable[..., str],
) -> list[G.Panel]:
    """The pod dashboard's row "Memory, transfers and CPU"."""
    return [
        s.row("Memory, transfers and CPU"),
        s.timeseries(
            "GPU memory used against capacity",
            "Used memory per GPU and its capacity (total minus what the driver reserves).",
            [
                target(_pod_gpus(either("gpu_memory_used_bytes")), f"{per_gpu} used"),
                target(
                    _pod_gpus(
                        _either(
                            f"{metric('gpu_memory_total_bytes')}{{{JOB}}} - {metric('gpu_memory_reserved_bytes')}"
                            f"{{{JOB}}}",
                            mixin.dcgm_memory_capacity(DCGM),
                        )
                    ),
                    f"{per_gpu} capacity",
                ),
            ],
            s.BYTES,
        ),
        s.timeseries(
            "PCIe throughput",
            "Bytes per second over PCIe; receive is host-to-device (input batches).",
            [
                target(_pod_gpus(either_rate("gpu_pcie_receive_bytes_total")), f"{per_gpu} receive"),
                target(_pod_gpus(either_rate("gpu_pcie_transmit_bytes_total")), f"{per_gpu} transmit"),
            ],
            s.BYTES_PER_SECOND,
        ),
        s.timeseries(
            "NVLink throughput",
            _gpulens_only(
                "Bytes per second over NVLink, all links together.",
                "only its profiling counter set has DCGM_FI_PROF_NVLINK_*_BYTES",
            ),
            [
                target(_pod_gpus(either_rate("gpu_nvlink_receive_bytes_total")), f"{per_gpu} receive"),
                target(_pod_gpus(either_rate("gpu_nvlink_transmit_bytes_total")), f"{per_gpu} transmit"),
            ],
            s.BYTES_PER_SECOND,
        ),
        s.timeseries(
            "CPU use against limit",
            "The pod's CPU use (cAdvisor) against its limit (kube-state-metrics, "
            "or the CFS quota). A pod at its limit cannot feed its GPUs.",
            [
                target(
                    f'sum(rate(container_cpu_usage_seconds_total{{{cadvisor},container!="",container!="POD"}}'
                    f"[$__rate_interval]))",
                    "used",
                ),
                target(
                    f'sum(kube_pod_container_resource_limits{{{kube_state_metrics},resource="cpu"}}) or '
                    f'sum(container_spec_cpu_quota{{{cadvisor},container!=""}} / container_spec_cpu_period'
                    f'{{{cadvisor},container!=""}})',
                    "limit",
                ),
            ],
            CPU_CORES,
        ),
        s.timeseries(
            "Throttled share of time",
            _gpulens_only(
                "Share of time the pod's GPUs ran slower for a reason other than "
                "the normal power cap: thermal, hardware slowdown, power brake.",
                "it has a bitmask of the reasons at each scrape, not the time each one held",
            ),
            [
                target(
                    _pod_gpus(_rate("gpu_clock_event_seconds_total", f'{JOB},reason=~"{c.throttle_reasons}"')),
                    f"{per_gpu} {{{{reason}}}}",
                )
            ],
            s.RATIO,
            width=24,
            max_value=1,
            levels=(("green", None), ("red", c.thresholds.alert_throttled_fraction)),
        ),
    ]


def _node_gpus(
    c: MixinConfig, gpus: str, per_gpu: str, either: Callable[..., str], share: Callable[..., str]
) -> list[G.Panel]:
    """The node dashboard's row "GPUs"."""
    return [
        s.row("GPUs"),
        s.timeseries(
            "GPU answering",
            _gpulens_only(
                "1 while NVML reads the GPU, 0 when it fails (fell off the bus: XID 79, NVML_ERROR_GPU_IS_LOST).",
                "it drops a GPU it cannot read instead of reporting it down",
            ),
            [target(f"{metric('gpu_up')}{{{gpus}}}", per_gpu)],
            s.COUNT,
            max_value=1,
        ),
        s.timeseries(
            "Temperature",
            "GPU core temperature.",
            [target(either("gpu_temperature_celsius"), per_gpu)],
            s.CELSIUS,
        ),
        s.timeseries(
            "Power against limit",
            "Board power draw and the enforced power limit.",
            [
                target(either("gpu_power_watts"), per_gpu),
                target(either("gpu_power_limit_watts"), f"{per_gpu} limit"),
            ],
            s.WATTS,
        ),
        s.timeseries(
            "SM clock against max",
            _gpulens_only(
                "SM clock as a share of its maximum: low while busy means throttling.",
                "its default counters have no maximum clock (DCGM_FI_DEV_MAX_SM_CLOCK)",
            ),
            [target(share("gpu_sm_clock_hertz", "gpu_sm_clock_max_hertz"), per_gpu)],
            s.RATIO,
            max_value=1,
        ),
        s.timeseries(
            "Clock events by reason",
            _gpulens_only(
                "Share of time each clock-event reason held (gpu_idle left out). "
                "sw_power_cap is normal boost behaviour; thermal, hw_slowdown and power brake are findings.",
                "it has a bitmask of the reasons at each scrape, not the time each one held",
            ),
            [target(_rate("gpu_clock_event_seconds_total", f'{gpus},reason!="gpu_idle"'), f"{per_gpu} {{{{reason}}}}")],
            s.RATIO,
            max_value=1,
        ),
        s.timeseries(
            "Memory used",
            "Used memory as a share of capacity (total minus reserved).",
            [target(f"{mixin.GPU_MEMORY_USED}{{{gpus}}}", per_gpu)],
            s.RATIO,
            max_value=1,
            levels=(("green", None), ("red", c.thresholds.memory_full)),
        ),
    ]


def _node_errors(gpus: str, per_gpu: str, either: Callable[..., str], share: Callable[..., str]) -> list[G.Panel]:
    """The node dashboard's row "Errors"."""
    return [
        s.row("Errors"),
        s.timeseries(
            "XID errors",
            _gpulens_only(
                "XID events the driver reported, by code (dmesg | grep -i xid).",
                "its XID field holds the last error's code, not a count of each",
            ),
            [
                target(
                    f"increase({metric('gpu_xid_errors_total')}{{{gpus}}}[$__rate_interval])",
                    f"{per_gpu} XID {{{{xid}}}}",
                )
            ],
            s.COUNT,
            width=8,
        ),
        s.timeseries(
            "ECC errors",
            "New ECC errors, corrected and uncorrected (aggregate counters).",
            [target(either("gpu_ecc_errors_total", over="increase"), f"{per_gpu} {{{{type}}}}")],
            s.COUNT,
            width=8,
        ),
        s.timeseries(
            "Row remapping",
            "Rows remapped after memory errors, and remaps pending (reset needed) or failed (replace the GPU).",
            [
                target(either("gpu_remapped_rows"), f"{per_gpu} remapped {{{{cause}}}}"),
                target(either("gpu_row_remap_pending"), f"{per_gpu} pending"),
                target(either("gpu_row_remap_failed"), f"{per_gpu} failed"),
            ],
            s.COUNT,
            width=8,
        ),
        s.timeseries(
            "NVLink links down and errors",
            _gpulens_only(
                "Links down (the exporter's log names them) and NVLink errors per second by type: CRC errors are "
                "retried transfers; replay and recovery errors mean a link is failing (DCGM's limits).",
                "gpulens reads link state and NVLink errors from NVML only",
            ),
            [
                target(f"{metric('gpu_nvlink_links_down')}{{{gpus}}}", f"{per_gpu} links down"),
                target(_rate("gpu_nvlink_errors_total", gpus), f"{per_gpu} {{{{type}}}} errors/s"),
            ],
            s.COUNT,
            width=12,
        ),
        s.timeseries(
            "PCIe link against its maximum",
            _gpulens_only(
                "Current PCIe generation and width as a share of what the "
                "GPU supports: under 100% the link trained down (a riser, a slot, power saving).",
                "its default counters have no link generation or width fields",
            ),
            [
                target(share("gpu_pcie_link_generation", "gpu_pcie_link_max_generation"), f"{per_gpu} generation"),
                target(share("gpu_pcie_link_width", "gpu_pcie_link_max_width"), f"{per_gpu} width"),
            ],
            s.RATIO,
            width=12,
            max_value=1,
        ),
    ]


def _node_gpulens_itself(c: MixinConfig) -> list[G.Panel]:
    """The node dashboard's row "gpulens itself"."""
    return [
        s.row("gpulens itself"),
        s.timeseries(
            "Exporter scrapes",
            "1 while Prometheus scrapes the node's exporter (gpulens' or dcgm-exporter).",
            [target(f"up{{{EXPORTERS}}}", "{{node}}")],
            s.COUNT,
            width=8,
            max_value=1,
        ),
        s.timeseries(
            "Exporter collectors",
            _gpulens_only(
                "1 while each of the exporter's inputs (nvml, kubelet, dcgm) works.", "these are gpulens' own"
            ),
            [target(f"{metric('exporter_collector_success')}{{{EXPORTERS}}}", "{{node}} {{collector}}")],
            s.COUNT,
            width=8,
            max_value=1,
        ),
        s.timeseries(
            "Exporter sample age",
            _gpulens_only("Age of the sample the exporter serves; grows when NVML hangs.", "these are gpulens' own"),
            [target(f"{metric('exporter_sample_age_seconds')}{{{EXPORTERS}}}", "{{node}}")],
            s.SECONDS,
            width=8,
        ),
        s.timeseries(
            "Analyzer verdict age",
            "Age of the analyzer's verdicts; grows while its input is down.",
            [
                target(f"{metric('analyzer_verdict_age_seconds')}{{{c.analyzer},{CLUSTER}}}", "verdict age"),
                target(f"{metric('analyzer_cycle_duration_seconds')}{{{c.analyzer},{CLUSTER}}}", "cycle duration"),
            ],
            s.SECONDS,
        ),
        s.timeseries(
            "Analyzer input errors",
            "Failed reads of the analyzer's input (Prometheus or exporters).",
            [
                target(
                    f"increase({metric('analyzer_input_errors_total')}{{{c.analyzer},{CLUSTER}}}[$__rate_interval])",
                    "{{input}}",
                )
            ],
            s.COUNT,
        ),
    ]


DASHBOARDS = {"gpulens-fleet.json": fleet, "gpulens-pod.json": pod, "gpulens-node.json": node}


def generate(config: MixinConfig) -> dict[str, str]:
    """File name -> dashboard JSON."""
    return {name: s.to_json(build(config)) for name, build in DASHBOARDS.items()}


#: The label kube-prometheus-stack's Grafana sidecar loads dashboards from (grafana chart:
#: sidecar.dashboards.label, value "1" by convention), and the annotation that names their folder where the
#: sidecar is given one (sidecar.dashboards.folderAnnotation, with provider.foldersFromFilesStructure).
SIDECAR_LABEL = "grafana_dashboard"
FOLDER_ANNOTATION = "grafana_folder"
FOLDER = "gpulens"


def sidecar_kustomization(names: list[str]) -> str:
    """A kustomization that turns each dashboard file into a ConfigMap of its own for Grafana's sidecar
    (one each: `kubectl apply` keeps a copy of an object in an annotation of at most 256 KiB). Names
    without a hash suffix, so a new version replaces the old ConfigMap instead of adding one."""
    generators = "".join(
        f"- name: {name.removesuffix('.json')}-dashboard\n  files:\n  - {name}\n" for name in sorted(names)
    )
    return (
        "# Generated by `gpulens dashboards` with the dashboards beside it; do not edit by hand.\n"
        "# The dashboards as ConfigMaps for kube-prometheus-stack's Grafana sidecar, for\n"
        "# deploy/kubernetes/prometheus-operator.\n"
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        "generatorOptions:\n"
        "  disableNameSuffixHash: true\n"
        f'  labels:\n    {SIDECAR_LABEL}: "1"\n'
        f"  annotations:\n    {FOLDER_ANNOTATION}: {FOLDER}\n"
        f"configMapGenerator:\n{generators}"
    )
