"""Every threshold the analyzer (and the generated alert rules) use, with where it comes from.

Sources, as in docs/signals.md (whose table of thresholds is generated from this file): (NVIDIA) the
vendor's guidance, (tool) another tool's default, (proposal) ours, kept only because `gpulens eval` shows
it separates the classes. Each field's comment names its source: the table shows them.
Override any of them with `--thresholds FILE` (YAML with the same field names).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from gpulens.core.activity import HIGH_BOUND, IDLE_ACTIVITY, IDLE_BOUND, LOW_BOUND
from gpulens.core.config import PROMQL_DURATION, ConfigError, duration_seconds, read_yaml
from gpulens.core.schema import LONGEST_DURATION, Integer, Number, Record, Schema, Text, validate

#: Thresholds that are bounds of the exporter's activity histogram, which counts every driver sample
#: between scrapes at fixed bounds: data from it can be judged at these values only.
EXPORTER_BOUNDS = {"idle_activity": IDLE_BOUND, "starvation_low": LOW_BOUND, "starvation_high": HIGH_BOUND}


@dataclass(frozen=True)
class Thresholds:
    # --- data -----------------------------------------------------------------------------------
    #: Fewer samples per GPU than this in the window is insufficient_data, not a guess. (proposal)
    min_samples: int = 30
    #: Activity under this ratio is "no work": SM / GR activity about 0. (tool: Princeton JDS uses 0%)
    idle_activity: float = IDLE_ACTIVITY
    #: Idle for this many trailing seconds of the window (or the whole window, if shorter) = idle.
    #: (tool: JDS warns at 60 min; a shorter window here, because the analyzer's window is minutes)
    idle_seconds: float = 300.0
    #: ... after work that was sustained (busy on at least this share of the recent_samples samples before
    #: the quiet tail), or no work at all: a job that stopped. Burstier work is a serving replica between
    #: requests, or a notebook between cells, pausing rather than done. (proposal)
    idle_sustained_share: float = 0.5
    #: The samples before the quiet tail that say whether work was sustained. (proposal)
    recent_samples: int = 20
    #: ... or quiet this many times longer than the longest pause while it worked (a notebook's last
    #: cell long ago): for requests arriving at random, a quiet spell four times the longest gap before
    #: it is rare, so the work stopped. (proposal; gpulens eval: no serving replica called idle)
    idle_pause_factor: float = 4.0
    #: Idle on at least this share of the window's samples: idle with confidence_idle, else with
    #: confidence_idle_partly. (proposal)
    idle_confident_share: float = 0.95
    #: A GPU that worked less than this share of a window of sparse_span_seconds or more (after its start-up)
    #: is idle, whatever the pattern of its few blips: a notebook that runs a cell every half hour, a replica
    #: that loaded its model and served nothing. Measured in seconds of work (utilization or activity times
    #: each row's interval, or the exporter's busy time), not in rows that caught a blip. Serving needs
    #: requests. (proposal, issue 30: about 1% of an hour)
    sparse_busy_share: float = 0.01
    #: ... over a window, or a pod's span in a report, this long at least: shorter, a replica between
    #: requests looks the same. (proposal, issue 30: an hour or more)
    sparse_span_seconds: float = 3600.0
    # --- data starvation (tool: SageMaker Debugger LowGPUUtilization: p95 > 70% and p5 < 10%) ----
    starvation_high: float = HIGH_BOUND
    starvation_low: float = LOW_BOUND
    #: p95 > high and p5 < low, written as "more than 5% of samples above high / below low". (tool:
    #: SageMaker Debugger LowGPUUtilization)
    starvation_tail: float = 0.05
    #: Busy/idle switches per minute that make it an oscillation rather than one change of phase,
    #: such as a warm-up. (proposal)
    starvation_switches_per_minute: float = 2.0
    #: CPU use / limit at which the pod's CPU is saturated. (tool: SageMaker CPUBottleneck 90%)
    cpu_saturated: float = 0.9
    #: Samples further apart than this cannot show a training step's bursts and gaps (steps take
    #: 0.1-10 s): what looks like bursts at minute scale is request arrivals or aliasing. Coarser data
    #: is called data_starvation only on the CPU evidence. (proposal)
    starvation_max_sample_seconds: float = 5.0
    #: Training steps repeat at a steady period; requests arrive at random. The spread of the time
    #: between burst starts, (p75 - p25) / median, is at most this for iterations; Poisson arrivals
    #: give 1.58. (proposal)
    starvation_regularity: float = 0.5
    #: The same from the exporter's counters (core/activity.py), which survive any scrape interval: the
    #: share of bursts starting within 1.5x of the previous burst's period is at least this for
    #: iterations; Poisson arrivals give 0.2. (proposal)
    starvation_steady_share: float = 0.5
    #: Fewer bursts than this cannot show whether they repeat at a steady period: the evidence says so.
    #: (proposal)
    min_bursts: int = 10
    # --- memory bandwidth (tool: KempnerPulse DRAM >= 0.5 with SM < 0.5; proposal: max pipe < 0.3) -
    dram_active: float = 0.5
    pipes_idle: float = 0.3
    #: Fraction of samples showing the signature for the class to hold. (proposal)
    signature_fraction: float = 0.5
    # --- memory fragmentation / OOM risk ----------------------------------------------------------
    #: Used over capacity. (common rule: > 0.9 for 5 min)
    memory_full: float = 0.9
    #: ... for this long. (common rule: > 0.9 for 5 min)
    memory_full_seconds: float = 300.0
    #: Growth in points of capacity. (tool: SageMaker GPUMemoryIncrease +5 points)
    memory_growth: float = 0.05
    #: Memory flatter than this (std of the used fraction) is a pre-allocator (vLLM, JAX,
    #: TensorRT-LLM hold up to 90% by design), never fragmentation. (proposal)
    preallocator_flatness: float = 0.01
    #: Used memory falling by more than this share of capacity from one sample to the next: the process
    #: died and gave its memory back (an OOM and a restart). (proposal)
    memory_drop: float = 0.2
    # --- interconnect (NVIDIA link rates; tool: KempnerPulse PCIe >= 1 GB/s with SM < 30%) --------
    link_busy: float = 0.6  # of the link's capacity (proposal)
    interconnect_sm: float = 0.3
    # --- throttling (tools: canonical hardware-observer, nvidia_gpu_exporter) --------------------
    #: HW slowdown 0x8, SW thermal 0x20, HW thermal 0x40, HW power brake 0x80; never SW power cap 0x4,
    #: which is normal boost behaviour. (NVIDIA: nvml.h clocks event reasons; tools as above)
    throttle_reasons_mask: int = 0x8 | 0x20 | 0x40 | 0x80
    throttle_seconds: float = 300.0
    # --- wrong GPU type (tool: Job Defense Shield "GPU model too powerful": <= 20%, <= 10 GB) ------
    oversized_activity: float = 0.2
    oversized_memory_bytes: float = 10e9
    #: ... over this long, for confidence_wrong_gpu (shorter: confidence_wrong_gpu_short). (tool: Job Defense
    #: Shield: over >= 1 h)
    oversized_span_seconds: float = 3600.0
    # --- poor placement (tool: jobstats "unused GPUs in a multi-GPU job"; proposal for the ratio) --
    #: The least busy GPU's activity / the busiest's. (tool: jobstats; proposal for the ratio)
    placement_imbalance: float = 0.5
    #: A multi-GPU pod whose busiest GPU is under this activity has a bigger problem than placement (idle or
    #: starved): it is judged on that instead. (proposal)
    placement_min_activity: float = 0.3
    #: Peer traffic over PCIe: the mean of the smaller of a GPU's PCIe send and receive rates, of the link's
    #: capacity (collectives send as much as they receive; input pipelines mostly receive). (proposal)
    placement_pcie_peer: float = 0.1
    #: NVLink carrying under this share of its capacity is idle. (proposal)
    nvlink_idle: float = 0.01
    #: NVLink errors that mean failing links (DCGM dcgm_gpu_hardware_limits.h: CRC errors "only matter at
    #: rates of 100+ per second"; at most 1 replay or recovery error).
    nvlink_crc_errors_per_second: float = 100.0
    nvlink_errors: float = 1.0  # (DCGM: at most 1 replay or recovery error)
    # --- power as the evidence of work (docs/signals.md: busy is not working) ---------------------------
    #: Busy (utilization above starvation_high) at under this share of the board's power limit is waiting,
    #: not work: a rank spinning in a collective reports 99-100% utilization at about 150 W of an H100's
    #: 700 W (0.21), while training draws 500-700 W. (proposal)
    waiting_power_share: float = 0.35
    # --- host stalls: a GPU waiting on its host or on a peer (docs/signals.md: busy is not working) -----
    #: A GPU waiting (busy at low power, or without a kernel while its peers wait) on at least this share of
    #: the window is stalled: a checkpoint written every 20-60 s of steps stalls a job 25-50% of the time.
    #: (proposal)
    stall_share: float = 0.2
    #: Stalls this long or longer, at a steady period, are saves (a checkpoint: tens of seconds every few
    #: minutes); shorter ones every step are the input pipeline. (proposal)
    stall_long_seconds: float = 10.0
    #: A rank whose peers draw at most this share of its power while a kernel runs (busy power) works while
    #: they wait for it: a straggler. Identical ranks draw within 10% of each other. (proposal)
    straggler_power_ratio: float = 0.75
    #: The rank the others wait for, with its SM clock this far (of its maximum) under theirs, is a slow GPU
    #: (throttled, power-capped); otherwise its work or its host. (proposal)
    straggler_clock_margin: float = 0.05
    #: Host-to-device PCIe traffic at this rate or more while the SMs wait (activity under interconnect_sm)
    #: with no kernel spinning is the GPU fetching its parameters or activations from host memory (CPU offload:
    #: FSDP or DeepSpeed ZeRO-Offload): bytes per second. A copy runs no kernel; a rank spinning in a collective
    #: whose exchange crosses PCIe waits on a peer. An input pipeline's copies come in spikes at each step's
    #: start, under it on average. (tool: KempnerPulse PCIe >= 1 GB/s with SM < 30%)
    offload_pcie_bytes_per_second: float = 1e9
    #: Bytes sent back to the host per byte fetched (PCIe TX over RX, their means over the window) from which the
    #: host traffic goes both ways: CPU offload sends gradients or optimizer state back as it fetches parameters (a
    #: real FSDP job with CPU offload: 0.6 GB/s out for 1.4 GB/s in, 0.43), where an input pipeline sends back
    #: little beside its batches (under 0.05). Both ways at offload volume settles offload over input; one way
    #: with the pod's CPU at its limit settles input over offload. (proposal: 0.2, between the two)
    offload_return_share: float = 0.2
    #: A pod using one CPU core, give or take this many, under a limit of more (or none), while its one GPU
    #: works little: one host thread drives the GPU (a Python loop, held to one core by the GIL, launching a
    #: short kernel per token or per item). (proposal)
    host_thread_cores: float = 0.15
    #: The GPUs of a multi-GPU pod are ranks of one job, whose waits a straggler or a collective explains, only
    #: where the data shows them exchanging (NVLink above nvlink_idle, PCIe both ways above placement_pcie_peer)
    #: or their power (else activity) moving together: the mean correlation between its GPUs' samples at least
    #: this. Independent processes (one inference server per GPU) neither exchange nor move together.
    #: (proposal)
    job_correlation: float = 0.5
    #: Pipeline stages take turns: of the samples (taken at one moment on all of a pod's GPUs) where one GPU
    #: waits with no work (activity under starvation_low), at least this share have another working (above
    #: the exporter's busy level, 0.5). Data-parallel ranks wait together (in one collective, on one input);
    #: a pipeline's stages wait in turn, each in its bubble while its neighbours compute. (proposal)
    pipeline_stagger_share: float = 0.5
    #: ... and two GPUs or more wait so, each on at least this share of its samples: stages in turn (a rank
    #: that waits while the others spin is a checkpoint or a straggler, not a stage). Not every stage: samples
    #: at a multiple of the step's period can miss one stage's bubble every time. (proposal)
    pipeline_gap_share: float = 0.02
    #: A pipeline's bubble is expected up to GPipe's (p-1)/(m+p-1) for p stages with this many micro-batches
    #: per stage (m = this x p): "negligible when M >= 4 x K" (tool: GPipe, Huang et al. 2019, section 2.3).
    #: Above it, the schedule (too few micro-batches) costs the GPU time, not the stages' work.
    pipeline_microbatches_per_stage: int = 4
    #: ... by this many standard errors of the measured bubble (a share of the pod's samples: sqrt(b(1-b)/n)),
    #: so that 40 samples at 15 s do not call a stall on a bubble they measure 0.03 high. (proposal: ~95%)
    pipeline_bubble_standard_errors: float = 2.0
    # --- over-provisioned serving ----------------------------------------------------------------
    #: Memory held on most samples: a model kept resident between requests. (proposal: well above the
    #: ~0.5 GiB a bare CUDA context takes)
    serving_memory_bytes: float = 1024**3
    #: ... on at least this share of samples: the replica keeps its model loaded. (proposal)
    serving_held_share: float = 0.9
    #: Quiet on at least this share of samples: the work comes in bursts. (proposal)
    serving_quiet_share: float = 0.3
    # --- history (gpulens report over hours or days) ---------------------------------------------
    #: A problem class needs this share of the covered time to be a pod's headline over its span, so
    #: that a few minutes of a problem in a healthy day do not name the day. (proposal)
    headline_min_share: float = 0.1
    # --- healthy (NVIDIA: SM active >= 0.8 necessary for effective use) -------------------------
    healthy_sm: float = 0.8
    #: Below this mean activity a GPU is likely used ineffectively. (NVIDIA: < 0.5)
    ineffective_sm: float = 0.5
    # --- the right-sizing plan (analyzer/outputs/plan.py) -----------------------------------------------------
    #: Capacity a plan keeps above the measured peak (memory, activity, load): 15%. (tool: the Kubernetes
    #: VPA recommender's default safety margin, --recommendation-margin-fraction 0.15)
    plan_headroom: float = 0.15
    #: Load is measured as activity averaged over bins of this many seconds (or the sampling interval, if
    #: longer): what a replica count can follow. (proposal: a minute; the HPA reacts every 15 s)
    plan_load_bin_seconds: float = 60.0
    #: A serving workload's replicas carry its summed load at this percentile of the bins ... (proposal)
    plan_load_percentile: float = 0.95
    #: ... at this activity each: the rest absorbs bursts within a bin. (proposal: an HPA-style target)
    plan_replica_activity: float = 0.7
    #: Where a serving engine says how full its KV cache is, a replica carries the requests that fill this
    #: share of it: past it vLLM preempts running requests to make room (its scheduler's recompute or swap),
    #: and latency climbs. (proposal: 10% below full, as gpu_memory_utilization's default leaves 10%)
    plan_kv_cache_bound: float = 0.9
    #: Idle notebook kernels are culled after this long. (tool: Zero to JupyterHub's cull.timeout default)
    plan_cull_seconds: float = 3600.0
    #: A serving replica is scaled to zero after this long without a request, woken by the next one: its first
    #: request waits for the model to load (minutes for an LLM), worth it only for rests of hours: nights,
    #: weekends. (proposal: an hour, the notebook culler's; KEDA's cooldownPeriod and Knative's
    #: scale-to-zero-grace-period are set to it)
    plan_scale_to_zero_seconds: float = 3600.0
    #: A plan over less than this span has not seen a weekly pattern (weekends, batch days): its actions'
    #: confidence is capped at plan_short_confidence and it says so. (proposal: a week)
    plan_trusted_span_seconds: float = 7 * 86400.0
    #: ... the cap. (proposal: as unsure as a signature that lacks its profiling fields)
    plan_short_confidence: float = 0.6
    #: A plan over less than this span says what its actions saved in the span, not per 30 days: a month
    #: projected from minutes multiplies a burst or a lull by thousands. (proposal: a day, one cycle of the
    #: daily pattern of serving load and working hours)
    plan_projection_min_seconds: float = 86400.0
    # --- the changes workloads went through (analyzer/judging/changes.py) -------------------------------------------
    #: Steps of a workload's replicas or its autoscaler's bounds each within this long of the one before are one
    #: change: a scale done in several commands, a GitOps sync applied in passes. (proposal: 10 minutes, past a
    #: rollout's steps and well within a day's comparison windows)
    change_settle_seconds: float = 600.0
    #: A change is judged over two windows of equal length, before it and after, each at most this long and cut
    #: short by the span's ends and the workload's other changes. (proposal: a week, one cycle of the weekly
    #: pattern; longer windows compare seasons, not a change)
    change_window_max_seconds: float = 604800.0
    #: Windows shorter than this leave a change too early to tell: an hour after a scale-down has not yet seen
    #: the load it must hold. (proposal: an hour, the notebook culler's timeout and many HPA stabilisation windows)
    change_window_min_seconds: float = 3600.0
    #: Windows at least this long are trusted as a day's pattern: shorter ones cap a change's confidence at
    #: plan_short_confidence. (proposal: a day, one cycle of serving load and working hours)
    change_window_trusted_seconds: float = 86400.0
    #: The live analyzer judges the changes over its history again this often: each judgement reads
    #: kube-state-metrics' history and two windows of each serving workload's engine, which move by minutes,
    #: not by cycles. (proposal: 5 minutes, kube-state-metrics' pace and the dashboards')
    change_judge_seconds: float = 300.0
    # --- the cluster: waits, pools and quotas (analyzer/judging/scheduling.py) ---------------------------------------
    #: A GPU pod waits this long for a node before a report names it: shorter waits are the scheduler's own
    #: latency and a node autoscaler's scale-up. (proposal: 5 minutes, half kubernetes-mixin's KubePodNotReady)
    schedule_pending_seconds: float = 300.0
    #: Fragmentation that stranded GPUs in this many separate spells (spells closer than
    #: schedule_pending_seconds are one) recurs: the plan bin-packs the pool. (proposal)
    schedule_recurring_episodes: int = 2
    #: A namespace with no GPU quota that holds more than this share of the cluster's GPUs while other
    #: namespaces' pods wait is taking the cluster (the seed's "one pipeline takes every GPU"). (proposal: half)
    schedule_dominant_share: float = 0.5
    # --- alerting: the generated Prometheus rules of alerts/rules.py; durations are PromQL durations ----
    #: Page when a pod's SM activity stays under this ratio (issue 6: 30% for 30 minutes).
    alert_low_sm: float = 0.3
    #: ... for this long. (issue 6)
    alert_low_sm_for: str = "30m"
    #: The rate() window of the recording rules: long enough to smooth one training step, short
    #: enough that a change shows within minutes. (proposal; kubernetes-mixin uses 5m)
    alert_rate_window: str = "5m"
    #: Allocated GPU with activity under idle_activity this long. (tool: Princeton JDS warns at 60 min)
    alert_idle_for: str = "1h"
    #: How long the analyzer must keep a class before its ticket fires. As long as the page's own
    #: duration: the verdict needs the analysis window (10 min) before it exists, so the ticket fires
    #: after the page of a pod whose activity is low too, and Alertmanager's inhibition mutes it; one
    #: notification per cause. (proposal)
    alert_verdict_for: str = "30m"
    #: Memory on a GPU no pod holds, above the driver's own context (~0.5 GiB), for this long is
    #: leftover memory (docs/signals.md: DataLoader workers of a killed job, gpu-operator #2880). (proposal)
    alert_memory_held_bytes: float = 1024**3
    #: ... for this long: longer than a pod's start and stop take. (proposal)
    alert_memory_held_for: str = "15m"
    #: NVLinks down or failing (nvlink_crc_errors_per_second, nvlink_errors) this long. (proposal: long enough
    #: for a link retraining after a GPU reset, short enough to cordon the node before the next job lands)
    alert_nvlink_for: str = "5m"
    #: Throttled share of time, over alert_rate_window, above which a GPU counts as throttled.
    #: Held for throttle_seconds. (tools: canonical hardware-observer, nvidia_gpu_exporter: 5 min)
    alert_throttled_fraction: float = 0.5
    #: A GPU pod waiting this long for a pool whose free GPUs are spread over nodes (fragmented) pages the
    #: pool's owner. (tool: kubernetes-mixin's KubePodNotReady fires after 15m)
    alert_waiting_for: str = "15m"
    #: A workload's latest change judged regressed this long (three of the analyzer's judgements of the changes,
    #: change_judge_seconds apart: a window's edge moving past a burst does not page) tickets its team. (proposal)
    alert_change_regressed_for: str = "15m"
    #: A team's or namespace's GPU spend (the analyzer's gpulens_workload_allocated_cost_dollars_total) over its
    #: budget's steady pace (its month's budget over 30 days): above this over an hour and over the last 5 minutes
    #: pages, 2% of the month's budget gone in an hour. (common rule: the Google SRE workbook, "Alerting on SLOs":
    #: multiwindow, multi-burn-rate alerts, a burn rate of 14.4 over 1h and 5m pages)
    budget_burn_1h_page_factor: float = 14.4
    #: ... above this over 6 hours and the last 30 minutes pages too: 5% of the budget in 6 hours. (common rule:
    #: the SRE workbook's 6 over 6h and 30m)
    budget_burn_6h_page_factor: float = 6.0
    #: ... above this over 3 days and the last 6 hours tickets: 10% of the budget in 3 days, a pace that spends it
    #: before the month ends. (common rule: the SRE workbook's 1 over 3d and 6h)
    budget_burn_3d_ticket_factor: float = 1.0
    #: An exporter or analyzer target down, or its data stale, this long. (kubernetes-mixin: 15m for
    #: TargetDown; shorter here because without the exporter every GPU alert goes blind)
    alert_target_down_for: str = "5m"

    # --- confidences, 0-1 (proposal: ordered by how directly the evidence shows the cause) ---------------
    #: Idle on nearly all samples (>= 0.95) and on most: the quiet tail is the work stopping.
    confidence_idle: float = 0.95
    confidence_idle_partly: float = 0.85
    #: Sparse use over an hour or more (sparse_busy_share).
    confidence_sparse: float = 0.9
    #: Memory full and grown; more for restarts and for staying full for long.
    confidence_fragmentation: float = 0.7
    confidence_fragmentation_restarts: float = 0.2
    confidence_fragmentation_full: float = 0.1
    #: Placement across sockets or root complexes without NVLink, or NVLink idle while PCIe carries the
    #: exchange; NVLinks down or failing.
    confidence_placement: float = 0.9
    confidence_link_faults: float = 0.85
    #: A share signature (interconnect, memory bandwidth, throttling): base + gain x the share of samples.
    confidence_share_base: float = 0.55
    confidence_share_gain: float = 0.4
    #: Host stalls: a rank named that stalls its peers; a straggler by power; a wait at low power without a
    #: rank to name; uneven activity without power to say who waits.
    confidence_stall: float = 0.8
    confidence_straggler: float = 0.7
    #: A rank alone whose long stalls at a steady period its own samples time (saves from this rank).
    confidence_saves: float = 0.7
    #: Fetches from host memory over PCIe while the SMs wait, on most samples (CPU offload).
    confidence_offload: float = 0.7
    #: One GPU working little while its pod's CPU use sits at one core (one host thread).
    confidence_host_thread: float = 0.6
    #: Pipeline stages taking turns with a bubble above GPipe's at pipeline_microbatches_per_stage (or within it).
    confidence_pipeline: float = 0.6
    confidence_waiting: float = 0.6
    confidence_uneven: float = 0.5
    #: Data starvation with its bursts timed at a steady period (or the CPU at its limit); more with the CPU
    #: at its limit; from the CPU alone (samples too coarse to time steps, or bursts that do not switch like
    #: them).
    confidence_starvation: float = 0.75
    confidence_starvation_cpu: float = 0.2
    confidence_starvation_coarse: float = 0.6
    #: Serving with bursts at random; without bursts timed.
    confidence_serving: float = 0.75
    confidence_serving_untimed: float = 0.6
    #: Wrong GPU type over an hour or more, and over less.
    confidence_wrong_gpu: float = 0.8
    confidence_wrong_gpu_short: float = 0.65
    #: Low activity that no signature explains (unexplained): how sure that the GPU is underused
    #: for a cause the data leaves open, from samples that time bursts and from coarser ones.
    confidence_low_activity: float = 0.4
    confidence_low_activity_coarse: float = 0.3
    #: Healthy with SM activity >= healthy_sm, and from utilization alone.
    confidence_healthy: float = 0.9
    confidence_healthy_utilization: float = 0.6
    #: A GPU no pod holds, in data that attributes GPUs to pods: unallocated, or held without a pod. Not 1: a
    #: pod whose attribution failed (a kubelet the exporter could not read) looks the same.
    confidence_without_pod: float = 0.9
    #: The most a class that profiling fields would settle is given without them.
    confidence_without_profiling: float = 0.5

    @classmethod
    def load(cls, path: str | None) -> Thresholds:
        """Defaults, overridden by a YAML file of field: value; ConfigError naming the bad key."""
        if not path:
            return cls()
        document = read_yaml(path, "--thresholds")
        for name in document if isinstance(document, dict) else ():
            if name in REMOVED:
                raise ConfigError(f"--thresholds {path}: {name} is gone: {REMOVED[name]}; delete it from the file")
        given = validate(document, _schema(), f"--thresholds {path}", empty={})
        for name, bound in EXPORTER_BOUNDS.items():
            if name in given and given[name] != bound:
                raise ConfigError(
                    f"--thresholds {path}: {name} {given[name]:g} cannot be honoured: gpulens' exporter counts the "
                    f"activity between scrapes at the fixed bounds of its histogram (core/activity.py), and reads "
                    f"{name} at {bound:g} from it, so its data would still be judged at {bound:g} while other inputs "
                    f"moved; leave {name} at {bound:g}"
                )
        return cls(**given)

    def at_speed(self, speed: float) -> Thresholds:
        """These thresholds for workloads played `speed` times faster than real time (a simulated fleet):
        WORKLOAD_DURATIONS divided by it, WORKLOAD_RATES multiplied."""
        return replace(
            self,
            **{name: getattr(self, name) / speed for name in WORKLOAD_DURATIONS},
            **{name: getattr(self, name) * speed for name in WORKLOAD_RATES},
        )

    def to_yaml(self, heading: str = "") -> str:
        """Every threshold as a --thresholds file holds it, `heading` as a comment above them."""
        import yaml  # here: the exporter loads this module, and no YAML

        comment = "".join(f"# {line}\n" for line in heading.splitlines())
        return comment + yaml.safe_dump(asdict(self), sort_keys=False)


#: Thresholds that measure what a workload does on its own clock: how long one of its stalls lasts, how fast it
#: moves bytes. A simulated fleet played `speed` times faster than real time (the demo's, five-fold) shows its
#: stalls that many times shorter and its rates that many times higher, and is judged at these scaled to match
#: (Thresholds.at_speed): unscaled, the demo's 15-25 s checkpoints were 3-5 s, under stall_long_seconds, and
#: read as the input pipeline's. The other durations are spans the analyzer watched (real time, as its alerts').
WORKLOAD_DURATIONS = ("stall_long_seconds",)
WORKLOAD_RATES = ("offload_pcie_bytes_per_second",)


#: Thresholds no rule reads any more, and why: a file that sets one is told so, not offered a near name.
REMOVED = {
    "confidence_starvation_untimed": "data_starvation is no longer claimed from bursts too few to time (such low "
    "activity is unexplained, at confidence_low_activity)",
    "confidence_serving_coarse": "overprovisioned_serving is no longer guessed from coarse samples and a model held "
    "(such low activity is unexplained, at confidence_low_activity_coarse)",
}
#: Thresholds named with a unit (and these two counts) are numbers from 0 up; every other number is a
#: ratio from 0 to 1.
_UNIT_SUFFIXES = ("_seconds", "_bytes", "_per_second", "_per_minute", "_factor")
_UNBOUNDED = {"starvation_regularity", "nvlink_errors", "pipeline_bubble_standard_errors"}


def _schema() -> Record:
    """The schema of a --thresholds file: every field by its type and range."""
    keys: dict[str, Schema] = {}
    for f in fields(Thresholds):
        if f.type == "str":
            keys[f.name] = Text(
                valid=lambda v: PROMQL_DURATION.fullmatch(v) and duration_seconds(v) <= LONGEST_DURATION,
                what="a Prometheus duration such as 30s, 5m or 1h, at most 10y",
            )
        elif f.type == "int":
            keys[f.name] = Integer(low=1)
        elif f.name.endswith(_UNIT_SUFFIXES) or f.name in _UNBOUNDED:
            keys[f.name] = Number(low=0)
        else:
            keys[f.name] = Number(low=0, high=1, noun="a ratio")
    return Record(keys, what="a mapping of threshold: value")
