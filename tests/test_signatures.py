"""Each signature at its edges: just above and just below each threshold it reads, on one window of a
hand-built trace whose every other signal sits well inside "healthy", so that only the threshold under
test can move the verdict. The thresholds are read from core/thresholds.py, not restated here."""

import math

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.judging.classify import classify
from gpulens.analyzer.judging.evidence import percent
from gpulens.core.bottlenecks import RECOMMENDATIONS, STALL_CAUSES
from gpulens.core.thresholds import Thresholds

T = Thresholds()
START = 1_800_000_000.0
#: Samples of a window, 10 s apart: 600 s, finer than starvation_max_sample_seconds is not needed here.
SAMPLES, STEP = 60, 10.0


def gpu(model: str = "NVIDIA L40S", samples: int = SAMPLES, gpu_name: str = "GPU-0", **columns) -> pd.DataFrame:
    """One GPU of pod ml/p, `samples` samples STEP seconds apart, working steadily (SM 0.9, tensor 0.6,
    DRAM 0.3, 40% of memory) unless `columns` (a value, or one per sample) say otherwise."""
    base = {
        "timestamp": START + STEP * np.arange(samples),
        "gpu": gpu_name,
        "node": "n1",
        "gpu_model": model,
        "namespace": "ml",
        "pod": "p",
        "gpu_util": 0.95,
        "sm_active": 0.9,
        "tensor_active": 0.6,
        "dram_active": 0.3,
        "memory_used_bytes": 0.4 * 48e9,
        "memory_total_bytes": 48e9,
    }
    return fr.normalize(pd.DataFrame(base | columns))


def verdict(frame: pd.DataFrame):
    [v] = classify(frame)
    return v


def test_the_base_trace_is_healthy():
    assert verdict(gpu()).bottleneck == "healthy"


@pytest.mark.parametrize(
    ("samples", "expected"), [(T.min_samples - 1, "insufficient_data"), (T.min_samples, "healthy")]
)
def test_insufficient_data_at_min_samples(samples, expected):
    assert verdict(gpu(samples=samples)).bottleneck == expected


@pytest.mark.parametrize(("busy_samples", "idle"), [(30, True), (31, False)])
def test_idle_after_idle_seconds_of_quiet_that_follow_sustained_work(busy_samples, idle):
    """Busy for the first samples, then nothing: 30 quiet samples are the 300 s of idle_seconds."""
    assert T.idle_seconds == 300
    on = np.r_[np.ones(busy_samples), np.zeros(SAMPLES - busy_samples)]
    v = verdict(gpu(gpu_util=0.95 * on, sm_active=0.9 * on, tensor_active=0.6 * on, dram_active=0.3 * on))
    assert (v.bottleneck == "idle") is idle, v
    if idle:
        assert v.evidence["idle_for_seconds"] == "300 >= 300 (activity < 1%)"


@pytest.mark.parametrize(("dram", "expected"), [(T.dram_active, "memory_bandwidth"), (T.dram_active - 0.01, "healthy")])
def test_memory_bandwidth_at_dram_active_while_the_pipes_idle(dram, expected):
    v = verdict(gpu(dram_active=dram, tensor_active=T.pipes_idle - 0.1))
    assert v.bottleneck == expected, v


@pytest.mark.parametrize(
    ("peak", "expected"), [(T.memory_full, "memory_fragmentation"), (T.memory_full - 0.001, "healthy")]
)
def test_memory_fragmentation_at_memory_full_with_a_restart(peak, expected):
    """Memory climbs to `peak`, the process dies (memory falls by more than memory_drop) and climbs again."""
    climb = np.linspace(0.6, peak, SAMPLES // 2)
    used = np.r_[climb, climb - 0.3] * 48e9
    assert verdict(gpu(memory_used_bytes=used)).bottleneck == expected


@pytest.mark.parametrize(("activity", "expected"), [(T.oversized_activity, "wrong_gpu_type"), (0.21, "unexplained")])
def test_wrong_gpu_type_at_oversized_activity_on_a_high_end_gpu(activity, expected):
    """Steady low activity on an H100 with 5 GB of memory: a sliver of a high-end GPU. Above the threshold,
    samples 10 s apart cannot show training steps, and nothing else says why the GPU works so little: the
    class says so, not a guess (test_low_activity_without_a_signature_names_the_causes_left_open)."""
    frame = gpu(
        model="NVIDIA H100 80GB HBM3",
        gpu_util=activity,
        sm_active=activity,
        tensor_active=0.1,
        dram_active=0.05,
        memory_used_bytes=5e9,
        memory_total_bytes=80e9,
    )
    assert verdict(frame).bottleneck == expected


@pytest.mark.parametrize(
    ("least", "expected"),
    [(0.9 * T.placement_imbalance, "host_stall"), (0.9 * T.placement_imbalance + 0.01, "healthy")],
)
def test_uneven_activity_without_placement_evidence_is_a_stall_not_placement(least, expected):
    """Two GPUs with no NVLink, no topology and no power in the trace: their spread says one waits or has
    less work, and nothing says where they sit."""
    exchange = {"pcie_tx_bytes_per_second": 0.2 * L40S_PCIE, "pcie_rx_bytes_per_second": 0.2 * L40S_PCIE}
    less = gpu(gpu_name="GPU-1", sm_active=least, gpu_util=least, **exchange)
    frame = fr.normalize(pd.concat([gpu(**exchange), less], ignore_index=True))
    v = verdict(frame)
    assert v.bottleneck == expected, v
    if expected == "host_stall":
        assert v.evidence["gpu_activity_spread"].startswith(f"least busy {percent(least)} / busiest 90% <= 50%")
        assert v.evidence["power"].startswith("absent")
        assert v.evidence["one_job"] == "PCIe carries 20% >= 10% of its capacity both ways: the GPUs exchange"
        assert v.recommendation == STALL_CAUSES["uneven"]


@pytest.mark.parametrize(
    ("busiest", "uneven"), [(T.placement_min_activity, True), (T.placement_min_activity - 0.01, False)]
)
def test_uneven_activity_only_for_a_pod_busy_enough_for_it_to_matter(busiest, uneven):
    exchange = {"pcie_tx_bytes_per_second": 0.2 * L40S_PCIE, "pcie_rx_bytes_per_second": 0.2 * L40S_PCIE}
    frame = fr.normalize(
        pd.concat(
            [
                gpu(sm_active=busiest, gpu_util=busiest, **exchange),
                gpu(gpu_name="GPU-1", sm_active=0.01, gpu_util=0.01, **exchange),
            ],
            ignore_index=True,
        )
    )
    assert (verdict(frame).bottleneck == "host_stall") is uneven


@pytest.mark.parametrize(("sockets", "expected"), [((0, 1), "poor_placement"), ((0, 0), "healthy")])
def test_poor_placement_needs_topology_and_not_a_spread(sockets, expected):
    """Two evenly busy L40S GPUs (no NVLink) on two CPU sockets exchange over PCIe across them; on one
    socket and one root complex they are placed well."""
    frame = fr.normalize(
        pd.concat(
            [gpu(numa_node=sockets[0], pcie_root=0), gpu(gpu_name="GPU-1", numa_node=sockets[1], pcie_root=0)],
            ignore_index=True,
        )
    )
    v = verdict(frame)
    assert v.bottleneck == expected, v
    if expected == "poor_placement":
        assert v.evidence["split_placement"] == (
            "GPU-0 (socket 0, PCIe root 0); GPU-1 (socket 1, PCIe root 0): no NVLink between them, so they "
            "exchange over PCIe across CPU sockets"
        )


@pytest.mark.parametrize(("hot_samples", "throttled"), [(30, True), (29, False)])
def test_throttling_at_throttle_seconds_of_thermal_bits_while_busy(hot_samples, throttled):
    """HW thermal (0x40) on `hot_samples` of 60 busy samples 10 s apart: 300 s is the least that counts in
    a 600 s window (throttle_seconds, or half the window), and half the busy time."""
    assert T.throttle_seconds == 300
    reasons = np.r_[np.full(hot_samples, 0x40), np.zeros(SAMPLES - hot_samples)].astype(float)
    v = verdict(gpu(clock_event_reasons=reasons))
    assert (v.bottleneck == "throttling") is throttled, v


@pytest.mark.parametrize(("quiet_samples", "signature"), [(18, True), (17, False)])
def test_overprovisioned_serving_at_serving_quiet_share(quiet_samples, signature):
    """A held model, light work (0.5 when busy), quiet on 18 of 60 samples (serving_quiet_share 0.3) or
    17: the signature holds only at the threshold. Below it, nothing shows requests served between quiet
    spells: serving is one of the causes left open, not the class."""
    assert T.serving_quiet_share == 0.3
    on = np.r_[np.zeros(quiet_samples), np.full(SAMPLES - quiet_samples, 0.5)]
    v = verdict(gpu(gpu_util=on, sm_active=on, tensor_active=0.3 * on))
    assert v.bottleneck == ("overprovisioned_serving" if signature else "unexplained")
    assert ("quiet_fraction" in v.evidence) is signature
    assert ("a serving replica with few requests" in v.evidence.get("causes_open", "")) is not signature


@pytest.mark.parametrize(("link_samples", "interconnect"), [(30, True), (29, False)])
def test_interconnect_at_signature_fraction_of_samples_with_a_busy_link(link_samples, interconnect):
    """PCIe at 70% of the L40S's capacity (link_busy 0.6) with SM activity 0.2 on half the samples
    (signature_fraction 0.5), or one sample fewer."""
    from gpulens.core.catalog import model_info

    capacity = model_info("NVIDIA L40S").pcie_bytes_per_second
    rate = np.r_[np.full(link_samples, 0.7 * capacity), np.zeros(SAMPLES - link_samples)]
    v = verdict(gpu(sm_active=0.2, gpu_util=0.95, pcie_rx_bytes_per_second=rate, pcie_tx_bytes_per_second=0.0))
    assert (v.bottleneck == "interconnect") is interconnect, v


@pytest.mark.parametrize(("busy_from", "starved"), [(15, True), (30, False)])
def test_data_starvation_at_starvation_switches_per_minute(busy_from, starved):
    """Ten minutes at 1 s: 30 s bursts every 60 s, steady like training steps, the pod's CPU at its limit
    (its input pipeline; without it, gaps this long at a steady period are saves: host_stall). Bursts from
    second 15 of each minute give 10 rises and 10 falls, 2.0 switches a minute
    (starvation_switches_per_minute); from second 30 the last burst runs to the end, 19 switches: 1.9 a
    minute, not the signature of steps: the class is the same, from the CPU at its limit while the GPU
    waits (its confidence 0.6, and the switches said to fall short)."""
    assert T.starvation_switches_per_minute == 2.0
    seconds = np.arange(600)
    on = ((seconds % 60 >= busy_from) & (seconds % 60 < busy_from + 30)).astype(float)
    activity = 0.02 + 0.93 * on
    frame = gpu(
        samples=600,
        gpu_util=activity,
        sm_active=activity,
        tensor_active=0.6 * on,
        cpu_usage_cores=7.8,
        cpu_limit_cores=8.0,
    )
    frame["timestamp"] = START + seconds
    v = verdict(fr.normalize(frame))
    assert v.bottleneck == "data_starvation"
    assert v.confidence == (0.95 if starved else 0.6)
    assert v.evidence["busy_idle_switches_per_minute"] == (
        "2.0 >= 2.0" if starved else "1.9 < 2.0: not the bursts and gaps of training steps; judged on the CPU alone"
    )


def nvidia_smi(samples: int = SAMPLES, gpu_name: str = "GPU-0", **columns) -> pd.DataFrame:
    """One H100 of pod ml/p as nvidia-smi sees it (utilization, memory, power; no profiling fields), busy
    at 80% of its 700 W limit unless `columns` say otherwise."""
    base = {
        "model": "NVIDIA H100 80GB HBM3",
        "gpu_util": 1.0,
        "sm_active": np.nan,
        "tensor_active": np.nan,
        "dram_active": np.nan,
        "memory_used_bytes": 60e9,
        "memory_total_bytes": 80e9,
        "power_watts": 560.0,
    }
    return gpu(samples=samples, gpu_name=gpu_name, **(base | columns))


@pytest.mark.parametrize(
    ("power_share", "waiting"), [(T.waiting_power_share, False), (T.waiting_power_share - 0.01, True)]
)
def test_without_profiling_fields_busy_at_low_power_is_waiting_not_work(power_share, waiting):
    """nvidia-smi alone: a rank spinning in a collective reports 100% utilization at about 150 W of an
    H100's 700 W. Busy under waiting_power_share of the limit is not work (not healthy); at the threshold it
    is. One GPU has no peer in the data, and a replica decoding at batch 1 also draws a third of the power:
    the causes are left open, with what would tell them apart."""
    v = verdict(nvidia_smi(power_watts=power_share * 700.0))
    assert v.bottleneck == ("unexplained" if waiting else "healthy"), v
    assert ("waiting_fraction" in v.evidence) is waiting
    if waiting:
        assert v.evidence["waiting_fraction"].startswith("100% of samples >= 20%: a kernel running at < 35% of the")
        assert v.evidence["power_while_busy"] == f"{percent(power_share)} of the power limit"
        assert v.evidence["causes_open"].startswith("a rank waiting in a collective on a peer in another pod; ")
        assert v.evidence["would_tell_them_apart"].startswith("SM activity (DCGM profiling fields")


def test_samples_busy_at_low_power_are_counted_as_waste_where_only_utilization_shows_work():
    """Utilization is 100% on every sample, so activity says no waste; the 30 of 60 samples at a fifth of the
    power are a kernel that ran without working, and count as idle GPU time: half the 600 GPU-seconds."""
    power = np.r_[np.full(30, 140.0), np.full(SAMPLES - 30, 560.0)]
    v = verdict(nvidia_smi(power_watts=power))
    assert v.bottleneck == "unexplained" and v.mean_activity == 1.0, v
    assert v.window_seconds * v.coverage == SAMPLES * STEP
    assert v.wasted_gpu_seconds == 300.0 and v.waiting_share == 0.5
    assert v.evidence["waste"].startswith("the 50% of samples busy under 35% of the power limit counted as no work")


def test_one_gpu_spinning_with_its_sms_idle_waits_on_a_peer_outside_its_pod():
    """With SM activity, the wait shows: utilization 100% while the SMs idle (NCCL's spin kernel)."""
    v = verdict(nvidia_smi(power_watts=140.0, sm_active=0.03))
    assert v.bottleneck == "host_stall" and v.recommendation == STALL_CAUSES["peer"], v


@pytest.mark.parametrize(("waiting_samples", "stalled"), [(12, True), (11, False)])
def test_a_gpu_waits_when_it_waits_on_stall_share_of_its_samples(waiting_samples, stalled):
    """Busy at a fifth of the power with the SMs idle on 12 of 60 samples is stall_share (0.2); 11 is a
    healthy job's noise."""
    assert T.stall_share == 0.2
    power = np.r_[np.full(waiting_samples, 140.0), np.full(SAMPLES - waiting_samples, 560.0)]
    sm = np.r_[np.full(waiting_samples, 0.03), np.full(SAMPLES - waiting_samples, 0.9)]
    v = verdict(nvidia_smi(power_watts=power, sm_active=sm))
    assert (v.bottleneck == "host_stall") is stalled, v


def checkpointing_job(save_seconds: int, period: int = 50, ranks: int = 4, samples: int = 600) -> pd.DataFrame:
    """Ten minutes (`samples`) at 1 s of a job on `ranks` H100s seen by nvidia-smi: rank 0 writes a checkpoint
    for the last `save_seconds` of every `period` (no kernel, 3% utilization, 50 W) while the others wait in the
    next collective (100% utilization at 140 W); the rest of the time all of them train at 560 W."""
    seconds = np.arange(samples)
    saving = seconds % period >= period - save_seconds
    frames = [
        nvidia_smi(
            samples=samples,
            gpu_name=f"GPU-{rank}",
            gpu_util=np.where(saving, 0.03, 1.0) if rank == 0 else 1.0,
            power_watts=np.where(saving, 50.0 if rank == 0 else 140.0, 560.0),
        )
        for rank in range(ranks)
    ]
    frame = pd.concat(frames, ignore_index=True)
    frame["timestamp"] = START + np.tile(seconds, ranks)
    return fr.normalize(frame)


def test_a_rank_that_checkpoints_is_named_with_the_shape_of_its_stalls():
    """The issue's 8x H100 job in miniature: rank 0 saves 20 s of every 50 while ranks 1-3 wait for it."""
    v = verdict(checkpointing_job(save_seconds=20))
    assert v.bottleneck == "host_stall" and v.confidence == T.confidence_without_profiling, v
    assert v.evidence["waiting_gpus"].startswith("GPU-1 40%, GPU-2 40%, GPU-3 40% of samples >= 20%: a kernel")
    assert v.evidence["stalling_gpu"].startswith("GPU-0: no kernel on 40% of samples while its peers wait")
    # 12 saves on each of 4 GPUs, 20 s each, 50 s apart: rows 1 s apart time them. The last runs to the end of
    # the rows, so nothing shows it ended: 11 a GPU are stalls with work on both sides.
    assert v.evidence["stalls"] == (
        "44 of 20 s (median) every 50 s >= 10 s at a steady period (spread 0 <= 0.5): synchronous saves"
    )
    assert v.recommendation == STALL_CAUSES["checkpoint"]


def test_a_rank_that_stalls_its_peers_for_seconds_every_step_is_held_by_its_input():
    """Rank 0 without a kernel for 4 s of every 10 while the others wait: stalls shorter than
    stall_long_seconds, every step, are its input (its DataLoader, its node's disk), not saves. The ranks'
    power falls and rises together: one job."""
    v = verdict(checkpointing_job(save_seconds=4, period=10))
    assert v.bottleneck == "host_stall" and v.recommendation == STALL_CAUSES["input"], v
    assert v.evidence["stalls"] == "236 of 4 s (median) every 10 s < 10 s: short gaps every step"
    assert v.evidence["one_job"].startswith("their samples move together (correlation ")


@pytest.mark.parametrize(("save_seconds", "expected"), [(10, "host_stall"), (9, "data_starvation")])
def test_a_rank_alone_stalls_on_saves_of_stall_long_seconds_and_on_its_input_below(save_seconds, expected):
    """Rank 0 in a pod of its own, saving every 30 s: gaps of stall_long_seconds (10 s) at a steady period
    are saves; shorter gaps every step are its input. Neither is a serving replica."""
    assert T.stall_long_seconds == 10
    v = verdict(checkpointing_job(save_seconds=save_seconds, period=30, ranks=1))
    assert v.bottleneck == expected, v
    if expected == "host_stall":
        assert v.evidence["stalled_fraction"] == "33.3% of samples >= 20%"
        assert v.recommendation == STALL_CAUSES["checkpoint"]


@pytest.mark.parametrize("rest_seconds", [299, 300])
def test_gaps_of_idle_seconds_are_rests_not_saves(rest_seconds):
    """Two hours of one GPU working 10 minutes and resting the rest of every 15, its memory held: a notebook
    training in cells, a job between runs. A checkpoint written even to slow storage takes under idle_seconds
    (5 minutes): a steady gap of 299 s is a save; one of 300 s or more is a rest, not a save to make async."""
    assert T.idle_seconds == 300
    v = verdict(checkpointing_job(save_seconds=rest_seconds, period=900, ranks=1, samples=7200))
    if rest_seconds < T.idle_seconds:
        assert (v.bottleneck, v.cause) == ("host_stall", "checkpoint"), v
        assert v.evidence["stalls"] == (
            "7 of 299 s (median) every 900 s >= 10 s at a steady period (spread 0 <= 0.5): synchronous saves"
        )
    else:  # at work two thirds of the time (67.7%, rows at 3% counted), at full activity while it works
        assert (v.bottleneck, v.evidence["mean_activity"]) == ("healthy", "67.7%"), v


def test_long_steady_gaps_with_the_memory_released_are_not_saves():
    """The same rank, its process ending in each gap (memory back to nothing): runs one after another."""
    frame = checkpointing_job(save_seconds=10, period=30, ranks=1)
    gaps = frame["gpu_util"].to_numpy() < 0.1
    frame["memory_used_bytes"] = np.where(gaps, 0.0, 60e9)
    assert verdict(frame).bottleneck != "host_stall"


#: Alternating +1/-1 and +1/+1/-1/-1 over a window's samples: both average 0 and they are orthogonal, so
#: a GPU's power of a*STEPS + b*OTHER correlates a / sqrt(a^2 + b^2) with another's of STEPS alone.
STEPS = np.tile([1.0, -1.0], SAMPLES // 2)
OTHER = np.tile([1.0, 1.0, -1.0, -1.0], SAMPLES // 4)


def two_ranks(ratio: float = 0.75, correlation: float = 1.0, **columns) -> pd.DataFrame:
    """Two H100s from nvidia-smi, always busy: GPU-1 at its 700 W limit, GPU-0 at `ratio` of it, each
    swinging 10 W around that mean with the given correlation between them."""
    swing = 10.0 * (correlation * STEPS + np.sqrt(1.0 - correlation**2) * OTHER)
    return fr.normalize(
        pd.concat(
            [
                nvidia_smi(power_watts=ratio * 700.0 + swing, **columns),
                nvidia_smi(gpu_name="GPU-1", power_watts=700.0 + 10.0 * STEPS, **columns),
            ],
            ignore_index=True,
        )
    )


@pytest.mark.parametrize(("ratio", "straggler"), [(T.straggler_power_ratio, True), (0.76, False)])
def test_a_straggler_draws_more_power_than_the_peers_that_wait_for_it(ratio, straggler):
    """Two ranks always busy, their power rising and falling together with each step; GPU-1 draws its 700 W
    limit, GPU-0 `ratio` of that: it finishes each step early and waits, in waits shorter than a sample
    (straggler_power_ratio 0.75)."""
    v = verdict(two_ranks(ratio))
    assert (v.bottleneck == "host_stall") is straggler, v
    if straggler:
        assert v.evidence["straggler_gpu"] == (
            "GPU-1 draws 100% of its power limit while busy, its peers at most 75% (75% <= 75%): they finish "
            "each step early and wait for it"
        )
        assert v.evidence["one_job"] == "their samples move together (correlation 1 >= 0.5)"
        assert v.recommendation == STALL_CAUSES["straggler"]


H100_NVLINK, H100_PCIE = 450e9, 63e9  # bytes per second each way: the catalogue's (core/catalog.py)
L40S_PCIE = 31.5e9


@pytest.mark.parametrize(
    ("columns", "correlation", "one_job"),
    [
        ({"nvlink_tx_bytes_per_second": 1.01 * T.nvlink_idle * H100_NVLINK}, 0.0, True),
        ({"nvlink_tx_bytes_per_second": 0.99 * T.nvlink_idle * H100_NVLINK}, 0.0, False),
        (
            {
                "pcie_tx_bytes_per_second": 1.01 * T.placement_pcie_peer * H100_PCIE,
                "pcie_rx_bytes_per_second": 1.01 * T.placement_pcie_peer * H100_PCIE,
            },
            0.0,
            True,
        ),
        (
            {
                "pcie_tx_bytes_per_second": 0.99 * T.placement_pcie_peer * H100_PCIE,
                "pcie_rx_bytes_per_second": 1.01 * T.placement_pcie_peer * H100_PCIE,
            },
            0.0,
            False,
        ),
        ({}, T.job_correlation + 0.01, True),
        ({}, T.job_correlation - 0.01, False),
    ],
)
def test_a_straggler_is_claimed_only_where_the_gpus_are_shown_to_be_one_job(columns, correlation, one_job):
    """The straggler's power pattern, and either the exchange between the GPUs (NVLink at nvlink_idle of its
    capacity, PCIe both ways at placement_pcie_peer) or power that moves together (job_correlation): ranks of
    one job. Each just above and just below its threshold.
    Without any of them the GPUs may run independent processes, and one drawing more power than the other
    is a heavier load, not a peer that others wait for: busy at 75-100% of the power, nothing is wasted."""
    v = verdict(two_ranks(correlation=correlation, **columns))
    assert v.bottleneck == ("host_stall" if one_job else "healthy"), v


def independent_processes(nvlink_share: float) -> pd.DataFrame:
    """A pod of eight H100s at 1 s with DCGM's profiling fields, each running its own inference process
    without a break: GPU-0 a larger model (SM 0.55 at 70% of the power), the others SM 0.3 at 42%, each with
    its own noise; NVLink carrying `nvlink_share` of its capacity."""
    rng = np.random.default_rng(7)
    frames = []
    for index in range(8):
        heavy = index == 0
        frames.append(
            gpu(
                model="NVIDIA H100 80GB HBM3",
                samples=600,
                gpu_name=f"GPU-{index}",
                gpu_util=0.96,
                sm_active=(0.55 if heavy else 0.3) + rng.uniform(-0.03, 0.03, 600),
                tensor_active=0.1,
                power_watts=700.0 * ((0.7 if heavy else 0.42) + rng.uniform(-0.03, 0.03, 600)),
                memory_used_bytes=50e9,
                memory_total_bytes=80e9,
                nvlink_tx_bytes_per_second=nvlink_share * H100_NVLINK,
                nvlink_rx_bytes_per_second=nvlink_share * H100_NVLINK,
            )
        )
    frame = pd.concat(frames, ignore_index=True)
    frame["timestamp"] = START + np.tile(np.arange(600.0), 8)
    return fr.normalize(frame)


def test_independent_processes_in_one_pod_are_not_a_straggler_and_their_cause_stays_open():
    """The issue's eight inference processes on one 8x H100 pod: no NCCL, NVLink at 0 B/s, each GPU's
    samples its own. GPU-0 draws 0.7 of the power and the others 0.42 (0.6 <= straggler_power_ratio), which
    was called a straggler; nothing shows the GPUs are one job, so no rank waits for another. Their low SM
    activity has no signature: unexplained, the evidence saying why no straggler is claimed."""
    v = verdict(independent_processes(nvlink_share=0.0))
    assert v.bottleneck == "unexplained", v
    assert v.evidence["one_job"].startswith("NVLink at 0% of its capacity, correlation between their samples ")
    assert v.evidence["one_job"].endswith(": no sign that the GPUs are ranks of one job")
    correlation = float(v.evidence["one_job"].split("correlation between their samples ")[1].split(":")[0])
    assert abs(correlation) < 0.1  # independent noise
    assert (
        "independent processes, one per GPU (an inference server each), not ranks of one job"
        in (v.evidence["causes_open"])
    )


def test_the_same_power_pattern_with_nvlink_carrying_an_exchange_is_a_straggler():
    """The same eight GPUs with NVLink carrying 5% of its capacity: ranks of one job, and GPU-0, at 0.7 of
    the power where the others draw 0.42, is the one they wait for."""
    v = verdict(independent_processes(nvlink_share=0.05))
    assert v.bottleneck == "host_stall" and v.recommendation == STALL_CAUSES["straggler"], v
    assert v.evidence["one_job"] == "NVLink carries 5% >= 1% of its capacity: the GPUs exchange"
    assert v.evidence["straggler_gpu"].startswith("GPU-0 draws ")


def offloading(fetch_bytes_per_second: float, fetching_samples: int = SAMPLES, sm: float = 0.2) -> pd.DataFrame:
    """One L40S fine-tuning with its parameters in host memory: SM `sm`, utilization 0.3, receiving
    `fetch_bytes_per_second` over PCIe on the first `fetching_samples` samples (a tenth of it after)."""
    fetching = np.arange(SAMPLES) < fetching_samples
    return gpu(
        sm_active=sm,
        gpu_util=0.3,
        tensor_active=0.1,
        pcie_rx_bytes_per_second=np.where(fetching, fetch_bytes_per_second, 0.1 * fetch_bytes_per_second),
        pcie_tx_bytes_per_second=0.5 * fetch_bytes_per_second,
    )


@pytest.mark.parametrize(
    ("fetch", "samples", "sm", "offload"),
    [
        (T.offload_pcie_bytes_per_second, SAMPLES // 2, 0.2, True),
        (T.offload_pcie_bytes_per_second, SAMPLES // 2 - 1, 0.2, False),
        (0.99 * T.offload_pcie_bytes_per_second, SAMPLES, 0.2, False),
        (8e9, SAMPLES, T.interconnect_sm - 0.01, True),
        (8e9, SAMPLES, T.interconnect_sm, False),
    ],
)
def test_cpu_offload_is_host_to_device_traffic_while_the_sms_wait(fetch, samples, sm, offload):
    """offload_pcie_bytes_per_second (1 GB/s) or more into the GPU while activity is under interconnect_sm,
    on signature_fraction of the samples: a host stall whose cause is the offload, with its own fix. Below
    any of the three, low activity with no signature is left open."""
    v = verdict(offloading(fetch, samples, sm))
    assert v.bottleneck == ("host_stall" if offload else "unexplained"), v
    if offload:
        assert v.recommendation == STALL_CAUSES["offload"]
        share = samples / SAMPLES
        mean = (share + 0.1 * (1 - share)) * fetch / 1e9
        assert v.evidence["host_fetch_fraction"] == (
            f"{percent(share)} of samples with >= 1 GB/s into the GPU over PCIe while activity < 30% (mean {mean:.3g} "
            "GB/s): it waits on what it fetches from host memory"
        )


def steps_with_transfers(into: list[float], back: list[float], cpu_cores: float) -> pd.DataFrame:
    """Ten minutes of training steps seen every 10 s: a sample at work (SM 0.85) and one waiting (SM 0) in turn,
    the waiting ones moving `into` and `back` bytes per second over PCIe (repeated in turn), the pod's CPU at
    `cpu_cores` of its 4."""
    waiting = np.arange(SAMPLES) % 2 == 1
    k = np.cumsum(waiting) - 1  # each waiting sample's place among them
    return gpu(
        sm_active=np.where(waiting, 0.0, 0.85),
        gpu_util=np.where(waiting, 0.0, 1.0),
        tensor_active=np.where(waiting, 0.0, 0.5),
        pcie_rx_bytes_per_second=np.where(waiting, np.array(into)[k % len(into)], 0.0),
        pcie_tx_bytes_per_second=np.where(waiting, np.array(back)[k % len(back)], 0.0),
        cpu_usage_cores=cpu_cores,
        cpu_limit_cores=4.0,
    )


@pytest.mark.parametrize(
    ("into", "back", "cpu", "cause"),
    [
        ([2e9], [0.1e9], 4.0, "input"),  # one way, the CPU at its limit: the input pipeline's batches
        ([2e9], [0.8e9], 4.0, "offload"),  # both ways at offload's volume, whatever the CPU
        ([27e9, 0, 0, 0, 0, 0], [12e9, 0, 0, 0, 0, 0], 1.0, "offload"),  # FSDP's bursts, one gap in six
    ],
)
def test_offload_and_input_are_weighed_by_the_evidence_that_excludes_the_other(into, back, cpu, cause):
    """Steps waiting on their host, seen every 10 s. CPU offload fetches parameters and sends gradients back
    (a real FSDP job: 1.4 GB/s in, 0.6 out; bursts of 27 and 12 GB/s a tenth of a second long); an input
    pipeline sends batches one way. Transfers both ways at offload's volume settle offload over input; one
    way with the pod's CPU at its limit settles input over offload, whichever signature runs first."""
    v = verdict(steps_with_transfers(into, back, cpu))
    if cause == "input":
        assert v.bottleneck == "data_starvation", v
        assert v.evidence["cpu_at_limit_fraction"] == "100% >= 50%"
        return
    assert (v.bottleneck, v.cause, v.recommendation) == ("host_stall", "offload", STALL_CAUSES["offload"]), v
    mean_in, mean_back = np.mean(into) / 1e9, np.mean(back) / 1e9
    assert v.evidence["transfers"] == (
        f"while it waits, {mean_in:.3g} GB/s into the GPU over PCIe and {mean_back:.3g} GB/s back "
        f"({percent(mean_back / mean_in)} >= 20%): parameters fetched and gradients sent back, at a volume only "
        "offloaded state moves (CPU offload)"
    )


@pytest.mark.parametrize("step", [1.0, 15.0, 30.0, 60.0])
def test_cpu_offload_shows_at_any_sample_interval_from_dcgm_exporter_alone(step):
    """dcgm-exporter's stock counters (GR engine activity, PCIe, memory, power; no SM activity), its
    samples `step` s apart over an hour: offloaded fetches fill every interval, so every sample shows them."""
    samples = int(3600 / step)
    frame = gpu(
        samples=samples,
        sm_active=np.nan,
        gr_engine_active=0.25,
        gpu_util=0.3,
        tensor_active=0.1,
        pcie_rx_bytes_per_second=6e9,
        pcie_tx_bytes_per_second=3e9,
        power_watts=120.0,
    )
    frame["timestamp"] = START + step * np.arange(samples)
    v = verdict(frame)
    assert v.bottleneck == "host_stall" and v.recommendation == STALL_CAUSES["offload"], v
    assert v.evidence["host_fetch_fraction"].startswith("100% of samples with >= 1 GB/s into the GPU over PCIe")


def unheld(**columns) -> pd.DataFrame:
    """A GPU no pod holds (GPU-1) beside pod ml/p's GPU: data that attributes GPUs to pods."""
    free = {"gpu_util": 0.0, "sm_active": 0.0, "tensor_active": 0.0, "dram_active": 0.0, "memory_used_bytes": 0.4e9}
    row = gpu(gpu_name="GPU-1", namespace="", pod="", **(free | columns))
    return pd.concat([gpu(), row], ignore_index=True)


@pytest.mark.parametrize(
    ("held_samples", "expected"),
    [(SAMPLES // 2 - 1, "unallocated"), (SAMPLES // 2, "held_without_pod")],
)
def test_a_gpu_no_pod_holds_is_held_at_signature_fraction_of_samples_above_a_context(held_samples, expected):
    """Memory above serving_memory_bytes (a CUDA context is ~0.5 GiB) on half the samples: a process."""
    assert T.signature_fraction == 0.5
    memory = np.where(np.arange(SAMPLES) < held_samples, T.serving_memory_bytes + 1, 0.4e9)
    v = {x.unit: x for x in classify(unheld(memory_used_bytes=memory))}["gpu:n1/GPU-1"]
    assert (v.bottleneck, v.confidence, v.secondary) == (expected, T.confidence_without_pod, [])
    assert v.evidence["pod"].startswith("none: the kubelet assigned this GPU to no pod")
    # All of its time is capacity nobody uses, or that a process outside any pod spends: waste by class.
    assert v.wasted_gpu_seconds == SAMPLES * STEP and v.workload == "(no pod)"


@pytest.mark.parametrize(("busy_samples", "expected"), [(0, "unallocated"), (1, "held_without_pod")])
def test_a_gpu_no_pod_holds_is_held_when_kernels_run_on_sparse_busy_share(busy_samples, expected):
    """One busy sample of 60 is 1.7% >= sparse_busy_share (1%): kernels ran with no pod."""
    on = (np.arange(SAMPLES) < busy_samples).astype(float)
    v = {x.unit: x for x in classify(unheld(gpu_util=0.95 * on, sm_active=0.9 * on))}["gpu:n1/GPU-1"]
    assert v.bottleneck == expected


def test_without_any_pod_in_the_data_each_gpu_is_judged_as_its_workload():
    """A capture that names no pods (dmon, nvidia-smi) says nothing of allocation: a busy GPU is healthy."""
    [v] = classify(gpu(namespace="", pod=""))
    assert (v.unit, v.bottleneck) == ("gpu:n1/GPU-0", "healthy")


#: What every unexplained verdict leaves open however complete the data: a light workload by design.
BY_DESIGN = "a light workload by design (small batches, short notebook cells)"
PROFILE = "the workload's own profile (PyTorch profiler, Nsight Systems)"


@pytest.mark.parametrize("step", [30.0, 60.0])
def test_low_activity_without_a_signature_names_the_causes_left_open(step):
    """A model held and steady light work (activity 0.2), as dcgm-exporter alone gives it every 30 or 60 s
    (no CPU, no power, no activity shape): no cause is claimed, no fix but what would settle it. The
    evidence lists each cause the data cannot rule out, with the input that would; its waste counts. A rank
    spinning in a collective is ruled out without power: no kernel ran most of any sample's time."""
    frame = gpu(samples=60, gpu_util=0.25, sm_active=0.2, tensor_active=0.05, memory_used_bytes=30e9)
    frame["timestamp"] = START + step * np.arange(60)
    v = verdict(fr.normalize(frame))
    assert (v.bottleneck, v.confidence) == ("unexplained", T.confidence_low_activity_coarse)
    assert v.evidence["mean_activity"] == "20% < 50% with no signature of a cause"
    assert v.evidence["model_memory_bytes"] == "30000000000 held on 100% of samples"
    assert v.evidence["causes_open"] == "; ".join(
        [
            "an input pipeline or a serving loop bound by the pod's CPU",
            "training steps starved for input (bursts and gaps at a steady period)",
            "a serving replica with few requests",
            BY_DESIGN,
        ]
    )
    assert v.evidence["would_tell_them_apart"] == "; ".join(
        [
            "the pod's CPU use and limit (cAdvisor, kube-state-metrics)",
            "gpulens' exporter on its node (it counts every second between scrapes), or samples at most 5 s apart, "
            "to time the bursts",
            "its serving engine's request metrics (vLLM, Triton), or its owner's kind (kube-state-metrics)",
            PROFILE,
        ]
    )
    assert v.recommendation.startswith("The GPU does little work, and this data does not say why")
    assert v.wasted_gpu_seconds == pytest.approx(0.8 * 60 * step, abs=0.1)


def test_low_activity_with_every_input_leaves_only_what_no_telemetry_shows():
    """The same light work every second with power and the pod's CPU below its limit, no model held (a
    notebook's small tensors): the CPU limit, the timing of steps, serving and waiting are ruled out by
    the data, and it says how. (At one core, one host thread would be the cause: the test above.)"""
    frame = gpu(
        samples=600,
        gpu_util=0.25,
        sm_active=0.2,
        memory_used_bytes=0.5e9,
        power_watts=120.0,
        cpu_usage_cores=2.5,
        cpu_limit_cores=8.0,
    )
    frame["timestamp"] = START + np.arange(600.0)
    v = verdict(fr.normalize(frame))
    assert (v.bottleneck, v.confidence) == ("unexplained", T.confidence_low_activity)
    assert v.evidence["cpu_at_limit_fraction"] == "0% < 50%: not at its limit"
    assert v.evidence["causes_open"] == (
        f"input or a host loop bound by storage, the network or one thread, not the CPU limit; {BY_DESIGN}"
    )
    assert v.evidence["would_tell_them_apart"] == PROFILE


def test_one_serving_period_at_a_quarter_second_is_not_data_starvation():
    """A vLLM replica sampled every 250 ms: quiet 20 s, serving without a break for 78 s (one dip), quiet
    22 s. The four edges are two switches a minute, but two bursts time no step and the CPU says nothing:
    not data_starvation (it was, at 0.5, with "too few to tell training steps from requests")."""
    quarter = np.arange(480) * 0.25
    serving = ((quarter >= 20) & (quarter < 98) & ~((quarter >= 60) & (quarter < 61))).astype(float)
    frame = nvidia_smi(samples=480, gpu_util=0.96 * serving, power_watts=120 + 300 * serving)
    frame["timestamp"] = START + quarter
    v = verdict(fr.normalize(frame))
    assert v.bottleneck == "healthy", v


def test_low_activity_that_could_be_a_rank_spinning_says_power_would_tell():
    """Utilization 0.9 with SM activity 0.2 and no power (dcgm-exporter without DCGM_FI_DEV_POWER_USAGE): a
    kernel ran, doing little: a rank spinning in a collective or a light kernel, which power would tell."""
    v = verdict(gpu(gpu_util=0.9, sm_active=0.2, tensor_active=0.05))
    assert v.bottleneck == "unexplained"
    assert "a rank waiting on a peer or its host (busy at low power)" in v.evidence["causes_open"]
    assert v.evidence["would_tell_them_apart"].split("; ")[-2:] == ["its power draw", PROFILE]


# --- start-up and served work --------------------------------------------------------------------------


def replica(
    seconds: int, step: float, util: np.ndarray | None = None, load: int = 90, share: float = 0.9
) -> pd.DataFrame:
    """A vLLM replica on an H100 as nvidia-smi logs it every `step` s (each row the last second's
    utilization): its weights load (16 GB) until 30 s before `load`, its KV cache takes memory to `share`
    of 80 GB at `load`, CUDA graphs are captured at 80% for 20 s, then a health check runs a 50 ms kernel every
    7 s. `util`: each second's utilization instead."""
    second = np.arange(seconds)
    weights = 16e9 * np.minimum(1.0, (second + 1) / (load - 30))
    memory = np.where(second < load, weights, share * 80e9)
    if util is None:
        warm_up = (second >= load) & (second < load + 20)
        util = np.where(warm_up, 0.8, np.where((second >= load + 20) & (second % 7 == 3), 0.05, 0.0))
    rows = second[:: int(step)]
    return nvidia_smi(
        samples=len(rows),
        timestamp=START + rows,
        gpu_util=util[rows],
        memory_used_bytes=memory[rows],
        memory_total_bytes=80e9,
        power_watts=np.where(util[rows] > 0.5, 500.0, 90.0),
    )


@pytest.mark.parametrize("step", [1.0, 15.0, 30.0, 60.0])
def test_a_replica_that_loaded_a_model_and_served_nothing_is_idle_at_any_interval(step):
    """32 minutes from its start (30 samples after its start-up at 60 s), at every interval. Its health checks
    are 0.5% of its time (the 30 s rows that catch one are a tenth of the rows, over the 1% bar when rows were
    counted), and the load's warm-up is start-up, not served work: idle, not overprovisioned_serving ("no
    burst of work seen"), and its flat 0.9 after the load is a pre-allocator's, not memory fragmentation."""
    v = verdict(replica(1920, step))
    assert v.bottleneck == "idle", v
    assert v.recommendation.startswith("Release the GPU")
    # The load ends at the first row without work after the warm-up (90-110 s).
    start_of_steady = {1.0: 110, 15.0: 120, 30.0: 120, 60.0: 120}
    no_burst = v.evidence["no_burst_seconds"]
    assert no_burst.startswith(f"{1920 - start_of_steady[step]} >= 300 without a burst of work")
    rows = np.arange(0, 1920, int(step))
    steady = rows >= start_of_steady[step]
    # The rows' own utilization after the load: 50 ms of each 7 s, as many rows catch it.
    work = float(np.mean(np.where(rows[steady] % 7 == 3, 0.05, 0.0)))
    assert work < 0.01 and f"{percent(work)} of " in no_burst, no_burst
    assert v.evidence["start_up"] == f"a model load and its warm-up, the first {start_of_steady[step]} s, left out"
    assert v.evidence["memory_held_bytes"] == "72000000000"


def test_idle_after_a_model_load_is_measured_from_the_loads_end():
    """A model loaded and warmed up in 42 s, then 278 s with no work: under the 300 s bar from the window's
    start, all of it from the load's end. Idle, the load no work that stopped."""
    second = np.arange(320)
    v = verdict(replica(320, 1.0, util=np.where((second >= 22) & (second < 42), 0.8, 0.0), load=22))
    assert v.bottleneck == "idle", v
    assert v.evidence["idle_for_seconds"] == "278 >= 278 (activity < 1%)"
    assert v.evidence["start_up"] == "a model load and its warm-up, the first 42 s, left out"
    assert "busy_before_fraction" not in v.evidence


def test_a_replica_serving_from_its_load_on_keeps_a_pre_allocators_flat_memory():
    """Serving without a pause from its load on (busy 60%, at 0.95 of its memory after 90 s: vLLM's
    gpu_memory_utilization 0.9 and the CUDA context beside it): the rise of the load is no growth, and the
    level held flat is the pre-allocator's configured share, not fragmentation."""
    second = np.arange(1800)
    v = verdict(replica(1800, 1.0, util=np.where(second >= 90, 0.6, 0.0), share=0.95))
    assert v.bottleneck == "healthy", v


def test_a_replica_that_served_after_its_load_is_serving():
    """The same replica with a request every 5 minutes (4 s at 90%): served work seen after the load."""
    second = np.arange(1800)
    util = np.where((second >= 90) & (second < 110), 0.8, np.where((second >= 150) & (second % 300 < 4), 0.9, 0.0))
    v = verdict(replica(1800, 1.0, util=util))
    assert v.bottleneck == "overprovisioned_serving", v
    assert v.evidence["quiet_fraction"].endswith("(5 bursts of work between them)")


@pytest.mark.parametrize(
    ("cores", "limit", "samples", "host_thread"),
    [
        (1.0, 4.0, SAMPLES // 2, True),
        (1.0, 4.0, SAMPLES // 2 - 1, False),
        (1.0 + T.host_thread_cores - 0.01, 4.0, SAMPLES, True),
        (1.0 + T.host_thread_cores + 0.01, 4.0, SAMPLES, False),
        (1.0 - T.host_thread_cores + 0.01, 4.0, SAMPLES, True),
        (1.0 - T.host_thread_cores - 0.01, 4.0, SAMPLES, False),
        (1.0, np.nan, SAMPLES, True),  # no limit: one core is still one thread
        (1.0, 1.0 + 2 * T.host_thread_cores, SAMPLES, False),  # a pod limited to about a core is at its limit
    ],
)
def test_one_gpu_working_little_while_its_pod_uses_one_cpu_core_waits_on_one_host_thread(
    cores, limit, samples, host_thread
):
    """A generate() loop from one Python thread: the pod's CPU sits at one core (1 +/- host_thread_cores),
    under a limit of more, on signature_fraction of the samples, while its GPU's SMs are 20% active. Elsewhere
    (another CPU use, the CPU at its limit) the same low activity is left open."""
    one_core = np.arange(SAMPLES) < samples
    v = verdict(
        gpu(
            sm_active=0.2,
            gpu_util=0.25,
            tensor_active=0.1,
            cpu_usage_cores=np.where(one_core, cores, 2.5),
            cpu_limit_cores=limit,
        )
    )
    assert v.bottleneck == ("host_stall" if host_thread else "unexplained"), v
    if host_thread:
        assert v.recommendation == STALL_CAUSES["host_thread"]
        assert v.evidence["one_core_fraction"] == (
            f"{percent(samples / SAMPLES)} of samples with the pod's CPU at 1 +/- 0.15 cores (under a higher limit) "
            "while activity is 20% < 50%: one host thread drives the GPU, which waits between its launches"
        )
        assert v.evidence["quiet_fraction"] == "0% of samples < 30%: launches one after another"


@pytest.mark.parametrize(("memory", "headline"), [(5e9, "wrong_gpu_type"), (11e9, "host_stall")])
def test_a_loop_one_host_thread_drives_on_a_sliver_of_a_big_gpu_is_sized_first(memory, headline):
    """The same generate() loop on an A100 80GB at 10% activity, its pod's CPU at one core: holding 5 GB (under
    oversized_memory_bytes, 10 GB) it fits a GPU a seventh the price, on which a host-bound loop runs as fast:
    the size settles the class (wrong_gpu_type, the resize in the plan), the loop's evidence kept and host_stall
    what else held. Holding 11 GB, nothing says the size: the loop is the class."""
    v = verdict(
        gpu(
            model="NVIDIA A100-SXM4-80GB",
            sm_active=0.1,
            gpu_util=0.2,
            tensor_active=0.05,
            memory_used_bytes=memory,
            memory_total_bytes=80e9,
            cpu_usage_cores=1.0,
            cpu_limit_cores=4.0,
        )
    )
    assert v.bottleneck == headline, v
    assert v.evidence["one_core_fraction"].startswith("100% of samples with the pod's CPU at 1 +/- 0.15 cores")
    if headline == "wrong_gpu_type":
        assert (v.secondary, v.cause, v.recommendation) == (
            ["host_stall"],
            "host_thread",
            RECOMMENDATIONS["wrong_gpu_type"],
        )
        assert v.evidence["peak_memory_bytes"] == "5000000000 <= 10000000000 on a NVIDIA A100-SXM4-80GB"
        assert v.evidence["deciding"].startswith("its footprint fits a smaller GPU")
    else:
        assert (v.cause, v.secondary) == ("host_thread", [])


@pytest.mark.parametrize(("quiet_samples", "host_thread"), [(17, True), (18, False)])
def test_a_gpu_quiet_for_long_while_its_pod_uses_one_core_is_not_driven_by_that_thread(quiet_samples, host_thread):
    """A notebook busy on its CPU (a pandas cell at one core) leaves its GPU quiet between cells: quiet on
    serving_quiet_share (0.3, 18 of 60) of the samples or more, the busy core is not what the GPU waits on, and
    with a model's memory held (19 GB) its bursts between quiet spells are the serving rule's."""
    quiet = np.arange(SAMPLES) < quiet_samples
    v = verdict(
        gpu(
            sm_active=np.where(quiet, 0.0, 0.25),
            gpu_util=np.where(quiet, 0.0, 0.3),
            tensor_active=0.1,
            cpu_usage_cores=1.0,
            cpu_limit_cores=4.0,
        )
    )
    assert v.bottleneck == ("host_stall" if host_thread else "overprovisioned_serving"), v


def stages(
    gaps: list[np.ndarray], samples: int, step: float = 1.0, nvlink_share: float = 0.05, working: float = 0.8
) -> pd.DataFrame:
    """A pod of H100s sampled together every `step` s, one GPU per array of `gaps` (True: the sample falls in
    the GPU's gap, SM 0 and no kernel; else SM `working` at 80% of the power), NVLink carrying `nvlink_share`."""
    frames = []
    for index, gap in enumerate(gaps):
        frames.append(
            gpu(
                model="NVIDIA H100 80GB HBM3",
                samples=samples,
                gpu_name=f"GPU-{index}",
                gpu_util=np.where(gap, 0.0, 1.0),
                sm_active=np.where(gap, 0.0, working),
                tensor_active=np.where(gap, 0.0, 0.5),
                power_watts=np.where(gap, 100.0, 560.0),
                memory_used_bytes=60e9,
                memory_total_bytes=80e9,
                nvlink_tx_bytes_per_second=nvlink_share * H100_NVLINK,
                nvlink_rx_bytes_per_second=nvlink_share * H100_NVLINK,
            )
        )
    frame = pd.concat(frames, ignore_index=True)
    frame["timestamp"] = START + step * np.tile(np.arange(samples), len(gaps))
    return fr.normalize(frame)


def gpipe(stages_count: int, microbatches: int, samples: int) -> list[np.ndarray]:
    """Each stage's gaps under GPipe, one micro-batch a sample: stage i runs its forwards from slot i and its
    backwards from slot m + 2p - 2 - i of each step of 2(m + p - 1) slots, a bubble of (p-1)/(m+p-1)."""
    p, m = stages_count, microbatches
    slot = np.arange(samples) % (2 * (m + p - 1))
    return [
        ~(((slot >= i) & (slot < i + m)) | ((slot >= m + 2 * p - 2 - i) & (slot < 2 * m + 2 * p - 2 - i)))
        for i in range(p)
    ]


@pytest.mark.parametrize(
    ("microbatches", "samples", "stalled"), [(15, 7200, True), (17, 7200, False), (15, 720, False)]
)
def test_a_pipeline_bubble_is_a_stall_above_gpipes_for_four_micro_batches_per_stage(microbatches, samples, stalled):
    """Four stages: GPipe's bubble with m = 4p = 16 micro-batches is 3/19 = 0.158 (pipeline_microbatches_per_stage).
    With 15 (a bubble of 3/18 = 0.167) over two hours, the schedule leaves the GPUs waiting: host_stall with the
    pipeline's fix, never the DataLoader's; with 17 (3/20 = 0.15) the bubble is what the schedule costs:
    healthy, named. Over 12 minutes, 15's bubble is within two standard errors of the bar: not shown above it."""
    v = verdict(stages(gpipe(4, microbatches, samples), samples))
    assert v.bottleneck == ("host_stall" if stalled else "healthy"), v
    assert (v.cause, v.recommendation == STALL_CAUSES["pipeline"]) == (("pipeline", True) if stalled else ("", False))
    bubble, n = 3 / (microbatches + 3), 4 * samples
    margin = 2 * math.sqrt(bubble * (1 - bubble) / n)
    assert v.evidence["pipeline_bubble"] == (
        f"{percent(bubble)} +/- {percent(margin)} of the time (1 - mean activity / working activity, {n} samples); "
        "GPipe's "
        f"(p-1)/(m+p-1) for p = 4 stages here implies m = {microbatches:.3g} micro-batches per step; with m >= 4p = "
        f"16 it is <= 15.8%{': above it' if stalled else ''} (stages in other pods raise p and the bar)"
    )
    assert v.evidence["stages_take_turns"] == (
        "100% of the moments a GPU waits (activity < 10%) another works (> 50%), >= 50%; 4 of 4 GPUs wait on >= 2% "
        "of their samples: pipeline stages, not ranks that wait together"
    )


@pytest.mark.parametrize(("working", "stalled"), [(0.6, True), (0.45, None)])
def test_stages_working_under_starvation_high_have_their_bubble_measured(working, stalled):
    """Stages whose kernels keep the SMs 60% busy (small micro-batches) work above BUSY_LEVEL, under
    starvation_high: their working level is measured above BUSY_LEVEL, the bubble of 15 micro-batches (3/18)
    is found above the bar as at 0.8. At 45% no GPU is seen working while another waits: no stages claimed."""
    v = verdict(stages(gpipe(4, 15, 7200), 7200, working=working))
    if stalled is None:
        assert "pipeline_bubble" not in v.evidence and v.cause != "pipeline", v
        return
    assert (v.bottleneck, v.cause) == ("host_stall", "pipeline"), v
    assert v.evidence["pipeline_bubble"].startswith(
        f"{percent(3 / 18)} +/- {percent(2 * math.sqrt(3 / 18 * 15 / 18 / 28800))} "
    )


def two_stages(second_gaps: set[int], first_gaps: frozenset[int] = frozenset({0, 1})) -> list[np.ndarray]:
    """Two GPUs over 600 s in steps of 10: the first in a gap at `first_gaps` of each step, the second at
    `second_gaps`."""
    slot = np.arange(600) % 10
    return [np.isin(slot, list(first_gaps)), np.isin(slot, list(second_gaps))]


@pytest.mark.parametrize(
    ("second_gaps", "turns"),
    [
        ({2, 3}, 1.0),  # strictly in turn
        ({0, 1, 2, 3}, 0.5),  # of the 4 moments with a gap, 2 have the other GPU working: pipeline_stagger_share
        ({0, 1, 2}, None),  # 1 of 3: mostly waiting together
        ({0, 1}, None),  # all together, as data-parallel ranks on one input
    ],
)
def test_gpus_are_pipeline_stages_where_their_gaps_take_turns(second_gaps, turns):
    v = verdict(stages(two_stages(second_gaps), 600))
    if turns is None:
        assert "stages_take_turns" not in v.evidence and v.recommendation != STALL_CAUSES["pipeline"], v
        return
    assert v.bottleneck == "host_stall" and v.recommendation == STALL_CAUSES["pipeline"], v
    assert v.evidence["stages_take_turns"].startswith(f"{percent(turns)} of the moments a GPU waits")


@pytest.mark.parametrize(("gapped", "stage"), [(12, True), (11, False)])
def test_two_gpus_or_more_wait_their_turn_on_pipeline_gap_share_of_samples(gapped, stage):
    """The second GPU in a gap on 12 of 600 samples (0.02 = pipeline_gap_share) is a stage; on 11, a GPU that
    almost never waits while the first does is no pipeline (a straggler, uneven work)."""
    gaps = two_stages(set())
    gaps[1][np.flatnonzero(~gaps[0])[:gapped]] = True
    v = verdict(stages(gaps, 600))
    assert ("stages_take_turns" in v.evidence) == stage, v
    if stage:
        assert "; 2 of 2 GPUs wait on >= 2% of their samples" in v.evidence["stages_take_turns"]


def test_gpus_that_take_turns_without_exchanging_are_not_stages():
    """The same turns with NVLink idle: independent processes (one notebook, one batch job per GPU) whose gaps
    fall apart by chance; none waits for another, so no pipeline and no bubble is claimed."""
    v = verdict(stages(two_stages({2, 3}), 600, nvlink_share=0.0))
    assert "stages_take_turns" not in v.evidence and v.recommendation != STALL_CAUSES["pipeline"], v


@pytest.mark.parametrize("step", [1.0, 15.0, 30.0, 60.0])
def test_pipeline_stages_show_at_any_sample_interval_from_dcgm_exporter_alone(step):
    """dcgm-exporter reads a node's GPUs at one moment, so each scrape shows which stages are in their bubble,
    however far apart scrapes are: four stages with 4 micro-batches (a bubble of 3/7), an hour of them, each
    scrape 3 slots of the 14-slot step after the last. The bubble is the share of samples that caught a gap."""
    samples = int(3600 / step)
    gaps = [g[3 * np.arange(samples)] for g in gpipe(4, 4, 3 * samples)]
    v = verdict(stages(gaps, samples, step=step))
    assert v.bottleneck == "host_stall" and v.recommendation == STALL_CAUSES["pipeline"], v
    caught = np.mean(gaps)
    assert abs(caught - 3 / 7) < 0.01
    assert v.evidence["pipeline_bubble"].startswith(f"{percent(caught)} +/- ")


def starting_job(level_from: int, rise_from: int = 1) -> pd.DataFrame:
    """An L40S job whose data begins with its process: a CUDA context (1% of memory) on the first samples, its
    model (30%) from sample `rise_from`, its full working set (60%) from sample `level_from`, warming up at SM
    0.2 until then and working at SM 0.9 after."""
    k = np.arange(SAMPLES)
    level = np.where(k < rise_from, 0.01, np.where(k < level_from, 0.3, 0.6))
    return gpu(
        memory_used_bytes=level * 48e9,
        sm_active=np.where(k < level_from, 0.2, 0.9),
        gpu_util=np.where(k < level_from, 0.4, 0.95),
    )


@pytest.mark.parametrize(("level_from", "expected"), [(30, "healthy"), (31, "insufficient_data")])
def test_a_jobs_start_up_is_left_out_of_what_it_is_judged_on(level_from, expected):
    """The 300 s warm-up at SM 0.2 of a job that then works at 0.9 is no verdict on it: left out, the 30
    samples after it (min_samples) are healthy, its waste none; 29 are too few to judge."""
    v = verdict(starting_job(level_from))
    assert v.bottleneck == expected, v
    assert v.evidence["start_up"] == f"a model load and its warm-up, the first {level_from * 10} s, left out"
    assert v.wasted_gpu_seconds == 0.0


@pytest.mark.parametrize(("rise_from", "starting"), [(14, True), (15, False)])
def test_a_gpu_idle_for_long_before_it_loads_is_not_starting(rise_from, starting):
    """The rise must begin in the first quarter of the rows: at sample 14 (140 s of the 590 s from the first
    sample to the last, 0.237) the job starts with the data; at sample 15 (0.254), a GPU left at its CUDA context
    for a quarter of the window and then loaded (a notebook) is judged on all it did, not cut to a start-up."""
    v = verdict(starting_job(45, rise_from=rise_from))
    assert ("start_up" in v.evidence) == starting, v
    assert v.window_seconds == (150.0 if starting else 600.0)
