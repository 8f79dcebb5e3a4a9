"""Hardware XIDs from every input into the trace's hardware_xid column, the verdict's evidence and the plan,
which leaves a GPU at fault alone. The oracle for which codes are hardware is NVIDIA's XID catalogue as
PRACTICES.md quotes it (13, 31, 43, 45 are the application's); for Prometheus, PromQL's own semantics:
a counter born within the rate window shows for the window's steps after its first sample."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.inputs import frame as fr
from gpulens.analyzer.inputs import readers
from gpulens.analyzer.inputs.live import ExporterInput
from gpulens.analyzer.judging.classify import XID_FAULTS
from gpulens.analyzer.judging.history import analyze
from gpulens.analyzer.outputs.actions import NotPlanned
from gpulens.analyzer.outputs.plan import make_plan
from gpulens.analyzer.outputs.use import Use
from gpulens.core import metrics as m
from gpulens.core import trace as tr
from gpulens.core.catalog import MODELS
from gpulens.core.thresholds import Thresholds
from gpulens.exporter.recorder import Recorder
from gpulens.exporter.sampler import Snapshot
from gpulens.exporter.sources.base import DeviceSample, NodeSample
from tests.captures import FIXTURES
from tests.helpers import BackfilledPrometheus

T0 = 1_762_646_400


def _snapshot(*devices: DeviceSample) -> Snapshot:
    return Snapshot(NodeSample(list(devices)), 0.0, {}, {}, {})


def _gpu(xids: dict[str, float], watched: bool = True) -> DeviceSample:
    d = DeviceSample("0", "GPU-a", "NVIDIA A100-SXM4-40GB", mig_mode="enabled", xids_watched=watched)
    d.set(m.UTILIZATION, 0.5)
    for code, count in xids.items():
        d.set(m.XID_ERRORS, count, code)
    return d


def _instance() -> DeviceSample:
    d = DeviceSample("0/gi1", "MIG-a1", "NVIDIA A100-SXM4-40GB", mig_mode="instance", parent_uuid="GPU-a")
    d.set(m.GRAPHICS_ENGINE_ACTIVE, 0.2)
    return d


def test_the_recorder_writes_each_rows_new_hardware_xid_on_the_gpu_and_its_instances(tmp_path):
    """Counts as the exporter's XID watcher keeps them from its start: a code born at 1 is new, an
    application code (13) is not hardware, a count that does not rise is no new event."""
    path = tmp_path / "node.csv"
    recorder = Recorder(str(path), node="n1")
    for counts in ({}, {"13": 1}, {"13": 1, "79": 1}, {"13": 1, "79": 1}, {"13": 2, "79": 1, "48": 3}):
        recorder.write(_snapshot(_gpu(counts), _instance()))
    recorder.write(_snapshot(_gpu({}, watched=False)))  # a source that does not watch XIDs: not known
    recorder.close()
    trace = readers.read_trace(path)
    rows = [(str(g), x) for g, x in zip(trace["gpu"], trace["hardware_xid"].fillna(-1), strict=True)]
    assert rows == [
        ("GPU-a", 0),
        ("MIG-a1", 0),
        ("GPU-a", 0),
        ("MIG-a1", 0),
        ("GPU-a", 79),
        ("MIG-a1", 79),
        ("GPU-a", 0),
        ("MIG-a1", 0),
        ("GPU-a", 48),
        ("MIG-a1", 48),
        ("GPU-a", -1),
    ]


@pytest.mark.parametrize(
    ("layout", "lacks"),
    [
        (tr.OLDER_LAYOUTS[0], "memory_reserved_bytes"),
        (tr.OLDER_LAYOUTS[1], "workload_kind, engine, hardware_xid, memory_reserved_bytes"),
    ],
    ids=["before-memory-reserved", "before-xids"],
)
def test_the_recorder_appends_to_a_recording_an_older_gpulens_began_in_its_layout(tmp_path, caplog, layout, lacks):
    path = tmp_path / "node.csv"
    old_row = ["1762646400.000", "GPU-a", "n1"] + [""] * (len(layout) - 3)
    path.write_text(",".join(layout) + "\n" + ",".join(old_row) + "\n")
    recorder = Recorder(str(path), node="n1")
    recorder.write(_snapshot(_gpu({"79": 1})))
    recorder.close()
    assert f"begun by an older gpulens: appending in its layout, without the {lacks} columns" in caplog.text
    header, first, appended = path.read_text().splitlines()
    assert header == ",".join(layout)
    assert len(appended.split(",")) == len(layout) and appended.split(",")[1] == "GPU-a"
    trace = readers.read_trace(path)
    assert len(trace) == 2 and not {c.strip() for c in lacks.split(",")} & set(trace.columns)


def _exposition(xids: dict[str, int]) -> str:
    lines = ['gpulens_gpu_utilization_ratio{gpu="0",uuid="GPU-a"} 0.5']
    lines += [f'gpulens_gpu_xid_errors_total{{gpu="0",uuid="GPU-a",xid="{code}"}} {n}' for code, n in xids.items()]
    return "# TYPE gpulens_gpu_xid_errors counter\n" + "\n".join(lines) + "\n"


def test_the_exporter_input_sees_a_code_from_its_first_event():
    """The first scrape is a baseline (the exporter's counts are older than the analyzer); after it, a code
    whose series appears at 1 is a new event."""
    reader = ExporterInput([("n1", "http://n1:9835/metrics")])
    codes = []
    for k, xids in enumerate(({"48": 2}, {"48": 2}, {"48": 2, "79": 1}, {"48": 2, "79": 1, "31": 1}, {"48": 3})):
        [row] = reader._rows_from("n1", _exposition(xids), T0 + k)
        codes.append(row.get("hardware_xid"))
    assert codes == [None, 0.0, 79.0, 0.0, 48.0]


def test_a_saved_dcgm_exporter_scrape_gives_its_last_hardware_xid(tmp_path):
    """dcgm-exporter's DCGM_FI_DEV_XID_ERRORS is the last code: a hardware one is kept, the application's
    31 reads as none, and the field's absence as not known (NaN)."""
    text = (FIXTURES / "dcgm-exporter" / "a100-no-mig-scrape1.prom").read_text()
    xid_line = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_XID_ERRORS{"))
    files = {
        "79": text.replace(xid_line, xid_line[:-1] + "79"),
        "31": text.replace(xid_line, xid_line[:-1] + "31"),
        "none": text.replace(xid_line + "\n", ""),
    }
    codes = {}
    for name, content in files.items():
        (tmp_path / f"{name}.prom").write_text(content)
        frame = readers.read_files([tmp_path / f"{name}.prom"], scrape_interval=30, scrape_start=T0)
        codes[name] = frame["hardware_xid"].fillna(-1).tolist()
    assert codes == {"79": [79.0], "31": [0.0], "none": [-1.0]}


@pytest.mark.slow
def test_prometheus_gives_the_steps_of_new_hardware_xids_from_gpulens_and_dcgm_exporter(tmp_path):
    """GPU-a's XID 79 counter is born at minute 20 (and XID 13's at minute 10, the application's); GPU-b
    counts none; dcgm-exporter's GPU-c reports XID 48 from minute 25 on and GPU-d the application's 31. With
    60 s steps the rate window is 240 s: XID 79 shows at minutes 20-23, then the counter stands still."""
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.store import Store
    from gpulens.analyzer.inputs.window import Window

    minutes = range(40)
    lines = ["# TYPE gpulens_gpu_utilization_ratio gauge"]
    for uuid in ("GPU-a", "GPU-b"):
        lines += [f'gpulens_gpu_utilization_ratio{{instance="n1",uuid="{uuid}"}} 0.5 {T0 + 60 * k}' for k in minutes]
    lines += ["# TYPE gpulens_gpu_xid_errors counter"]
    for code, born in (("13", 10), ("79", 20)):
        lines += [
            f'gpulens_gpu_xid_errors_total{{instance="n1",uuid="GPU-a",xid="{code}"}} 1 {T0 + 60 * k}'
            for k in minutes
            if k >= born
        ]
    for name, values in (
        ("DCGM_FI_DEV_GPU_UTIL", {"GPU-c": lambda k: 40, "GPU-d": lambda k: 40}),
        ("DCGM_FI_DEV_XID_ERRORS", {"GPU-c": lambda k: 48 if k >= 25 else 0, "GPU-d": lambda k: 31}),
    ):
        lines += [f"# TYPE {name} gauge"]
        for uuid, value in values.items():
            lines += [
                f'{name}{{instance="n2",UUID="{uuid}",modelName="NVIDIA L4",Hostname="n2"}} {value(k)} {T0 + 60 * k}'
                for k in minutes
            ]
    prometheus = BackfilledPrometheus(tmp_path, "\n".join(lines) + "\n# EOF\n")
    try:
        reader = SeriesReader(Store(prometheus.url), 60.0)
        held = Window.of(60.0, 40)
        end = T0 + 39 * 60
        reader.read(held, held.move_to(end), end)
        frame = reader.frame(held, 2400)
    finally:
        prometheus.stop()
    flagged = {
        str(gpu): sorted(int((t - T0) / 60) for t in rows["timestamp"][rows["hardware_xid"] > 0])
        for gpu, rows in frame.groupby("gpu", observed=True)
    }
    assert flagged == {"GPU-a": [20, 21, 22, 23], "GPU-b": [], "GPU-c": list(range(25, 40)), "GPU-d": []}
    assert set(frame.loc[frame["hardware_xid"] > 0, "hardware_xid"]) == {79.0, 48.0}


def test_a_hardware_xid_is_evidence_on_the_verdict_and_keeps_the_gpu_out_of_the_plan():
    """A light job on an A100 the plan would move to a T4 (test_plan.py), but its GPU reported XID 79
    once, at 06:00: the verdict keeps its class with the XID as evidence, and the plan repairs first."""
    step, samples = 30.0, 12 * 120  # 12 hours
    catalogue = MODELS["A100-SXM4-40GB"]
    xid = np.zeros(samples)
    xid[6 * 120] = 79
    trace = fr.normalize(
        pd.DataFrame(
            {
                "timestamp": T0 + step * np.arange(samples),
                "gpu": "GPU-etl",
                "node": "node-a",
                "gpu_model": catalogue.name,
                "namespace": "batch",
                "pod": "etl-0",
                "gpu_util": 0.16,
                "sm_active": 0.15,
                "memory_used_bytes": 10e9,
                "memory_total_bytes": float(catalogue.memory_total_bytes),
                "hardware_xid": xid,
            }
        )
    )
    t = Thresholds()
    [verdict] = analyze(trace, t)
    assert verdict.bottleneck == "wrong_gpu_type"
    assert verdict.evidence[XID_FAULTS] == (
        "XID 79 (the GPU fell off the bus) reported, the last at 2025-11-09 06:00:00 UTC: hardware, driver or "
        "NVLink trouble by NVIDIA's XID catalogue (the application's are 13, 31, 43, 45); dcgm-exporter repeats "
        "a GPU's last XID until it restarts, so from it the XID may predate the window"
    )
    plan = make_plan([verdict], Use.of_trace(trace, step, t), t)
    assert plan.actions == []
    assert plan.not_planned == [
        NotPlanned(
            "batch/etl-0", ["batch/etl-0"], f"a hardware XID on its GPU: {verdict.evidence[XID_FAULTS]}; repair first"
        )
    ]
    clean = analyze(trace.assign(hardware_xid=0.0), t)
    assert XID_FAULTS not in clean[0].evidence
    assert [a.action for a in make_plan(clean, Use.of_trace(trace, step, t), t).actions] == ["cheaper_gpu"]
