"""The analyzer never dead while "healthy", never silently wrong: answers nobody foresaw, bugs in a cycle,
inputs that fail and return. Real HTTP servers answer what a broken Prometheus or exporter would."""

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pandas as pd
import pytest

from gpulens.analyzer.live import ExporterInput, InputError, PrometheusInput
from gpulens.analyzer.service import AnalyzerService
from gpulens.core.config import redact
from gpulens.core.thresholds import Thresholds
from tests.helpers import samples, value
from tests.test_history import Replay, fleet_trace


class Canned:
    """A real HTTP server answering every GET with `body` (a settable attribute)."""

    def __init__(self, body: bytes, content_type: str = "application/json"):
        self.body, self.content_type = body, content_type
        canned = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", canned.content_type)
                self.send_header("Content-Length", str(len(canned.body)))
                self.end_headers()
                self.wfile.write(canned.body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def canned():
    servers = []

    def start(body, content_type="application/json"):
        servers.append(Canned(body, content_type))
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
        ({"status": "error", "error": "bad_data: parse error"}, "refused 'gpulens_gpu_utilization_ratio': bad_data"),
        (
            {"status": "success", "data": {"result": [{"metric": {"uuid": "GPU-1"}, "values": [["x", "1"]]}]}},
            "answered with a malformed sample: ValueError",
        ),
    ],
)
def test_a_prometheus_answering_garbage_is_an_input_error_naming_it(canned, body, message):
    server = canned(json.dumps(body).encode())
    source = PrometheusInput(server.url, window=60, step=15)
    with pytest.raises(InputError, match=message):
        source.window_frame()
    [(target, status)] = source.target_status().items()
    assert (target, status.up, status.failures, status.last_success) == (server.url, False, 1, None)


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
    service.last_attempt -= 2 * AnalyzerService.MAX_BACKOFF_SECONDS + 1
    alive, reason = service.health()
    assert not alive and reason.startswith("no analysis cycle has ended for 241 s")


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
    trace.loc[idle, "node"] = "node-b"
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
