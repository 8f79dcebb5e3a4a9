"""host_stall: the GPU waits on its host or on a peer rather than works, and the cause of each wait, each with its
own fix (core.bottlenecks.STALL_CAUSES): pipeline stages in their bubbles, fetches from host memory (CPU
offload), one host thread, one rank stalling the others, a straggler, a peer outside the pod, synchronous saves,
uneven activity."""

from __future__ import annotations

import math
from typing import Literal

from gpulens.analyzer.judging.evidence import Evidence, percent, share
from gpulens.analyzer.judging.features import PodFeatures, PodGpu
from gpulens.analyzer.judging.rules.base import Finding, Rule, Settles, fmt, waiting_waste
from gpulens.core.activity import BUSY_LEVEL
from gpulens.core.catalog import GpuModel
from gpulens.core.thresholds import Thresholds


def pipeline(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """The pod's GPUs take turns: when one waits with no work, another works (stagger_share), two or more wait
    so on pipeline_gap_share of their samples, and they exchange (NVLink or PCIe both ways): pipeline stages,
    each waiting in its bubble. A bubble over GPipe's for its stages with pipeline_microbatches_per_stage
    micro-batches each, by pipeline_bubble_standard_errors, leaves the GPUs waiting on the schedule
    (host_stall); up to it, it is what the schedule costs (healthy, the bubble named). Data-parallel ranks wait
    together (one collective, one input) and are not stages."""
    if f.gpus < 2 or not f.stagger_share >= t.pipeline_stagger_share or not f.gapped_gpus >= 2:
        return None
    exchange = _exchange(f, t)
    if not exchange:
        return None  # independent processes take turns by chance: none of them waits for another
    p, bubble = f.gpus, f.bubble_share
    if math.isnan(bubble):
        return None  # no GPU worked above BUSY_LEVEL: no turns to measure a bubble between
    expected = (p - 1) / ((t.pipeline_microbatches_per_stage + 1) * p - 1)
    implied = (p - 1) * (1 - bubble) / bubble if bubble > 0 else math.inf
    margin = t.pipeline_bubble_standard_errors * math.sqrt(bubble * (1 - bubble) / f.samples)
    stalled = bubble - margin > expected
    evidence = {
        "stages_take_turns": f"{percent(f.stagger_share)} of the moments a GPU waits (activity < "
        f"{percent(t.starvation_low)}) "
        f"another works (> {percent(BUSY_LEVEL)}), >= {percent(t.pipeline_stagger_share)}; "
        f"{f.gapped_gpus:.0f} of {p} GPUs wait on "
        f">= {percent(t.pipeline_gap_share)} of their samples: pipeline stages, not ranks that wait together",
        "one_job": exchange,
        "pipeline_bubble": f"{percent(bubble)} +/- {percent(margin)} of the time (1 - mean activity / working "
        "activity, "
        f"{f.samples} samples); GPipe's (p-1)/(m+p-1) for p = {p} stages here implies m = {implied:.3g} "
        f"micro-batches per step; with m >= {t.pipeline_microbatches_per_stage}p = "
        f"{t.pipeline_microbatches_per_stage * p} it is <= {percent(expected)}"
        + (": above it" if stalled else "")
        + " (stages in other pods raise p and the bar)",
    }
    if not stalled:
        return Finding("healthy", t.confidence_pipeline, evidence)
    return Finding("host_stall", t.confidence_pipeline, evidence, "pipeline")


def host_stall(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """The GPU waits on its host or on a peer rather than works. Without profiling fields utilization says
    that a kernel ran, not that the GPU worked: a rank waiting in a collective spins a kernel at 100%
    utilization and a fifth of its power (docs/signals.md). The causes, each with its own fix
    (STALL_CAUSES): fetches from host memory (CPU offload); one host thread driving one GPU; one rank stalls
    the others (a checkpoint written from it, its input); a straggler works while its peers wait; the whole
    pod waits on a peer outside it; synchronous saves on a GPU judged alone; uneven activity where power
    cannot say who waits. Pipeline stages waiting in their bubbles are pipeline's, before these."""
    return (
        _offload(f, t, info)
        or _host_thread(f, t)
        or _rank_stalls(f, t)
        or _straggler(f, t)
        or _pod_waits(f, t)
        or _saves(f, t)
        or _uneven(f, t)
    )


def host_transfers(f: PodFeatures, t: Thresholds, info: GpuModel) -> Literal["both ways", "one way", ""]:
    """How the GPU's host traffic flows while it waits between its bursts (its samples under starvation_low, on
    more than starvation_tail of them), where PCIe carries host traffic only (one GPU, or GPUs whose collectives
    go over NVLink): "both ways" where it fetches offload_pcie_bytes_per_second or more on average then and
    sends offload_return_share of that back (CPU offload: parameters in, gradients out); "one way" where it
    fetches that much with less back (an input pipeline's batches); "" where it fetches less, does not wait,
    PCIe may carry the pod's own exchange, or the input has no PCIe counters. A healthy job's steady input is
    no wait's."""
    into, back = f.host_to_device_in_gaps_bytes_per_second, f.device_to_host_in_gaps_bytes_per_second
    if not f.low_share > t.starvation_tail or not into >= t.offload_pcie_bytes_per_second or math.isnan(back):
        return ""
    if f.gpus >= 2 and not info.nvlink_bytes_per_second > 0:
        return ""
    return "both ways" if back >= t.offload_return_share * into else "one way"


def _transfers_evidence(f: PodFeatures, t: Thresholds) -> Evidence:
    into, back = f.host_to_device_in_gaps_bytes_per_second, f.device_to_host_in_gaps_bytes_per_second
    both = back >= t.offload_return_share * into
    return Evidence(
        f"while it waits, {into / 1e9:.3g} GB/s into the GPU over PCIe and {back / 1e9:.3g} GB/s back "
        f"({percent(back / into)} "
        f"{'>=' if both else '<'} {percent(t.offload_return_share)}): ",
        "parameters fetched and gradients sent back, at a volume only offloaded state moves (CPU offload)"
        if both
        else "one way, as an input pipeline's batches go",
    )


def _offload(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """The GPU fetches its parameters or activations from host memory (CPU offload): host-to-device PCIe traffic
    of offload_pcie_bytes_per_second or more while the SMs wait, on most samples; or, however bursty (a real
    FSDP job fetches at 27 GB/s for a tenth of a second, 1.4 GB/s on average), transfers both ways at that
    volume (host_transfers()), which settle offload over an input pipeline whatever the steps' shape. One way with
    the pod's CPU at its limit is the input pipeline's (data_starvation): the CPU settles input over offload.
    PCIe carries host traffic only where it carries no peer exchange: one GPU, or GPUs whose collectives go over
    NVLink."""
    transfers = host_transfers(f, t, info)
    if not (f.host_fetch_share >= t.signature_fraction or transfers == "both ways"):
        return None
    if f.gpus >= 2 and not info.nvlink_bytes_per_second > 0:
        return None  # PCIe may carry the exchange between the pod's GPUs: interconnect and placement's to judge
    if transfers != "both ways" and f.cpu_at_limit_share >= t.signature_fraction:
        return None  # its CPU at its limit while the GPU waits, fetching one way: its input pipeline
    evidence: dict[str, str] = {}
    if f.host_fetch_share >= t.signature_fraction:
        evidence["host_fetch_fraction"] = Evidence(
            share(f.host_fetch_share),
            f" of samples with >= {t.offload_pcie_bytes_per_second / 1e9:g} GB/s into the GPU over PCIe while "
            f"activity < {percent(t.interconnect_sm)} (mean {f.host_to_device_bytes_per_second / 1e9:.3g} "
            "GB/s): it waits on "
            "what it fetches from host memory",
        )
    if transfers:
        evidence["transfers"] = _transfers_evidence(f, t)
    return Finding("host_stall", t.confidence_offload, evidence, "offload")


def _host_thread(f: PodFeatures, t: Thresholds) -> Finding | None:
    """One GPU working little (activity under ineffective_sm) but seldom quiet (under serving_quiet_share of
    its samples: short launches, one after another) while its pod's CPU use sits within host_thread_cores of
    one core, under a limit of more, on most samples: one host thread drives the GPU, which waits between its
    launches. A notebook busy on its CPU leaves the GPU quiet for long; a pod at its CPU limit is
    data_starvation's or unexplained's to judge."""
    if f.gpus != 1 or not f.activity < t.ineffective_sm or not f.one_core_share >= t.signature_fraction:
        return None
    if not f.quiet_share < t.serving_quiet_share or f.cpu_at_limit_share >= t.signature_fraction:
        return None
    evidence: dict[str, str] = {
        "one_core_fraction": Evidence(
            share(f.one_core_share),
            f" of samples with the pod's CPU at 1 +/- {t.host_thread_cores:g} cores (under a higher limit) while "
            f"activity is {percent(f.activity)} < {percent(t.ineffective_sm)}: one host thread drives the "
            "GPU, which waits "
            "between its launches",
        ),
        "quiet_fraction": Evidence(
            share(f.quiet_share), " of samples < ", share(t.serving_quiet_share), ": launches one after another"
        ),
    }
    return Finding("host_stall", t.confidence_host_thread, evidence, "host_thread")


def one_job(f: PodFeatures, t: Thresholds) -> str:
    """What shows that a multi-GPU unit's GPUs are ranks of one job (exchange between them, or samples that
    move together), without which no wait is put on a straggler or a collective: independent processes, one
    per GPU, have no peer to wait for. "" where nothing does."""
    if exchange := _exchange(f, t):
        return exchange
    if f.gpu_correlation >= t.job_correlation:
        return f"their samples move together (correlation {fmt(f.gpu_correlation)} >= {t.job_correlation})"
    return ""


def _exchange(f: PodFeatures, t: Thresholds) -> str:
    """What shows a multi-GPU unit's GPUs exchanging data: NVLink in use, or PCIe both ways. "" where nothing does."""
    if f.nvlink_use >= t.nvlink_idle:
        return f"NVLink carries {percent(f.nvlink_use)} >= {percent(t.nvlink_idle)} of its capacity: the GPUs exchange"
    if f.pcie_peer_use >= t.placement_pcie_peer:
        return (
            f"PCIe carries {percent(f.pcie_peer_use)} >= {percent(t.placement_pcie_peer)} of its capacity "
            "both ways: the GPUs "
            "exchange"
        )
    return ""


def unrelated(f: PodFeatures, t: Thresholds) -> str:
    """Why a multi-GPU unit's GPUs may be independent processes: what the data shows of their exchange and
    correlation (for the evidence where one_job found nothing)."""
    links = (
        f"NVLink at {percent(f.nvlink_use)} of its capacity"
        if not math.isnan(f.nvlink_use)
        else "no NVLink traffic in the input"
    )
    together = "" if math.isnan(f.gpu_correlation) else f", correlation between their samples {fmt(f.gpu_correlation)}"
    return f"{links}{together}: no sign that the GPUs are ranks of one job"


def waiting_means(t: Thresholds) -> str:
    return (
        f"a kernel running at < {percent(t.waiting_power_share)} of the power limit or with SMs < "
        f"{percent(t.starvation_low)} "
        "active: waiting (a kernel spinning in a collective), not working"
    )


def _rank_stalls(f: PodFeatures, t: Thresholds) -> Finding | None:
    """Some GPUs of the pod wait on stall_share of their samples or more while one barely waits: the one
    they wait for. Without a kernel meanwhile, its host holds it (a checkpoint, its input); working, it is
    a straggler."""
    waiting = [g for g in f.pod_gpus if g.waiting >= t.stall_share]
    if not waiting:
        return None
    held_by = min(f.pod_gpus, key=lambda g: math.inf if math.isnan(g.waiting) else g.waiting)
    if not held_by.waiting < t.stall_share / 2:
        return None  # all of them wait: on something outside the pod (_pod_waits)
    job = one_job(f, t)
    if not job:
        return None
    evidence = {
        "waiting_gpus": ", ".join(f"{g.gpu} {percent(g.waiting)}" for g in waiting)
        + f" of samples >= {percent(t.stall_share)}: {waiting_means(t)}",
        "one_job": job,
    }
    if held_by.no_kernel >= t.stall_share:
        cause, shape = _stall_shape(f, t)
        evidence["stalling_gpu"] = (
            f"{held_by.gpu}: no kernel on {percent(held_by.no_kernel)} of samples while its peers wait: its host holds "
            "it (a checkpoint written from this rank, its input)"
        )
        evidence["stalls"] = shape
    else:
        cause = "straggler"
        evidence["stalling_gpu"] = f"{held_by.gpu}: works while its peers wait" + _clocks(held_by, f.pod_gpus, t)
    return Finding("host_stall", t.confidence_stall, evidence, cause)


def _straggler(f: PodFeatures, t: Thresholds) -> Finding | None:
    """Every GPU of the pod runs kernels, and one draws far more power than the others while it does: it
    works through each step while they finish early and wait for it, in waits shorter than a sample."""
    powered = [g for g in f.pod_gpus if g.busy_power >= t.waiting_power_share and g.no_kernel < t.stall_share]
    if len(powered) < 2 or len(powered) < len(f.pod_gpus):
        return None
    slow = max(powered, key=lambda g: g.busy_power)
    most = max(g.busy_power for g in powered if g is not slow)
    if most / slow.busy_power > t.straggler_power_ratio:
        return None
    job = one_job(f, t)
    if not job:
        return None  # one process drawing more power than another: a heavier model, not a peer waited for
    evidence = {
        "straggler_gpu": f"{slow.gpu} draws {percent(slow.busy_power)} of its power limit while busy, its peers at "
        f"most {percent(most)} ({percent(most / slow.busy_power)} <= {percent(t.straggler_power_ratio)}): "
        "they finish each step "
        "early and wait for it" + _clocks(slow, f.pod_gpus, t),
        "one_job": job,
    }
    return Finding("host_stall", t.confidence_straggler, evidence, "straggler")


def _clocks(slow: PodGpu, gpus: tuple[PodGpu, ...], t: Thresholds) -> str:
    """What the clocks say of the rank the others wait for: its GPU slow, or its work or host."""
    peers = [g.clock for g in gpus if g is not slow and not math.isnan(g.clock)]
    if math.isnan(slow.clock) or not peers:
        return ""
    if slow.clock < min(peers) - t.straggler_clock_margin:
        return f"; its SM clock at {slow.clock:.0%} of its maximum, theirs at {min(peers):.0%}: its GPU is slow"
    return f"; its SM clock at {slow.clock:.0%} of its maximum, as theirs: its work or its host, not its GPU"


def _pod_waits(f: PodFeatures, t: Thresholds) -> Finding | None:
    """The pod's GPUs wait on stall_share of their samples or more, none of them holding the others: on a
    peer outside the pod (a rank on another node), or a stalled stream. A pod of one GPU has no peer in
    the data: only its SMs idle under a running kernel (a spin-wait) show it waits, not low power alone (a
    replica decoding at batch 1 draws a third of an H100's power; _busy_at_low_power)."""
    if not f.waiting_share >= t.stall_share:
        return None
    spinning = f.spinning_share >= t.stall_share
    job = one_job(f, t) if f.gpus >= 2 else ""
    if not (spinning or job):
        return None
    evidence = {
        "waiting_fraction": Evidence(
            share(f.waiting_share),
            " of samples >= ",
            share(t.stall_share),
            f": {waiting_means(t)}; on no GPU of this pod: a peer outside it (another pod's rank) or a stalled stream",
        ),
        "power_while_busy": f"{percent(f.busy_power_share)} of the power limit",
        "stalls": _stall_shape(f, t)[1],
    }
    if job:
        evidence["one_job"] = job
    return waiting_waste(Finding("host_stall", t.confidence_waiting, evidence, "peer"), f, t)


def _saves(f: PodFeatures, t: Thresholds) -> Finding | None:
    """Long stalls without a kernel at a steady period, with work between them, where the data times them
    (_stall_shape): synchronous saves (a checkpoint written from this rank). Short ones are the input pipeline
    (data_starvation)."""
    if not f.stalled_share >= t.stall_share or f.cpu_at_limit_share >= t.signature_fraction:
        return None  # a pod whose CPU sits at its limit while the GPU waits is feeding it: data_starvation
    cause, shape = _stall_shape(f, t)
    if cause != "checkpoint" or not f.high_share > t.starvation_tail:
        return None
    evidence = {
        "stalled_fraction": Evidence(share(f.stalled_share), " of samples >= ", share(t.stall_share)),
        "stalls": shape,
    }
    return Finding("host_stall", t.confidence_saves, evidence, "checkpoint")


def _stall_shape(f: PodFeatures, t: Thresholds) -> tuple[str, str]:
    """The cause the stalls' shape shows ("checkpoint", "input", or "" where it cannot tell), and what the
    evidence says of it: from the exporter's counters where the trace has them (the mean gap below
    starvation_low between bursts, and the share of steady bursts), else from rows that time them."""
    if f.has_shape and f.bursts:
        length = f.low_share * f.window_seconds * f.gpus / f.bursts
        steady = f.steady_burst_share >= t.starvation_steady_share
        timed = f"{f.bursts:.0f} gaps of {length:.3g} s (mean, from the exporter's counters)"
        spread = f"{percent(f.steady_burst_share)} of bursts steady" + (" >=" if steady else " <")
        spread += f" {percent(t.starvation_steady_share)}"
    elif f.sample_seconds > t.starvation_max_sample_seconds:
        return "", (
            f"not timed: stalls shorter than the {f.sample_seconds:.0f} s between samples cannot be, so checkpoints "
            "(tens of seconds every few minutes) cannot be told from input gaps (every step)"
        )
    else:
        length = f.stall_samples * f.sample_seconds
        steady = f.stall_spread <= t.starvation_regularity
        timed = f"{f.stalls:.0f} of {length:.3g} s (median) every {f.stall_period_seconds:.3g} s"
        spread = f"spread {fmt(f.stall_spread)}" + (" <=" if steady else " >") + f" {t.starvation_regularity}"
    if length < t.stall_long_seconds:
        return "input", f"{timed} < {t.stall_long_seconds:g} s: short gaps every step"
    if length >= t.idle_seconds:
        return "", (
            f"{timed} >= {t.idle_seconds:g} s (idle_seconds): rests between work (a notebook between its cells, a "
            "job between runs), longer than a checkpoint written even to slow storage, not saves"
        )
    if f.stall_held_share < t.serving_held_share:
        return "", (
            f"{timed} >= {t.stall_long_seconds:g} s, the GPU's memory released in them (held on "
            f"{percent(f.stall_held_share)} of stalled samples): the process ended and another began, not a save"
        )
    if steady:
        return "checkpoint", f"{timed} >= {t.stall_long_seconds:g} s at a steady period ({spread}): synchronous saves"
    return "", f"{timed} >= {t.stall_long_seconds:g} s at no steady period ({spread})"


def _uneven(f: PodFeatures, t: Thresholds) -> Finding | None:
    """One GPU far busier than another, with no placement evidence and no power to say which waits."""
    busiest, least = f.gpu_activity_max, f.gpu_activity_min
    if f.gpus < 2 or not busiest >= t.placement_min_activity or not least / busiest <= t.placement_imbalance:
        return None
    job = one_job(f, t)
    if not job:
        return None  # independent processes with different loads: nobody waits for anybody
    evidence = {
        "gpu_activity_spread": f"least busy {percent(least)} / busiest {percent(busiest)} <= "
        f"{percent(t.placement_imbalance)}, "
        "with no topology or link evidence against the placement: a stall or a straggler",
        "one_job": job,
    }
    if math.isnan(f.busy_power_share):
        evidence["power"] = "absent: cannot tell whether the less busy GPU waits for the busier one or has less work"
    return Finding("host_stall", t.confidence_uneven, evidence, "uneven")


ONE_RANK = "the GPUs wait on one rank, a peer or a save its evidence names, not each on its own input or requests"
PIPELINE = Rule(
    ("host_stall", "healthy"),
    pipeline,
    features=("bubble_share", "gapped_gpus", "gpus", "nvlink_use", "pcie_peer_use", "samples", "stagger_share"),
    thresholds=(
        "confidence_pipeline",
        "nvlink_idle",
        "pipeline_bubble_standard_errors",
        "pipeline_gap_share",
        "pipeline_microbatches_per_stage",
        "pipeline_stagger_share",
        "placement_pcie_peer",
        "starvation_low",
    ),
    settles={
        "stages_take_turns": Settles(
            ("data_starvation", "overprovisioned_serving"),
            "its GPUs take turns, one working while another waits: a pipeline's schedule, where starved ranks wait "
            "together and a replica's GPUs serve a request together",
        ),
    },
)
HOST_STALL = Rule(
    ("host_stall",),
    host_stall,
    features=(
        "activity",
        "bursts",
        "busy_power_share",
        "cpu_at_limit_share",
        "device_to_host_in_gaps_bytes_per_second",
        "gpu_activity_max",
        "gpu_activity_min",
        "gpu_correlation",
        "gpus",
        "has_shape",
        "high_share",
        "host_fetch_share",
        "host_to_device_bytes_per_second",
        "host_to_device_in_gaps_bytes_per_second",
        "low_share",
        "nvlink_use",
        "one_core_share",
        "pcie_peer_use",
        "pod_gpus",
        "quiet_share",
        "sample_seconds",
        "sm_active",
        "spinning_share",
        "stall_held_share",
        "stall_period_seconds",
        "stall_samples",
        "stall_spread",
        "stalled_share",
        "stalls",
        "steady_burst_share",
        "waiting_share",
        "window_seconds",
    ),
    thresholds=(
        "confidence_host_thread",
        "confidence_offload",
        "confidence_saves",
        "confidence_stall",
        "confidence_straggler",
        "confidence_uneven",
        "confidence_waiting",
        "host_thread_cores",
        "idle_seconds",
        "ineffective_sm",
        "interconnect_sm",
        "job_correlation",
        "nvlink_idle",
        "offload_pcie_bytes_per_second",
        "offload_return_share",
        "placement_imbalance",
        "placement_min_activity",
        "placement_pcie_peer",
        "serving_held_share",
        "serving_quiet_share",
        "signature_fraction",
        "stall_long_seconds",
        "stall_share",
        "starvation_low",
        "starvation_max_sample_seconds",
        "starvation_regularity",
        "starvation_steady_share",
        "starvation_tail",
        "straggler_clock_margin",
        "straggler_power_ratio",
        "waiting_power_share",
    ),
    settles={
        "host_fetch_fraction": Settles(
            ("data_starvation", "overprovisioned_serving"),
            "it fetches from host memory through its waits, its pod's CPU under its limit: the wait is the fetch (CPU "
            "offload), where an input pipeline's batches arrive as its bursts start, or with its CPU at its limit, and "
            "a replica waiting for requests fetches nothing",
        ),
        "transfers": Settles(
            ("data_starvation", "overprovisioned_serving"),
            "while it waits, data crosses PCIe both ways at a volume that scales with the model: parameters in, "
            "gradients out (CPU offload), where an input pipeline sends little back and a replica between requests "
            "moves nothing",
        ),
        "stalling_gpu": Settles(("data_starvation", "overprovisioned_serving"), ONE_RANK),
        "straggler_gpu": Settles(("data_starvation", "overprovisioned_serving"), ONE_RANK),
        "waiting_fraction": Settles(
            ("data_starvation", "overprovisioned_serving"),
            "a kernel spins at a small share of its power while it waits: a collective waiting on a peer, where a "
            "starved or unrequested GPU runs no kernel",
        ),
        "stalled_fraction": Settles(
            ("data_starvation",),
            "the stalls' length and period (its `stalls` evidence) are a save's or a rank's, not every step's input",
        ),
    },
)

#: This module's rules, in the order they are tried (rules.RULES).
RULES: tuple[Rule, ...] = (
    PIPELINE,
    HOST_STALL,
)
