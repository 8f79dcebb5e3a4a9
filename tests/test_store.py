"""The store client (analyzer/inputs/store.py): credentials through a real vmauth, a real VictoriaMetrics that
refuses long ranges, and a scripted API for the failures real stores cannot be made to show on demand
(503 then an answer, a partial answer, a tenant header)."""

from __future__ import annotations

import email.utils
import gzip
import json
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import zlib
from dataclasses import replace

import pytest
import requests

from gpulens.analyzer.cli import common as cli
from gpulens.analyzer.inputs.store import Store, StoreAuth, StoreError, accept_encoding, series_points
from gpulens.core.config import ConfigError
from tests.helpers import (
    REPO,
    BackfilledPrometheus,
    ScriptedHttp,
    ServerProcess,
    VictoriaMetrics,
    certificate,
    certificate_authority,
    wait_until,
)

#: A minute of one series: 0, 1, ... 59 at one-second steps, from this unix second.
T0 = 1_762_646_400
SERIES = "".join(f'gpu_test{{uuid="GPU-1"}} {k} {(T0 + k) * 1000}\n' for k in range(600))


@pytest.fixture(scope="module")
def victoria(tmp_path_factory):
    """VictoriaMetrics holding ten minutes of one series, and refusing more than 100 points a series."""
    store = VictoriaMetrics(tmp_path_factory.mktemp("vm"), ("-search.maxPointsPerTimeseries=100",))
    try:
        store.load(SERIES)
        yield store
    finally:
        store.stop()


@pytest.fixture(scope="module")
def vmauth(victoria, tmp_path_factory):
    """vmauth in front of it: a bearer token for one user, basic auth for another."""
    workdir = tmp_path_factory.mktemp("vmauth")
    config = workdir / "auth.yml"
    config.write_text(
        f'users:\n- bearer_token: "tok-3f9a"\n  url_prefix: "{victoria.url}"\n'
        f'- username: "reporter"\n  password: "pw-71c2"\n  url_prefix: "{victoria.url}"\n'
    )

    def flags(address: str) -> list[str]:
        return [f"-auth.config={config}", f"-httpListenAddr={address}"]

    server = ServerProcess("vmauth", workdir, flags, "/health")
    try:
        yield server.url
    finally:
        server.stop()


def values(series: list[dict]) -> list[float]:
    return [float(v) for s in series for _, v in s["values"]]


@pytest.mark.slow
def test_a_range_longer_than_the_store_allows_is_read_in_halves(victoria):
    """VictoriaMetrics refuses 600 points a series (-search.maxPointsPerTimeseries=100): the client halves
    the range until it passes, and joins the pieces into the one series the store holds."""
    whole = {"query": "gpu_test", "start": str(T0), "end": str(T0 + 599), "step": "1"}
    refused = requests.post(victoria.url + "/api/v1/query_range", data=whole, timeout=10)
    assert refused.status_code == 422 and "cannot exceed -search.maxPointsPerTimeseries=100" in refused.text
    series = Store(victoria.url).query_range("gpu_test", T0, T0 + 599, 1)
    assert values(series) == [float(k) for k in range(600)]
    # Cut beforehand to the points a store takes: the same series, whatever the cut.
    assert values(Store(victoria.url, max_points=64).query_range("gpu_test", T0, T0 + 599, 1)) == values(series)


@pytest.mark.slow
def test_an_answer_larger_than_gpulens_reads_is_asked_in_halves_or_refused(victoria):
    """A store answering more than max_answer_bytes (a selector matching millions of series) cannot take
    the analyzer's memory: a range is asked again in halves until each answer fits, an instant query is
    refused naming the bound and the fix."""
    series = Store(victoria.url, max_points=100, max_answer_bytes=2_000).query_range("gpu_test", T0, T0 + 599, 1)
    assert values(series) == [float(k) for k in range(600)]
    with pytest.raises(StoreError) as refused:
        Store(victoria.url, max_answer_bytes=10).query("gpu_test", T0)
    assert str(refused.value) == (
        f"Prometheus at {victoria.url} refuses 'gpu_test': its answer is larger than the 10 bytes gpulens reads at "
        "once. Select fewer GPUs (--prometheus.selector, --prometheus.dcgm-selector) or share them between "
        "analyzers (--shard.count)"
    )


@pytest.mark.slow
def test_credentials_reach_the_store_and_never_an_error(vmauth, tmp_path):
    token, password = tmp_path / "token", tmp_path / "password"
    token.write_text("tok-3f9a\n")
    password.write_text("pw-71c2")
    assert values(Store(vmauth, StoreAuth(bearer_token_file=str(token))).query_range("gpu_test", T0, T0 + 9, 1)) == [
        float(k) for k in range(10)
    ]
    basic = StoreAuth(basic_auth_username="reporter", basic_auth_password_file=str(password))
    assert values(Store(vmauth, basic).query_range("gpu_test", T0, T0 + 9, 1)) == [float(k) for k in range(10)]
    # A rotated token is read again; a wrong one is one error naming the store and the flags, never the token.
    token.write_text("tok-wrong")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpulens",
            "report",
            "--prometheus",
            vmauth,
            "--since",
            "1h",
            "--prometheus.bearer-token-file",
            str(token),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 2
    # vmauth answers an unknown token with 400 and the token quoted back.
    assert done.stderr.startswith(f"gpulens report: Prometheus at {vmauth} refused the credentials (HTTP 400)")
    assert "--prometheus.bearer-token-file" in done.stderr and "Traceback" not in done.stderr
    assert "tok-wrong" not in done.stderr + done.stdout
    # The words a store says back are scrubbed of every credential it echoes.
    store = Store(vmauth, StoreAuth(bearer_token_file=str(token)))
    store._bearer()
    assert store._scrub('cannot find the provided auth token "Bearer tok-wrong"') == (
        'cannot find the provided auth token "Bearer <redacted>"'
    )


@pytest.fixture
def scripted():
    servers: list[ScriptedHttp] = []

    def start(answers):
        servers.append(ScriptedHttp(answers))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


ANSWER = {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[T0, "1"]]}]}}
INSTANT_ANSWER = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [T0, "1"]}]}}


def test_an_overloaded_store_is_asked_again_after_the_time_it_names(scripted):
    server = scripted([(503, "overloaded", {"Retry-After": "7"}), (429, {"status": "error"}, {}), (200, ANSWER, {})])
    waits: list[float] = []
    assert values(Store(server.url, sleep=waits.append).query_range("up", T0, T0, 1)) == [1.0]
    assert waits == [7.0, 2.0]  # Retry-After where given, else the doubling backoff (1 s, 2 s, ...)
    # Thanos is told to fail rather than answer in part; the other stores ignore the parameter.
    assert all("partial_response=false" in form for _, form in server.requests)


def test_a_store_that_stays_down_is_one_error_naming_it_and_the_fix(scripted):
    server = scripted([(503, "down", {})] * 4)
    with pytest.raises(StoreError) as failed:
        Store(server.url, sleep=lambda _: None).query_range("up", T0, T0, 1)
    assert str(failed.value) == (
        f"Prometheus at {server.url} answered HTTP 503 to 'up' (down) (tried 4 times): the store is overloaded or "
        "restarting: try again later, or read a shorter span"
    )


def test_a_store_that_never_answered_is_said_at_once_and_one_that_went_down_is_retried(scripted):
    """Nothing listening, or a name that does not resolve, before the store ever answered: a wrong URL, said at
    once in words (it was retried for 9 s and said in urllib3's "Max retries exceeded"). A store that answered and
    then refuses is restarting: retried with the doubling backoff."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    waits: list[float] = []
    with pytest.raises(StoreError) as refused:
        Store(f"http://127.0.0.1:{port}", sleep=waits.append).query("up", T0)
    assert str(refused.value) == (
        f"cannot reach Prometheus at http://127.0.0.1:{port}: connection refused: nothing listens there: check the "
        "URL and that the store is up"
    )
    with pytest.raises(StoreError) as unresolved:
        Store("http://prometheus.invalid:9090", sleep=waits.append).query("up", T0)
    assert str(unresolved.value).startswith(
        "cannot reach Prometheus at http://prometheus.invalid:9090: its host name does not resolve ("
    )
    assert waits == []
    server = scripted([(200, ANSWER, {})])
    store = Store(server.url, sleep=waits.append)
    assert values(store.query_range("up", T0, T0, 1)) == [1.0]
    server.close()
    with pytest.raises(StoreError) as down:
        store.query_range("up", T0, T0, 1)
    assert str(down.value) == (
        f"cannot reach Prometheus at {server.url}: connection refused: nothing listens there (tried 4 times): check "
        "the URL and that the store is up"
    )
    assert waits == [1.0, 2.0, 4.0]


def test_a_partial_answer_is_never_taken_for_a_whole_one(scripted):
    partial = {**ANSWER, "warnings": ["store 10.0.0.7:10901 unavailable"]}
    server = scripted([(200, partial, {})] * 4)
    with pytest.raises(StoreError, match="answered 'up' in part: store 10.0.0.7:10901 unavailable"):
        Store(server.url, sleep=lambda _: None).query_range("up", T0, T0, 1)
    assert len(server.requests) == 4


def test_a_tenant_header_goes_with_every_query(scripted):
    server = scripted([(200, ANSWER, {}), (200, INSTANT_ANSWER, {})])
    store = Store(server.url, StoreAuth(headers=(StoreAuth.parse_header("X-Scope-OrgID: team-a"),)))
    store.query_range("up", T0, T0, 1)
    store.query("up", T0)
    assert [headers.get("X-Scope-OrgID") for headers, _ in server.requests] == ["team-a", "team-a"]


@pytest.mark.parametrize(
    ("url", "compression", "sent"),
    [
        # auto: a store on this host or the cluster's network is read plain, any other gzipped.
        ("http://127.0.0.1:9090", "auto", "identity"),
        ("http://127.8.0.1:9090", "auto", "identity"),
        ("http://[::1]:9090", "auto", "identity"),
        ("http://localhost:9090/prometheus", "auto", "identity"),
        ("http://prometheus:9090", "auto", "identity"),  # a service of the same namespace, a Compose service
        ("http://prometheus-operated.monitoring.svc:9090", "auto", "identity"),
        ("https://thanos-query.monitoring.svc.cluster.local:10902", "auto", "identity"),
        ("http://vmselect.vm.svc.corp.example:8481/select/0/prometheus", "auto", "identity"),
        ("https://prometheus-prod-10-prod-us-central-0.grafana.net/api/prom", "auto", "gzip, deflate"),
        ("http://10.0.4.17:9090", "auto", "gzip, deflate"),  # an address says nothing of the link
        ("http://[2001:db8::7]:9090", "auto", "gzip, deflate"),
        ("http://mimir.example.com", "auto", "gzip, deflate"),
        ("http://127.0.0.1:9090", "gzip", "gzip, deflate"),
        ("https://prometheus-prod-10-prod-us-central-0.grafana.net/api/prom", "none", "identity"),
    ],
)
def test_answers_are_asked_gzipped_only_where_the_link_is_worth_the_stores_cpu(url, compression, sent):
    assert accept_encoding(url, compression) == sent


def test_a_compression_that_is_not_one_is_refused_naming_the_flag():
    with pytest.raises(ConfigError, match=r"--prometheus.compression 'zstd' is not one of auto, gzip, none"):
        Store("http://127.0.0.1:9", compression="zstd")


def test_the_compression_flag_offers_what_the_store_client_takes():
    import argparse

    from gpulens.analyzer.inputs.store import COMPRESSIONS
    from gpulens.cli import build_parser

    commands = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command in ("report", "analyzer"):
        flag = next(a for a in commands.choices[command]._actions if "--prometheus.compression" in a.option_strings)
        assert (tuple(flag.choices), flag.default) == (COMPRESSIONS, "auto")


def test_the_encoding_asked_for_goes_with_every_query(scripted):
    server = scripted([(200, ANSWER, {}), (200, INSTANT_ANSWER, {}), (200, ANSWER, {})])
    Store(server.url).query_range("up", T0, T0, 1)  # on this host: plain
    Store(server.url).query("up", T0)
    Store(server.url, compression="gzip").query_range("up", T0, T0, 1)
    assert [headers.get("Accept-Encoding") for headers, _ in server.requests] == [
        "identity",
        "identity",
        "gzip, deflate",
    ]


@pytest.mark.slow
def test_a_real_prometheus_sends_the_same_series_plain_or_gzipped(tmp_path):
    """Debian's Prometheus answers "identity" uncompressed and "gzip" compressed: the same points either
    way, as written, and the wire carries what the store was asked for."""
    lines = ["# TYPE gpu_test gauge"]
    lines += [f'gpu_test{{uuid="GPU-{g}"}} {(g * 7 + k) % 100} {T0 + 15 * k}' for g in range(4) for k in range(240)]
    prometheus = BackfilledPrometheus(tmp_path, "\n".join(lines) + "\n# EOF\n")
    try:
        read = {}
        for compression in ("none", "gzip"):
            store = Store(prometheus.url, compression=compression)
            series = store.query_range("gpu_test", T0, T0 + 15 * 239, 15)
            read[compression] = (store, {s["metric"]["uuid"]: series_points(s).tolist() for s in series})
    finally:
        prometheus.stop()
    written = {f"GPU-{g}": [[T0 + 15 * k, float((g * 7 + k) % 100)] for k in range(240)] for g in range(4)}
    assert read["none"][1] == read["gzip"][1] == written
    plain, gzipped = read["none"][0], read["gzip"][0]
    assert plain.read_bytes == gzipped.read_bytes  # the same answer, inflated
    assert plain.wire_bytes == plain.read_bytes  # sent as it is
    assert gzipped.wire_bytes < gzipped.read_bytes / 4  # sent gzipped: 960 points of two-digit values


@pytest.mark.parametrize(
    ("auth", "message"),
    [
        (StoreAuth(basic_auth_username="a"), "--prometheus.basic-auth.password-file go together: give both"),
        (StoreAuth(cert_file="c.pem"), "--prometheus.cert-file and --prometheus.key-file go together"),
        (StoreAuth(bearer_token_file="/no/token"), "--prometheus.bearer-token-file /no/token: cannot read it"),
    ],
)
def test_settings_that_cannot_work_are_refused_at_start(auth, message):
    with pytest.raises(ConfigError, match=message):
        auth.check()


@pytest.mark.parametrize("header", ["X-Scope-OrgID", "Bad Name: x", "X-Tenant: caf\u00e9\u4e2d"])
def test_a_header_flag_that_is_not_a_header_is_refused(header):
    with pytest.raises(ConfigError, match="--prometheus.header"):
        StoreAuth.parse_header(header)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--prometheus", "http://127.0.0.1:9"], "--prometheus needs --since: how far back to read"),
        (["--prometheus", "prometheus:9090", "--since", "1d"], "--prometheus 'prometheus:9090' is not an http(s) URL"),
        (
            ["--prometheus", "http://127.0.0.1:9", "--since", "1d", "--until", "yesterday"],
            "--until 'yesterday' is not a time: give RFC 3339 (2026-11-23T00:00:00Z) or unix seconds",
        ),
        (
            ["--prometheus", "http://127.0.0.1:9", "--since", "2026-11-23T00:00:00Z", "--until", "2026-11-22"],
            "--until '2026-11-22' is not a time: give RFC 3339",
        ),
        (
            ["trace.csv", "--prometheus", "http://127.0.0.1:9", "--since", "1d"],
            "trace.csv: files given with --prometheus: a report reads a store or files, not both; drop one",
        ),
        (["--since", "1d"], "give files to read, or --prometheus URL --since DURATION: one of the two"),
        (["trace.csv", "--since", "1d"], "--since: only for --prometheus (files cover their own span"),
        (
            ["trace.csv", "--team-label", "team", "--prometheus.selector", 'job="x"', "--prometheus.step", "1m"],
            "--team-label, --prometheus.selector, --prometheus.step: only for --prometheus",
        ),
        (  # unix seconds, as --until takes them: not a span of 56 years
            ["--prometheus", "http://127.0.0.1:9", "--since", "1762732800", "--until", "1762646400"],
            "--since 1762732800 is not before --until 2025-11-09T00:00:00Z",
        ),
        (
            ["--prometheus", "http://127.0.0.1:9", "--since", "last week"],
            "--since 'last week' is not a time: give a duration (7d, 24h), RFC 3339",
        ),
        (
            ["--prometheus", "http://127.0.0.1:9", "--since", "1d", "--prometheus.header", "X-Scope-OrgID"],
            "--prometheus.header 'X-Scope-OrgID' is not 'Name: value'",
        ),
    ],
)
@pytest.mark.slow
def test_a_report_span_that_cannot_be_read_is_one_line_naming_the_flag(args, message):
    done = subprocess.run(
        [sys.executable, "-m", "gpulens", "report", *args], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.startswith(f"gpulens report: {message}") and done.stderr.count("\n") == 1, done.stderr


@pytest.mark.parametrize(
    ("since", "start"),
    [
        ("7d", 1_762_732_800 - 7 * 86400),
        ("3600", 1_762_732_800 - 3600),  # a number of seconds
        ("999999999", 1_762_732_800 - 999_999_999),  # still a span: 31.7 years
        ("1000000000", 1_000_000_000),  # unix seconds: 2001-09-09T01:46:40Z
        ("1762646400", 1_762_646_400),
        ("2025-11-09T00:00:00Z", 1_762_646_400),
    ],
)
def test_since_is_a_span_before_until_or_a_time_as_until_takes_it(since, start):
    assert cli.since(since, 1_762_732_800.0) == start


def test_a_query_too_big_even_for_one_step_names_the_limit_to_raise(scripted):
    too_many = {"status": "error", "errorType": "execution", "error": "query processing would load too many samples"}
    server = scripted([(422, too_many, {})] * 5)
    store = Store(server.url)
    with pytest.raises(StoreError) as refused:
        store.query_range("up", T0, T0 + 2, 1)  # 3 steps, halved to 2 and 1, then refused for 1
    assert len(server.requests) == 3
    assert str(refused.value) == (
        f"Prometheus at {server.url} refuses 'up' even for a single step: query processing would load too many "
        "samples. "
        "Raise the store's limit of samples per query (Prometheus --query.max-samples, VictoriaMetrics "
        "-search.maxSamplesPerQuery, Mimir max_fetched_samples_per_query), or select fewer GPUs "
        "(--prometheus.selector, --prometheus.dcgm-selector)"
    )
    with pytest.raises(StoreError, match="refuses 'up': query processing would load too many samples. Raise"):
        store.query("up", T0)


@pytest.mark.slow
def test_a_store_behind_mutual_tls(tmp_path):
    """Prometheus requiring a client certificate signed by its CA: read with the CA and client certificate
    flags; without the client certificate, one error naming the TLS flags."""
    pki = certificate_authority(tmp_path)
    certificate(pki, "server", "/CN=prometheus", "IP:127.0.0.1")
    certificate(pki, "reporter", "/CN=gpulens", "DNS:gpulens.example")
    web = tmp_path / "web.yml"
    web.write_text(
        f"tls_server_config:\n  cert_file: {pki / 'server.crt'}\n  key_file: {pki / 'server.key'}\n"
        f"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: {pki / 'ca.crt'}\n"
    )
    client = {"verify": str(pki / "ca.crt"), "cert": (str(pki / "reporter.crt"), str(pki / "reporter.key"))}
    history = "# TYPE gpu_test gauge\n" + "".join(f'gpu_test{{uuid="GPU-1"}} {k} {T0 + k}\n' for k in range(60))
    prometheus = BackfilledPrometheus(
        tmp_path, history + "# EOF\n", (f"--web.config.file={web}",), scheme="https", tls=client
    )
    try:
        auth = StoreAuth(
            ca_file=str(pki / "ca.crt"), cert_file=str(pki / "reporter.crt"), key_file=str(pki / "reporter.key")
        )
        auth.check()
        assert values(Store(prometheus.url, auth).query_range("gpu_test", T0, T0 + 59, 1)) == [
            float(k) for k in range(60)
        ]
        with pytest.raises(StoreError, match=r"cannot reach Prometheus at https://127\.0\.0\.1:\d+ over TLS: .*"):
            Store(prometheus.url, StoreAuth(ca_file=str(pki / "ca.crt"))).query_range("gpu_test", T0, T0 + 59, 1)
    finally:
        prometheus.stop()


@pytest.mark.slow
@pytest.mark.parametrize(("old", "new"), [("zz-old", "aa-new"), ("aa-old", "zz-new")])
def test_a_gpu_handed_to_a_new_pod_is_the_new_pods_from_its_first_step(tmp_path, old, new):
    """Backfilled data has no staleness markers: Prometheus' 5-minute lookback keeps the old pod's series
    beside the new one's for 5 minutes after the handover. The new pod holds the GPU from its first
    sample, whichever pod's name sorts first."""
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.window import Window

    lines = ["# TYPE gpulens_gpu_utilization_ratio gauge"]
    lines += [f'gpulens_gpu_utilization_ratio{{instance="n1",uuid="GPU-1"}} 0.5 {T0 + 60 * k}' for k in range(20)]
    lines += ["# TYPE gpulens_gpu_pod_info gauge"]
    for k in range(20):
        pod = old if k < 10 else new
        lines.append(f'gpulens_gpu_pod_info{{instance="n1",uuid="GPU-1",namespace="ml",pod="{pod}"}} 1 {T0 + 60 * k}')
    prometheus = BackfilledPrometheus(tmp_path, "\n".join(lines) + "\n# EOF\n")
    try:
        reader = SeriesReader(Store(prometheus.url), 60.0)
        held = Window.of(60.0, 20)
        held.move_to(T0 + 19 * 60)
        reader.read(held, T0, T0 + 19 * 60)
        frame = reader.frame(held, 20 * 60)
    finally:
        prometheus.stop()
    assert list(frame["pod"].astype(str)) == [old] * 10 + [new] * 10


@pytest.mark.slow
def test_cadvisor_and_kube_state_metrics_are_read_from_the_jobs_named(tmp_path):
    """Where a second job scrapes cAdvisor and kube-state-metrics again (a second scrape config, an old
    release left running), every job's series add up: a pod's 2 cores read as 4. --cadvisor.job and
    --kube-state-metrics.job keep the job named, as kubernetes-mixin's selectors do, and as the dashboards
    read them (tests/test_dashboards.py). A real Prometheus; the pod uses 2 cores of a 4-core limit."""
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.window import Window
    from gpulens.core.mixin import ANY_JOB

    steps, pod = 20, 'namespace="ci",pod="job-0",container="main"'
    lines = ["# TYPE gpulens_gpu_utilization_ratio gauge"]
    lines += [f'gpulens_gpu_utilization_ratio{{instance="n1",uuid="GPU-1"}} 0.5 {T0 + 60 * k}' for k in range(steps)]
    lines += ["# TYPE gpulens_gpu_pod_info gauge"]
    lines += [f'gpulens_gpu_pod_info{{instance="n1",uuid="GPU-1",{pod}}} 1 {T0 + 60 * k}' for k in range(steps)]
    lines += ["# TYPE container_cpu_usage_seconds_total gauge"]  # a counter's samples: rate() reads them alike
    for job in ("kubelet", "cadvisor-again"):
        cpu = f'container_cpu_usage_seconds_total{{job="{job}",{pod}}}'
        lines += [f"{cpu} {2.0 * 60 * k} {T0 + 60 * k}" for k in range(steps)]
    lines += ["# TYPE kube_pod_container_resource_limits gauge"]
    for job in ("kube-state-metrics", "kube-state-metrics-old"):
        limit = f'kube_pod_container_resource_limits{{job="{job}",{pod},resource="cpu",unit="core"}}'
        lines += [f"{limit} 4 {T0 + 60 * k}" for k in range(steps)]
    prometheus = BackfilledPrometheus(tmp_path, "\n".join(lines) + "\n# EOF\n")
    end, seen = T0 + 60 * (steps - 1), {}
    named = replace(ANY_JOB, cadvisor_job="kubelet", kube_state_metrics_job="kube-state-metrics")
    try:
        for name, config in (("any job", ANY_JOB), ("the jobs named", named)):
            reader = SeriesReader(Store(prometheus.url), 60.0, config)
            held = Window.of(60.0, steps)
            reader.read(held, held.move_to(end), end)
            frame = reader.frame(held, 60 * steps)
            newest = frame[frame["timestamp"] == end].iloc[0]
            seen[name] = (round(newest["cpu_usage_cores"], 9), newest["cpu_limit_cores"])
    finally:
        prometheus.stop()
    assert seen == {"any job": (4.0, 8.0), "the jobs named": (2.0, 4.0)}


@pytest.mark.slow
def test_gpulens_and_dcgm_exporter_series_are_read_from_the_jobs_named(tmp_path):
    """A staging cluster's exporters scraped under jobs of their own: unnamed (the analyzer's default), every
    job's GPUs are read; --exporter.job and --dcgm.job, the flags and MixinConfig fields the alerts and
    dashboards are generated with, keep the jobs named. A real Prometheus."""
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.window import Window
    from gpulens.core.mixin import ANY_JOB, MixinConfig

    steps, lines = 10, []
    for job, uuid in (("gpulens-exporter", "GPU-1"), ("staging-exporter", "GPU-2")):
        lines += ["# TYPE gpulens_gpu_utilization_ratio gauge"] if uuid == "GPU-1" else []
        series = f'gpulens_gpu_utilization_ratio{{job="{job}",instance="n1",uuid="{uuid}"}}'
        lines += [f"{series} 0.5 {T0 + 60 * k}" for k in range(steps)]
    for job, uuid in (("nvidia-dcgm-exporter", "GPU-3"), ("staging-dcgm", "GPU-4")):
        lines += ["# TYPE DCGM_FI_DEV_GPU_UTIL gauge"] if uuid == "GPU-3" else []
        series = f'DCGM_FI_DEV_GPU_UTIL{{job="{job}",instance="n2",UUID="{uuid}",modelName="NVIDIA L4",Hostname="n2"}}'
        lines += [f"{series} 40 {T0 + 60 * k}" for k in range(steps)]
    prometheus = BackfilledPrometheus(tmp_path, "\n".join(lines) + "\n# EOF\n")
    end, seen = T0 + 60 * (steps - 1), {}
    named = MixinConfig(exporter_job="gpulens-exporter", dcgm_job="nvidia-dcgm-exporter")
    try:
        for name, config in (("any job", ANY_JOB), ("the jobs named", named)):
            reader = SeriesReader(Store(prometheus.url), 60.0, config)
            held = Window.of(60.0, steps)
            reader.read(held, held.move_to(end), end)
            seen[name] = sorted(set(reader.frame(held, 60 * steps)["gpu"].astype(str)))
    finally:
        prometheus.stop()
    assert seen == {"any job": ["GPU-1", "GPU-2", "GPU-3", "GPU-4"], "the jobs named": ["GPU-1", "GPU-3"]}


@pytest.mark.slow
def test_a_memory_share_is_the_one_the_recording_rule_and_dashboards_draw(tmp_path):
    """One denominator, the memory workloads can use (SIGNALS.md: used / (total - reserved)): the analyzer's
    share of a GPU's memory is the recording rule's (gpu:gpulens_gpu_memory_used:ratio, which the dashboards
    draw), as a real Prometheus evaluates it, for a gpulens exporter's GPU and a dcgm-exporter's alike. The
    figures are the H100 capture's: 19,818 MiB used of 81,559, 479 reserved."""
    from gpulens.analyzer.inputs import frame as fr
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.window import Window
    from gpulens.core import mixin

    mib, steps = 2**20, 10
    gpulens = {"used": 19818, "total": 81559, "reserved": 479}
    dcgm = {"USED": 19818, "FREE": 81559 - 479 - 19818, "RESERVED": 479}
    lines = []
    for kind, mebibytes in gpulens.items():
        series = f'gpulens_gpu_memory_{kind}_bytes{{job="gpulens-exporter",instance="n1",gpu="0",uuid="GPU-1"}}'
        lines += [f"# TYPE gpulens_gpu_memory_{kind}_bytes gauge"]
        lines += [f"{series} {mebibytes * mib} {T0 + 60 * k}" for k in range(steps)]
    for kind, mebibytes in dcgm.items():
        labels = 'job="nvidia-dcgm-exporter",instance="n2",gpu="0",UUID="GPU-2",modelName="NVIDIA H100",Hostname="n2"'
        lines += [f"# TYPE DCGM_FI_DEV_FB_{kind} gauge"]
        lines += [f"DCGM_FI_DEV_FB_{kind}{{{labels}}} {mebibytes} {T0 + 60 * k}" for k in range(steps)]
    prometheus = BackfilledPrometheus(tmp_path, "\n".join(lines) + "\n# EOF\n")
    end = T0 + 60 * (steps - 1)
    config = mixin.MixinConfig()
    rule = next(r["expr"] for r in mixin.recording_rules(config) if r["record"] == mixin.GPU_MEMORY_USED)
    try:
        drawn = {r["metric"]["uuid"]: float(r["value"][1]) for r in Store(prometheus.url).query(rule, end)}
        reader = SeriesReader(Store(prometheus.url), 60.0, config)
        held = Window.of(60.0, steps)
        reader.read(held, held.move_to(end), end)
        frame = reader.frame(held, 60 * steps)
    finally:
        prometheus.stop()
    newest = frame[frame["timestamp"] == end]
    judged = dict(
        zip(newest["gpu"].astype(str), newest["memory_used_bytes"] / fr.memory_capacity(newest)[0], strict=True)
    )
    assert drawn == pytest.approx({"GPU-1": 19818 / (81559 - 479), "GPU-2": 19818 / (81559 - 479)}, rel=1e-12)
    assert judged == pytest.approx(drawn, rel=1e-12)


@pytest.mark.slow
def test_a_reader_that_runs_for_long_forgets_the_pods_and_gpus_gone_from_its_window(tmp_path):
    """A service reads the fleet every cycle for months: the pods (300 here, one a minute) and the
    dcgm-exporter GPUs (one leaves after 50 minutes) it keeps are those of its window, and every frame still
    names each step's pod."""
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.inputs.window import Window

    steps = 300
    lines = ["# TYPE gpulens_gpu_utilization_ratio gauge"]
    lines += [f'gpulens_gpu_utilization_ratio{{instance="n1",uuid="GPU-1"}} 0.5 {T0 + 60 * k}' for k in range(steps)]
    lines += ["# TYPE gpulens_gpu_pod_info gauge"]
    lines += [
        f'gpulens_gpu_pod_info{{instance="n1",uuid="GPU-1",namespace="ci",pod="job-{k}"}} 1 {T0 + 60 * k}'
        for k in range(steps)
    ]
    for name, value in (("DCGM_FI_DEV_GPU_UTIL", 40), ("DCGM_FI_DEV_FB_USED", 1024)):
        lines += [f"# TYPE {name} gauge"]
        lines += [
            f'{name}{{instance="n2",UUID="GPU-d",modelName="NVIDIA L4",Hostname="n2"}} {value} {T0 + 60 * k}'
            for k in range(50)
        ]
    prometheus = BackfilledPrometheus(tmp_path, "\n".join(lines) + "\n# EOF\n")
    try:
        reader = SeriesReader(Store(prometheus.url), 60.0)
        held = Window.of(60.0, 10)
        largest = 0
        for k in range(9, steps, 5):
            end = T0 + 60 * k
            reader.read(held, held.move_to(end), end)
            frame = reader.frame(held, 600)
            gpu_1 = frame[frame["gpu"] == "GPU-1"]
            assert list(gpu_1["pod"].astype(str)) == [f"job-{j}" for j in range(k - 9, k + 1)]
            largest = max(largest, len(held.names.pods))
    finally:
        prometheus.stop()
    assert largest <= 2 * 11 + 64 + 5  # the window's 10 pods and "none", twice, and a cycle's new ones
    assert ("n2", "GPU-d") not in held.dcgm.models and ("n2", "GPU-d") not in held.dcgm.nodes


def test_a_store_trickling_its_answer_is_cut_at_the_requests_time():
    """A byte every 50 ms never trips a timeout per read: the request's own time ends it."""
    body = json.dumps(ANSWER).encode()
    sent: list[int] = []
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def trickle() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
            connection.sendall(head)
            try:
                for byte in body:
                    connection.sendall(bytes([byte]))
                    sent.append(byte)
                    time.sleep(0.05)  # the trickle itself
            except OSError:
                pass  # the client has gone

    server = threading.Thread(target=trickle, daemon=True)
    server.start()
    with listener, pytest.raises(StoreError) as late:
        Store(f"http://127.0.0.1:{port}", timeout=0.5, retries=0).query("up", T0)
    assert str(late.value) == (
        f"Prometheus at http://127.0.0.1:{port} did not answer 'up' whole within 0.5 s: the store is overloaded or "
        "the query too large: raise --prometheus.timeout or read a shorter span"
    )
    assert len(sent) < len(body)
    server.join(10)


def test_an_answer_a_proxy_cut_short_is_asked_again(scripted):
    """A proxy that ends an answer it has begun (vmauth, nginx at its time-out) cannot take back its HTTP
    200: a JSON body cut short is retried, not taken for a store that does not speak the API, and the
    query answers what the store holds once an answer arrives whole."""
    whole = json.dumps(ANSWER).encode()
    server = scripted([(200, whole[:40], {}), (200, ANSWER, {})])
    [series] = Store(server.url, sleep=lambda _: None).query_range("up", T0, T0, 1)
    assert (series["values"], len(server.requests)) == ([[T0, "1"]], 2)
    cut = scripted([(200, whole[:40], {})])
    with pytest.raises(StoreError) as failed:
        Store(cut.url, sleep=lambda _: None).query_range("up", T0, T0, 1)
    assert str(failed.value) == (
        f"Prometheus at {cut.url} answered 'up' with JSON cut short after 40 bytes (tried 4 times): a proxy "
        "between gpulens and the store (vmauth, nginx, a load balancer) ended the answer early: check its "
        "response time-out and size limit, or read a shorter span"
    )


@pytest.mark.parametrize(
    "framing",
    [b"Content-Length: 500\r\n\r\n", b"Transfer-Encoding: chunked\r\n\r\n1f4\r\n"],
    ids=["shorter-than-its-length", "chunk-never-ended"],
)
def test_a_connection_broken_mid_answer_is_retried_then_named(framing):
    """A store (or the network) that closes the connection before its answer is whole: the body shorter than
    its Content-Length, or a chunk never finished. Each try is a clear, retried failure, never urllib3's
    error escaping as a traceback."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    served: list[int] = []

    def break_off() -> None:
        for _ in range(2):
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + framing + b'{"status":')
                served.append(1)

    server = threading.Thread(target=break_off, daemon=True)
    server.start()
    with listener, pytest.raises(StoreError) as broken:
        Store(f"http://127.0.0.1:{port}", retries=1, sleep=lambda _: None).query("up", T0)
    server.join(10)
    assert str(broken.value).startswith(
        f"cannot reach Prometheus at http://127.0.0.1:{port}: the connection broke before the answer was whole ("
    )
    assert str(broken.value).endswith("(tried 2 times): check the URL and that the store is up")
    assert len(served) == 2


@pytest.mark.slow
def test_values_no_gpu_can_report_are_left_out_named_and_counted(tmp_path, caplog):
    """A broken exporter's +Inf, 1e308 watts and negative utilisation reach Prometheus as they are. The
    live input and a report leave them out (as if not sampled), count them and name the first; NaN is a
    missing sample, not an error. The same values in a file refuse it (test_inputs.py)."""
    from gpulens.analyzer.inputs.live import PrometheusInput
    from gpulens.analyzer.inputs.series import SeriesReader
    from gpulens.analyzer.runs import span
    from gpulens.core.thresholds import Thresholds

    broken = {3: "+Inf", 4: "-0.5", 5: "NaN"}  # GPU-2's utilisation at those minutes; GPU-1's is 0.5
    lines = ["# TYPE gpulens_gpu_utilization_ratio gauge"]
    for uuid in ("GPU-1", "GPU-2"):
        for k in range(10):
            value = broken.get(k, "0.5") if uuid == "GPU-2" else "0.5"
            lines.append(f'gpulens_gpu_utilization_ratio{{instance="n1",uuid="{uuid}"}} {value} {T0 + 60 * k}')
    lines += ["# TYPE gpulens_gpu_power_watts gauge"]
    lines += [f'gpulens_gpu_power_watts{{instance="n1",uuid="GPU-2"}} {"1e308" if k == 6 else 300} {T0 + 60 * k}'
              for k in range(10)]  # fmt: skip
    prometheus = BackfilledPrometheus(tmp_path, "\n".join(lines) + "\n# EOF\n")
    try:
        source = PrometheusInput(prometheus.url, window=540, step=60, clock=lambda: T0 + 540)
        frame = source.window_frame()
        reader = SeriesReader(Store(prometheus.url), 60.0)
        span.report(reader, span.Span(T0, T0 + 540, 60.0), Thresholds())
    finally:
        prometheus.stop()
    gpu2 = frame[frame["gpu"] == "GPU-2"].sort_values("timestamp")
    assert list(gpu2["gpu_util"].fillna(-1)) == [0.5, 0.5, 0.5, -1, -1, -1, 0.5, 0.5, 0.5, 0.5]
    assert list(gpu2["power_watts"].fillna(-1)) == [300.0] * 6 + [-1] + [300.0] * 3
    assert list(frame[frame["gpu"] == "GPU-1"]["gpu_util"]) == [0.5] * 10
    assert source.checks.left_out == 3  # +Inf, -0.5 and 1e308; NaN is missing, not impossible
    said = [r.getMessage() for r in caplog.records if "no GPU can report" in r.getMessage()]
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + 180))  # the first, as RFC 3339 says it
    assert said == [
        f"Prometheus at {prometheus.url} answered values no GPU can report (gpu_util, power_watts): left out of "
        f"the verdicts, as if not sampled; the first: gpu_util of GPU-2 on n1 at {at}: inf is not a ratio "
        "from 0 to 1 (percentages must be divided by 100)",
        f"Prometheus at {prometheus.url} holds 3 values no GPU can report, left out of the verdicts (as if not "
        f"sampled); the first: gpu_util of GPU-2 on n1 at {at}: inf is not a ratio from 0 to 1 (percentages "
        "must be divided by 100)",
    ]


def test_a_store_asking_to_wait_for_ever_is_waited_on_no_longer_than_a_request_may_take(scripted):
    # Retry-After in seconds and as an HTTP date, a day ahead: each wait is cut to --prometheus.timeout.
    tomorrow = email.utils.formatdate(time.time() + 86400, usegmt=True)
    server = scripted(
        [(503, "busy", {"Retry-After": "100000"}), (503, "busy", {"Retry-After": tomorrow}), (200, ANSWER, {})]
    )
    waits: list[float] = []
    assert values(Store(server.url, timeout=5, sleep=waits.append).query_range("up", T0, T0, 1)) == [1.0]
    assert waits == [5.0, 5.0]


def test_a_shutdown_ends_a_wait_between_retries_at_once(scripted):
    server = scripted([(503, "busy", {"Retry-After": "30"})])
    store = Store(server.url, timeout=30, retries=3)
    failed: list[str] = []

    def query() -> None:
        with pytest.raises(StoreError) as stopped:
            store.query_range("up", T0, T0, 1)
        failed.append(str(stopped.value))

    asking = threading.Thread(target=query)
    asking.start()
    wait_until(lambda: len(server.requests) == 1, 10, what="the first request")
    store.interrupt()  # SIGTERM: the analyzer's close()
    asking.join(5)
    assert not asking.is_alive()
    assert failed == [f"Prometheus at {server.url}: stopped before 'up' was answered (gpulens is shutting down)"]
    assert len(server.requests) == 1


def test_a_redirect_is_not_followed_so_credentials_stay_with_the_store_they_were_given_for(scripted, tmp_path):
    elsewhere = scripted([(200, ANSWER, {})])
    store = scripted([(302, "", {"Location": elsewhere.url + "/api/v1/query_range"})])
    key = StoreAuth.parse_header("X-Api-Key: s3cret-key")
    with pytest.raises(StoreError) as refused:
        Store(store.url, StoreAuth(headers=(key,)), retries=0).query_range("up", T0, T0, 1)
    assert str(refused.value) == (
        f"Prometheus at {store.url} redirects 'up' (HTTP 302) to {elsewhere.url}/api/v1/query_range: gpulens "
        "follows no redirect, since the credentials and headers would go with it to the host it names; give the URL "
        "it points to as the store's URL"
    )
    assert elsewhere.requests == [] and [h["X-Api-Key"] for h, _ in store.requests] == ["s3cret-key"]


def test_a_gzip_bomb_is_inflated_no_further_than_the_answers_bound(scripted):
    # 256 MiB of spaces (valid JSON whitespace) compress to about 250 KiB; gpulens reads at most 4 MiB of it.
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb = b"".join(squeeze.compress(b" " * (1 << 20)) for _ in range(256)) + squeeze.flush()
    server = scripted([(200, bomb, {"Content-Encoding": "gzip", "Content-Type": "application/json"})])
    tracemalloc.start()
    try:
        with pytest.raises(StoreError) as refused:
            Store(server.url, max_answer_bytes=4 << 20).query("up", T0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "its answer is larger than the 4,194,304 bytes gpulens reads at once" in str(refused.value)
    assert peak < 16 << 20, peak  # the bound and a piece, not the 256 MiB (urllib3 inflates 64 KiB to 64 MiB)
    # A gzipped answer within the bound reads as it would plain.
    whole = gzip.compress(json.dumps(INSTANT_ANSWER).encode())
    server = scripted([(200, whole, {"Content-Encoding": "gzip"})])
    assert Store(server.url).query("up", T0) == INSTANT_ANSWER["data"]["result"]


def _as_lists(body: dict) -> dict:
    """A decoded answer with each series' values as [[t, v], ...] of the floats' reprs (NaN equals NaN; -0 is
    0, as every comparison has it), to compare the two decoders."""
    import numpy as np

    for series in body["data"]["result"]:
        points = np.asarray(series["values"], dtype=float).reshape(-1, 2) + 0.0  # -0.0 + 0.0 is 0.0
        series["values"] = [[repr(float(t)), repr(float(v))] for t, v in points]
    return body


@pytest.mark.parametrize(
    "answer",
    [
        # Prometheus: special values, exponents, fractional times; a series with no point.
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"a","x":"1"},'
        '"values":[[1.5,"NaN"],[2,"+Inf"],[3,"-Inf"],[4,"1e-05"],[5,"-2.5E+3"]]},{"metric":{},"values":[]}]}}',
        # Numbers alone (read by orjson, not numpy's parser): fractions of a second, exponents, integers past
        # 2**53 and 2**64, the shortest round trip of a double, -0.
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"a":"b"},"values":[[1700000000,'
        '"0.1"],[1700000030.25,"1e-05"],[1700000060,"12345678901234567890123"],[1700000090,"-2.5E+3"],'
        '[1700000120,"9007199254740993"],[1700000150,"0.30000000000000004"],[1700000180,"-0"]]}]}}',
        # VictoriaMetrics' envelope, and label values holding the markers the reader looks for, escaped.
        '{"status":"success","isPartial":false,"data":{"resultType":"matrix","result":[{"metric":{"v":'
        '"\\",\\"values\\":[[1,\\"2\\"]]}"},"values":[[1,"2"]]}]},"stats":{"seriesFetched":"1"}}',
        '{"status":"success","data":{"resultType":"matrix","result":[]}}',
    ],
)
def test_a_matrix_is_read_without_a_python_object_per_point_and_means_what_its_json_says(answer):
    from gpulens.analyzer.inputs.store import _decoded, _matrix

    fast = _matrix(answer.encode())
    assert fast is not None
    assert _as_lists(fast) == _as_lists(json.loads(answer))
    assert _as_lists(_decoded(answer.encode())) == _as_lists(json.loads(answer))


@pytest.mark.parametrize(
    "answer",
    [
        # A value that is no number: left to the JSON decoder (and the store client's checks).
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"x"]]}]}}',
        # JSON's words, which a number parser would take for NaN or 1.
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"null"]]}]}}',
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"true"]]}]}}',
        # A native histogram's series, or any key more: the JSON decoder's.
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"histograms":[[1,{}]]}]}}',
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"2"]],"x":1}]}}',
        # Cut short, and an envelope that is not JSON after the series.
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"2"]',
        '{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"2"]]}]}',
        '{"status":"success","data":{"resultType":"vector","result":[]}}',
    ],
)
def test_anything_but_a_plain_matrix_is_left_to_the_json_decoder(answer):
    from gpulens.analyzer.inputs.store import _matrix

    assert _matrix(answer.encode()) is None
