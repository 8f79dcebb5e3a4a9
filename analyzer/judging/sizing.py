"""The size a workload needs, whatever its class: the smallest GPU its measured use fits (Verdict.size).

A unit fits a GPU where its peak memory and its peak activity, each with plan_headroom above it, fit: a MIG
profile of its own GPU (NVIDIA's "Supported MIG Profiles": n/7 of the SMs, m/8 of the memory and its bandwidth,
each at least the activity needed), a cheaper catalogue model with as many dense FP16 TFLOPS and as much memory
bandwidth as the peak activity needs of its GPU's (activity does not say whether the work waits on the SMs or on
memory, so both are held to it) and the memory, or a time-sliced share of its GPU (no MIG: no isolation). Of
those, the one that costs least; its GPU as it is where none fits. The peak activity is the highest mean over the
plan's bins (plan_load_bin_seconds, or longer over long spans), not one sample's: a request's burst shorter than
a bin is carried by the slice, a little slower.

What a size does not say: whether the class's fix should come first (core.bottlenecks.Bottleneck.fix_before_size,
which the plan reads), and, for an engine that takes most of its GPU's memory at start (vLLM, SGLang, TGI), any
size from memory: its memory in use is its KV cache, not its load, and it is sized by its requests instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gpulens.analyzer.inputs.frame import is_mig
from gpulens.core.catalog import MODELS, GpuModel, model_info
from gpulens.core.thresholds import Thresholds

#: Serving engines that take most of the GPU's memory at start (vLLM's gpu_memory_utilization, SGLang's
#: mem_fraction_static, TGI's cuda_memory_fraction): their memory in use says nothing of their load.
PREALLOCATING = frozenset({"vllm", "sglang", "tgi"})

#: How a unit fits: a MIG profile of its GPU, a cheaper model, a time-sliced share of its GPU, its GPU as it is
#: (nothing smaller fits), or unknown (Size.basis says why: no samples, a model the catalogue lacks, an engine
#: that pre-allocates its memory, a MIG instance already).
Fit = Literal["mig", "cheaper_gpu", "time_slicing", "whole", "unknown"]

#: Most pods one GPU is time-sliced between (the device plugin's replicas): more would each hold too little
#: memory to be worth proposing.
MAX_SLICES = 8


@dataclass(frozen=True)
class Size:
    """The smallest GPU a unit's measured use fits, and what it was measured from (Verdict.size)."""

    fit: Fit
    #: What it fits, as people name it ("a MIG 1g.20gb slice of its NVIDIA A100-SXM4-80GB", "NVIDIA L4", "1/4
    #: of its GPU, time-sliced"); "" where unknown.
    fits: str
    #: The GPU model it would run on: its own, or the cheaper one's NVML name.
    gpu_model: str
    #: What it would cost per GPU it holds now (0-1): the MIG profile's larger share of its GPU's compute and
    #: memory, the cheaper model's price over its own, 1/n of a time-sliced GPU; 1.0 for its GPU as it is and
    #: where unknown.
    price_share: float
    #: Its peak: the most memory one of its GPUs held (bytes), and the highest mean activity of a bin per
    #: GPU (0-1 of its GPU); None where not measured.
    memory_peak_bytes: float | None
    activity_peak: float | None
    #: Seconds each activity bin averages over.
    bin_seconds: float
    #: What it needs: the peaks with plan_headroom above them.
    memory_needed_bytes: float | None
    activity_needed: float | None
    #: Why it fits (the catalogue's figures its needs were held against), or why no size is known, in words.
    basis: str

    @property
    def peak(self) -> str:
        """Its peak in words ("activity 8.0% of its GPU (the highest 60 s mean), memory 6.0 GiB"); "" where not
        measured."""
        if self.activity_peak is None or self.memory_peak_bytes is None:
            return ""
        return (
            f"activity {self.activity_peak:.1%} of its GPU (the highest {self.bin_seconds:.0f} s mean), memory "
            f"{self.memory_peak_bytes / 2**30:.1f} GiB"
        )

    @property
    def smaller(self) -> bool:
        """Whether it fits something that costs less than its GPU as it is."""
        return self.fit in ("mig", "cheaper_gpu", "time_slicing")


def unsized(gpu_model: str, basis: str, bin_seconds: float = 0.0) -> Size:
    """No size known, and why."""
    return Size("unknown", "", gpu_model, 1.0, None, None, bin_seconds, None, None, basis)


def smallest(
    gpu_model: str,
    activity_peak: float,
    memory_peak: float,
    bin_seconds: float,
    t: Thresholds,
    prices: dict[str, float] | None = None,
    engine: str = "",
    gpu: str = "",
) -> Size:
    """The smallest GPU a unit on `gpu_model` (its NVML name) fits, from its `activity_peak` (0-1 of its GPU,
    the highest mean of a `bin_seconds` bin; NaN: not measured) and `memory_peak` (bytes; NaN: not measured),
    each with plan_headroom; the cheapest of a MIG profile, a cheaper model and a time-sliced share at
    `prices` (else the catalogue's), its GPU as it is where none fits. `gpu`: one of its GPUs' keys, which says
    whether it is a MIG instance already."""
    model = model_info(gpu_model, prices)
    if is_mig(gpu_model, gpu):
        return unsized(
            gpu_model,
            "it runs on a MIG instance: its activity and memory are the slice's, and gpulens sizes whole GPUs "
            "(a smaller profile of the same GPU is the change to weigh by hand)",
            bin_seconds,
        )
    if engine in PREALLOCATING:
        return unsized(
            gpu_model,
            f"its engine ({engine}) takes most of its GPU's memory for its KV cache whatever its load: its memory "
            "is no demand; it is sized by its requests (fewer replicas), not by a smaller GPU",
            bin_seconds,
        )
    if not model.memory_total_bytes:
        return unsized(
            gpu_model,
            f"its GPU model ({gpu_model or 'unnamed'}) is not in gpulens' catalogue: what share of it the peak needs "
            "is unknown; name the model (--gpu-model)",
            bin_seconds,
        )
    if math.isnan(activity_peak) or math.isnan(memory_peak):
        missing = "activity" if math.isnan(activity_peak) else "memory use"
        return unsized(gpu_model, f"no {missing} measured: what it needs is unknown", bin_seconds)
    headroom = 1 + t.plan_headroom
    compute, memory = activity_peak * headroom, memory_peak * headroom
    needs = f"{compute:.1%} of its GPU's compute and {memory / 2**30:.1f} GiB ({t.plan_headroom:.0%} above its peak)"
    options: list[Size] = []

    def option(fit: Fit, fits: str, on: str, share: float, why: str) -> None:
        basis = f"it needs {needs}: {why}"
        options.append(Size(fit, fits, on, share, memory_peak, activity_peak, bin_seconds, memory, compute, basis))

    mig = min(
        (
            p
            for p in model.mig_profiles
            if p.memory_bytes >= memory and p.compute_share >= compute and p.eighths / 8 >= compute
        ),
        key=lambda p: p.gpu_share,
        default=None,
    )
    if mig is not None and mig.gpu_share < 1:
        option(
            "mig",
            f"a MIG {mig.name} slice of its {model.name}",
            model.name,
            mig.gpu_share,
            f"{mig.name} has {mig.sevenths}/7 of the SMs and {mig.memory_bytes / 1e9:g} GB ({mig.eighths}/8 of the "
            f"memory and its bandwidth: it costs {mig.gpu_share:.3g} of the GPU; NVIDIA's MIG profiles)",
        )
    tflops, bandwidth = compute * model.dense_fp16_tflops, compute * model.memory_bandwidth_bytes_per_second
    cheaper = _cheaper(model, tflops, bandwidth, memory, prices or {})
    if cheaper is not None:
        option(
            "cheaper_gpu",
            cheaper.name,
            cheaper.name,
            cheaper.price_per_hour / model.price_per_hour,
            f"{cheaper.name} has {cheaper.dense_fp16_tflops:g} >= {tflops:.3g} dense FP16 TFLOPS, "
            f"{cheaper.memory_bandwidth_bytes_per_second / 1e9:g} >= {bandwidth / 1e9:.3g} GB/s and "
            f"{cheaper.memory_total_bytes / 2**30:.0f} GiB at ${cheaper.price_per_hour:.2f}/GPU-h against "
            f"${model.price_per_hour:.2f} (NVIDIA's datasheets)"
            + (
                "; it has no bf16: a model in bf16 runs there in fp16 (check its numerics) or in fp32, slower"
                if model.bf16 and not cheaper.bf16
                else ""
            ),
        )
    share = max(compute, memory / model.memory_total_bytes)
    slices = min(MAX_SLICES, math.floor(1 / share)) if share > 0 else MAX_SLICES
    if slices >= 2 and mig is None:
        option(
            "time_slicing",
            f"1/{slices} of its {model.name}, time-sliced",
            model.name,
            1 / slices,
            f"1/{slices} of the GPU carries the peak; no memory isolation: each pod must stay under "
            f"{model.memory_total_bytes / slices / 2**30:.0f} GiB",
        )
    if not options:
        return Size(
            "whole",
            f"its {model.name}",
            model.name,
            1.0,
            memory_peak,
            activity_peak,
            bin_seconds,
            memory,
            compute,
            f"no MIG profile, cheaper model or time-sliced share of the catalogue holds {needs}",
        )
    # The cheapest; at equal cost a MIG slice (isolated) before a cheaper model before time-slicing.
    return min(options, key=lambda s: s.price_share)


def _cheaper(
    model: GpuModel, tflops: float, bandwidth: float, memory: float, prices: dict[str, float]
) -> GpuModel | None:
    """The cheapest catalogue model, cheaper than `model`, with `tflops` dense FP16, `bandwidth` bytes per second
    of memory bandwidth and `memory` bytes; None where the catalogue has no compute or bandwidth figure for
    `model`."""
    if not model.dense_fp16_tflops or not model.memory_bandwidth_bytes_per_second:
        return None
    candidates = [
        model_info(m.name, prices)
        for m in MODELS.values()
        if m.dense_fp16_tflops >= tflops
        and m.memory_bandwidth_bytes_per_second >= bandwidth
        and m.memory_total_bytes >= memory
    ]
    cheaper = [m for m in candidates if m.price_per_hour < model.price_per_hour]
    return min(cheaper, key=lambda m: (m.price_per_hour, m.name), default=None)
