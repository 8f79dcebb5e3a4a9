"""The simulated fleet moves the way real GPUs do, and the sampler integrates it exactly."""

import itertools
import math
import statistics
import time

import numpy as np
import pytest
import requests
import yaml

from gpulens.core import metrics as m
from gpulens.core.catalog import MODELS
from gpulens.core.thresholds import Thresholds
from gpulens.exporter.sampler import Sampler
from gpulens.exporter.sources.simulated import SimulatedAttribution, SimulatedSource
from gpulens.simulator import fleet
from gpulens.simulator.fleet import FleetError, fleet_from_flags, load_fleet
from gpulens.simulator.workloads import DAY, DAY_SCALE, EVAL_ONLY, PROFILES, duty


class ManualClock:
    """A clock the test advances by hand, shared by the source and the sampler."""

    def __init__(self, start: float = 1_000_000.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def run(profile: str, seconds: int, model: str = "H100-SXM5-80GB", step: float = 1.0, gpus: int = 1):
    """Sample a one-node fleet running `profile` once per `step` for `seconds`; return the samples."""
    node = fleet_from_flags(gpus, model, [profile], seed=3)[0]
    clock = ManualClock()
    source = SimulatedSource(node, clock=clock)
    out = []
    for _ in range(int(seconds / step)):
        clock.now += step
        out.append(source.sample())
    return out


def series(node_samples, spec, gpu=0):
    return [s.devices[gpu].get(spec) for s in node_samples]


def test_duty_is_exact_for_any_window():
    # on 1 s of every 4 s: a 4 s window always holds exactly 1 s; a 0.5 s window inside the on-phase all of it.
    assert duty(10.0, 4.0, 4.0, 1.0) == 0.25
    assert duty(17.3, 4.0, 4.0, 1.0, phase=0.9) == pytest.approx(0.25)
    assert duty(0.75, 0.5, 4.0, 1.0) == 1.0
    assert duty(3.0, 1.0, 4.0, 1.0) == 0.0


def test_healthy_training_is_busy_and_steady():
    s = run("healthy_training", 60)
    sm = series(s, m.SM_ACTIVE)
    assert min(sm) >= 0.85 and max(sm) <= 0.91
    assert set(series(s, m.UTILIZATION)) == {1.0}
    assert all(d.devices[0].clock_event_reasons == 0 for d in s)


def test_data_starvation_swings_between_bursts_and_gaps():
    sm = sorted(series(run("data_starvation", 120), m.SM_ACTIVE))
    p5, p95 = sm[int(0.05 * len(sm))], sm[int(0.95 * len(sm))]
    # docs/signals.md: p95 > 0.7 and p5 < 0.1 is the fluctuation signature (SageMaker LowGPUUtilization).
    assert p95 > 0.7 and p5 < 0.1


def test_data_starvation_pcie_spikes_at_burst_starts():
    s = run("data_starvation", 60, step=0.1)
    rx = [b.devices[0].get(m.PCIE_RECEIVE) - a.devices[0].get(m.PCIE_RECEIVE) for a, b in itertools.pairwise(s)]
    busy = series(s, m.UTILIZATION)[1:]
    gap_rate = max(r for r, u in zip(rx, busy, strict=True) if u == 0)
    starts = [i for i in range(1, len(busy)) if busy[i - 1] == 0 and busy[i] > 0]
    assert len(starts) >= 9  # 5-6.5 s iterations over 60 s
    # Within 0.3 s of every burst start, host-to-device traffic is over ten times the gap's.
    assert all(max(rx[i : i + 3]) > 10 * gap_rate for i in starts)


def test_memory_fragmentation_fills_memory_then_restarts_with_a_new_pid():
    s = run("memory_fragmentation", 600, model="A100-SXM4-40GB")
    model = MODELS["A100-SXM4-40GB"]
    usable = model.memory_total_bytes - model.memory_reserved_bytes
    used = [u / usable for u in series(s, m.MEMORY_USED)]
    assert max(used) > 0.97
    pids = {p.pid for d in s for p in d.devices[0].processes}
    assert len(pids) >= 2  # OOM-killed and restarted at least once in 10 minutes
    assert any(not d.devices[0].processes for d in s)  # the gap while it restarts


def test_idle_holds_a_context_and_runs_nothing():
    s = run("idle", 30)
    assert set(series(s, m.UTILIZATION)) == {0.0} and set(series(s, m.SM_ACTIVE)) == {0.0}
    assert all(len(d.devices[0].processes) == 1 for d in s)
    assert all(d.devices[0].clock_event_reasons == m.CLOCK_EVENT_REASONS["gpu_idle"] for d in s)


def test_memory_held_has_memory_and_no_process():
    s = run("memory_held", 10)
    assert all(not d.devices[0].processes for d in s)
    assert min(series(s, m.MEMORY_USED)) > 20 * 1024**3


def test_memory_bandwidth_is_dram_bound_with_idle_pipes():
    s = run("memory_bandwidth", 30)
    assert min(series(s, m.DRAM_ACTIVE)) >= 0.75 and max(series(s, m.TENSOR_ACTIVE)) < 0.1


def test_interconnect_saturates_nvlink_or_pcie():
    h100 = run("interconnect", 10)
    rate = (h100[-1].devices[0].get(m.NVLINK_TRANSMIT) - h100[0].devices[0].get(m.NVLINK_TRANSMIT)) / 9
    assert rate == pytest.approx(0.9 * 18 * 25e9, rel=0.01)
    l40s = run("interconnect", 10, model="L40S")
    model = MODELS["L40S"]
    rate = (l40s[-1].devices[0].get(m.PCIE_RECEIVE) - l40s[0].devices[0].get(m.PCIE_RECEIVE)) / 9
    assert rate == pytest.approx(0.9 * model.pcie_bytes_per_second, rel=0.01)
    assert max(series(l40s, m.SM_ACTIVE)) < 0.3


def test_thermal_throttling_sets_thermal_bits_and_slows_the_clock():
    s = run("thermal_throttling", 20)
    assert all(d.devices[0].clock_event_reasons == 0x60 for d in s)
    assert max(series(s, m.SM_CLOCK)) < 0.7 * 1980e6
    assert min(series(s, m.TEMPERATURE)) >= 87


def test_light_inference_barely_uses_a_big_gpu():
    s = run("light_inference", 120)
    sm = series(s, m.SM_ACTIVE)
    assert 0.03 < sum(sm) / len(sm) < 0.12
    assert max(series(s, m.MEMORY_USED)) < 10e9


def test_poor_placement_spans_sockets_without_nvlink_and_is_unbalanced():
    node = load_fleet(
        {
            "nodes": [
                {
                    "name": "n",
                    "model": "L40S",
                    "gpus": 4,
                    "workloads": [{"profile": "poor_placement", "gpus": [1, 2], "pod": "a/b"}],
                }
            ]
        }
    )[0]
    clock = ManualClock()
    sample = SimulatedSource(node, clock=clock).sample()
    a, b = node.gpus[1].uuid, node.gpus[2].uuid
    assert (a, b, "system", "none") in sample.topology
    assert sample.devices[1].get(m.NVLINK_LINKS) == 0
    assert sample.devices[1].get(m.SM_ACTIVE) > 2 * sample.devices[2].get(m.SM_ACTIVE)


def test_sampler_integrates_busy_and_idle_seconds_exactly():
    node = fleet_from_flags(2, "H100-SXM5-80GB", ["data_starvation", "idle"], seed=1)[0]
    clock = ManualClock()
    source = SimulatedSource(node, clock=clock)
    sampler = Sampler(source, interval=0.5, clock=clock)
    expected_busy = expected_sm = expected_idle = 0.0
    driver_samples: list[tuple[float, float]] = []
    sampler.tick()
    for _ in range(200):
        clock.now += 0.5
        snapshot = sampler.tick()
        starving = snapshot.node.devices[0]
        driver_samples += starving.activity_samples
        expected_sm += starving.get(m.SM_ACTIVE) * 0.5
    # Busy and idle time come from the driver's own samples, each standing for the time since the one
    # before (the very first has none): 1/6 s resolution, not the sampler's 0.5 s.
    for (before, _), (at, value) in zip(driver_samples, driver_samples[1:], strict=False):
        expected_busy += value * (at - before)
        expected_idle += (at - before) if value < 0.01 else 0.0
    assert len(driver_samples) == 600
    assert driver_samples[1][0] - driver_samples[0][0] == pytest.approx(1 / 6)
    counters = snapshot.device_counters
    assert counters[node.gpus[0].uuid].busy == pytest.approx(expected_busy)
    assert counters[node.gpus[0].uuid].sm_active == pytest.approx(expected_sm)
    assert counters[node.gpus[0].uuid].idle == pytest.approx(expected_idle)
    assert counters[node.gpus[1].uuid].idle == pytest.approx(100.0 - 1 / 6)  # idle the whole 100 s but the first sample
    assert counters[node.gpus[1].uuid].clock_events["gpu_idle"] == pytest.approx(100.0)


def test_sampler_does_not_invent_time_across_a_gap():
    node = fleet_from_flags(1, "H100-SXM5-80GB", ["idle"], seed=1)[0]
    clock = ManualClock()
    sampler = Sampler(SimulatedSource(node, clock=clock), interval=1.0, clock=clock)
    sampler.tick()
    clock.now += 1.0
    sampler.tick()
    clock.now += 30.0  # the source hung for 30 s
    snapshot = sampler.tick()
    # The driver kept its last 120 samples (20 s) meanwhile: those count, each for 1/6 s, but the 10 s
    # before the oldest of them are nobody's to invent. Before the hang: 1 s less the first sample.
    assert len(snapshot.node.devices[0].activity_samples) == 120
    assert snapshot.device_counters[node.gpus[0].uuid].idle == pytest.approx(5 / 6 + 119 / 6)


@pytest.mark.parametrize(
    "fleet, message",
    [
        ({}, "required key(s) nodes missing"),
        ({"nodes": []}, "nodes: expected a non-empty list of a mapping with keys name, model, gpus"),
        ({"nodes": [{"model": "V100"}]}, "nodes[0].model: expected one of H200, H100-SXM5-80GB,"),
        ({"nodes": [{"gpus": 0}]}, "nodes[0].gpus: expected a whole number from 1 to 64, got 0"),
        ({"nodes": [{"gpu": 2}]}, "nodes[0]: unknown key(s) gpu; did you mean gpus?"),
        ({"seed": "x", "nodes": [{}]}, "seed: expected a whole number, got 'x'"),
        (
            {"nodes": [{"gpus": 2, "workloads": [{"profile": "idle", "gpus": [2]}]}]},
            "nodes[0] (sim-node-1).workloads[0]: workload 'idle' names GPU 2, but the node has GPUs 0-1",
        ),
        (
            {"nodes": [{"gpus": 2, "workloads": [{"profile": "idle", "gpus": [0]}, {"profile": "idle", "gpus": [0]}]}]},
            "nodes[0] (sim-node-1).workloads[1]: GPU 0 is given two workloads",
        ),
        ({"nodes": [{"workloads": [{"profile": "training"}]}]}, "nodes[0].workloads[0].profile: expected one of"),
        (
            {"nodes": [{"workloads": [{"profile": "idle", "gpus": 0, "pod": "notebook"}]}]},
            "nodes[0].workloads[0].pod: expected 'namespace/name' or 'namespace/name/container', got 'notebook'",
        ),
        (
            {"nodes": [{"workloads": [{"profile": "idle", "gpus": 0, "pod": "ml/a-0", "owner": "deployment/a"}]}]},
            "nodes[0].workloads[0].owner: expected 'Kind/name': Deployment/chat-api, StatefulSet/jupyter, Job/train",
        ),
        (
            {"nodes": [{"workloads": [{"profile": "idle", "gpus": 0, "pod": "ml/api-0", "owner": "Deployment/api"}]}]},
            "nodes[0] (sim-node-1).workloads[0].pod: 'api-0' cannot be a pod of Deployment api: a Deployment's pod is "
            "named api-<replicaset hash>-<suffix>, as api-6c8f9d7b54-x2k4p",
        ),
        (
            {"nodes": [{"workloads": [{"profile": "serving", "pod": "ml/api-0", "engine": "vllm"}]}]},
            "nodes[0] (sim-node-1).workloads[0].engine: an engine serves from its pod's GPUs; give the workload gpus",
        ),
        (
            {"nodes": [{"workloads": [{"profile": "memory_held", "gpus": 0, "image": "vllm/vllm-openai:v0.6.3"}]}]},
            "nodes[0] (sim-node-1).workloads[0].image: a workload without a pod has no image; give it a pod",
        ),
        (
            {"nodes": [{"workloads": [{"profile": "idle", "gpus": 0, "pod": "ml/a", "from": 600, "until": 60}]}]},
            "nodes[0] (sim-node-1).workloads[0].until: 60 is not after from (600): its pod would never run",
        ),
        (
            {
                "nodes": [
                    {"workloads": [{"profile": "idle", "gpus": 0, "pod": "ml/a", "traffic": {"from": 1, "times": 2}}]}
                ]
            },
            "nodes[0] (sim-node-1).workloads[0].traffic: only a vllm_replica's requests are drawn at a rate",
        ),
        (
            {"nodes": [{"workloads": [{"profile": "memory_held", "gpus": 0, "until": 60}]}]},
            "nodes[0] (sim-node-1).workloads[0]: from and until say when a pod runs; give the workload a pod",
        ),
        (
            {
                "nodes": [
                    {"model": "L40S", "workloads": [{"profile": "idle", "gpus": 0, "pod": "ml/a", "mig": "1g.10gb"}]}
                ]
            },
            "nodes[0] (sim-node-1).workloads[0].mig: NVIDIA L40S has no MIG profile '1g.10gb'; it has no MIG: give the "
            "workload a whole GPU",
        ),
        (
            {"nodes": [{"workloads": [{"profile": "idle", "gpus": 0, "pod": "ml/a", "mig": "3g.20gb"}]}]},
            "nodes[0] (sim-node-1).workloads[0].mig: NVIDIA H100 80GB HBM3 has no MIG profile '3g.20gb'; it offers "
            "1g.10gb, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb",
        ),
        (
            {"nodes": [{"workloads": [{"profile": "idle", "gpus": [0, 1], "pod": "ml/a", "mig": "3g.40gb"}]}]},
            "nodes[0] (sim-node-1).workloads[0].mig: a MIG instance is a slice of one GPU; give the workload one GPU",
        ),
    ],
)
def test_bad_fleets_are_refused_with_the_reason(fleet, message):
    with pytest.raises(FleetError) as error:
        load_fleet(fleet)
    assert str(error.value).startswith(message)


def test_the_demo_fleet_covers_every_profile_that_shows_within_minutes():
    nodes = fleet.fleet_from_file(fleet.DEFAULT_FLEET)
    profiles = {g.profile for node in nodes for g in node.gpus}
    assert profiles == set(PROFILES) - set(DAY_SCALE) - set(EVAL_ONLY)


def test_xid_errors_counts_row_remapping_events_under_healthy_work():
    s = run("xid_errors", 300)  # 300 s at one XID 63 per 30 s
    assert [d.devices[0].get(m.XID_ERRORS, "63") for d in s][::60] == [0, 2, 4, 6, 8]
    assert s[-1].devices[0].get(m.XID_ERRORS, "63") == 10
    assert min(series(s, m.SM_ACTIVE)) > 0.8


def test_fallen_off_bus_keeps_only_up_zero():
    s = run("fallen_off_bus", 3)
    assert [(d.devices[0].up, d.devices[0].values) for d in s] == [(False, {})] * 3


@pytest.mark.parametrize("speed", [1.0, 5.0])
def test_simulated_kubelet_reports_pod_cpu_in_real_seconds(speed):
    """cAdvisor's counters for the pods: CPU seconds per real second, whatever the simulation speed."""
    node = load_fleet(
        {
            "nodes": [
                {
                    "name": "n",
                    "gpus": 3,
                    "workloads": [
                        {"profile": "healthy_training", "gpus": [0], "pod": "a/train"},
                        {"profile": "idle", "gpus": [1], "pod": "a/notebook"},
                        {"profile": "data_starvation", "gpus": [2], "pod": "b/bert"},
                    ],
                }
            ]
        }
    )[0]
    clock = ManualClock()
    source = SimulatedSource(node, clock=clock, speed=speed)
    source.sample()  # the first sample counts one simulated second
    for _ in range(100):
        clock.now += 0.1
        source.sample()
    status, content_type, body = source.cadvisor_text()
    text = body.decode()
    assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
    usage = {
        line.split('pod="')[1].split('"')[0]: float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("container_cpu_usage_seconds_total{")
    }
    # 10 real seconds (+1 simulated second at the start) at 30 % and 1 % of a 4-core limit.
    assert usage["train"] == pytest.approx(0.3 * 4 * (10 + 1 / speed), abs=1e-3)
    assert usage["notebook"] == pytest.approx(0.01 * 4 * (10 + 1 / speed), abs=1e-3)
    assert 0.95 * 4 * 10 < usage["bert"] < 0.99 * 4 * (10 + 1 / speed)
    assert 'container_spec_cpu_quota{container="main",namespace="b",pod="bert"} 400000' in text
    assert 'container_spec_cpu_period{container="main",namespace="b",pod="bert"} 100000' in text


def _day_gpus(*profiles: str, seed: int = 5):
    return fleet_from_flags(len(profiles), "H100-SXM5-80GB", list(profiles), seed)[0].gpus


def test_a_serving_replica_works_by_day_and_holds_its_model_all_night():
    [g] = _day_gpus("serving")
    day = 20_000 * DAY
    hourly = [PROFILES["serving"](g, day + (h + 1) * 3600, 3600) for h in range(24)]
    schedule = g.schedules[20_000]
    # The hours add up to exactly the requests the day's schedule served.
    assert sum(a.busy for a in hourly) * 3600 == pytest.approx(schedule.before[-1], rel=1e-9)
    duty = [a.busy for a in hourly]
    assert sum(duty) / 24 == pytest.approx(g.params["load"], rel=0.25)  # mean duty as configured: 2-10%
    assert 11 <= duty.index(max(duty)) <= 17  # the afternoon peak
    assert max(duty[0:5]) < max(duty) / 3  # quiet nights
    # The model stays in memory whether requests come or not.
    assert min(a.memory_fraction for a in hourly) >= g.params["model_memory"]


def test_day_scale_profiles_stop_working_when_their_day_says():
    notebook, finished, idle = _day_gpus("notebook", "training_finished", "idle_replica")
    day = 20_000 * DAY

    def busy(g, start_hour, end_hour):
        return PROFILES[g.profile](g, day + end_hour * 3600, (end_hour - start_hour) * 3600).busy

    work_from, work_until = notebook.params["work_from"] / 3600, notebook.params["work_until"] / 3600
    assert busy(notebook, work_from, work_until) > 0.05
    assert busy(notebook, 0, work_from) == 0 and busy(notebook, work_until + 0.1, 24) == 0
    finish = finished.params["finish"] / 3600
    assert busy(finished, finish - 0.1, finish - 0.01) == 1.0 and busy(finished, finish, finish + 0.01) == 0.0
    assert busy(idle, 0, 24) < 0.001  # a 1 s request every few hours


def test_the_simulated_kube_state_metrics_say_what_the_fleet_file_says_of_each_pod():
    """Parsed as Prometheus parses kube-state-metrics and resolved as the analyzer resolves owners (through
    ReplicaSets to Deployments, Jobs to CronJobs), each pod of the demo fleet has the owner its fleet file
    names (read here from the YAML itself), else is its own (kind Pod); its labels and image are the file's."""
    from prometheus_client.parser import text_string_to_metric_families

    from gpulens.analyzer.inputs.owners import resolve
    from gpulens.simulator.cluster import kube_state_metrics

    nodes = fleet.fleet_from_file(fleet.DEFAULT_FLEET)
    exposed = list(
        text_string_to_metric_families(kube_state_metrics([p for n in nodes for p in n.pods], [], 1_795_873_601.25))
    )
    series = {family.name: [sample.labels for sample in family.samples if sample.value == 1] for family in exposed}
    # Each pod's creation time to the quarter second, as written (the demo's waits are timed from it).
    [created] = [family for family in exposed if family.name == "kube_pod_created"]
    assert {sample.value for sample in created.samples} == {1_795_873_601.25}

    def pairs(name: str, key: str) -> dict[tuple[str, str], tuple[str, str]]:
        return {
            (s["namespace"], s[key]): (s["owner_kind"], s["owner_name"])
            for s in series[name]
            if s["owner_kind"] != "<none>"
        }

    workloads = [w for node in yaml.safe_load(fleet.DEFAULT_FLEET.read_text())["nodes"] for w in node["workloads"]]
    pods = {tuple(w["pod"].split("/")[:2]): w for w in workloads if "pod" in w}
    owners = resolve(
        pods,
        pairs("kube_pod_owner", "pod"),
        pairs("kube_replicaset_owner", "replicaset"),
        pairs("kube_job_owner", "job_name"),
        {},
        {},
    )
    assert {pod: (o.kind, o.name) for pod, o in owners.items()} == {
        pod: tuple(w["owner"].split("/")) if "owner" in w else ("Pod", pod[1]) for pod, w in pods.items()
    }
    labels = {
        (s["namespace"], s["pod"]): {k: v for k, v in s.items() if k.startswith("label_")}
        for s in series["kube_pod_labels"]
    }
    assert labels[("research", "notebook-alice-0")] == {
        "label_app": "jupyterhub",
        "label_component": "singleuser-server",
        "label_hub_jupyter_org_username": "alice",
    }
    images = {(s["namespace"], s["pod"]): s["image"] for s in series["kube_pod_container_info"]}
    assert images == {pod: w["image"] for pod, w in pods.items()}
    running = {(s["namespace"], s["pod"]) for s in series["kube_pod_status_phase"] if s["phase"] == "Running"}
    assert running == set(pods)


def test_an_llm_server_at_its_peak_fills_its_kv_cache_while_its_sms_stay_under_forty_percent():
    """A continuous-batching server (vLLM) holds as many requests as its KV cache does: at 14:00 its requests
    in flight average mean_load x capacity x the day's peak factor (Little's law; the factor is
    _daytime's maximum, computed here from its formula), 80-95% of the cache, while decoding keeps its SMs
    under 40% active. At night a fifth of the mean; it holds 90% of memory throughout."""
    from gpulens.simulator.workloads import LlmEngine

    [g] = _day_gpus("llm_serving")
    engine = LlmEngine.of(g)
    day = 20_000 * DAY
    peak_factor = 0.2 + 0.8 / 0.332
    at_peak = [day + 14 * 3600 + 10 * k for k in range(-60, 60)]  # 20 minutes about 14:00, one draw a 10 s
    kv = [engine.load(g, t, day).kv_cache_usage for t in at_peak]
    expected = engine.mean_load * peak_factor
    assert 0.78 <= expected <= 0.94
    assert sum(kv) / len(kv) == pytest.approx(expected, abs=0.05)
    activity = [PROFILES["llm_serving"](g, t, 1.0) for t in at_peak]
    assert max(a.sm_active for a in activity) <= 0.4
    assert {a.memory_fraction for a in activity} == {0.9}
    at_night = [engine.in_engine(g, day + 3 * 3600 + 10 * k) for k in range(120)]
    assert sum(at_night) / len(at_night) < engine.mean_load * engine.capacity * 0.3


def test_an_engines_request_counter_is_the_integral_of_its_arrival_rate():
    """Requests finished over a day are the arrival rate (requests in flight / seconds each) integrated over
    the day's shape; the closed form against a sum over each minute of _daytime."""
    from gpulens.simulator.workloads import LlmEngine, _daytime

    [g] = _day_gpus("llm_serving")
    engine = LlmEngine.of(g)
    day = 20_000 * DAY
    rate = engine.mean_load * engine.capacity / engine.request_seconds
    summed = sum(rate * _daytime(m * 60 + 30) * 60 for m in range(24 * 60))
    load = engine.load(g, day + DAY, day)
    assert load.requests == pytest.approx(summed, rel=1e-4)
    assert load.output_tokens == pytest.approx(summed * engine.output_tokens, rel=1e-4)
    assert engine.load(g, day + DAY + 3600, day + DAY).requests == pytest.approx(
        sum(rate * _daytime(m * 60 + 30) * 60 for m in range(60)), rel=1e-3
    )


def test_each_serving_profile_counts_the_requests_its_gpu_serves():
    """light_inference: a 60 ms request every 0.5 s, 120 a minute, one running 12% of the time; serving: the
    requests of its day's schedule; a replica that never serves, none."""
    from gpulens.simulator.workloads import engine_load

    light, serving, never = _day_gpus("light_inference", "serving", "never_served")
    day = 20_000 * DAY
    assert engine_load(light, day + 60, day).requests == 120
    running = [engine_load(light, day + k / 100, day).running for k in range(1000)]
    assert sum(running) == pytest.approx(0.12 * 1000, abs=2)
    engine_load(serving, day, day)  # builds the day's schedule
    ended = sum(1 for end in serving.schedules[20_000].ends if day < end <= day + DAY)
    assert engine_load(serving, day + DAY, day).requests == ended > 0
    assert engine_load(never, day + DAY, day) == type(engine_load(never, day, day))()


def test_a_vllm_replica_serves_a_request_a_second_at_random_from_memory_it_preallocated():
    """vllm_replica: requests arrive as a Poisson process of one a second, each decoding an exponential time
    of mean 0.5 s, so the GPU decodes in 1 - exp(-0.5) = 39.3% of the time (M/G/infinity: the chance that no
    request is in progress is exp(-rate x mean length)); its engine runs the requests in progress at each
    moment, and counts one a second. Bursts at random: no steady period that would read as training steps,
    over the hour or in any of its minutes. vLLM's 90% of memory whatever the load."""
    from gpulens.simulator.workloads import _replica_busy, _replica_requests, engine_load

    [g] = _day_gpus("vllm_replica")
    day = 20_000 * DAY
    hour = PROFILES["vllm_replica"](g, day + 3600, 3600)
    assert hour.busy == pytest.approx(1 - math.exp(-0.5), abs=0.02)
    assert hour.sm_active == pytest.approx(0.3 * hour.busy + 0.01)
    assert hour.memory_fraction == 0.9
    instants = [day + 0.1 + k * 0.1 for k in range(3000)]
    running = [engine_load(g, t, day).running for t in instants]
    assert [n > 0 for n in running] == [_replica_busy(g, t, 1e-6) > 0.5 for t in instants]
    assert max(running) >= 2 and engine_load(g, day + 3600, day).requests == 3600
    requests = _replica_requests(g, day, day + 3600)
    assert len(requests) == pytest.approx(3600, rel=0.05)
    starts, reach = [], -math.inf  # where the GPU turns busy: the bursts the exporter times
    for arrival, finish in requests:
        if arrival > reach:
            starts.append(arrival)
        reach = max(reach, finish)
    starts = np.array(starts)

    def steady(burst_starts: np.ndarray) -> float:  # the exporter's steady-burst share
        gaps = np.diff(burst_starts)
        return float(np.mean((gaps[1:] <= 1.5 * gaps[:-1]) & (gaps[1:] >= gaps[:-1] / 1.5)))

    assert steady(starts) < 0.35
    minutes = [steady(starts[(starts >= day + 60 * k) & (starts < day + 60 * (k + 1))]) for k in range(60)]
    assert max(minutes) < Thresholds().starvation_steady_share


def test_the_simulated_engines_export_what_vllm_and_triton_export():
    """Parsed as Prometheus parses them: vLLM's gauges and counters with model_name, Triton's with model
    and version; counters under their family names (prometheus_client strips _total)."""
    from prometheus_client.parser import text_string_to_metric_families

    from gpulens.simulator.engines import triton_text, vllm_text
    from gpulens.simulator.workloads import EngineLoad

    load = EngineLoad(
        running=12,
        waiting=3,
        kv_cache_usage=0.375,
        requests=1234.6,
        prompt_tokens=5e5,
        output_tokens=2e5,
        request_seconds=8.0,
    )
    vllm = {
        s.name: (s.labels, s.value) for f in text_string_to_metric_families(vllm_text(load, "m")) for s in f.samples
    }
    assert vllm == {
        "vllm:num_requests_running": ({"model_name": "m"}, 12),
        "vllm:num_requests_waiting": ({"model_name": "m"}, 3),
        "vllm:kv_cache_usage_perc": ({"model_name": "m"}, 0.375),
        "vllm:request_success_total": ({"finished_reason": "stop", "model_name": "m"}, 1234),
        "vllm:prompt_tokens_total": ({"model_name": "m"}, 500000),
        "vllm:generation_tokens_total": ({"model_name": "m"}, 200000),
    }
    triton = {s.name: s.value for f in text_string_to_metric_families(triton_text(load, "e")) for s in f.samples}
    assert triton == {
        "nv_inference_request_success_total": 1234,
        "nv_inference_count_total": 1234,
        "nv_inference_exec_count_total": 1234,
        "nv_inference_request_duration_us_total": int(1234.6 * 8e6),
        "nv_inference_queue_duration_us_total": 1234 * 50,
        "nv_inference_pending_request_count": 3,
    }


#: A Deployment scaled from 2 replicas to 1 at 60 simulated seconds, the one left taking 12 times its requests from
#: then; a notebook culled at 90 s.
SCALED = {
    "nodes": [
        {
            "name": "n",
            "gpus": 3,
            "workloads": [
                {
                    "profile": "vllm_replica",
                    "gpus": [0],
                    "pod": "serve/chat-6c8f9d7b54-a1b2c",
                    "owner": "Deployment/chat",
                    "engine": "vllm",
                    "traffic": {"from": 60, "times": 12},
                },
                {
                    "profile": "vllm_replica",
                    "gpus": [1],
                    "pod": "serve/chat-6c8f9d7b54-d3e4f",
                    "owner": "Deployment/chat",
                    "engine": "vllm",
                    "until": 60,
                },
                {
                    "profile": "idle",
                    "gpus": [2],
                    "pod": "research/notebook-gina-0",
                    "owner": "StatefulSet/notebook-gina",
                    "until": 90,
                },
            ],
        }
    ]
}


@pytest.mark.parametrize("speed", [1.0, 5.0])
def test_a_pod_that_ended_leaves_its_gpu_its_kubelet_and_its_cgroup(speed):
    """Past its `until`, a pod's GPU runs nothing and no pod holds it: the kubelet's pod-resources answer and
    cAdvisor no longer name it, however fast the fleet is played."""
    [node] = load_fleet(SCALED)
    clock = ManualClock()
    source = SimulatedSource(node, clock=clock, speed=speed)
    attribution = SimulatedAttribution(node, source.clock)

    def now() -> tuple[set[str], set[str], set[str]]:
        sample = source.sample()
        with_processes = {d.gpu for d in sample.devices if d.processes}
        held = {pod.pod for _, pod in attribution.state().allocations}
        lines = source.cadvisor_text()[2].decode().splitlines()
        measured = {line.split('pod="')[1].split('"')[0] for line in lines if line.startswith("container_cpu_usage")}
        return with_processes, held, measured

    pods = {"chat-6c8f9d7b54-a1b2c", "chat-6c8f9d7b54-d3e4f", "notebook-gina-0"}
    assert now() == ({"0", "1", "2"}, pods, pods)
    clock.now += 75 / speed  # 75 simulated seconds on: the replica scaled away has ended
    assert now() == ({"0", "2"}, pods - {"chat-6c8f9d7b54-d3e4f"}, pods - {"chat-6c8f9d7b54-d3e4f"})
    clock.now += 30 / speed  # the notebook culled
    assert now() == ({"0"}, {"chat-6c8f9d7b54-a1b2c"}, {"chat-6c8f9d7b54-a1b2c"})


def test_the_replica_left_takes_the_load_and_queues_past_what_it_decodes_at_once():
    """A vllm_replica decodes REPLICA_MOST_RUNNING (4) requests at once, each half a second on average: at most 8 a
    second. At a request a second none waits; at twelve, from the moment the load came, the 4 a second it cannot
    take pile up in its queue, to what a minute of them holds (clients give up after REPLICA_CLIENT_TIMEOUT_SECONDS),
    and its counter counts the 8 a second it finishes."""
    from gpulens.simulator.workloads import REPLICA_MOST_RUNNING, engine_load

    [node] = load_fleet(SCALED)
    left = node.gpus[0]
    left.started = 1_000_000.0
    before = [engine_load(left, left.started + t, left.started) for t in range(0, 60)]
    assert max(e.waiting for e in before) == 0
    # 30 s after the load came (at 60 s): 120 waiting past its random excess; from a minute on, 240.
    filling = engine_load(left, left.started + 90, left.started)
    assert filling.running == REPLICA_MOST_RUNNING and 120 <= filling.waiting <= 120 + 12
    after = [engine_load(left, left.started + t, left.started) for t in range(120, 480)]
    assert {e.running for e in after} == {REPLICA_MOST_RUNNING}
    assert min(e.waiting for e in after) >= 240 and statistics.median(e.waiting for e in after) <= 240 + 4
    assert after[-1].requests == pytest.approx(60 * 1.0 + (479 - 60) * 8.0)


def test_the_simulated_cluster_says_each_workloads_replicas_and_only_the_pods_that_run():
    from prometheus_client.parser import text_string_to_metric_families

    from gpulens.demo import SimulatedCluster, engine_path

    nodes = load_fleet(SCALED)
    cluster = SimulatedCluster(nodes, speed=1.0)
    try:

        def said(at: float) -> tuple[dict, set]:
            cluster.started = time.time() - at  # the demo `at` simulated seconds in
            for g in nodes[0].gpus:
                g.started = cluster.started
            families = {f.name: f for f in text_string_to_metric_families(cluster.kube_state_text())}
            replicas = {
                (s.labels["namespace"], s.labels.get("deployment") or s.labels["statefulset"]): s.value
                for name in ("kube_deployment_spec_replicas", "kube_statefulset_replicas")
                for s in families[name].samples
            }
            return replicas, {s.labels["pod"] for s in families["kube_pod_info"].samples}

        assert said(30) == (
            {("serve", "chat"): 2, ("research", "notebook-gina"): 1},
            {"chat-6c8f9d7b54-a1b2c", "chat-6c8f9d7b54-d3e4f", "notebook-gina-0"},
        )
        assert said(120) == ({("serve", "chat"): 1, ("research", "notebook-gina"): 0}, {"chat-6c8f9d7b54-a1b2c"})
        url = f"http://{cluster.address}{engine_path('serve', 'chat-6c8f9d7b54-d3e4f')}"
        assert requests.get(url, timeout=5).status_code == 404  # its engine ended with it
        url = f"http://{cluster.address}{engine_path('serve', 'chat-6c8f9d7b54-a1b2c')}"
        assert "vllm:num_requests_waiting" in requests.get(url, timeout=5).text
    finally:
        cluster.stop()


def test_a_mig_workload_runs_on_an_instance_of_its_gpu_as_nvml_shows_one():
    """A workload given a MIG profile: its GPU is MIG-enabled (power, clocks, no utilization) and its pod holds
    the one instance ("<index>/gi1", NVML's "MIG-" UUID, the profile), which does the work of the whole GPU's
    activity in its share (a 3g.40gb has 3 of 7 compute slices) with the profile's memory; the kubelet gives the
    pod the instance, and kube-state-metrics its request as kube-state-metrics names a MIG resource."""
    from gpulens.simulator.cluster import kube_state_metrics

    pod = {"profile": "light_inference", "pod": "ml/embed-29380326-w4x7k", "owner": "CronJob/embed"}
    [whole_node] = load_fleet({"seed": 7, "nodes": [{"gpus": 1, "workloads": [{**pod, "gpus": [0]}]}]})
    [node] = load_fleet({"seed": 7, "nodes": [{"gpus": 1, "workloads": [{**pod, "gpus": [0], "mig": "3g.40gb"}]}]})
    clock = ManualClock()
    whole, sliced = SimulatedSource(whole_node, clock=clock), SimulatedSource(node, clock=clock)
    clock.now += 1
    [gpu] = whole.sample().devices
    parent, instance = sliced.sample().devices
    assert (parent.gpu, parent.mig_mode, parent.uuid) == ("0", "enabled", node.gpus[0].uuid)
    assert parent.get(m.UTILIZATION) is None and parent.get(m.SM_ACTIVE) is None
    assert parent.get(m.POWER) == gpu.get(m.POWER) and parent.get(m.SM_CLOCK) == gpu.get(m.SM_CLOCK)
    assert (instance.gpu, instance.mig_mode, instance.mig_profile, instance.parent_uuid) == (
        "0/gi1",
        "instance",
        "3g.40gb",
        parent.uuid,
    )
    assert instance.uuid.startswith("MIG-") and instance.get(m.UTILIZATION) is None
    assert instance.get(m.SM_ACTIVE) == round(gpu.get(m.SM_ACTIVE) * 7 / 3, 4)
    assert instance.get(m.MEMORY_TOTAL) == 40e9 and instance.get(m.MEMORY_USED) == gpu.get(m.MEMORY_USED)
    [process] = instance.processes
    assert process.utilization is None and process.pod.pod == "embed-29380326-w4x7k"
    [(device, held)] = SimulatedAttribution(node).state().allocations
    assert (device.uuid, held.pod) == (instance.uuid, "embed-29380326-w4x7k")
    said = kube_state_metrics(node.pods, [node.info()]).splitlines()
    [request] = [line for line in said if line.startswith("kube_pod_container_resource_requests{")]
    assert 'resource="nvidia_com_mig_3g_40gb"' in request and request.endswith(" 1.0")
    [allocatable] = [line for line in said if line.startswith("kube_node_status_allocatable{")]
    assert allocatable.endswith(" 0.0")  # a MIG-enabled GPU is not offered as a GPU
