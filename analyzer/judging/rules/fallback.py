"""Where no signature holds: an overlay becomes the class (throttling, a wrong GPU type), else low activity
no evidence here explains (unexplained, or busy at low power: waiting), else healthy."""

from __future__ import annotations

import math
from dataclasses import replace

from gpulens.analyzer.judging.evidence import Evidence, byte_count, percent, share
from gpulens.analyzer.judging.features import PodFeatures
from gpulens.analyzer.judging.rules.base import Finding, waiting_waste
from gpulens.analyzer.judging.rules.host_stall import one_job, unrelated, waiting_means
from gpulens.analyzer.judging.rules.serving import model_memory
from gpulens.core.thresholds import Thresholds


def sized_over_loop(loop: Finding, f: PodFeatures, t: Thresholds) -> Finding:
    """A loop bound by one host thread (`loop`) on a sliver of a high-end GPU: its footprint settles the size
    whatever else holds, and the loop runs as fast on a GPU a seventh the price, so the class is wrong_gpu_type,
    with host_stall (the loop, its evidence kept) what else held; batching the loop is the fix after the move."""
    sized = without_signature(f, t, None if math.isnan(f.activity) else float(f.activity), False, True)
    evidence = {
        **sized.evidence,
        **loop.evidence,
        "deciding": "its footprint fits a smaller GPU, and a loop one host thread drives runs as fast on one: the "
        "size first, then the loop (batch it: host_stall's host_thread fix)",
    }
    return replace(sized, evidence=evidence, also=("host_stall",), cause=loop.cause)


def without_signature(
    f: PodFeatures, t: Thresholds, activity: float | None, throttled: bool, oversized: bool
) -> Finding:
    """No signature holds: an overlay becomes the class, else low activity or healthy."""
    if throttled:
        return Finding("throttling", t.confidence_share_base + t.confidence_share_gain * f.throttled_share, {})
    if oversized and activity is not None:
        evidence = {
            "mean_activity": f"{percent(activity)} <= {percent(t.oversized_activity)}",
            "peak_memory_bytes": Evidence(
                byte_count(f.memory_peak_bytes), " <= ", byte_count(t.oversized_memory_bytes), f" on a {f.gpu_model}"
            ),
        }
        long = f.window_seconds >= t.oversized_span_seconds
        return Finding("wrong_gpu_type", t.confidence_wrong_gpu if long else t.confidence_wrong_gpu_short, evidence)
    if activity is not None and activity < t.ineffective_sm:
        return _unexplained(f, t, activity)
    if f.waiting_share >= t.stall_share:
        return _busy_at_low_power(f, t)
    healthy = f.has_profiling and f.sm_active >= t.healthy_sm
    return Finding(
        "healthy",
        t.confidence_healthy if healthy else t.confidence_healthy_utilization,
        {"mean_activity": "nan" if activity is None else percent(activity)},
    )


def _unexplained(f: PodFeatures, t: Thresholds, activity: float) -> Finding:
    """Low activity that no signature explains. A class is a claim with a fix attached, so none is
    claimed: the evidence names the causes this data leaves open and the inputs that would tell them apart,
    and the plan proposes no resize and no code fix. Its waste is counted all the same."""
    coarse = f.resolution_seconds > t.starvation_max_sample_seconds
    evidence = {"mean_activity": f"{percent(activity)} < {percent(t.ineffective_sm)} with no signature of a cause"}
    causes, inputs = [], []
    if math.isnan(f.cpu_at_limit_share):
        causes.append("an input pipeline or a serving loop bound by the pod's CPU")
        inputs.append("the pod's CPU use and limit (cAdvisor, kube-state-metrics)")
    elif f.cpu_at_limit_share >= t.signature_fraction:
        evidence["cpu_at_limit_fraction"] = Evidence(
            share(f.cpu_at_limit_share),
            " >= ",
            share(t.signature_fraction),
            ", but the GPU is no less busy while it is",
        )
        causes.append("work on the pod's CPU beside the GPU's, or an input pipeline bound by it")
    else:
        evidence["cpu_at_limit_fraction"] = Evidence(
            share(f.cpu_at_limit_share), " < ", share(t.signature_fraction), ": not at its limit"
        )
        causes.append("input or a host loop bound by storage, the network or one thread, not the CPU limit")
    if coarse:
        causes.append("training steps starved for input (bursts and gaps at a steady period)")
        inputs.append(
            "gpulens' exporter on its node (it counts every second between scrapes), or samples at most "
            f"{t.starvation_max_sample_seconds:g} s apart, to time the bursts"
        )
    if f.model_held_share >= t.serving_held_share:
        evidence["model_memory_bytes"] = model_memory(f)
        causes.append("a serving replica with few requests")
        inputs.append("its serving engine's request metrics (vLLM, Triton), or its owner's kind (kube-state-metrics)")
    if f.kernel_busy_share > 0 and math.isnan(f.busy_power_share):  # a kernel spinning in a collective looks busy
        causes.append("a rank waiting on a peer or its host (busy at low power)")
        inputs.append("its power draw")
    causes.append("a light workload by design (small batches, short notebook cells)")
    inputs.append("the workload's own profile (PyTorch profiler, Nsight Systems)")
    _independent(f, t, evidence, causes, inputs)
    evidence["causes_open"] = "; ".join(causes)
    evidence["would_tell_them_apart"] = "; ".join(inputs)
    return Finding("unexplained", t.confidence_low_activity_coarse if coarse else t.confidence_low_activity, evidence)


def _busy_at_low_power(f: PodFeatures, t: Thresholds) -> Finding:
    """A kernel runs most of the time at a small share of the power, with nothing in the data that it waits
    for (one GPU, no SM activity to show a spin-wait): a rank spinning in a collective on a peer in another
    pod, or light kernels by design (a small-batch decode). Not healthy, and no cause claimed."""
    evidence = {
        "waiting_fraction": Evidence(
            share(f.waiting_share), " of samples >= ", share(t.stall_share), f": {waiting_means(t)}"
        ),
        "power_while_busy": f"{percent(f.busy_power_share)} of the power limit",
    }
    causes = [
        "a rank waiting in a collective on a peer in another pod",
        "light kernels by design (a small-batch decode draws a third of an H100's power)",
    ]
    inputs = [
        "SM activity (DCGM profiling fields: a spinning kernel leaves the SMs idle)",
        "the pod's owner (kube-state-metrics: one pod of a multi-pod job)",
    ]
    _independent(f, t, evidence, causes, inputs)
    evidence["causes_open"] = "; ".join(causes)
    evidence["would_tell_them_apart"] = "; ".join(inputs)
    return waiting_waste(Finding("unexplained", t.confidence_low_activity, evidence), f, t)


def _independent(f: PodFeatures, t: Thresholds, evidence: dict[str, str], causes: list[str], inputs: list[str]) -> None:
    """For a multi-GPU unit with nothing to show it is one job (one_job): the evidence says so, and that its
    GPUs may run independent processes, which neither wait for each other nor have a straggler."""
    if f.gpus < 2 or one_job(f, t):
        return
    evidence["one_job"] = unrelated(f, t)
    causes.append("independent processes, one per GPU (an inference server each), not ranks of one job")
    if math.isnan(f.nvlink_use):
        inputs.append("NVLink traffic between the GPUs (DCGM_FI_PROF_NVLINK_TX_BYTES / RX_BYTES)")
