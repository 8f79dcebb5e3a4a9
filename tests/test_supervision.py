"""Never dead while "healthy", never silently wrong: answers nobody foresaw, bugs in a cycle or in one
of the exporter's loops, inputs that fail and return. Real HTTP servers answer what a broken Prometheus,
exporter or dcgm-exporter would; a real gRPC server plays the kubelet."""

import contextlib
import json
import logging
import math
import re
import threading
import tracemalloc
import urllib.parse
import zipfile
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.inputs import live
from gpulens.analyzer.inputs.live import ExporterInput, InputError, PrometheusInput
from gpulens.analyzer.inputs.window import Shard
from gpulens.analyzer.runs.service import AnalyzerService, cycle_offset
from gpulens.core import metrics as m
from gpulens.core import trace as tr
from gpulens.core.config import redact
from gpulens.core.mixin import ANY_JOB
from gpulens.core.status import MAX_BACKOFF_SECONDS, LoopGuard
from gpulens.core.thresholds import Thresholds
from gpulens.exporter.attribution import attributor
from gpulens.exporter.attribution.attributor import KubeletAttribution
from gpulens.exporter.collector import ExporterCollector
from gpulens.exporter.sampler import Sampler
from gpulens.exporter.sources import dcgm
from gpulens.exporter.sources.base import DeviceSample, NodeSample, Source
from gpulens.exporter.sources.dcgm import DcgmFetcher
from tests.fake_kubelet import FakeKubelet
from tests.helpers import ScriptedHttp, samples, value, wait_until
from tests.test_dcgm import T4_0, T4_1, FakeDcgmExporter
from tests.test_history import Replay, fleet_trace


@pytest.fixture
def canned():
    servers = []

    def start(body, content_type="application/json"):
        servers.append(ScriptedHttp([(200, body, {"Content-Type": content_type})]))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"status": "success", "data": {}}, "without a list of series in data.result"),
        ({"status": "success", "data": {"result": [{"values": []}]}}, "without a list of series in data.result"),
        ([1, 2], "refused"),
        (
            {"status": "error", "error": "bad_data: parse error"},
            "refused 'max by (instance, uuid) (gpulens_gpu_utilization_ratio)': bad_data",
        ),
        (
            {
                "status": "success",
                "data": {"resultType": "matrix", "result": [{"metric": {"uuid": "GPU-1"}, "values": [["x", "1"]]}]},
            },
            "answered with a malformed sample: ValueError",
        ),
        (
            {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, "1"]}]}},
            "with a 'vector' where the Prometheus HTTP API gives a 'matrix': is this the Prometheus HTTP API?",
        ),
        (
            {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"uuid": 7}, "values": []}]}},
            "with a series that is not one of the Prometheus HTTP API (label values that are not strings, or no "
            "'values'): {'metric': {'uuid': 7}, 'values': []}",
        ),
    ],
)
def test_a_prometheus_answering_garbage_is_an_input_error_naming_it(canned, body, message):
    server = canned(json.dumps(body).encode())
    source = PrometheusInput(server.url, window=60, step=15)
    with pytest.raises(InputError, match=re.escape(message)):
        source.window_frame()
    [(target, status)] = source.target_status().items()
    assert (target, status.up, status.failures, status.last_success) == (server.url, False, 1, None)


class ScriptedPrometheus:
    """Prometheus' HTTP API over GPUs (uuid -> the last unix time each reported) whose every signal at time
    t is `signal(uuid, t)`: range queries answer the steps asked for, instant queries nothing. Records
    each range query's (start, end); `fail_next` makes the next range query answer HTTP 500 without JSON."""

    def __init__(self, gpus: dict[str, float], result: list[dict] | None = None, instant: list[dict] | None = None):
        self.gpus, self.ranges, self.fail_next = gpus, [], False
        #: Series answered to every range query instead of the GPUs' signals (None: the signals).
        self.result = result
        #: Series answered to every instant query (a shard's lookup of its exporters).
        self.instant = instant or []
        #: Each range query answered: its PromQL, start and end.
        self.asked: list[tuple[str, float, float]] = []
        #: The range query (counted from the first, `answered`) to answer HTTP 500 too.
        self.answered, self.fail_at = 0, 0
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                form = dict(
                    x.split("=", 1) for x in self.rfile.read(int(self.headers["Content-Length"])).decode().split("&")
                )
                result: list[dict] = scripted.instant
                if self.path.endswith("query_range"):
                    start, end, step = (float(form[k]) for k in ("start", "end", "step"))
                    scripted.answered += 1
                    if scripted.fail_next or scripted.answered == scripted.fail_at:
                        scripted.fail_next = False
                        self.send_response(500)
                        self.end_headers()
                        return
                    query = urllib.parse.unquote_plus(form["query"])
                    scripted.ranges.append((start, end))
                    scripted.asked.append((query, start, end))
                    steps = [start + k * step for k in range(int((end - start) // step) + 1)]
                    # A GPU's memory is 1 more than every signal (a ratio): never less than the memory it uses.
                    more = 1.0 if "memory_total" in query else 0.0
                    result = scripted.result or [
                        {
                            "metric": {"instance": "node-a:9848", "uuid": uuid},
                            "values": [[t, str(signal(uuid, t) + more)] for t in steps if t <= last],
                        }
                        for uuid, last in scripted.gpus.items()
                    ]
                kind = "matrix" if self.path.endswith("query_range") else "vector"
                body = json.dumps({"status": "success", "data": {"resultType": kind, "result": result}}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


def signal(uuid: str, t: float) -> float:
    """What ScriptedPrometheus answers for every signal of GPU `uuid` at unix time `t`."""
    return t % 1000 / 2000 + 0.5 * (uuid == "GPU-B")  # a ratio, as every signal may be


def test_the_window_held_between_cycles_is_read_again_only_where_a_failure_left_it_and_forgets_gpus_that_left():
    store = ScriptedPrometheus({"GPU-A": math.inf, "GPU-B": math.inf})
    now = [1_800_000_000.0]
    # Every query every cycle (one part): the parts' turns are the next test's.
    source = PrometheusInput(store.url, window=60, step=15, clock=lambda: now[0], parts=1)

    def cycle(at: float) -> pd.DataFrame:
        now[0], store.ranges = at, []
        return source.window_frame()

    def expected(at: float, gpus: list[str]) -> list[tuple[str, float, float]]:
        return [(uuid, t, signal(uuid, t)) for uuid in gpus for t in (at - 60, at - 45, at - 30, at - 15, at)]

    def held(frame: pd.DataFrame) -> list[tuple[str, float, float]]:
        return list(zip(frame["gpu"].astype(str), frame["timestamp"], frame["gpu_util"], strict=True))

    t0 = now[0]
    assert held(cycle(t0)) == expected(t0, ["GPU-A", "GPU-B"])
    # The first cycle reads the window whole: its newest steps, then (a small fleet) the older ones at once.
    assert set(store.ranges) == {(t0 - 30, t0), (t0 - 60, t0 - 45)}
    assert held(cycle(t0 + 15)) == expected(t0 + 15, ["GPU-A", "GPU-B"])
    assert set(store.ranges) == {(t0 - 15, t0 + 15)}  # one new step, and the newest two again
    store.fail_next = True
    with pytest.raises(InputError, match="answered HTTP 500 with no JSON"):
        cycle(t0 + 30)
    # The failed cycle read nothing: the next reads from the first step after t0 + 15, the newest read in
    # full, less the two read again (t0 and t0 + 15), not the whole window (t0 - 15 on).
    assert held(cycle(t0 + 45)) == expected(t0 + 45, ["GPU-A", "GPU-B"])
    assert set(store.ranges) == {(t0, t0 + 45)}
    # GPU-B stops reporting after t0 + 45: its steps leave the window one by one, then it is gone.
    store.gpus["GPU-B"] = t0 + 45
    frame = cycle(t0 + 60)
    assert set(store.ranges) == {(t0 + 30, t0 + 60)}
    assert held(frame) == expected(t0 + 60, ["GPU-A"]) + expected(t0 + 60, ["GPU-B"])[:4]
    assert held(cycle(t0 + 120)) == expected(t0 + 120, ["GPU-A"])
    assert held(cycle(t0 + 135)) == expected(t0 + 135, ["GPU-A"])


def test_each_query_is_read_once_a_minute_a_quarter_of_them_a_cycle_and_the_verdicts_rest_on_what_all_have_read(
    tmp_path,
):
    """Prometheus' cost of a query grows with the series it reads, not the steps: at a 15 s interval a
    cycle reads the quarter of the queries read least recently, each from its last read (less two steps),
    and the frame ends at the newest step every query has read, 45 s before the newest, value for value."""
    store = ScriptedPrometheus({"GPU-A": math.inf, "GPU-B": math.inf})
    now = [1_800_000_000.0]
    t0, kept = now[0], str(tmp_path / "analyzer.state")
    source = PrometheusInput(store.url, window=120, step=15, clock=lambda: now[0], state_file=kept)

    def cycle(at: float) -> pd.DataFrame:
        now[0], store.asked = at, []
        return source.window_frame()

    def asked() -> dict[str, tuple[float, float]]:
        return {query: (start, end) for query, start, end in store.asked}

    def exact(frame: pd.DataFrame, until: float) -> bool:
        """Every GPU at every step of the window up to `until`, each gauge and rate as scripted."""
        steps = range(int(now[0]) - 120, int(until) + 1, 15)
        expected = [(uuid, float(t)) for uuid in ("GPU-A", "GPU-B") for t in steps]
        if list(zip(frame["gpu"].astype(str), frame["timestamp"], strict=True)) != expected:
            return False
        values = [signal(uuid, t) for uuid, t in expected]
        columns = [c for c in (*tr.FROM_GAUGES, *tr.FROM_RATES) if c not in tr.NOT_JUDGED]
        more = {"memory_total_bytes": 1.0}  # as scripted: memory is 1 more than every signal
        asked = all(list(frame[c]) == [v + more.get(c, 0.0) for v in values] for c in columns if c in frame)
        return asked and bool(frame[list(tr.NOT_JUDGED)].isna().all(axis=None))  # no verdict reads them: not asked

    assert exact(cycle(t0), t0)
    every = set(asked())
    assert {(start, end) for _, start, end in store.asked} == {(t0 - 30, t0), (t0 - 120, t0 - 45)}
    parts = []
    for k in (1, 2, 3, 4):  # a quarter each, from the newest two steps read (t0 - 15, t0) to the newest
        frame = cycle(t0 + 15 * k)
        parts.append(set(asked()))
        assert set(asked().values()) == {(t0 - 15, t0 + 15 * k)}
        assert exact(frame, t0 + 15 * (k - 3) if k == 4 else t0)  # up to the step every part has read
    assert set().union(*parts) == every and sum(map(len, parts)) == len(every)
    # The fifth cycle reads the first quarter again, from the newest two steps it read (t0, t0 + 15).
    frame = cycle(t0 + 75)
    assert set(asked()) == parts[0] and set(asked().values()) == {(t0, t0 + 75)}
    assert exact(frame, t0 + 30)
    # A failed cycle leaves its part unread: the next reads it with the part due then, each from its own.
    store.fail_next = True
    with pytest.raises(InputError):
        cycle(t0 + 90)
    frame = cycle(t0 + 105)
    assert asked() == {**dict.fromkeys(parts[1], (t0 + 15, t0 + 105)), **dict.fromkeys(parts[2], (t0 + 30, t0 + 105))}
    assert exact(frame, t0 + 60)
    # A restart two minutes later: every part is due, from the window's first step (each part's last read
    # has left it); the frame is whole again.
    source.close()
    source = PrometheusInput(store.url, window=120, step=15, clock=lambda: now[0], state_file=kept)
    frame = cycle(t0 + 225)
    assert set(asked()) == every and set(asked().values()) == {(t0 + 105, t0 + 225)}
    assert exact(frame, t0 + 225)
    # A minute's interval reads every part every cycle.
    frame = cycle(t0 + 285)
    assert set(asked()) == every and set(asked().values()) == {(t0 + 210, t0 + 285)}
    assert exact(frame, t0 + 285)


def test_a_read_that_fails_part_way_is_read_again_from_where_it_lacks_steps_with_nothing_half_read_kept():
    store = ScriptedPrometheus({"GPU-A": math.inf, "GPU-B": math.inf})
    now = [1_800_000_000.0]
    source = PrometheusInput(store.url, window=60, step=15, clock=lambda: now[0], parts=1)
    t0 = now[0]
    source.window_frame()
    now[0] = t0 + 15
    store.fail_at = store.answered + 3  # two columns get the new step, the third query fails
    with pytest.raises(InputError):
        source.window_frame()
    now[0], store.ranges = t0 + 30, []
    frame = source.window_frame()
    assert set(store.ranges) == {(t0 - 15, t0 + 30)}  # from t0, the newest read in full, less the two again
    for column in ("gpu_util", "sm_active", "tensor_active", "power_watts"):  # first, second, third, later queries
        assert list(zip(frame["gpu"].astype(str), frame["timestamp"], frame[column], strict=True)) == [
            (uuid, t, signal(uuid, t)) for uuid in ("GPU-A", "GPU-B") for t in range(int(t0) - 30, int(t0) + 31, 15)
        ]


@pytest.mark.slow
def test_a_large_fleets_first_cycle_reads_the_newest_steps_and_the_rest_follows_a_few_a_cycle(monkeypatch, caplog):
    """At 10,000 GPUs the whole window is the costliest read a replica makes: the first cycle serves
    verdicts from the newest eighth, and each cycle after reads as many older steps as its budget allows."""
    caplog.set_level(logging.INFO, logger="gpulens.analyzer.inputs.live")
    monkeypatch.setattr(live, "READ_POINTS_PER_CYCLE", 1)  # a fleet so large that one step a cycle is the budget
    store = ScriptedPrometheus({"GPU-A": math.inf, "GPU-B": math.inf})
    now = [1_800_000_000.0]
    t0 = now[0]
    source = PrometheusInput(store.url, window=600, step=15, clock=lambda: now[0], parts=1)
    frame = source.window_frame()
    assert set(store.ranges) == {(t0 - 60, t0)}  # 41 steps: the newest 5 alone, the rest does not fit
    assert sorted(set(frame["timestamp"])) == [t0 - 15 * k for k in range(4, -1, -1)]
    cycles = 0
    while frame["timestamp"].min() > now[0] - 600:
        now[0], store.ranges, cycles = now[0] + 15, [], cycles + 1
        frame = source.window_frame()
        older = set(store.ranges) - {(now[0] - 30, now[0])}  # the new step and two again; then one older
        assert len(older) <= 1 and all(end == start for start, end in older)
    # 36 steps unread after the first cycle, two fewer a cycle: one read, one slid out of the window.
    assert cycles == 18
    said = [r.getMessage() for r in caplog.records if r.name == "gpulens.analyzer.inputs.live"]
    assert said == [
        f"Prometheus at {store.url}: reading the window newest steps first (60 s so far), the older ones a few "
        "a cycle; verdicts meanwhile rest on the span read",
        f"Prometheus at {store.url}: the window is whole",
    ]
    assert list(zip(frame["gpu"].astype(str), frame["timestamp"], frame["gpu_util"], strict=True)) == [
        (uuid, t, signal(uuid, t)) for uuid in ("GPU-A", "GPU-B") for t in range(int(now[0]) - 600, int(now[0]) + 1, 15)
    ]
    now[0], store.ranges = now[0] + 15, []
    source.window_frame()
    assert set(store.ranges) == {(now[0] - 30, now[0])}  # whole: only the new steps


def _state_with(path: Path, **meta_changes) -> None:
    """Rewrite the state file at `path` with fields of its description changed (what a bad disk, a hand edit
    or an attacker with the volume could leave)."""
    with np.load(path, allow_pickle=False) as saved:
        arrays = {name: saved[name] for name in saved.files}
    meta = json.loads(arrays["meta"].tobytes()) | meta_changes
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    with path.open("wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: _state_with(p, read_from="yesterday"), 'read_from is "yesterday", not a time or null'),
        (lambda p: _state_with(p, read_until=[[1]]), "read_until is [[1]], not 1 times or nulls"),
        (lambda p: _state_with(p, parts=3e9), "parts is 3000000000.0, not this analyzer's 1"),
        (lambda p: _state_with(p, pods=[["a", 1, "c"]]), "pods is not a list of [namespace, pod, container]"),
        (lambda p: _state_with(p, grids={"gpus": []}), "grids.gpus is missing"),
        (lambda p: p.write_bytes(b""), "File is not a zip file"),
        (
            # A matrix member that inflates to 64 MiB where its two rows of five steps hold 80 bytes.
            lambda p: _zip_member(p, "gpus.gpu_util.npy", 64 << 20),
            "gpus.gpu_util.npy holds 67,108,864 bytes, more than 2 rows of 5",
        ),
    ],
)
@pytest.mark.slow
def test_a_damaged_state_file_is_said_once_and_the_window_read_from_the_store(tmp_path, caplog, damage, reason):
    store = ScriptedPrometheus({"GPU-A": math.inf, "GPU-B": math.inf})
    now = [1_800_000_000.0]
    kept = tmp_path / "analyzer.state"
    first = PrometheusInput(store.url, window=60, step=15, clock=lambda: now[0], state_file=str(kept), parts=1)
    whole = first.window_frame()
    first.close()
    damage(kept)
    store.ranges = []
    again = PrometheusInput(store.url, window=60, step=15, clock=lambda: now[0], state_file=str(kept), parts=1)
    tracemalloc.start()
    try:
        frame = again.window_frame()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        again.close()
    said = [r.getMessage() for r in caplog.records if r.name == "gpulens.analyzer.inputs.state"]
    assert said == [f"cannot read the analyzer's state file {kept} ({reason}): reading the window from the store"]
    assert set(store.ranges) == {(now[0] - 30, now[0]), (now[0] - 60, now[0] - 45)}  # whole, as on a first start
    pd.testing.assert_frame_equal(frame, whole)
    assert peak < 32 << 20, peak  # nothing the file claims is allocated


def _zip_member(path: Path, member: str, size: int) -> None:
    """Replace `member` of the .npz at `path` by one of `size` zero bytes, deflated (a few KiB on disk)."""
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, bytes(size) if name == member else data)


def test_two_replicas_given_one_state_file_never_tear_it(tmp_path, caplog):
    store = ScriptedPrometheus({"GPU-A": math.inf})
    now = [1_800_000_000.0]
    kept = tmp_path / "analyzer.state"
    replicas = [
        PrometheusInput(store.url, window=60, step=15, clock=lambda: now[0], state_file=str(kept), parts=1)
        for _ in range(2)
    ]
    try:
        for replica in replicas:
            replica.window_frame()
        said = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "gpulens.analyzer.inputs.live"]
        assert said == [
            (
                "ERROR",
                f"another analyzer holds the state file {kept}: give each replica its own --analysis.state-file (a "
                "StatefulSet's volume); this one keeps no state",
            )
        ]
    finally:
        for replica in replicas:
            replica.close()
    # The file is the first replica's, whole: the next start reads only the steps it missed.
    store.ranges = []
    restart = PrometheusInput(store.url, window=60, step=15, clock=lambda: now[0], state_file=str(kept), parts=1)
    restart.window_frame()
    restart.close()
    assert set(store.ranges) == {(now[0] - 15, now[0])}


@pytest.mark.slow
def test_a_restart_reads_only_the_steps_it_missed_from_the_window_it_kept(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="gpulens.analyzer.inputs.state")
    store = ScriptedPrometheus({"GPU-A": math.inf, "GPU-B": math.inf})
    now = [1_800_000_000.0]
    t0, kept = now[0], str(tmp_path / "analyzer.state")
    # Every query every cycle (one part); a restart with parts due is the test above's.
    first = PrometheusInput(store.url, window=60, step=15, clock=lambda: now[0], state_file=kept, parts=1)
    first.window_frame()
    first.close()  # a rollout: SIGTERM
    now[0], store.ranges = t0 + 30, []  # back 30 s later

    def restart(**settings) -> pd.DataFrame:
        """A new process on the file: its first cycle, then SIGTERM (which writes the file and lets it go)."""
        source = PrometheusInput(store.url, window=60, step=15, clock=lambda: now[0], state_file=kept, **settings)
        try:
            return source.window_frame()
        finally:
            source.close()

    frame = restart(parts=1)
    assert set(store.ranges) == {(t0 - 15, t0 + 30)}  # the two steps missed, and two again; not t0 - 30 on
    assert list(zip(frame["gpu"].astype(str), frame["timestamp"], frame["gpu_util"], strict=True)) == [
        (uuid, t, signal(uuid, t)) for uuid in ("GPU-A", "GPU-B") for t in range(int(t0) - 30, int(t0) + 31, 15)
    ]
    # Other verdict thresholds, links or severities read the same values: the window kept is used.
    store.ranges = []
    other = replace(ANY_JOB, grafana_url="https://grafana.example", thresholds=Thresholds(alert_low_sm=0.5))
    restart(parts=1, config=other)
    assert set(store.ranges) == {(t0 + 15, t0 + 30)}  # the newest two again only
    # Another throttle mask reads other values: not used, and said.
    store.ranges = []
    restart(parts=1, config=replace(ANY_JOB, thresholds=Thresholds(throttle_reasons_mask=8)))
    assert set(store.ranges) == {(t0, t0 + 30), (t0 - 30, t0 - 15)}  # whole, as on a first start
    assert "(differs in throttle_reasons_mask)" in caplog.text  # the settings that differ, by name
    # Read in four parts, not one: the parts' reads the file holds are not this reader's; not used.
    store.ranges = []
    restart()
    assert set(store.ranges) == {(t0, t0 + 30), (t0 - 30, t0 - 15)}  # whole, as on a first start
    # Written with another selector: not used, and said.
    store.ranges = []
    restart(parts=1, selector='job="x"')
    assert set(store.ranges) == {(t0, t0 + 30), (t0 - 30, t0 - 15)}  # whole, as on a first start
    assert f"{kept} was written by another configuration" in caplog.text
    # A file that is not one: said once, the window read from the store, the service goes on.
    Path(kept).write_bytes(b"PK\x03\x04 torn")
    store.ranges = []
    frame = restart(parts=1)
    assert len(frame) == 10
    assert set(store.ranges) == {(t0, t0 + 30), (t0 - 30, t0 - 15)}  # whole, as on a first start
    assert f"cannot read the analyzer's state file {kept}" in caplog.text
    # The window it wrote at close is the window the next start holds.
    restored = restart(parts=1)
    pd.testing.assert_frame_equal(restored, frame)


def test_a_sharded_replica_restarts_on_the_window_it_kept(tmp_path):
    """A replica of a shard reads only its nodes' exporters, and the file says which: the next start of the
    same shard uses the window kept (it was thrown away as another configuration's once the reader stopped
    holding the shard's exporters between cycles)."""
    node = {"metric": {"node": "node-a", "instance": "node-a:9848"}, "value": [0, "1"]}
    store = ScriptedPrometheus({"GPU-A": math.inf}, instant=[node])
    now = [1_800_000_000.0]
    t0, kept = now[0], str(tmp_path / "analyzer.state")

    def start() -> pd.DataFrame:
        """A process of the one shard of one (every node its own) on the file: a cycle, then SIGTERM."""
        source = PrometheusInput(
            store.url, window=60, step=15, clock=lambda: now[0], state_file=kept, parts=1, shard=Shard(0, 1)
        )
        try:
            return source.window_frame()
        finally:
            source.close()

    assert len(start()) == 5
    now[0], store.ranges = t0 + 30, []
    frame = start()
    assert set(store.ranges) == {(t0 - 15, t0 + 30)}  # the two steps missed, and two again
    assert list(frame["timestamp"]) == [t0 + k for k in range(-30, 31, 15)]


def test_a_state_file_that_cannot_be_written_is_said_once_and_once_when_it_can_again(tmp_path, caplog):
    store = ScriptedPrometheus({"GPU-A": math.inf})
    kept = tmp_path / "analyzer.state"
    kept.mkdir()  # a directory where the file should be: no rename onto it
    now = [1_800_000_000.0]
    source = PrometheusInput(store.url, window=60, step=15, clock=lambda: now[0], state_file=str(kept))
    source.window_frame()
    source.close()  # the first write (a cycle's comes once a minute)
    source.close()
    said = [r.getMessage() for r in caplog.records if r.name == "gpulens.analyzer.inputs.live"]
    assert said == [
        f"cannot keep the window across restarts: --analysis.state-file {kept}: it is a directory; name a file"
    ]
    kept.rmdir()
    source.close()
    said = [r.getMessage() for r in caplog.records if r.name == "gpulens.analyzer.inputs.live"]
    assert said[1:] == [f"the window is kept across restarts again, in {kept}"]
    assert kept.is_file()


def test_series_without_their_identifying_labels_are_skipped_not_fatal(canned):
    # pod_info without namespace/pod/container, topology without its peer: read as far as they go.
    text = (
        'gpulens_gpu_utilization_ratio{gpu="0",uuid="GPU-1"} 0.5\n'
        'gpulens_gpu_pod_info{gpu="0",uuid="GPU-1"} 1\n'
        'gpulens_gpu_topology_info{gpu="0",uuid="GPU-1"} 1\n'
    )
    server = canned(text.encode(), "text/plain; version=0.0.4")
    source = ExporterInput([("node-a", server.url)], window=60)
    source.poll()
    frame = source.window_frame()
    assert frame[["node", "gpu", "namespace", "pod", "gpu_util"]].values.tolist() == [["node-a", "GPU-1", "", "", 0.5]]
    assert source.target_status()[server.url].up is True


def test_an_exporter_that_is_down_among_many_is_visible(canned):
    server = canned(b'gpulens_gpu_utilization_ratio{gpu="0",uuid="GPU-1"} 0.5\n', "text/plain")
    down = "http://user:hunter2@127.0.0.1:9/metrics"  # discard port: refused at once
    source = ExporterInput([("a", server.url), ("b", down)], window=60, timeout=2)
    source.poll()
    assert len(source.window_frame()) == 1  # the answering exporter's row: verdicts go on
    status = source.target_status()
    assert status[server.url].up and status[server.url].failures == 0
    redacted = "http://<redacted>@127.0.0.1:9/metrics"
    assert (status[redacted].up, status[redacted].failures) == (False, 1)
    assert "hunter2" not in source.last_error and redacted in source.last_error


class Flaky(Replay):
    """The replay input, with an answer nobody foresaw for chosen cycles: a frame the classifier chokes on."""

    def __init__(self, *args, broken: set[int]):
        super().__init__(*args)
        self.calls, self.broken = 0, broken

    def window_frame(self) -> pd.DataFrame:
        self.calls += 1
        frame = super().window_frame()
        return frame.drop(columns=["gpu"]) if self.calls in self.broken else frame


def test_an_unexpected_error_is_logged_once_counted_and_the_loop_goes_on(caplog):
    trace = fleet_trace(["training_finished"], 15.0, 1, finish=3600.0, keeps_memory=1.0)
    now = [trace["timestamp"].min() + 600.0]
    source = Flaky(trace, 600, lambda: now[0], broken={2, 3})
    service = AnalyzerService(source, Thresholds(), {}, 300, lambda: now[0])
    results = []
    with caplog.at_level(logging.WARNING):
        for _ in range(4):
            results.append(service.cycle())
            now[0] += 300
    assert results == [True, False, False, True]
    assert service.state.errors == {"analysis": 2}
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "unexpected error analysing the window" in tracebacks[0].getMessage()
    assert "analysis cycles succeed again" in caplog.text
    body = service.render_text().decode()
    assert 'gpulens_analyzer_errors_total{stage="analysis"} 2.0' in body
    assert 'gpulens_analyzer_errors_total{stage="input"} 0.0' in body


def test_liveness_fails_only_when_the_loop_stops_cycling_and_readiness_when_verdicts_are_stale():
    trace = fleet_trace(["training_finished"], 15.0, 1, finish=3600.0, keeps_memory=1.0)
    now = [trace["timestamp"].min() + 600.0]
    service = AnalyzerService(Replay(trace, 600, lambda: now[0]), Thresholds(), {}, 10, lambda: now[0])
    assert service.health() == (True, "ok") and service.ready()[0] is False  # alive, nothing judged yet
    assert service.cycle() and service.ready() == (True, "ok")
    now[0] += 31  # three intervals without a verdict: stale, not ready; the loop itself is not judged by it
    assert service.ready()[0] is False and service.health() == (True, "ok")
    service.last_attempt -= 2 * MAX_BACKOFF_SECONDS + 1
    alive, reason = service.health()
    assert not alive and reason.startswith("no analysis cycle has ended for 241 s")


class Timed(Replay):
    """A replay whose cycles take the given seconds of the test's clock, recording when each started; the
    service's stop event is replaced by one on that clock (a wait moves it on), set after the last cycle."""

    def __init__(self, trace: pd.DataFrame, now: list[float], durations: list[float]):
        super().__init__(trace, 600, lambda: now[0])
        self.now, self.durations, self.starts = now, durations, []

    def window_frame(self) -> pd.DataFrame:
        self.starts.append(self.now[0])
        frame = super().window_frame()
        self.now[0] += self.durations[len(self.starts) - 1]
        return frame

    def run(self, service: AnalyzerService) -> None:
        timed = self

        class Stop:
            def wait(self, seconds: float) -> bool:
                assert seconds >= 0
                timed.now[0] += seconds
                return False

            def is_set(self) -> bool:
                return len(timed.starts) == len(timed.durations)

        service._stop = Stop()  # type: ignore[assignment]
        service.run()


def test_cycles_start_at_a_fixed_rate_on_the_wall_clock_skipping_the_starts_a_long_one_overran(caplog):
    """Cycles start on multiples of the interval (plus the phase, kept a second clear of the store's step
    grid), whatever a cycle took: a cycle that started an interval after the last ended would drift over
    a 15 s step grid and now and then read two steps' parts at once. A cycle that overruns skips the starts
    it missed; three in a row are said, once, and their end too."""
    trace = fleet_trace(["training_finished"], 15.0, 1, finish=3600.0, keeps_memory=1.0)
    grid = float(math.ceil(trace["timestamp"].min() / 15) * 15 + 600)  # a step of the store's grid, a window in
    now = [grid + 7.5]
    source = Timed(trace, now, [4, 16, 5, 31, 2, 20, 20, 20, 1])
    service = AnalyzerService(source, Thresholds(), {}, 15, lambda: now[0], grid_step=15)
    assert service.offset == 1.0  # phase 0 is on the grid: a second after it
    with caplog.at_level(logging.WARNING):
        source.run(service)
    # 7.5 + 4 ends before 16; 16 + 16 overran 31 (skipped); 61 + 31 overran 76 and 91.
    assert [start - grid for start in source.starts] == [7.5, 16, 46, 61, 106, 121, 151, 181, 211]
    # Each cycle after the first starts a second past a step: its newest step is the one a whole
    # number of intervals after the last cycle's, never two cycles' steps from a wait's jitter.
    assert [(start - grid) % 15 for start in source.starts[1:]] == [1.0] * 8
    said = [r.getMessage() for r in caplog.records if "analysis cycles" in r.getMessage()]
    assert said == [
        "3 analysis cycles in a row took longer than --analysis.interval (15 s), the last 20.0 s: verdicts are "
        "updated less often than the interval says; see docs/sizing.md (--prometheus.read-parts, shards, a "
        "longer interval)",
        "analysis cycles fit in --analysis.interval again",
    ]


def test_a_clock_set_back_during_a_cycle_delays_the_next_by_an_interval_not_by_as_long():
    trace = fleet_trace(["training_finished"], 15.0, 1, finish=3600.0, keeps_memory=1.0)
    grid = float(math.ceil(trace["timestamp"].min() / 15) * 15 + 3600)
    now = [grid + 7.5]
    source = Timed(trace, now, [-3600, 1])  # the clock goes back an hour during the first cycle
    source.run(AnalyzerService(source, Thresholds(), {}, 15, lambda: now[0], grid_step=15))
    assert [start - grid for start in source.starts] == [7.5, 7.5 - 3600 + 15]


@pytest.mark.parametrize(
    ("phase", "interval", "grid_step", "offset"),
    [
        (0.0, 15, 15, 1.0),  # on a step: a second after it
        (3.75, 15, 15, 3.75),  # replica 1 of 4: clear of the grid, kept
        (14.5, 15, 15, 1.0),  # half a second before a step: a second after it
        (15.0, 60, 15, 16.0),  # replica 1 of 4 at a minute's interval: on a step of the 15 s grid
        (0.0, 2, 1, 0.25),  # a 1 s grid: a quarter of a step clear
        (0.0, 15, None, 0.0),  # exporters directly: no grid to keep clear of
    ],
)
def test_a_replicas_cycles_start_at_its_phase_clear_of_the_step_grid(phase, interval, grid_step, offset):
    assert cycle_offset(phase, interval, grid_step) == offset


@pytest.mark.parametrize(
    ("text", "redacted"),
    [
        ("cannot reach Prometheus at http://admin:s3cret@prom:9090: refused", "http://<redacted>@prom:9090: refused"),
        ("https://token@thanos.example/api and http://u:p@e:9848/metrics", "https://<redacted>@thanos.example/api"),
        ("http://prom:9090/api/v1/query?x=a@b", "http://prom:9090/api/v1/query?x=a@b"),
    ],
)
def test_credentials_in_urls_never_reach_logs_or_answers(text, redacted):
    out = redact(text)
    assert redacted in out and "s3cret" not in out and "u:p@" not in out


def test_pods_of_a_node_that_stopped_reporting_are_stale_not_current():
    trace = fleet_trace(["idle", "healthy_training"], 15.0, 1)
    start = trace["timestamp"].min()
    # The node of the idle pod stops reporting 20 minutes in (its exporter went down); the other goes on.
    idle = trace["pod"] == "idle-0"
    trace["node"] = trace["node"].cat.add_categories("node-b").mask(idle, "node-b")
    trace = trace[~idle | (trace["timestamp"] < start + 1200)]
    now = [start + 1200.0]
    service = AnalyzerService(Replay(trace, 600, lambda: now[0]), Thresholds(), {}, 60, lambda: now[0])
    assert service.cycle() and service.state.stale == frozenset()
    before = dict(service.state.wasted_seconds)
    now[0] += 300  # five minutes on: the idle pod's newest sample is 300 s behind, beyond 3 x 60 s
    assert service.cycle()
    assert service.state.stale == {("sd", "idle-0", "node-b")}
    verdicts = {v["pod"]: v for v in json.loads(service.verdicts_json()[2])["verdicts"]}
    assert (verdicts["idle-0"]["stale"], verdicts["healthy_training-1"]["stale"]) == (True, False)
    assert verdicts["idle-0"]["last_sample_timestamp"] == start + 1200  # its last sample, 1185 s, lasted 15 s
    parsed = samples(service.render_text().decode())
    assert value(parsed, "gpulens_pod_bottleneck_info", pod="idle-0") is None  # its verdict series end
    assert value(parsed, "gpulens_pod_bottleneck_info", pod="healthy_training-1") == 1
    assert value(parsed, "gpulens_pod_last_sample_timestamp_seconds", pod="idle-0", node="node-b") == start + 1200
    # The stale pod accrues no waste: its last verdict is not what it does now.
    assert service.state.wasted_seconds[("sd", "idle")] == before[("sd", "idle")]


# --- the exporter's loops -------------------------------------------------------------------------


def test_a_loop_guard_backs_off_doubling_up_to_its_cap_and_counts_every_bug(caplog):
    guard = LoopGuard(logging.getLogger("test"), "doing the thing")
    with caplog.at_level(logging.WARNING):
        assert guard.call(lambda: None) and guard.delay(10.0) == 10.0
        for _ in range(3):
            assert guard.call(lambda: {}["missing"]) is False
        assert (guard.errors, guard.delay(10.0)) == (3, 80.0)
        for _ in range(2000):  # a bug that never goes away: the wait stays at the cap, no overflow
            guard.call(lambda: 1 / 0)
        assert (guard.errors, guard.delay(10.0), guard.delay(300.0)) == (2003, 120.0, 300.0)
        assert guard.call(lambda: None) and guard.delay(10.0) == 10.0
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "unexpected error doing the thing (a bug" in tracebacks[0].getMessage()
    assert caplog.text.count("doing the thing succeeds again") == 1


class OneGpu(Source):
    name = "one"

    def sample(self) -> NodeSample:
        d = DeviceSample(gpu="0", uuid="GPU-1")
        d.set(m.UTILIZATION, 0.5)
        return NodeSample([d])


def test_a_bug_in_the_sampler_loop_is_counted_logged_once_and_the_loop_goes_on(caplog):
    calls = []

    def recorder_with_a_bug(snapshot):  # --record's writer, failing on the 2nd and 3rd samples
        calls.append(snapshot)
        if len(calls) in (2, 3):
            raise KeyError("timestamp")

    sampler = Sampler(OneGpu(), interval=0.01, on_sample=recorder_with_a_bug)
    with caplog.at_level(logging.WARNING):
        sampler.start()
        try:
            wait_until(lambda: len(calls) >= 6, 10, interval=0.01, what="the sampler to go on after the bug")
        finally:
            sampler.stop()
    text = ExporterCollector(sampler, "v", "one").render_text().decode()
    assert 'gpulens_exporter_collector_errors_total{collector="one"} 2.0' in text
    assert 'gpulens_exporter_collector_failures_total{collector="one"} 0.0' in text
    assert 'gpulens_exporter_collector_success{collector="one"} 1.0' in text
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "unexpected error sampling the GPUs (a bug" in tracebacks[0].getMessage()
    assert caplog.text.count("sampling the GPUs succeeds again") == 1


def test_a_bug_in_the_kubelet_loop_is_counted_and_attribution_goes_on(tmp_path, monkeypatch, caplog):
    socket_path = str(tmp_path / "kubelet.sock")
    kubelet = FakeKubelet(socket_path, {("ml", "trainer-0"): {"main": [("nvidia.com/gpu", [T4_0])]}}).start()
    real = attributor.parse_device_id
    bugs = iter([True, True])  # the first two refreshes meet a bug in parsing device IDs

    def parse_with_a_bug(device_id):
        if next(bugs, False):
            raise IndexError("list index out of range")
        return real(device_id)

    monkeypatch.setattr(attributor, "parse_device_id", parse_with_a_bug)
    no_dir = str(tmp_path / "none")  # no /proc and no log links: the kubelet's answer alone is judged
    attribution = KubeletAttribution(socket_path, refresh_interval=0.01, proc_root=no_dir, log_root=no_dir)
    with caplog.at_level(logging.WARNING):
        attribution.start()
        attribution.first_reading(timeout=2)
        try:
            state = wait_until(lambda: attribution.state().allocations and attribution.state(), 10, interval=0.01)
        finally:
            attribution.close()
            kubelet.stop()
    assert [(ref.uuid, pod.pod) for ref, pod in state.allocations] == [(T4_0, "trainer-0")]
    assert (state.status.success, state.status.errors, state.status.failures) == (True, 2, 0)
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "unexpected error reading the kubelet's pod resources" in tracebacks[0].getMessage()


def test_a_bug_in_the_dcgm_loop_is_counted_and_the_reader_goes_on(monkeypatch, caplog):
    dcgm_exporter = FakeDcgmExporter()
    dcgm_exporter.serve("t4x2-one-pod.prom")
    real = dcgm.devices_from_rows
    bugs = iter([True, True, True])

    def devices_with_a_bug(rows):
        if next(bugs, False):
            raise AttributeError("'NoneType' object has no attribute 'labels'")
        return real(rows)

    monkeypatch.setattr(dcgm, "devices_from_rows", devices_with_a_bug)
    fetcher = DcgmFetcher("http://user:hunter2@" + dcgm_exporter.url.removeprefix("http://"), interval=0.01)
    with caplog.at_level(logging.WARNING):
        fetcher.start()
        assert fetcher.status.success is False and fetcher.status.errors == 1  # the first read, at start
        try:
            reading = wait_until(fetcher.reading, 10, interval=0.01, what="DCGM values after the bug")
        finally:
            fetcher.close()
            dcgm_exporter.stop()
    assert (fetcher.status.success, fetcher.status.errors, fetcher.status.failures) == (True, 3, 0)
    assert sorted(reading.devices) == [(T4_1, None), (T4_0, None)]
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "unexpected error reading dcgm-exporter at http://<redacted>@" in caplog.text
    assert "hunter2" not in caplog.text


@contextlib.contextmanager
def answering(result: list[dict]) -> Iterator[str]:
    """A store's URL answering every range query with `result` and every instant query with nothing."""
    store = ScriptedPrometheus({}, result)
    try:
        yield store.url
    finally:
        store.server.shutdown()
        store.server.server_close()


T = 1_800_000_000
POD_SERIES = {"instance": "n1:9848", "uuid": "GPU-1", "namespace": "nlp", "pod": "bert-0", "container": "main"}


@pytest.mark.parametrize("value", ["7", "-3", "1e308", "2.5"])
def test_a_pod_identity_of_an_odd_value_names_its_pod_not_another(value):
    """gpulens_gpu_pod_info is 1 and `group` answers 1; a store answering another value (a broken exporter,
    a proxy) made the value a code of another pod, or one past the pod table (an IndexError a cycle)."""
    with answering([{"metric": POD_SERIES, "values": [[T, value]]}]) as url:
        # A window of three steps, read in one: the stub answers every query with the point at T, even the
        # read of older steps a longer window makes (a store answers only the steps asked).
        frame = PrometheusInput(url, window=30, step=15, clock=lambda: T).window_frame()
    assert list(zip(frame["namespace"].astype(str), frame["pod"].astype(str), strict=True)) == [("nlp", "bert-0")]


@pytest.mark.slow
def test_a_pod_name_of_a_megabyte_costs_a_megabyte_not_a_megabyte_a_pod():
    """Pod names are kept as the strings they are: as numpy's fixed-width text, each of 200 pods took the
    width of the longest, four bytes a character: 800 MiB for one name of 1 MiB."""
    result = [
        {
            "metric": {**POD_SERIES, "uuid": f"GPU-{i}", "pod": f"p{i}" + ("x" * (1 << 20) if i == 7 else "")},
            "values": [[T, "1"]],
        }
        for i in range(200)
    ]
    with answering(result) as url:
        source = PrometheusInput(url, window=60, step=15, clock=lambda: T, parts=1)
        tracemalloc.start()
        try:
            frame = source.window_frame()
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert frame["pod"].astype(str).str.len().max() == (1 << 20) + 2 and len(frame) == 200
    assert peak < 64 << 20, peak  # answers of 1 MiB, read a few at once
