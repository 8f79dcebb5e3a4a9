"""The analyzer: readers on real recordings, the classifier, `gpulens report` and `gpulens eval`."""

import csv
import io
import json
import os
import pickle
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs import readers
from gpulens.analyzer.inputs.readers import TraceError, read_trace
from gpulens.analyzer.judging.classify import classify
from gpulens.analyzer.judging.evidence import Evidence, byte_count, duration, in_units, percent, seconds, share
from gpulens.analyzer.outputs.evaluate import DAY_KINDS, VARIANTS, Scenario, evaluate, scenario_trace
from gpulens.core.bottlenecks import POD_CLASSES
from gpulens.core.thresholds import REMOVED, Thresholds
from tests.captures import FIXTURES, H100_CAPTURE, capture_sections
from tests.helpers import gpulens

MIB = 1024**2
DMON = FIXTURES / "dcgmi-dmon"


# --- readers on real recordings --------------------------------------------------------------


def test_nvidia_smi_query_gpu_log_as_recorded(tmp_path):
    # The capture's query-gpu section is exactly what `nvidia-smi --query-gpu=... --format=csv` printed.
    log = tmp_path / "nvidia-smi.csv"
    log.write_text(
        "\n".join(capture_sections(H100_CAPTURE)["load :: query-gpu (csv, what the exporter parses)"]) + "\n"
    )
    frame = readers.read_files([log])
    row = frame.iloc[0]
    assert (row.gpu, row.gpu_model) == ("GPU-00000000-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3")
    assert row.gpu_util == 1.0
    assert row.memory_used_bytes == 19818 * MIB and row.memory_total_bytes == 81559 * MIB
    assert row.power_watts == 631.95 and row.sm_clock_hertz == 1980e6 and row.sm_clock_max_hertz == 1980e6
    assert row.clock_event_reasons == 0
    assert row.timestamp == pd.Timestamp("2026-07-14 08:12:53.353", tz="UTC").timestamp()
    assert np.isnan(row.sm_active)  # nvidia-smi has no SM activity: absent, not 0


def test_dcgmi_dmon_training_windows_and_the_idle_gaps_between_them():
    trace = readers.read_files([DMON / "train_nlp_dcgm.csv"], gpu_model="NVIDIA A100 80GB PCIe")
    windows = pd.read_csv(DMON / "train_nlp_nlp_train.csv")
    # Between two of the recorded BERT experiments the GPU sat idle for 216 s.
    gap = trace[(trace.timestamp >= 1661762824) & (trace.timestamp <= 1661763039)]
    assert not ((windows.start_timestamp <= 1661763039) & (windows.end_timestamp >= 1661762824)).any()
    [idle] = classify(gap)
    assert (idle.bottleneck, idle.confidence) == ("idle", 0.95)
    assert idle.evidence["idle_for_seconds"] == "216 >= 216 (activity < 1%)"
    w = windows.iloc[-1]
    [training] = classify(trace[(trace.timestamp >= w.start_timestamp) & (trace.timestamp <= w.end_timestamp)])
    assert training.bottleneck != "idle" and training.mean_activity > 0.3
    # GR engine activity alone cannot say how much of the GPU works: the verdict says so, and that it has it.
    assert training.evidence["profiling_fields"].startswith("graphics-engine activity only: it shows that a kernel")
    assert training.confidence <= 0.5
    assert training.evidence["not_judged"] == "memory_bandwidth (the input has no DRAM or pipe activity)"


def test_experiments_run_one_after_another_are_not_checkpoint_stalls():
    """The BERT recording runs its experiments one after another, each a new process: gaps of 17-120 s at a
    near-steady period, as a job that checkpoints would show, but with the GPU's memory released in them.
    Every window of it is healthy training, as it was before host stalls were judged."""
    from gpulens.analyzer.judging.history import analyze

    trace = readers.read_files([DMON / "train_nlp_dcgm.csv"], gpu_model="NVIDIA A100 80GB PCIe")
    [v] = analyze(trace)
    assert (v.bottleneck, list(v.by_class)) == ("healthy", ["healthy"])


def test_a_recording_with_a_hole_is_insufficient_data_not_a_guess():
    # The ResNet-50 recording has no samples for 209 s before its first experiment: 24 samples in 230 s.
    trace = readers.read_files([DMON / "train_cv_dcgm.csv"])
    first = pd.read_csv(DMON / "train_cv_cv_train.csv").iloc[0]
    [verdict] = classify(trace[trace.timestamp < first.start_timestamp])
    assert (verdict.bottleneck, verdict.evidence["samples_per_gpu"]) == ("insufficient_data", "24 < 30")


SCRAPES = [
    FIXTURES / "dcgm-exporter" / "a100-no-mig-scrape1.prom",
    FIXTURES / "dcgm-exporter" / "a100-no-mig-scrape2.prom",
]


def test_saved_dcgm_exporter_scrapes_are_one_series():
    # They carry no time: the first was taken when its file was written, the next a scrape interval later.
    frame = readers.read_files(SCRAPES, scrape_interval=30)
    saved = SCRAPES[0].stat().st_mtime
    assert list(frame.timestamp) == [saved, saved + 30.0]
    frame = readers.read_files(SCRAPES, scrape_interval=30, scrape_start=1763719200.0)
    assert list(frame.timestamp) == [1763719200.0, 1763719230.0]
    assert list(frame.pcie_tx_bytes_per_second) == [16503.0, 16503.0]
    assert frame.memory_total_bytes.iloc[0] == 40384 * MIB
    pods = readers.read_files([FIXTURES / "dcgm-exporter" / "t4x2-one-pod.prom"])
    assert sorted(pods.pod) == ["", "runai-reservation-gpu-qa-mig-worker-gpu-1-kvltw"]


def test_a_saved_scrape_gives_every_column_dcgm_exporter_has_a_field_for(tmp_path):
    """A scrape's fields reach the trace as a store's series do (core/trace.py's mapping, core/dcgm.py's
    fields): the FP16 pipe, NVLink traffic and the SM clock's maximum were left out of files. The real
    A100 capture, with three fields dcgm-exporter exports when its counters CSV asks for them."""
    labels = SCRAPES[0].read_text().split("DCGM_FI_DEV_SM_CLOCK{", 1)[1].split("}", 1)[0]
    extra = [
        ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", "0.25"),
        ("DCGM_FI_PROF_NVLINK_TX_BYTES", "gauge", "1500000"),
        ("DCGM_FI_DEV_MAX_SM_CLOCK", "gauge", "1410"),
    ]
    text = SCRAPES[0].read_text() + "".join(f"# TYPE {n} {k}\n{n}{{{labels}}} {v}\n" for n, k, v in extra)
    (tmp_path / "scrape.prom").write_text(text)
    [row] = readers.read_files([tmp_path / "scrape.prom"], scrape_start=1763719200.0).to_dict("records")
    assert (row["fp16_active"], row["nvlink_tx_bytes_per_second"], row["sm_clock_max_hertz"]) == (
        0.25,
        1_500_000.0,
        1410e6,  # MHz, as the field's help says
    )
    assert row["sm_clock_hertz"] == 210e6 and row["pcie_tx_bytes_per_second"] == 16503.0  # as before


@pytest.mark.slow
def test_a_report_of_saved_scrapes_is_dated_and_advises_recording_more():
    done = gpulens(
        "report",
        *map(str, SCRAPES),
        "--scrape-interval",
        "15s",
        "--scrape-start",
        "2025-11-21T10:00:00Z",
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    [verdict] = json.loads(done.stdout)["verdicts"]
    assert verdict["bottleneck"] == "insufficient_data" and verdict["evidence"]["samples_per_gpu"] == "2 < 30"
    # Two scrapes 15 s apart from 10:00:00, each sample covering its interval: not 1970.
    [episode] = verdict["episodes"]
    assert (episode["start"], episode["end"]) == (1763719200.0, 1763719230.0)
    assert verdict["recommendation"].startswith("Not enough samples in the files to judge: a verdict needs 30 per GPU")
    assert "check that the exporter" not in verdict["recommendation"]
    bad = gpulens("report", *map(str, SCRAPES), "--scrape-start", "lunchtime")
    assert (bad.returncode, bad.stderr) == (
        2,
        "gpulens report: --scrape-start 'lunchtime' is not a time: give RFC 3339 (2026-11-23T00:00:00Z) or unix "
        "seconds\n",
    )


# --- the trace format ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, message",
    [
        ("gpu,sm_active\n0,0.5\n", "line 1: required column 'timestamp' missing from the header"),
        ("timestamp,gpu,sm_activ\n1,0,0.5\n", "line 1: unknown column(s) sm_activ"),
        ("timestamp,gpu,sm_active\n1,0,0.5\n2,0,high\n", "line 3, column 3 (sm_active): 'high' is not a number"),
        ("timestamp,gpu,sm_active\n1,0,85\n", "line 2, column 3 (sm_active): 85 is not a ratio from 0 to 1"),
        ("timestamp,gpu,sm_active\nyesterday,0,0.5\n", "line 2, column 1 (timestamp): 'yesterday' is neither unix"),
        ("timestamp,gpu,sm_active\n1,0\n", "line 2: 2 fields, the header has 3"),
        ("", "empty file"),
    ],
)
def test_malformed_trace_names_file_line_column(tmp_path, text, message):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(TraceError) as error:
        read_trace(path)
    assert str(error.value).startswith(str(path)) and message in str(error.value)


def test_rfc3339_and_unix_timestamps_agree(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,gpu,gpu_util\n2025-11-21T10:00:00Z,0,0.5\n1763719201,0,0.25\n")
    frame = read_trace(path)
    assert list(frame.timestamp) == [1763719200.0, 1763719201.0]


def test_parquet_round_trip(tmp_path):
    frame = scenario_trace(Scenario("idle", "T4", 1, 0.0, True, False, 5), window=60)
    fr.write_trace(frame, tmp_path / "t.parquet")
    back = read_trace(tmp_path / "t.parquet")
    pd.testing.assert_frame_equal(back, frame)


# --- the classifier --------------------------------------------------------------------------


def one(label, **kwargs) -> list:
    s = Scenario(
        label,
        kwargs.pop("model", "A100-SXM4-40GB"),
        kwargs.pop("gpus", 1),
        kwargs.pop("onset", 0.0),
        kwargs.pop("profiling", True),
        kwargs.pop("mig", False),
        kwargs.pop("seed", 31),
    )
    return classify(scenario_trace(s))


def blocks(starts: list[float], seconds: int, step: float = 1.0, activity: float = 0.5) -> pd.DataFrame:
    """One pod's GPU sampled every `step` seconds for `seconds` from each of `starts`, nothing between."""
    ts = [start + k * step for start in starts for k in range(int(seconds / step))]
    return fr.normalize(
        pd.DataFrame(
            {
                "timestamp": ts,
                "gpu": "GPU-0",
                "node": "n1",
                "gpu_model": "NVIDIA L40S",
                "namespace": "ml",
                "pod": "p",
                "gpu_util": activity,
                "memory_used_bytes": 4e9,
                "memory_total_bytes": 48e9,
            }
        )
    )


def test_gaps_in_the_data_are_gaps_not_waste():
    # Two one-minute blocks an hour apart: the samples cover 120 s of a 3,660 s span. Only those 120 s
    # count (at 30% activity, a problem class: 84 s wasted); the old arithmetic stretched every sample to
    # 30.8 s: 2,583 s.
    [v] = classify(blocks([1_800_000_000.0, 1_800_003_600.0], 60, activity=0.3))
    assert v.bottleneck != "healthy"
    assert (v.window_seconds, v.coverage) == (3660.0, round(120 / 3660, 4))
    assert (v.wasted_gpu_seconds, v.wasted_cost) == (84.0, round(84 / 3600 * 1.50, 4))
    # The same two minutes of samples with no gap cover their whole span.
    [whole] = classify(blocks([1_800_000_000.0], 120, activity=0.3))
    assert (whole.window_seconds, whole.coverage, whole.wasted_gpu_seconds) == (120.0, 1.0, 84.0)


def test_coarse_samples_cover_their_interval_and_a_missed_scrape_is_a_gap():
    # One sample every 57 s for an hour, one scrape in ten missing: each sample stands for 57 s. At 30%
    # activity with a model held and no signature of a cause, unexplained: its waste is the unused 70% of the
    # covered time all the same.
    ts = [1_800_000_000.0 + 57 * k for k in range(64) if k % 10 != 5]
    frame = blocks([0.0], 1, activity=0.3)
    frame = fr.normalize(pd.concat([frame.assign(timestamp=x) for x in ts], ignore_index=True))
    [v] = classify(frame, Thresholds(min_samples=30))
    assert v.bottleneck == "unexplained"
    assert v.window_seconds == 57 * 63 + 57 and v.coverage == round(len(ts) * 57 / (57 * 64), 4)
    assert v.wasted_gpu_seconds == pytest.approx(0.7 * 57 * len(ts), abs=0.05)


def test_a_healthy_pod_wastes_nothing_by_cause():
    """Headroom a healthy pod leaves is not waste: no cause to fix, no money charged to one."""
    [v] = classify(blocks([1_800_000_000.0], 600, activity=0.6))
    assert (v.bottleneck, v.wasted_gpu_seconds, v.wasted_cost) == ("healthy", 0.0, 0.0)
    assert v.by_class["healthy"].wasted_gpu_seconds == 0.0


def test_a_verdict_carries_evidence_recommendation_and_waste():
    [v] = one("data_starvation", model="H100-SXM5-80GB")
    assert v.bottleneck == "data_starvation" and v.confidence == 0.95  # CPU at its limit adds confidence
    assert v.evidence["activity_p95_above"].startswith("70% (") and "cpu_at_limit_fraction" in v.evidence
    assert "num_workers" in v.recommendation
    # Waste: (1 - mean activity) x 600 GPU-seconds, priced at the H100's 4 USD per hour.
    assert v.wasted_gpu_seconds == pytest.approx((1 - v.mean_activity) * 600, abs=0.5)
    assert v.wasted_cost == pytest.approx(v.wasted_gpu_seconds / 3600 * 4.0, abs=1e-3)


def test_throttling_is_secondary_when_something_else_is_wrong():
    frame = scenario_trace(Scenario("data_starvation", "H100-SXM5-80GB", 1, 0.0, True, False, 32))
    frame["clock_event_reasons"] = 0x40.__float__()  # hot while starving
    [v] = classify(frame)
    assert (v.bottleneck, v.secondary) == ("data_starvation", ["throttling"])


def test_a_preallocating_server_is_not_fragmentation():
    frame = scenario_trace(Scenario("healthy", "H100-SXM5-80GB", 1, 0.0, True, False, 33))
    frame["memory_used_bytes"] = 0.9 * frame["memory_total_bytes"]  # vLLM's gpu_memory_utilization=0.9
    [v] = classify(frame)
    assert v.bottleneck == "healthy"


def test_without_profiling_fields_confidence_is_low_and_memory_bandwidth_never_claimed():
    [v] = one("memory_bandwidth", profiling=False)
    assert v.bottleneck != "memory_bandwidth"
    assert v.confidence <= 0.5 and "profiling_fields" in v.evidence


def test_too_few_samples_is_insufficient_data():
    [v] = one("insufficient_data")
    assert (v.bottleneck, v.evidence["samples_per_gpu"]) == ("insufficient_data", "20 < 30")


def test_thresholds_come_from_one_overridable_config(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("min_samples: 10\n")
    [v] = classify(scenario_trace(Scenario("insufficient_data", "T4", 1, 0, True, False, 3)), Thresholds.load(path))
    assert v.bottleneck == "healthy"
    path.write_text("min_sample: 10\n")
    with pytest.raises(ValueError, match="unknown key\\(s\\) min_sample"):
        Thresholds.load(path)


@pytest.mark.slow
def test_eval_on_unseen_seeds_at_coarse_sampling_over_a_day():
    report = evaluate(seed=1000, per_class=3, intervals=(15.0, 60.0), spans=(3600.0, 86400.0), per_day_profile=2)
    # Every class of a pod's samples; the classes of a GPU no pod holds come from the attribution
    # (test_signatures, test_analyzer_service).
    assert set(report.labels) == set(POD_CLASSES)
    assert report.macro_f1() >= 0.95
    assert report.healthy_called_idle() == 0
    assert report.serving_told_to_release() == 0
    assert report.never_claims_memory_bandwidth_without_profiling()
    # Replicas that loaded a model and served nothing, their health checks every 10 s: 2 over each span,
    # each seen at 15 and 60 s, all idle.
    assert report.never_served_found() == "8/8"
    # The day-scale pods judged again with what Kubernetes says they are (a Deployment's replica, a JupyterHub
    # server, a Job: evaluate.DAY_KINDS): each given the class its data shows, and no notebook called serving.
    said = report.with_kinds
    assert len(said) == len(report.results[report.results["kind"] == "day"]) == 2 * 2 * 2 * len(DAY_KINDS)
    assert (said["label"] == said["predicted"]).all(), said[said["label"] != said["predicted"]]
    # The workload shapes users met (evaluate.SHAPES): a notebook training in cells is in use and healthy, never
    # idle; a replica serving by day and resting at night is serving, with its kind or from its GPU alone; a light
    # loop on a big GPU is wrong_gpu_type and a light job with no signature unexplained, both sized down.
    shapes = report.shapes
    # 2 spans x 2 intervals x 2 pods x (a notebook with its kind; a replica, a light loop and a light job, each
    # with its kind and alone)
    assert len(shapes) == 2 * 2 * 2 * 7 and set(shapes["interval"]) == {15.0, 60.0}
    assert (shapes["label"] == shapes["predicted"]).all(), shapes[shapes["label"] != shapes["predicted"]]
    light = shapes[shapes["profile"].isin(["light_loop", "light_job"])]
    assert len(light) == 2 * 2 * 2 * 4 and light["smaller"].all(), light[~light["smaller"]]
    # One pod of each placement fault, stall cause and cause left open (CPU offload, one host thread, four
    # independent processes in one pod), each given the class its data shows at both intervals.
    for interval in (15.0, 60.0):
        for label, variants in VARIANTS.items():
            assert dict(report.variants(label, interval)) == {name: "1/1" for name in variants}, (label, interval)


@pytest.mark.slow
def test_eval_at_one_second_over_a_day():
    report = evaluate(seed=1001, per_class=3, intervals=(1.0,), spans=(600.0, 86400.0), per_day_profile=2)
    assert report.macro_f1() >= 0.95
    assert report.healthy_called_idle() == 0
    assert report.serving_told_to_release() == 0


# --- the command line ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def three_pods(tmp_path_factory):
    """A trace of three pods (idle, healthy, memory_bandwidth) and its report as JSON: what the tables show."""
    labels = ["idle", "healthy", "memory_bandwidth"]
    frame = pd.concat(
        [scenario_trace(Scenario(label, "H100-SXM5-80GB", 1, 0, True, False, 40 + i)) for i, label in enumerate(labels)]
    )
    path = tmp_path_factory.mktemp("three") / "trace.csv"
    fr.write_trace(frame, path)
    result = gpulens("report", str(path), "--format", "json")
    assert result.returncode == 0, result.stderr
    return path, json.loads(result.stdout)


def _header(lines: list[str], first: str) -> list[str]:
    """A table's column headers, from its header line (the one starting with `first`)."""
    line = next(line for line in lines if line.strip().startswith(first + "  "))
    return re.split(r" {2,}", line.strip())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("columns", "pods_table", "plan_table"), [(80, False, False), (120, False, True), (250, True, True)]
)
def test_the_report_reads_at_any_width_its_figures_whole(three_pods, columns, pods_table, plan_table):
    """Piped with COLUMNS, as on a terminal that wide: every line fits; every figure the JSON holds is shown
    whole (the plan's GPUs, saving and confidence collapsed to nothing beside its long changes, at 120 and 250
    columns). The pods and the plan are tables where their text columns hold 30 characters or more, else a
    block each: at 120 the pods' why and what to do would hold 14 and 10 ("stages_take_tur…", "Communica"),
    the plan's change 41."""
    path, document = three_pods
    result = gpulens("report", str(path), env={**os.environ, "COLUMNS": str(columns)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    text = "\n".join(lines)
    assert max(map(len, lines)) <= columns
    assert sum(line.startswith("What to change: ") for line in lines) == 1
    verdicts = {v["unit"]: v for v in document["verdicts"]}
    actions = document["plan"]
    # Minutes of samples: what each change saved in them, no month projected from them (JSON: null).
    assert document["plan_summary"]["projected"] is False
    assert actions and all(a["saving_usd_per_30d"] is None for a in actions)
    assert _header(lines, "owner") == ["owner", "pods", "GPU-h sampled", "GPU-h wasted", "cost $"]
    if pods_table:
        assert _header(lines, "pod or GPU") == ["pod or GPU", "class", "conf", "GPU-h", "cost $", "why", "what to do"]
        for unit, v in verdicts.items():
            row = next(line for line in lines if line.strip().startswith(unit + " "))
            figures = [v["bottleneck"], f"{v['confidence']:.2f}", f"{v['wasted_gpu_seconds'] / 3600:,.2f}"]
            assert re.split(r" {2,}", row.strip())[1:5] == [*figures, f"{v['wasted_cost']:,.2f}"], row
    else:
        # A block's name, then its figures: on one line where both fit, else on the next, never parted by a wrap.
        for unit, v in verdicts.items():
            figures = f"{v['bottleneck']} {v['confidence']:.2f}  {v['wasted_gpu_seconds'] / 3600:,.2f} GPU-h wasted, "
            figures += f"${v['wasted_cost']:,.2f}"
            assert re.search(f"^{re.escape(unit)}(  |\n  ){re.escape(figures)}$", text, re.M), figures
        for v in verdicts.values():  # what to do, whole where the line holds it
            fix = "  to do: " + v["recommendation"].split(". ")[0].split(": ")[0]
            assert len(fix) > columns or fix in lines, fix
    if plan_table:
        assert _header(lines, "workload") == ["workload", "action", "GPUs", "saved in span $", "confidence", "change"]
        plan = lines[next(k for k, line in enumerate(lines) if line.startswith("What to change: ")) :]
        for a in actions:
            row = next(line for line in plan if line.strip().startswith(a["owner"] + " "))
            figures = [a["action"], f"{a['gpus_now']:g} -> {a['gpus_after']:g}", f"{a['saving_usd_span']:,.2f}"]
            assert re.split(r" {2,}", row.strip())[1:5] == [*figures, f"{a['confidence']:.2f}"], row
    else:
        for a in actions:
            figures = re.escape(f"{a['action']}: GPUs {a['gpus_now']:g} -> {a['gpus_after']:g}, ")
            figures += re.escape(f"saves ${a['saving_usd_span']:,.2f} in the ") + r"\d+ min seen, "
            figures += re.escape(f"confidence {a['confidence']:.2f}")
            assert re.search(f"^{re.escape(a['owner'])}(  |\n  ){figures}$", text, re.M), figures
    assert any("memory_held: 0.8 GiB" in line for line in lines)  # evidence in units, the key's unit not said
    assert not any("_bytes: " in line for line in lines)


@pytest.mark.parametrize(
    ("evidence", "text", "shown"),
    [
        (
            Evidence(seconds(300), " >= ", seconds(300), " (activity < 0.01)"),
            "300 >= 300 (activity < 0.01)",
            "300 s >= 300 s (activity < 0.01)",
        ),
        (
            Evidence(share(0.953), " of samples >= ", share(0.2), ": one rank"),
            "95.3% of samples >= 20%: one rank",
            "95.3% of samples >= 20%: one rank",
        ),
        (
            Evidence(seconds(57.0, ".3g"), ": too coarse to time single bursts"),
            "57: too coarse to time single bursts",
            "57 s: too coarse to time single bursts",
        ),
        (Evidence(byte_count(33299559872)), "33299559872", "31.0 GiB"),
        # Text without figures (or read back from JSON) is shown as the analyzer wrote it.
        ("GPU-1 (rank 0)", "GPU-1 (rank 0)", "GPU-1 (rank 0)"),
    ],
)
def test_evidence_keeps_its_figures_for_the_table_to_show_in_units(evidence, text, shown):
    """The API, the page and the metrics show the text as written; the table shows its figures in units from
    the numbers, not from the words; a report's shards pickle it with its figures."""
    assert evidence == text and json.loads(json.dumps(evidence)) == text
    assert in_units(evidence) == shown
    assert in_units(pickle.loads(pickle.dumps(evidence))) == shown


@pytest.mark.slow
def test_report_json_csv_and_table(tmp_path):
    frame = pd.concat(
        [
            scenario_trace(Scenario(label, "H100-SXM5-80GB", 1, 0, True, False, 40 + i))
            for i, label in enumerate(["idle", "healthy", "memory_bandwidth"])
        ]
    )
    fr.write_trace(frame, tmp_path / "trace.csv")
    result = gpulens("report", str(tmp_path / "trace.csv"), "--format", "json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    verdicts = document["verdicts"]
    assert [v["bottleneck"] for v in verdicts] == ["idle", "memory_bandwidth", "healthy"]  # most waste first
    assert set(verdicts[0]) >= {
        "namespace",
        "pod",
        "node",
        "gpus",
        "gpu_model",
        "bottleneck",
        "confidence",
        "evidence",
        "recommendation",
        "wasted_gpu_seconds",
        "secondary",
    }
    assert [(v["window_seconds"], v["coverage"]) for v in verdicts] == [(600.0, 1.0)] * 3
    # The sums: each pod is its own workload in a file (no kube-state-metrics), all in one namespace.
    wasted = sum(v["wasted_gpu_seconds"] for v in verdicts) / 3600
    [namespace] = document["waste"]["namespace"]
    assert namespace["key"] == "eval" and namespace["pods"] == 3
    assert namespace["wasted_gpu_hours"] == pytest.approx(wasted, abs=1e-3)
    assert namespace["gpu_hours"] == pytest.approx(3 * 600 / 3600, abs=1e-3)
    assert [(s["key"], s["wasted_gpu_hours"]) for s in document["waste"]["owner"]] == [
        (f"eval/{v['pod']}", round(v["wasted_gpu_seconds"] / 3600, 3)) for v in verdicts
    ]
    assert sum(s["wasted_gpu_hours"] for s in document["waste"]["class"]) == pytest.approx(wasted, abs=1e-3)
    result = gpulens("report", str(tmp_path / "trace.csv"), "--format", "csv")
    header = result.stdout.splitlines()[0]
    assert header.startswith("namespace,pod,node,gpus,gpu_model,bottleneck,confidence")
    assert header.endswith(
        ",recommendation,window_seconds,coverage,sample_seconds,time_share,episodes,owner_kind,owner,team,"
        "workload_kind,engine,size_fit,size_fits,size_price_share"
    )
    # Each row's size is the JSON's (the size its use fits, measured once).
    rows = {r["pod"]: r for r in csv.DictReader(io.StringIO(result.stdout))}
    assert {pod: (r["size_fit"], r["size_fits"], float(r["size_price_share"])) for pod, r in rows.items()} == {
        v["pod"]: (v["size"]["fit"], v["size"]["fits"], round(v["size"]["price_share"], 4)) for v in verdicts
    }
    by_namespace = gpulens("report", str(tmp_path / "trace.csv"), "--format", "csv", "--by", "namespace").stdout
    assert by_namespace.splitlines() == [
        "namespace,pods,gpu_hours,wasted_gpu_hours,wasted_cost",
        f"eval,3,{namespace['gpu_hours']},{namespace['wasted_gpu_hours']},{namespace['wasted_cost']}",
    ]
    table = gpulens("report", str(tmp_path / "trace.csv")).stdout
    assert "eval/idle-40" in table and "memory_bandwidth" in table and "Release the GPU" in table
    # `analyze`, the command's old name, is an alias: scripts written against it get the same answer.
    assert gpulens("analyze", str(tmp_path / "trace.csv"), "--format", "csv").stdout == result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("output", ["table", "json", "csv", "html"])
def test_a_recording_without_samples_is_refused_in_every_format(tmp_path, output):
    """A header and no rows (a recorder stopped at once, a Parquet file of no row) is no fleet without GPUs:
    every format refuses it with one line that names the files, and writes nothing."""
    header = tmp_path / "header.csv"
    header.write_text("timestamp,gpu,node,pod,gpu_util\n")
    empty = tmp_path / "empty.parquet"
    pd.DataFrame({"timestamp": pd.Series([], dtype=float), "gpu": pd.Series([], dtype=str)}).to_parquet(empty)
    result = gpulens("report", str(header), str(empty), "--format", output)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        f"gpulens report: {header}, {empty}: no samples (a header, no rows): nothing to judge; give a recording "
        "that holds some (gpulens exporter --record writes one)\n"
    )


@pytest.mark.slow
def test_report_bad_file_writes_nothing(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,gpu,sm_active\n1,0,0.5\n2,0,oops\n")
    out = tmp_path / "verdicts.json"
    out.write_text("previous results\n")
    result = gpulens("report", str(bad), "--format", "json", "--out", str(out))
    assert result.returncode == 2
    assert result.stderr == f"gpulens report: {bad}, line 3, column 3 (sm_active): 'oops' is not a number\n"
    assert out.read_text() == "previous results\n"
    missing = gpulens("report", str(tmp_path / "missing.csv"), "--out", str(tmp_path / "new.json"))
    assert missing.returncode == 2 and str(tmp_path / "missing.csv") in missing.stderr
    # Nothing written: no output, and no temporary file beside the one kept.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.csv", "verdicts.json"]


@pytest.mark.slow
def test_eval_command_prints_the_matrix():
    """The command's report, on a small eval (the whole one is test_eval_on_unseen_seeds_...): a matrix per
    interval, each variant's pods found, and the figures every run must hold."""
    result = gpulens("eval", "--per-class", "3", "--intervals", "15,60", "--spans", "1h", "--per-day-profile", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(rows: true class, columns: predicted)") == 2
    assert result.stdout.count("  causes left open: independent 1/1\n") == 2
    assert "macro-F1:" in result.stdout and "healthy pods called idle: 0" in result.stdout
    assert result.stdout.count("  day-scale pods with their kind (GPU alone): accuracy 1.000 (") == 2


def _recorded_seconds(record: Path, pod: str) -> float:
    """Simulated seconds of `pod` the --record file holds (at --simulate.speed 5: five each wall second), from
    its whole lines as they are written."""
    if not record.exists():
        return 0.0
    lines = record.read_text().splitlines(keepends=True)
    rows = [row for row in csv.DictReader(line for line in lines if line.endswith("\n")) if row["pod"] == pod]
    return 5 * (float(rows[-1]["timestamp"]) - float(rows[0]["timestamp"])) if rows else 0.0


@pytest.mark.slow
def test_the_exporter_records_a_trace_that_analyze_reads(tmp_path):
    from tests.helpers import start_exporter, wait_until

    record = tmp_path / "node.csv"
    exporter, url = start_exporter(
        [
            "--source",
            "simulated",
            "--simulate.node",
            "sim-h100-a",
            "--simulate.speed",
            "5",
            "--sampler.interval",
            "0.25",
            "--record",
            str(record),
        ]
    )
    wait_until(lambda: _recorded_seconds(record, "bert-finetune-0") >= 80, 60, what="80 simulated seconds")
    exporter.stop()
    frame = read_trace(record)
    assert set(frame.node) == {"sim-h100-a"} and frame.gpu.nunique() == 8
    verdicts = {f"{v.namespace}/{v.pod}": v.bottleneck for v in classify(frame) if v.pod}
    assert verdicts["research/notebook-alice-0"] == "idle"
    assert verdicts["science/stencil-solver-0"] == "memory_bandwidth"
    assert verdicts["vision/resnet-ddp-0"] == "healthy"
    assert frame.pcie_rx_bytes_per_second.notna().sum() > 0
    # Every driver sample between rows is in the trace: the simulated driver samples every 1/6 s of
    # simulated time, 5x faster than real time, so about 30 per second and GPU.
    starving = frame[frame.pod == "bert-finetune-0"]
    seconds = starving.timestamp.max() - starving.timestamp.min()
    assert 29 * seconds <= starving.activity_samples.sum() <= 31 * seconds
    steady = 2 * starving.steady_bursts.sum() / starving.activity_transitions.sum()
    assert steady >= 0.7  # its steps repeat at a steady period (the first two bursts have none to repeat)
    [v] = [v for v in classify(frame) if v.pod == "bert-finetune-0"]
    assert v.bottleneck == "data_starvation" and "steady_burst_fraction" in v.evidence, v


def test_the_recorder_refuses_to_append_to_a_file_of_another_layout(tmp_path):
    from gpulens.exporter.recorder import Recorder, RecordError

    old = tmp_path / "old.csv"
    old.write_text("timestamp,gpu,gpu_util\n1,GPU-1,0.5\n")
    with pytest.raises(RecordError, match="holds a trace with other columns .*record to a new file"):
        Recorder(str(old))
    assert old.read_text() == "timestamp,gpu,gpu_util\n1,GPU-1,0.5\n"  # untouched


def test_a_node_price_from_the_clusters_cost_tool_wins_over_the_price_file():
    """OpenCost's price for the pod's node (node_prices) beats the price file's for its model, which
    beats the catalogue's; a node it does not price keeps the file's."""
    s = Scenario("data_starvation", "H100-SXM5-80GB", 1, 0.0, True, False, 31)
    frame = scenario_trace(s)
    [node] = frame["node"].unique()
    [by_node] = classify(frame, prices={"H100": 2.0}, node_prices={node: 9.5})
    [by_file] = classify(frame, prices={"H100": 2.0}, node_prices={"another-node": 9.5})
    assert by_node.wasted_gpu_seconds == by_file.wasted_gpu_seconds > 0
    assert by_node.wasted_cost == pytest.approx(by_node.wasted_gpu_seconds / 3600 * 9.5, abs=1e-3)
    assert by_file.wasted_cost == pytest.approx(by_file.wasted_gpu_seconds / 3600 * 2.0, abs=1e-3)


def test_the_class_table_is_whole_and_every_set_of_classes_derives_from_it():
    """core/bottlenecks.py is the one home of the vocabulary: each class a fix, a colour of its own, whether
    it is a problem and whether it needs profiling fields; the sets the code uses are read from it."""
    from gpulens.analyzer.outputs import report
    from gpulens.core import bottlenecks

    table = bottlenecks.BOTTLENECKS
    assert len({b.colour for b in table}) == len(table) and all(re.fullmatch(r"#[0-9a-f]{6}", b.colour) for b in table)
    assert all(b.fix.endswith(".") for b in table)
    assert bottlenecks.CLASSES[0] == "healthy" and bottlenecks.CLASSES[-1] == "insufficient_data"
    assert set(bottlenecks.CLASSES) - bottlenecks.PROBLEMS == {"healthy", "insufficient_data", "unallocated"}
    assert bottlenecks.GPU_CLASSES == ("unallocated", "held_without_pod")
    assert [b.name for b in table if b.profiling == "needed"] == ["memory_bandwidth"]
    assert report.COLOURS == {b.name: b.colour for b in table}


def _held_with_blips(seconds: float, blips: int, step: float = 10.0) -> pd.DataFrame:
    """A GPU holding a 20 GB model for `seconds`, sampled every `step` s, busy (100%) on `blips` samples
    spread evenly and idle on the others: a notebook's rare cells, or a replica's rare requests."""
    frame = blocks([1_800_000_000.0], int(seconds), step=step, activity=0.0)
    busy = np.linspace(0, len(frame) - 1, blips + 2).round().astype(int)[1:-1] if blips else []
    frame.loc[busy, "gpu_util"] = 1.0
    frame["memory_used_bytes"] = 20e9
    return frame


@pytest.mark.parametrize(
    ("seconds", "blips", "idle"),
    [
        (3600.0, 3, True),  # 3 of 360 samples: 0.8% of an hour
        (3600.0, 4, False),  # 4 of 360: 1.1%, a replica with some requests
        (3590.0, 3, False),  # under an hour: too short to call sparse use idle
        (3600.0, 0, True),  # nothing at all: idle, and no burst claimed
    ],
)
def test_sparse_use_of_an_hour_or_more_is_idle_and_no_burst_is_claimed_unseen(seconds, blips, idle):
    [v] = classify(_held_with_blips(seconds, blips))
    assert (v.bottleneck == "idle") is idle, v
    if idle:
        work = blips / int(seconds / 10)
        assert v.evidence["busy_fraction"].startswith(f"{percent(work)} of 1 h worked ({duration(work * 3600)}) < 1%: ")
        assert v.evidence["memory_held_bytes"] == "20000000000"
    elif v.bottleneck == "overprovisioned_serving":
        assert f"({blips} bursts of work between them)" in v.evidence["quiet_fraction"]


def test_sparse_use_is_seconds_of_work_not_rows_that_caught_a_blip():
    """dcgm-exporter every 30 s: DCGM averages SM activity over the interval, so a 2 s health check at 50%
    SM reads 0.0333 on the one row that holds it. A check every 20 minutes makes 3 of an hour's 120 rows
    busy (2.5%, over the 1% bar), but 3 s of work in 3,600 (0.083%): idle, as the exporter's counters
    would measure it."""
    frame = _held_with_blips(3600.0, 3, step=30.0)
    frame["sm_active"] = np.where(frame["gpu_util"] > 0, 2 * 0.5 / 30, 0.0)
    [v] = classify(frame)
    assert v.bottleneck == "idle", v
    assert v.evidence["busy_fraction"].startswith("0.083% of 1 h worked (3 s) < 1%: sparse use")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["starvation_high", "starvation_low", "idle_activity"])
def test_a_threshold_the_exporters_histogram_cannot_honour_is_refused_saying_why(tmp_path, name):
    """The exporter counts activity between scrapes at fixed histogram bounds: moving one of the three
    thresholds read from them would judge its data at the old value and other inputs at the new one."""
    from gpulens.core import activity

    bound = {"starvation_high": activity.HIGH_BOUND, "starvation_low": activity.LOW_BOUND}.get(
        name, activity.IDLE_BOUND
    )
    assert getattr(Thresholds(), name) == bound
    path = tmp_path / "t.yaml"
    path.write_text(f"{name}: {bound}\n")
    assert getattr(Thresholds.load(str(path)), name) == bound
    path.write_text(f"{name}: 0.3\n")
    with pytest.raises(ValueError, match=rf"{name} 0.3 cannot be honoured: gpulens' exporter counts the activity"):
        Thresholds.load(str(path))
    done = subprocess.run(
        [sys.executable, "-m", "gpulens", "report", "x.csv", "--thresholds", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2 and f"leave {name} at {bound:g}" in done.stderr and "Traceback" not in done.stderr


def test_the_html_report_draws_gaps_as_gaps_and_counts_in_words():
    """Two hours of samples 14 hours apart: the activity line stops at the gap and starts again after it;
    one pod is "1 pod" and "the pod"; numbers sit under headers aligned as they are."""
    from gpulens.analyzer.judging.history import analyze
    from gpulens.analyzer.outputs import report as html_report

    trace = blocks([1_800_000_000.0, 1_800_000_000.0 + 15 * 3600], 3600, step=30.0, activity=0.3)
    verdicts = analyze(trace)
    page = html_report.render(verdicts, html_report.trace_timelines(trace, verdicts))
    assert page.count("<polyline class=activity") == page.count("<polyline class=memory") == 2
    assert "<b>1</b>pod</span>" in page and "<h2>Timelines: the pod</h2>" in page
    assert "<th class=n>GPU-h wasted</th><th class=n>cost</th>" in page


@pytest.mark.slow
def test_report_out_replaces_regular_files_only_and_never_its_input(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,gpu,gpu_util\n" + "".join(f"{t},GPU-1,0.5\n" for t in range(0, 600, 15)))
    expected = gpulens("report", str(trace), "--format", "json").stdout
    # A device (made here with /dev/null's numbers, never the system's) is written in place, not replaced.
    device = tmp_path / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    assert gpulens("report", str(trace), "--format", "json", "--out", str(device)).returncode == 0
    assert stat.S_ISCHR(device.stat().st_mode)
    # A link to the process's stdout (as /dev/stdout is) prints the report there.
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    result = gpulens("report", str(trace), "--format", "json", "--out", str(link))
    assert (result.returncode, result.stdout) == (0, expected) and link.is_symlink()
    # A link to a file: the file is replaced, with its permissions; the link stays a link.
    target, link = tmp_path / "kept.json", tmp_path / "latest.json"
    target.write_text("old\n")
    target.chmod(0o640)
    link.symlink_to(target)
    assert gpulens("report", str(trace), "--format", "json", "--out", str(link)).returncode == 0
    assert link.is_symlink() and target.read_text() == expected and stat.S_IMODE(target.stat().st_mode) == 0o640
    # Temporary names planted beside the report (links to a file of the victim's) are neither followed nor used.
    victim, out = tmp_path / "victim", tmp_path / "report.json"
    victim.write_text("untouched\n")
    for name in (".report.json.tmp", *(f".report.json.{i:012x}.tmp" for i in range(4))):
        (tmp_path / name).symlink_to(victim)
    assert gpulens("report", str(trace), "--format", "json", "--out", str(out)).returncode == 0
    assert victim.read_text() == "untouched\n" and out.read_text() == expected
    assert sorted(p.name for p in tmp_path.glob(".report.json*")) == sorted(
        [".report.json.tmp", *(f".report.json.{i:012x}.tmp" for i in range(4))]
    )  # the planted ones only: nothing of gpulens' left behind
    # The report's own input, under any name: refused before anything is read or written.
    alias = tmp_path / "alias.csv"
    alias.symlink_to(trace)
    before = trace.read_bytes()
    result = gpulens("report", str(trace), "--out", str(alias))
    assert (result.returncode, result.stderr) == (
        2,
        f"gpulens report: --out {alias} is {trace}, which the report reads: name another file for the report\n",
    )
    assert trace.read_bytes() == before
    # A directory, or a path under a file: one line naming the flag.
    for bad, reason in (
        (tmp_path, "it is a directory; name a file"),
        (trace / "x.json", "cannot write it (Not a directory)"),
    ):
        result = gpulens("report", str(trace), "--out", str(bad))
        last = result.stderr.splitlines()[-1]
        assert result.returncode == 2 and last.startswith(f"gpulens report: --out {bad}: {reason}"), result.stderr


@pytest.mark.parametrize("name", ["confidence_starvation_untimed", "confidence_serving_coarse"])
def test_a_threshold_no_rule_reads_any_more_is_refused_saying_what_replaced_it(tmp_path, name):
    """A thresholds file written for an older release names a confidence whose guess is gone: it is told
    which, why, and to delete it, not offered a threshold with a similar name."""
    path = tmp_path / "t.yaml"
    path.write_text(f"min_samples: 20\n{name}: 0.3\n")
    with pytest.raises(ValueError) as refused:
        Thresholds.load(str(path))
    assert str(refused.value) == f"--thresholds {path}: {name} is gone: {REMOVED[name]}; delete it from the file"
    assert "unexplained" in REMOVED[name] and not hasattr(Thresholds(), name)


@pytest.mark.parametrize(("samples", "expected"), [(1, "insufficient_data"), (Thresholds().min_samples, "unallocated")])
def test_a_gpu_no_pod_holds_is_judged_from_as_many_samples_as_a_pod(samples, expected):
    """One scrape of a node: its pod's GPU is insufficient_data, and so is the GPU beside it that no pod holds
    (it was unallocated at 0.90 from that one scrape); from min_samples on, each is what its samples show."""
    rows = [
        {"timestamp": 1_800_000_000.0 + 15 * k, "gpu": gpu, "node": "n1", "gpu_model": "NVIDIA H100 80GB HBM3"}
        | {"namespace": ns, "pod": name, "gpu_util": 0.0, "memory_used_bytes": 0.0}
        for k in range(samples)
        for gpu, ns, name in (("GPU-a", "ml", "train-0"), ("GPU-b", "", ""))
    ]
    verdicts = {v.unit: v for v in classify(fr.normalize(pd.DataFrame(rows)), Thresholds())}
    assert verdicts["gpu:n1/GPU-b"].bottleneck == expected
    if samples == 1:
        assert verdicts["ml/train-0"].bottleneck == "insufficient_data"
        assert verdicts["gpu:n1/GPU-b"].evidence == {"samples_per_gpu": f"1 < {Thresholds().min_samples}"}


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (
            ["--since", "10", "minutes"],
            "--since 10 minutes: a duration is one word, as Prometheus writes it: --since 10m (units s, m, h, d, w)",
        ),
        (
            ["--since", "7d", "--window", "2", "Hours"],
            "--window 2 Hours: a duration is one word, as Prometheus writes it: --window 2h (units s, m, h, d, w)",
        ),
        (
            ["--since", "7d", "week.csv"],
            "week.csv: files given with --prometheus: a report reads a store or files, not both; drop one (a "
            "duration is one word: --since 10m)",
        ),
    ],
)
def test_a_duration_in_two_words_is_said_as_one_not_read_as_a_file(words, said, capsys):
    """`--since 10 minutes` made "minutes" a file to read, and the report said "give files to read, or
    --prometheus URL": the duration is said as it should be written."""
    from gpulens import cli

    assert cli.main(["report", "--prometheus", "http://127.0.0.1:9", *words]) == 2
    assert capsys.readouterr().err == f"gpulens report: {said}\n"
