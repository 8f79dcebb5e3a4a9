"""Where a multi-GPU pod's GPUs sit: poor placement (split across sockets or NVLink islands, NVLinks unused or
faulty) and the interconnect (a link near its capacity while the SMs wait)."""

from __future__ import annotations

import math

from gpulens.analyzer.judging.evidence import Evidence, percent, share
from gpulens.analyzer.judging.features import PodFeatures, PodGpu
from gpulens.analyzer.judging.rules.base import Finding, Rule, Settles
from gpulens.core.catalog import GpuModel
from gpulens.core.thresholds import Thresholds


def poor_placement(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    """A multi-GPU pod whose GPUs cannot exchange at NVLink speed: on different CPU sockets or PCIe root
    complexes with no NVLink between them; joined by NVLink that sits idle while they exchange over PCIe
    (NCCL peer-to-peer turned off, a container that does not see its peers); NVLinks down or failing on its
    GPUs. Only with that evidence: uneven activity alone is a stall or a straggler (host_stall)."""
    busiest, least = f.gpu_activity_max, f.gpu_activity_min
    if f.gpus < 2 or not busiest >= t.placement_min_activity:
        return None  # an idle or barely used pod has a bigger problem than placement
    # One NVLink island, from the exporter's topology; without it, what the model's SXM boards have.
    nvlinked = f.nvlink_groups == 1 if f.nvlink_groups else info.nvlink_bytes_per_second > 0
    evidence: dict[str, str] = {}
    confidence = 0.0
    if not nvlinked and (f.numa_nodes >= 2 or f.pcie_roots >= 2):
        across = "CPU sockets" if f.numa_nodes >= 2 else "PCIe root complexes of one socket"
        where = "; ".join(_where(g, info) for g in f.pod_gpus)
        evidence["split_placement"] = f"{where}: no NVLink between them, so they exchange over PCIe across {across}"
        confidence = t.confidence_placement
    if (
        nvlinked
        and info.nvlink_bytes_per_second > 0
        and f.nvlink_use < t.nvlink_idle
        and f.pcie_peer_use >= t.placement_pcie_peer
    ):
        evidence["nvlink_unused"] = (
            f"{', '.join(g.gpu for g in f.pod_gpus) or 'the GPUs'} share NVLink, which carried {percent(f.nvlink_use)} "
            f"< {percent(t.nvlink_idle)} of its capacity while PCIe carried {percent(f.pcie_peer_use)} >= "
            f"{percent(t.placement_pcie_peer)} both ways: peer traffic goes over PCIe (NCCL_P2P_DISABLE or "
            "NCCL_P2P_LEVEL "
            "set, or a container that sees only its own GPU)"
        )
        confidence = t.confidence_placement
    failing = [
        g
        for g in f.pod_gpus
        if g.links_down > 0
        or g.crc_per_second >= t.nvlink_crc_errors_per_second
        or _retries(g) * f.window_seconds > t.nvlink_errors
    ]
    if failing:
        evidence["nvlink_faults"] = "; ".join(_link_faults(g, f.window_seconds) for g in failing) + (
            f" (CRC matters at >= {t.nvlink_crc_errors_per_second:g}/s, replay and recovery above "
            f"{t.nvlink_errors:g} per window: DCGM's limits)"
        )
        confidence = max(confidence, t.confidence_link_faults)
    if not confidence:
        return None
    evidence["gpu_activity_spread"] = f"least busy {percent(least)} / busiest {percent(busiest)}"
    return Finding("poor_placement", confidence, evidence, facts=frozenset({"nvlink_fault"} if failing else ()))


def _where(g: PodGpu, info: GpuModel) -> str:
    """'GPU-… (socket 0, PCIe root 1, NVLink island 0)', with what the trace says (no island on a model
    without NVLink, an L40S: its GPUs are each an island of their own)."""
    island = g.nvlink_group if info.nvlink_bytes_per_second > 0 else math.nan
    parts = [
        f"{name} {value:.0f}"
        for name, value in (("socket", g.socket), ("PCIe root", g.root), ("NVLink island", island))
        if not math.isnan(value)
    ]
    return g.gpu + (f" ({', '.join(parts)})" if parts else "")


def _retries(g: PodGpu) -> float:
    """Replay and recovery errors per second on a GPU's NVLinks (0 where the trace does not say)."""
    return sum(r for r in (g.replay_per_second, g.recovery_per_second) if not math.isnan(r))


def _link_faults(g: PodGpu, window_seconds: float) -> str:
    """'GPU-…: 4 NVLinks down, CRC 150/s, 300 replay errors, 12 recovery errors'."""
    parts = []
    if g.links_down > 0:
        parts.append(f"{g.links_down:.0f} NVLink{'s' if g.links_down > 1 else ''} down")
    if g.crc_per_second > 0:
        parts.append(f"CRC {g.crc_per_second:.3g}/s")
    for kind, rate in (("replay", g.replay_per_second), ("recovery", g.recovery_per_second)):
        if rate > 0:
            parts.append(f"{rate * window_seconds:.0f} {kind} errors")
    return f"{g.gpu}: {', '.join(parts)}"


def interconnect(f: PodFeatures, t: Thresholds, info: GpuModel) -> Finding | None:
    if not f.link_bound_share >= t.signature_fraction:
        return None
    evidence = {
        "link_bound_fraction": Evidence(
            share(f.link_bound_share),
            f" of samples with a link >= {percent(t.link_busy)} of capacity and activity < "
            f"{percent(t.interconnect_sm)}",
        ),
        "link_utilization": percent(f.link_use),
    }
    return Finding("interconnect", t.confidence_share_base + t.confidence_share_gain * f.link_bound_share, evidence)


PLACED = "its GPUs cannot exchange at NVLink speed: their ranks wait on the exchange its placement slows"
POOR_PLACEMENT = Rule(
    ("poor_placement",),
    poor_placement,
    features=(
        "gpu_activity_max",
        "gpu_activity_min",
        "gpus",
        "numa_nodes",
        "nvlink_groups",
        "nvlink_use",
        "pcie_peer_use",
        "pcie_roots",
        "pod_gpus",
        "window_seconds",
    ),
    thresholds=(
        "confidence_link_faults",
        "confidence_placement",
        "nvlink_crc_errors_per_second",
        "nvlink_errors",
        "nvlink_idle",
        "placement_min_activity",
        "placement_pcie_peer",
    ),
    settles={
        "split_placement": Settles(("host_stall", "interconnect"), PLACED),
        "nvlink_unused": Settles(("host_stall", "interconnect"), PLACED),
        "nvlink_faults": Settles(("host_stall", "interconnect"), PLACED),
    },
)
INTERCONNECT = Rule(
    ("interconnect",),
    interconnect,
    features=("link_bound_share", "link_use"),
    thresholds=("confidence_share_base", "confidence_share_gain", "interconnect_sm", "link_busy", "signature_fraction"),
    settles={
        "link_bound_fraction": Settles(
            ("host_stall",),
            "a link runs near its capacity while the SMs wait: the waits are the link's, not a host's or a peer's",
        ),
    },
)

#: This module's rules, in the order they are tried (rules.RULES).
RULES: tuple[Rule, ...] = (
    POOR_PLACEMENT,
    INTERCONNECT,
)
