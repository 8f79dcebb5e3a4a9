"""The right-sizing plan on constructed fleets, with the plans worked out by hand from the catalogue's
figures (NVIDIA's MIG profiles and datasheets) and the thresholds; and its promise as a property: a plan
never proposes less capacity than the measured peak needs with its headroom."""

import csv
import io
import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.judging.history import analyze
from gpulens.analyzer.outputs.actions import GPU_ONLY_REPLICA_CONFIDENCE
from gpulens.analyzer.outputs.evaluate import Scenario, scenario_trace
from gpulens.analyzer.outputs.formats import plan_csv
from gpulens.analyzer.outputs.plan import make_plan, sized
from gpulens.analyzer.outputs.use import Use
from gpulens.core.catalog import MODELS
from gpulens.core.thresholds import Thresholds

T = Thresholds()
START = 1_800_000_000.0
GIB = 2**30


def pod(
    name: str, model: str, activity: np.ndarray, memory: float, step: float, gpu: str = "", node: str = "node-a"
) -> pd.DataFrame:
    """One GPU of pod `name` ("namespace/pod"), sampled every `step` seconds: utilization and SM activity
    `activity` (one value a sample), `memory` bytes used."""
    namespace, pod_name = name.split("/")
    catalogue = MODELS[model]
    return pd.DataFrame(
        {
            "timestamp": START + step * np.arange(len(activity)),
            "gpu": gpu or f"GPU-{name.replace('/', '-')}",
            "node": node,
            "gpu_model": catalogue.name,
            "namespace": namespace,
            "pod": pod_name,
            "gpu_util": np.minimum(activity * 1.05, 1.0),
            "sm_active": activity,
            "memory_used_bytes": memory,
            "memory_total_bytes": float(catalogue.memory_total_bytes),
        }
    )


def planned(frames: list[pd.DataFrame], step: float):
    trace = fr.normalize(pd.concat(frames, ignore_index=True))
    verdicts = analyze(trace, T)
    return verdicts, make_plan(verdicts, Use.of_trace(trace, step, T), T)


def test_eight_replicas_whose_bursts_never_overlap_need_one():
    """8 replicas of a Deployment, each busy 5% of the time (3 s requests at 95%, at random, never two at
    once), a 20 GiB model held: one replica carries them all."""
    rng = np.random.default_rng(7)
    minutes, step = 12 * 60, 1.0  # 720 minutes: bins of a minute (a span holds at most MAX_BINS)
    busy = np.zeros((8, minutes * 60))
    for minute in range(minutes):
        # 8 of the minute's twenty 3 s slots, each to a replica drawn at random: a replica serves 0 to 8
        # requests a minute, one a minute on average, and never two replicas at once.
        starts = rng.choice(np.arange(0, 60, 3), size=8, replace=False)
        for replica, start in zip(rng.integers(0, 8, size=8), starts, strict=True):
            busy[replica, minute * 60 + start : minute * 60 + start + 3] = 0.95
    frames = [pod(f"serve/llm-7d9f8c6b5d-{k}bcde", "H100-SXM5-80GB", busy[k], 20 * GIB, step) for k in range(8)]
    verdicts, plan = planned(frames, step)
    assert {v.bottleneck for v in verdicts} == {"overprovisioned_serving"}
    [action] = plan.actions
    assert (action.action, action.gpus_now, action.gpus_after) == ("fewer_replicas", 8.0, 1.0)
    assert action.owner == "serve/Deployment/llm"  # no owners read: inferred from the pods' names
    assert action.evidence["replicas"] == "8 of Deployment serve/llm (inferred from the pods' names)"
    # Each minute carries 8 x 3 s at 95%: 0.38 GPUs' worth, at every percentile.
    assert action.evidence["load"] == "the replicas' summed activity over 60 s bins: p95 0.38, peak 0.38 GPUs' worth"
    # 7 H100s freed at the catalogue's $4.00 an hour, for 30 days.
    assert action.saving_usd_per_30d == 7 * 4.00 * 720
    assert action.assumptions["price"] == "$4.00/GPU-h (the catalogue)"
    assert action.assumptions["span"].startswith("12 h of samples < 7 d: a weekly pattern")
    # Sized from the GPUs' activity alone, without the engines' queue and KV cache: held below firm.
    assert action.confidence == GPU_ONLY_REPLICA_CONFIDENCE == 0.5 < T.plan_short_confidence
    assert action.assumptions["sizing"].startswith(
        "from GPU activity alone, confidence at most 0.5: its engine's running and waiting requests"
    )


def test_a_small_model_on_an_h100_gets_its_smallest_mig_slice():
    """6 GiB at 8% of an H100 80GB: 1g.10gb (1/7 of the compute >= 9.2%, 10 GB >= 6.9 GiB with 15%) saves
    6/7 of $4.00 an hour, more than an L4 ($3.20 less an hour), which would carry it too."""
    step = 30.0
    activity = np.full(12 * 120, 0.08)  # 12 hours
    _, plan = planned([pod("apps/embedder-0", "H100-SXM5-80GB", activity, 6 * GIB, step)], step)
    [action] = plan.actions
    assert (action.action, action.what) == ("mig", "a MIG 1g.10gb slice of its NVIDIA H100 80GB HBM3")
    assert action.gpus_after == round(1 / 7, 3)
    assert action.saving_usd_per_30d == round(6 / 7 * 4.00 * 720, 2)
    assert action.evidence["peak"] == "activity 8.0% of its GPU (the highest 60 s mean), memory 6.0 GiB"


def test_a_light_job_on_an_a100_moves_to_a_cheaper_model():
    """10 GB at 15% of an A100 40GB: 53.8 TFLOPS and 11.5 GB with 15% headroom. A T4 (65 TFLOPS, 15 GiB,
    $0.50) carries it for $1.50 an hour less; the MIG slice that fits (3g.20gb) would save only 4/7 of $2.00."""
    step = 30.0
    activity = np.full(12 * 120, 0.15)  # 12 hours
    verdicts, plan = planned([pod("batch/etl-0", "A100-SXM4-40GB", activity, 10e9, step)], step)
    assert [v.bottleneck for v in verdicts] == ["wrong_gpu_type"]
    [action] = plan.actions
    assert (action.action, action.what) == ("cheaper_gpu", "move to Tesla T4 ($1.50/GPU-h less)")
    assert (action.gpus_now, action.gpus_after) == (1.0, 1.0)
    assert action.saving_usd_per_30d == 1.50 * 720
    assert action.evidence["fits"] == (
        "it needs 17.3% of its GPU's compute and 10.7 GiB (15% above its peak): Tesla T4 has 65 >= 53.8 dense FP16 "
        "TFLOPS, 320 >= 268 GB/s and 15 GiB at $0.50/GPU-h against $2.00 (NVIDIA's datasheets); it has no bf16: a "
        "model in bf16 runs there in fp16 (check its numerics) or in fp32, slower"
    )


def test_an_idle_notebook_is_released_after_the_cull_time():
    """An hour of work, then 47 hours idle: culled after an hour idle, its GPU is free for 46 of them."""
    step = 30.0
    notebook = np.zeros(2 * 24 * 120)
    notebook[:120] = 0.6
    [verdict], plan = planned([pod("research/notebook-alice-0", "A100-SXM4-40GB", notebook, 12 * GIB, step)], step)
    [action] = plan.actions
    assert (action.action, action.gpus_now) == ("release", 1.0)
    assert action.what == "cull its kernel after 1 h idle (JupyterHub idle-culler, Kubeflow culling)"
    [idle] = [e for e in verdict.episodes if e.bottleneck == "idle"]
    recovered = (idle.end - idle.start - T.plan_cull_seconds) / 3600
    assert recovered == pytest.approx(46, abs=0.1)
    # Durations as people write them; 48 h in at most 1,024 bins: each 169 s.
    assert action.evidence["idle"] == "1 d 22 h of idle spells past 1 h (169 s bins)"
    # An A100 40GB at the catalogue's $2.00, to a bin of the rest's start (the plan measures its bins).
    assert action.saving_usd_span == pytest.approx(recovered * 2.00, abs=169 / 3600 * 2.00)


def test_a_data_starved_job_gets_its_input_fix_and_its_waste_not_a_smaller_gpu():
    trace = scenario_trace(Scenario("data_starvation", "A100-SXM4-40GB", 1, 0.0, True, False, 11))
    verdicts = analyze(trace, T)
    plan = make_plan(verdicts, Use.of_trace(trace, 1.0, T), T)
    [verdict], [action] = verdicts, plan.actions
    assert verdict.bottleneck == "data_starvation"
    assert (action.action, action.gpus_now, action.gpus_after) == ("fix", 1.0, 1.0)
    assert action.what == verdict.recommendation.split(". ")[0]
    assert action.saving_usd_span == round(verdict.wasted_cost, 2)
    assert action.evidence["waste"].startswith(f"{verdict.wasted_gpu_seconds / 3600:.2f} GPU-h")


def test_low_activity_without_a_cause_gets_the_size_its_use_needs_and_what_would_settle_the_cause():
    """A loop launching short kernels from one host thread on an H100, its model held (53.7 GiB at 18% at most):
    the data names no cause, so no code fix is proposed; but whatever its cause, its footprint fits a cheaper
    GPU. With 15% headroom it needs 61.7 GiB, which no MIG profile of an H100 short of the whole GPU and no L40S
    (45 GiB) holds: an A100 80GB, $1.50 an hour less by the catalogue ($4.00 against $2.50). The action says
    what would settle the cause after the move; its waste is counted all the same."""
    trace = scenario_trace(Scenario("unexplained", "H100-SXM5-80GB", 1, 0.0, True, False, 12))
    use = Use.of_trace(trace, 1.0, T)
    [verdict] = sized(analyze(trace, T), use, T)
    plan = make_plan([verdict], use, T)
    assert verdict.bottleneck == "unexplained" and verdict.wasted_gpu_seconds > 0
    assert verdict.size is not None and verdict.size.memory_peak_bytes is not None
    assert verdict.size.memory_peak_bytes / GIB == pytest.approx(53.65, abs=0.01)
    [action] = plan.actions
    assert (action.action, action.what) == ("cheaper_gpu", "move to NVIDIA A100-SXM4-80GB ($1.50/GPU-h less)")
    assert action.saving_usd_per_30d == 1.50 * 720
    assert action.evidence["fits"] == verdict.size.basis
    assert verdict.size.basis.startswith("it needs 21.0% of its GPU's compute and 61.7 GiB (15% above its peak)")
    assert action.then.startswith("then find why it works little: add what would settle it: the pod's CPU use")
    assert plan.not_planned == []


def test_a_gpu_at_fault_is_repaired_before_anything_is_resized_in_the_words_of_its_fault():
    """A throttling GPU is no pod's size to change: the plan proposes nothing for it and says what is wrong
    (the class's fix opens with it), not a generic "a GPU at fault or a process outside any pod"."""
    trace = scenario_trace(Scenario("throttling", "H100-SXM5-80GB", 1, 0.0, True, False, 12))
    verdicts = analyze(trace, T)
    [verdict] = verdicts
    assert verdict.bottleneck == "throttling"
    plan = make_plan(verdicts, Use.of_trace(trace, 1.0, T), T)
    assert plan.actions == []
    assert [(n.units, n.reason) for n in plan.not_planned] == [
        ([verdict.unit], "throttling: The GPU slows itself down; repair first")
    ]


def test_the_fleet_packs_the_slices_and_frees_whole_gpus_and_nodes():
    """Eight small models, one on each H100 of two 4-GPU nodes, each moved to a 1g.10gb slice: 8/7 of a GPU,
    packed first-fit decreasing onto 2 GPUs (the lower bound), which frees 6 GPUs: one whole node."""
    step = 30.0
    names = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    frames = [
        pod(f"apps/{name}", "H100-SXM5-80GB", np.full(12 * 120, 0.08), 6 * GIB, step, node=f"node-{k // 4}")
        for k, name in enumerate(names)
    ]
    _, plan = planned(frames, step)
    assert [a.action for a in plan.actions] == ["mig"] * 8
    [h100] = plan.fleet
    assert (h100.gpus_present, h100.nodes_present, h100.gpus_needed, h100.lower_bound) == (8, 2, 2, 2)
    assert (h100.gpus_freed, h100.nodes_freed, h100.saving_usd_per_30d) == (6, 1, 6 * 4.00 * 720)


@pytest.mark.slow  # Hypothesis: the full lane's
@settings(max_examples=40, deadline=None)
@given(
    replicas=st.integers(2, 8),
    duty=st.floats(0.01, 0.6),
    burst=st.floats(0.3, 1.0),
    seed=st.integers(0, 2**16),
)
def test_fewer_replicas_never_carry_less_than_the_measured_peak_with_headroom(replicas, duty, burst, seed):
    """Whatever the replicas' load, the GPUs a plan keeps carry the peak bin's summed load with headroom."""
    rng = np.random.default_rng(seed)
    step, samples = 60.0, 24 * 60
    frames = [
        pod(f"serve/api-{k}", "L4", np.where(rng.random(samples) < duty, burst, 0.0), 4 * GIB, step)
        for k in range(replicas)
    ]
    trace = fr.normalize(pd.concat(frames, ignore_index=True))
    verdicts = analyze(trace, T)
    use = Use.of_trace(trace, step, T)
    plan = make_plan(verdicts, use, T)
    load = np.nansum([use.activity(v.unit) for v in verdicts if v.pod], axis=0)
    for action in plan.actions:
        if action.action == "fewer_replicas":
            assert action.gpus_after >= load.max() * (1 + T.plan_headroom) - 1e-9
            assert action.gpus_after >= math.ceil(np.quantile(load, T.plan_load_percentile) / T.plan_replica_activity)
        assert action.gpus_after <= action.gpus_now


@pytest.mark.parametrize("projected_from", [3600.0, T.plan_projection_min_seconds])
@pytest.mark.slow
def test_the_live_service_plans_over_its_history_and_exposes_the_savings(projected_from):
    """The analyzer's plan over its history: the eight replicas become one, in its API and its metrics
    (one series a workload, not a pod). Three hours project a month where an hour suffices; where a day is
    needed (the default), its saving is not projected: the series is absent, the JSON's null, until it is."""
    from dataclasses import replace

    from prometheus_client.parser import text_string_to_metric_families

    from gpulens.analyzer.runs.service import AnalyzerService
    from tests.test_history import Replay

    rng = np.random.default_rng(3)
    minutes = 3 * 60
    busy = np.zeros((8, minutes * 60))
    for minute in range(minutes):
        starts = rng.choice(np.arange(0, 60, 3), size=8, replace=False)
        for replica, start in zip(rng.integers(0, 8, size=8), starts, strict=True):
            busy[replica, minute * 60 + start : minute * 60 + start + 3] = 0.95
    trace = fr.normalize(
        pd.concat([pod(f"serve/llm-7d9f8c6b5d-{k}bcde", "H100-SXM5-80GB", busy[k], 20 * GIB, 1.0) for k in range(8)])
    )
    now = [START + 600.0]
    t = replace(T, plan_projection_min_seconds=projected_from)
    service = AnalyzerService(Replay(trace, 600, lambda: now[0]), t, {}, 300, lambda: now[0], 86400)
    while now[0] <= START + minutes * 60:
        assert service.cycle()
        now[0] += 300
    [action] = service.plan().actions
    assert (action.action, action.gpus_now, action.gpus_after) == ("fewer_replicas", 8.0, 1.0)
    document = json.loads(service.plan_json({})[2])
    assert document == json.loads(json.dumps(service.plan().to_dict()))
    projected = projected_from < 3 * 3600
    assert document["plan_summary"]["projected"] is projected
    assert document["plan"][0]["saving_usd_per_30d"] == (7 * 4.00 * 720 if projected else None)
    exposed = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(service.render_text().decode())
        for s in family.samples
        if s.name.startswith("gpulens_plan_")
    }
    workload = (("action", "fewer_replicas"), ("namespace", "serve"), ("owner", action.owner), ("team", ""))
    assert exposed == {
        **({("gpulens_plan_monthly_saving_dollars", workload): 7 * 4.00 * 720} if projected else {}),
        ("gpulens_plan_gpus", tuple(sorted((*workload, ("state", "now"))))): 8.0,
        ("gpulens_plan_gpus", tuple(sorted((*workload, ("state", "after"))))): 1.0,
    }


@pytest.mark.slow
def test_replicas_bound_by_their_kv_cache_are_sized_by_their_engines_load_not_their_sms():
    """The same 8 replicas, their SMs as idle as above (one replica would carry the activity), but each vLLM
    ran 8 requests at p95 and 12 at its peak with its KV cache 45% full: a replica holds 12 x 0.9 / 0.45 = 24
    (plan_kv_cache_bound), the replicas' peaks sum to 96, so 4 replicas, not 1."""
    from dataclasses import replace

    from gpulens.analyzer.inputs.engines import EngineLoad

    rng = np.random.default_rng(7)
    minutes, step = 12 * 60, 1.0
    busy = np.zeros((8, minutes * 60))
    for minute in range(minutes):
        starts = rng.choice(np.arange(0, 60, 3), size=8, replace=False)
        for replica, start in zip(rng.integers(0, 8, size=8), starts, strict=True):
            busy[replica, minute * 60 + start : minute * 60 + start + 3] = 0.95
    frames = [pod(f"serve/llm-7d9f8c6b5d-{k}bcde", "H100-SXM5-80GB", busy[k], 72 * GIB, step) for k in range(8)]
    trace = fr.normalize(pd.concat(frames, ignore_index=True))
    load = EngineLoad("vllm", 5000.0, 0.95, 8.0, 12.0, 0.0, 0.0, 0.3, 0.45)
    verdicts = [
        replace(v, owner_kind="Deployment", owner="llm", workload_kind="serving", engine="vllm", engine_load=load)
        for v in analyze(trace, T)
    ]
    [action] = make_plan(verdicts, Use.of_trace(trace, step, T), T).actions
    assert (action.action, action.gpus_now, action.gpus_after) == ("fewer_replicas", 8.0, 4.0)
    assert action.evidence["load"] == "vllm's requests running, summed over the replicas: p95 64, peaks 96"
    assert action.evidence["sizing"] == (
        "24 running requests a replica: its peak of 12 running filled 45% of its KV cache; 90% of it holds 24"
    )
    assert action.saving_usd_per_30d == 4 * 4.00 * 720


def test_a_preallocating_engines_memory_is_no_demand_for_a_smaller_gpu():
    """A vLLM replica given 30% of an H100 (gpu_memory_utilization 0.3: 24 GiB) serving 3 s requests every
    minute: from its GPU alone a cheaper model holds its peak; but its memory is its KV cache, taken whatever
    the load, so no slice or cheaper GPU is fitted to it."""
    from dataclasses import replace

    step = 1.0
    rng = np.random.default_rng(3)
    activity = np.zeros(6 * 3600)
    for start in np.cumsum(rng.exponential(60.0, size=400)).astype(int):  # requests at random, one a minute
        activity[start : start + 3] = 0.95
    trace = fr.normalize(pod("serve/chat-0", "H100-SXM5-80GB", activity, 24 * GIB, step))
    [alone] = analyze(trace, T)
    assert alone.bottleneck == "overprovisioned_serving"
    [resized] = make_plan([alone], Use.of_trace(trace, step, T), T).actions
    assert resized.action == "cheaper_gpu"
    plan = make_plan([replace(alone, workload_kind="serving", engine="vllm")], Use.of_trace(trace, step, T), T)
    assert plan.actions == []
    [skipped] = plan.not_planned
    assert skipped.reason.startswith("its engine (vllm) takes most of its GPU's memory for its KV cache")


def test_a_notebook_idle_for_less_than_the_cull_time_changes_nothing_and_says_so():
    """Two hours of a notebook: 20 minutes of cells at 60%, 40 idle, 20 of cells, 40 idle (idle spells of 45
    minutes as its history's 15-minute steps book them, 40 as its samples show). In use, healthy while it works;
    culled after an hour idle it would have been
    freed for none of it: not a release of 1 GPU to 1 for $0, but a reason."""
    step = 30.0
    notebook = np.zeros(2 * 60 * 2)  # a sample every 30 s
    for start in (0, 60 * 2):  # minutes 0-20 and 60-80
        notebook[start : start + 40] = 0.6
    rows = pod("research/notebook-alice-0", "A100-SXM4-40GB", notebook, 12 * GIB, step)
    [v], plan = planned([rows.assign(workload_kind="notebook", engine="")], step)
    assert v.bottleneck == "healthy" and v.evidence["pauses"].startswith("2 rests of 45 min, each followed")
    assert plan.actions == []
    [skipped] = plan.not_planned
    assert skipped.units == ["research/notebook-alice-0"]
    assert skipped.reason == (
        "idle 40 min at most at a stretch in the 2 h seen, under the 1 h a culler waits (plan_cull_seconds): "
        "culling would have freed nothing yet"
    )


def test_a_notebook_in_use_with_a_pause_past_the_cull_time_is_culled_not_released():
    """A notebook (Kubernetes says so) training for an hour, resting 2 h 30 min, then training again: in use,
    healthy while it works, never "release". Its pause outlasts the hour a culler waits by 1 h 30 min: culling
    it would have freed that, $3.00 of an A100 40GB at the catalogue's $2.00 an hour."""
    step = 30.0
    activity = np.zeros(int(4.5 * 3600 / step))
    activity[: int(3600 / step)] = activity[int(3.5 * 3600 / step) :] = 0.6
    rows = pod("research/nb-0", "A100-SXM4-40GB", activity, 12 * GIB, step)
    [v], plan = planned([rows.assign(workload_kind="notebook", engine="")], step)
    assert v.bottleneck == "healthy"
    assert v.evidence["pauses"] == (
        "1 rest of 2 h 30 min, each followed by work or no longer than one that was: a workload in use, not work "
        "that stopped (2.50 GPU-h wasted, booked as idle)"
    )
    [cull] = plan.actions
    assert (cull.action, cull.what) == (
        "release",
        "cull its kernel after 1 h idle (JupyterHub idle-culler, Kubeflow culling)",
    )
    assert (cull.saving_usd_span, cull.evidence) == (3.0, {"idle": "1 h 30 min of idle spells past 1 h (60 s bins)"})


def test_a_replica_resting_at_night_is_sized_never_released():
    """A replica's day from its GPU alone: requests from 08:00 to 18:00 (3 s at 95% every 20 minutes), none at
    night, 20 GiB of an H100 held: serving, never "release its GPUs". Its peak fills the GPU (no smaller share
    fits); its nights are what to save: scaled to zero after an hour without a request."""
    step = 60.0
    minutes = np.arange(24 * 60)
    activity = np.where((minutes // 60 >= 8) & (minutes // 60 < 18) & (minutes % 20 == 7), 0.95, 0.0)
    [v], plan = planned([pod("serve/chat-5d4f8b7c9-x2k4q", "H100-SXM5-80GB", activity, 20 * GIB, step)], step)
    assert v.bottleneck == "overprovisioned_serving"
    # Its rests as its samples show them, 00:00-08:07 (487 min) and 17:48-24:00 (372 min), past the hour it waits
    # before scaling to zero: 12 h 19 min, $49.27 of an H100 at the catalogue's $4.00, to a bin (84 s: a day in
    # 1,024 bins) at each end of each rest.
    [zero] = plan.actions
    assert zero.action == "scale_to_zero"
    assert zero.saving_usd_span == pytest.approx((487 + 372 - 2 * 60) / 60 * 4.00, abs=4 * 84.3 / 3600 * 4.00)
    assert zero.evidence["rests"].startswith("2 rests without requests longer than 1 h, the longest 8 h")


def test_a_plan_over_less_than_a_day_says_what_it_saved_in_the_span_not_per_month():
    """12 hours of a light job on an A100 40GB (a T4 carries it for $1.50 an hour less): $18 saved in the
    span; the 30-day figure ($1,080) is projected only from a day of samples: not in the text, null in JSON."""
    from gpulens.analyzer.outputs import terminal
    from gpulens.analyzer.outputs.report import plan_section

    step = 30.0
    verdicts, plan = planned([pod("batch/etl-0", "A100-SXM4-40GB", np.full(12 * 120, 0.15), 10e9, step)], step)
    [action] = plan.actions
    assert (action.saving_usd_span, action.saving_usd_per_30d) == (18.0, 1080.0)
    assert plan.projected is False and plan.to_dict()["plan"][0]["saving_usd_per_30d"] is None
    # The CSV is judged by the JSON's rule: the span's saving, an empty month.
    [row] = csv.DictReader(io.StringIO(plan_csv(plan)))
    assert (row["saving_usd_span"], row["saving_usd_per_30d"]) == ("18.0", "")
    text = terminal.report_text(verdicts, plan, 120)
    assert (
        "What to change: GPUs held 1 -> 1 (by the 1 pod and GPUs it changes, each counted whenever it ran in the "
        "12 h seen), saving $18.00 in the 12 h seen (no month projected from under 1 d of samples)"
        in " ".join(text.split())
    )
    assert "per 30 days" not in text and "1,080" not in text
    html = plan_section(plan)
    assert "saving <b>$18.00 in the 12 h seen</b> (no month projected from under 1 d of samples)" in html
    assert "GPUs held 1 → 1 (by the 1 pod and GPUs it changes, each counted whenever it ran in the 12 h seen)" in html
    assert "<th class=n>saved in the span</th>" in html and "1,080" not in html


def _light(name: str, memory: float, one_core: bool, seed: int) -> pd.DataFrame:
    """Six hours at 30 s of a light job on an A100 80GB: 10% activity (+/- 1%), `memory` bytes held, its pod's
    CPU at one core of four (a loop one host thread drives) or at a quarter of a core (nothing of the CPU)."""
    rng = np.random.default_rng(seed)
    samples = 6 * 120
    activity = np.clip(0.1 + rng.normal(0, 0.01, samples), 0, 1)
    cpu = (1.0 if one_core else 0.25) + rng.normal(0, 0.03, samples)
    rows = pod(name, "A100-SXM4-80GB", activity, memory, 30.0)
    return rows.assign(cpu_usage_cores=cpu, cpu_limit_cores=4.0)


def _sized_plan(frames: list[pd.DataFrame], step: float):
    trace = fr.normalize(pd.concat(frames, ignore_index=True))
    use = Use.of_trace(trace, step, T)
    verdicts = sized(analyze(trace, T), use, T)
    return verdicts, make_plan(verdicts, use, T)


@pytest.mark.parametrize(
    ("memory", "headline", "secondary"), [(5 * GIB, "wrong_gpu_type", ["host_stall"]), (12 * GIB, "host_stall", [])]
)
def test_a_light_loop_on_a_big_gpu_moves_first_and_batches_its_loop_after(memory, headline, secondary):
    """The issue's seed problem: 5 GiB at 10% of an A100 80GB, its pod's CPU at one core. The footprint settles
    the size (wrong_gpu_type, host_stall beside it): its peak, 11.7% of the GPU in a minute, needs 13.5% with 15%
    headroom, and 5.8 GiB. A 1g.10gb slice has 1/7 of the SMs but 1/8 of the memory bandwidth (12.5% < 13.5%); a
    T4 has 65 >= 42.1 TFLOPS, 320 >= 275 GB/s and 15 GiB for $0.50 an hour, under a 1g.20gb's quarter of $2.50.
    The loop runs as fast there, so the move comes first, and batching the loop after it: each fix raises its use.
    Holding 12 GiB (over oversized_memory_bytes) the loop is the class, and its plan the same: 13.8 GiB fits a T4."""
    [v], plan = _sized_plan([_light("ml/light-0", memory, True, 5)], 30.0)
    assert (v.bottleneck, v.secondary, v.cause) == (headline, secondary, "host_thread")
    assert v.size is not None and (v.size.fit, v.size.fits, v.size.price_share) == ("cheaper_gpu", "Tesla T4", 0.2)
    [action] = plan.actions
    assert (action.action, action.what) == ("cheaper_gpu", "move to Tesla T4 ($2.00/GPU-h less)")
    assert action.saving_usd_per_30d == 2.00 * 720
    assert action.saving_usd_span == 2.00 * 6
    assert action.evidence["fits"] == v.size.basis  # the verdict's size is the plan's: measured once
    assert action.then.startswith("then one host thread drives the GPU: the pod's CPU sits at one core")
    assert action.then.endswith("Each fix raises its use: size it again after")
    # Every output says the step after the move: the HTML report, and the terminal's table.
    from html import escape

    from gpulens.analyzer.outputs import terminal
    from gpulens.analyzer.outputs.report import plan_section

    assert escape(f"{action.what}; {action.then}") in plan_section(plan)
    assert f"{action.what}; {action.then}" in " ".join(terminal.report_text([v], plan, 400).split())


def test_a_job_holding_10_gib_at_10_percent_gets_the_gpu_it_fits_whatever_its_cause():
    """10 GiB at 10% of an A100 80GB, its CPU far from its limit, no signature: unexplained, and whatever its cause
    it fits a T4 (11.5 GiB with headroom; its busiest minute, with headroom, within a T4's 65 TFLOPS and 320 GB/s),
    $2.00 an hour under the A100. Sized, with what would settle its cause after."""
    frame = _light("ml/heavy-0", 10 * GIB, False, 6)
    [v], plan = _sized_plan([frame], 30.0)
    busiest = float(frame["sm_active"].to_numpy().reshape(-1, 2).mean(axis=1).max())  # minutes of two samples
    needed = busiest * (1 + T.plan_headroom)
    assert v.bottleneck == "unexplained"
    assert v.size is not None and v.size.fits == "Tesla T4"
    assert v.size.activity_peak == pytest.approx(busiest)
    assert v.size.basis.startswith(
        f"it needs {needed:.1%} of its GPU's compute and 11.5 GiB (15% above its peak): Tesla T4 has 65 >= "
        f"{needed * 312:.3g} dense FP16 TFLOPS, 320 >= {needed * 2039:.3g} GB/s"
    )
    [action] = plan.actions
    assert (action.action, action.saving_usd_per_30d) == ("cheaper_gpu", 2.00 * 720)
    assert action.then.startswith("then find why it works little: add what would settle it")


def test_a_starved_job_is_fed_first_and_sized_after_and_the_plan_says_why():
    """A data-starved job on an A100 40GB: its peak minute is 22.8% of the GPU and it holds 27.3 GiB, which an
    L40S holds today (362 TFLOPS, 864 GB/s, 45 GiB, $1.50 against $2.00). Fed faster it would use more than that,
    so the plan feeds it first (the fix, and the waste it recovers) and says to size it after, and why."""
    trace = scenario_trace(Scenario("data_starvation", "A100-SXM4-40GB", 1, 0.0, True, False, 11))
    use = Use.of_trace(trace, 1.0, T)
    [v] = sized(analyze(trace, T), use, T)
    [action] = make_plan([v], use, T).actions
    assert v.bottleneck == "data_starvation" and v.size is not None and v.size.fits == "NVIDIA L40S"
    assert (action.action, action.gpus_now, action.gpus_after) == ("fix", 1.0, 1.0)
    assert action.then == (
        "then size it again from what it uses: today its use fits NVIDIA L40S, but fed faster it uses more of its "
        "GPU, which a smaller one would cap"
    )


def test_a_healthy_pod_whose_peak_needs_its_whole_gpu_changes_nothing():
    """Every class is sized, healthy too; but a pod busy at 90% SM activity most minutes needs all of its H100
    at its peak (103.5% with headroom): its size is its GPU as it is, and the plan neither acts nor says why."""
    step = 30.0
    activity = np.full(6 * 120, 0.9)
    activity[::4] = 0.3
    [v], plan = _sized_plan([pod("apps/ranker-0", "H100-SXM5-80GB", activity, 12 * GIB, step)], step)
    assert v.bottleneck == "healthy"
    assert v.size is not None and (v.size.fit, v.size.fits) == ("whole", "its NVIDIA H100 80GB HBM3")
    assert plan.actions == [] and plan.not_planned == []


def test_a_pod_on_a_mig_instance_is_not_sized_as_if_it_held_the_whole_gpu():
    """A light job on a 1g.10gb instance of an A100: its activity and memory are the slice's, so no share of the
    whole GPU is fitted to it (which would claim 6/7 of an A100's price saved from a seventh of one)."""
    rows = pod("ml/embed-0", "A100-SXM4-80GB", np.full(6 * 120, 0.3), 4 * GIB, 30.0, gpu="MIG-5e1c0a55-a100")
    rows["gpu_model"] = "NVIDIA A100-SXM4-80GB MIG 1g.10gb"
    [v], plan = _sized_plan([rows], 30.0)
    assert v.size is not None and (v.size.fit, v.size.price_share) == ("unknown", 1.0)
    assert v.size.basis.startswith("it runs on a MIG instance: its activity and memory are the slice's")
    assert not [a for a in plan.actions if a.action in ("mig", "cheaper_gpu", "time_slicing")]


def test_a_notebook_whose_rare_cells_keep_a_culler_away_is_moved_off_its_gpu():
    """Six hours of a notebook's kernel that runs a short cell every 40 minutes (one sample of 80 at 50%: 0.6% of
    the time worked, idle by sparse use): an idle-culler, which waits an hour without activity, would never
    reclaim it, so culling frees nothing; its GPU is released all the same, by moving the kernel off it."""
    step = 30.0
    notebook = np.zeros(6 * 120)
    notebook[::80] = 0.5
    rows = pod("research/notebook-dan-0", "A100-SXM4-40GB", notebook, 6 * GIB, step)
    [v], plan = _sized_plan([rows.assign(workload_kind="notebook", engine="")], step)
    assert v.bottleneck == "idle" and "sparse_use" in v.facts
    [action] = plan.actions
    assert (action.action, action.gpus_after) == ("release", 0.0)
    assert action.what.startswith("move its kernel off the GPU (onto CPU, or a time-sliced share)")
    assert action.evidence["idle"].startswith("0.6% of the span worked; idle 39 min at most at a stretch")
    assert action.saving_usd_span == pytest.approx(6 * 2.00, abs=0.01)
