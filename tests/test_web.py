"""HTTP serving: content negotiation, health, exporter-toolkit web config, bad flags."""

import gzip
import os
import socket
import subprocess
import sys

import bcrypt
import pytest
import requests
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from tests.helpers import REPO, GpulensProcess, free_port, samples, start_exporter, value, wait_until

#: Every test here starts real servers or gpulens processes (the fast lane skips them: pytest -m "not slow").
pytestmark = pytest.mark.slow

SIMULATED = ["--source", "simulated", "--simulate.gpus", "2", "--sampler.interval", "0.1"]


@pytest.fixture(scope="module")
def exporter_process():
    process, url = start_exporter(SIMULATED)
    yield process, url
    process.stop()


@pytest.fixture
def exporter(exporter_process):
    return exporter_process[1]


def test_simulated_data_is_said_at_start_and_in_every_scrape(exporter_process):
    process, url = exporter_process
    assert "WARNING gpulens.exporter: serving SIMULATED data (--source simulated): node " in process.log
    parsed = samples(requests.get(url + "/metrics").text)
    assert value(parsed, "gpulens_exporter_build_info", source="simulated", version="0.1.0") == 1


def test_metrics_in_prometheus_text_by_default(exporter):
    response = requests.get(exporter + "/metrics")
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert value(samples(response.text), "gpulens_gpu_up", gpu="1") == 1


#: What Prometheus 2.x sends on every scrape (scrape/scrape.go's acceptHeader).
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def test_metrics_in_openmetrics_with_gzip_as_prometheus_asks(exporter):
    response = requests.get(
        exporter + "/metrics", headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}, stream=True
    )
    assert response.headers["Content-Type"] == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    assert response.headers["Content-Encoding"] == "gzip"
    text = gzip.decompress(response.raw.read()).decode()
    assert text.endswith("# EOF\n")
    families = {f.name: f for f in parse_openmetrics(text)}  # the strict OpenMetrics parser takes it whole
    assert families["gpulens_gpu_busy_seconds"].type == "counter"
    assert {s.labels["gpu"] for s in families["gpulens_gpu_up"].samples} == {"0", "1"}


def test_gzip_when_accepted(exporter):
    response = requests.get(exporter + "/metrics", headers={"Accept-Encoding": "gzip"}, stream=True)
    assert response.headers["Content-Encoding"] == "gzip"
    assert b"gpulens_gpu_up" in gzip.decompress(response.raw.read())


def test_a_scraper_keeps_its_connection_from_one_scrape_to_the_next(exporter):
    import http.client

    host, port = exporter.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=5)
    ports = []
    for _ in range(3):  # as Prometheus scrapes: one connection, kept alive
        connection.request("GET", "/metrics", headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"})
        response = connection.getresponse()
        assert (response.status, response.getheader("Connection")) == (200, None)
        assert gzip.decompress(response.read()).endswith(b"# EOF\n")
        ports.append(connection.sock.getsockname()[1])
    connection.close()
    assert len(set(ports)) == 1


def test_health_and_index(exporter):
    assert requests.get(exporter + "/healthz").text == "ok\n"
    assert requests.get(exporter + "/readyz").text == "ok\n"
    index = requests.get(exporter + "/")
    assert 'href="/metrics"' in index.text and index.headers["Content-Type"].startswith("text/html")
    assert requests.get(exporter + "/nope").status_code == 404


def test_a_hundred_scrapers_at_once_are_all_let_in():
    # socketserver's backlog of 5 refused a tenth to a third of them within a 1 s connect timeout.
    import concurrent.futures

    process, url = start_exporter(["--source", "simulated", "--simulate.gpus", "8"])

    def scrape(_):
        try:
            return requests.get(url + "/metrics", timeout=(1.0, 60.0)).status_code
        except requests.ConnectTimeout:
            return "connect timeout"

    try:
        for _ in range(3):
            with concurrent.futures.ThreadPoolExecutor(100) as pool:
                assert list(pool.map(scrape, range(100))) == [200] * 100
    finally:
        process.stop()


def _web_config(tmp_path, text: str) -> str:
    path = tmp_path / "web.yml"
    path.write_text(text)
    return str(path)


def test_basic_auth_with_bcrypt_hashes(tmp_path):
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    config = _web_config(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = GpulensProcess(
        ["exporter", *SIMULATED, "--web.listen-address", f"127.0.0.1:{port}", "--web.config.file", config]
    )
    try:
        wait_until(lambda: _status(url, ("prometheus", "s3cret")) == 200, 20, what="exporter with auth")
        assert _status(url, None) == 401
        # The probes answer without credentials, as Kubernetes sends none; the reasons only with them.
        for probe in ("/healthz", "/readyz"):
            assert (requests.get(url + probe).status_code, requests.get(url + probe).text) == (200, "ok\n")
        assert _status(url, ("prometheus", "wrong")) == 401
        assert _status(url, ("someone", "s3cret")) == 401
        response = requests.get(url + "/metrics", auth=("prometheus", "s3cret"))
        assert value(samples(response.text), "gpulens_gpu_up", gpu="0") == 1
    finally:
        process.stop()


def _status(url, auth):
    try:
        return requests.get(url + "/metrics", auth=auth, timeout=2).status_code
    except requests.RequestException:
        return None


def _tls_web_config(tmp_path) -> str:
    """A self-signed certificate for 127.0.0.1 and a web config that serves it."""
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(tmp_path / "server.key"),
            "-out",
            str(tmp_path / "server.crt"),
        ],
        check=True,
        capture_output=True,
    )
    return _web_config(tmp_path, "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")


def test_tls(tmp_path):
    config = _tls_web_config(tmp_path)
    port = free_port()
    process = GpulensProcess(
        ["exporter", *SIMULATED, "--web.listen-address", f"127.0.0.1:{port}", "--web.config.file", config]
    )
    try:

        def ready():
            try:
                return (
                    requests.get(
                        f"https://127.0.0.1:{port}/healthz", verify=str(tmp_path / "server.crt"), timeout=2
                    ).status_code
                    == 200
                )
            except requests.RequestException:
                return False

        wait_until(ready, 20, what="TLS exporter")
        with pytest.raises(requests.RequestException):
            requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    finally:
        process.stop()


def run_exporter(*args, timeout=30):
    return subprocess.run(
        [sys.executable, "-m", "gpulens", "exporter", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--web.listen-address", "localhost"], "--web.listen-address 'localhost' is not HOST:PORT"),
        (["--simulate.gpus", "2", "--simulate.profiles", "busy"], "unknown workload profile 'busy'; choose one of"),
        (["--simulate.gpus", "2", "--simulate.model", "V100"], "--simulate.model 'V100' is unknown"),
        (["--simulate.config", "/nonexistent/fleet.yaml"], "--simulate.config /nonexistent/fleet.yaml: cannot read it"),
        (["--web.config.file", "/nonexistent/web.yml"], "--web.config.file /nonexistent/web.yml: cannot read it"),
    ],
)
def test_bad_flags_name_the_value_and_exit_2(args, message):
    result = run_exporter("--source", "simulated", *args)
    assert result.returncode == 2
    assert message in result.stderr and result.stderr.startswith("gpulens exporter: ")


def test_bad_web_config_is_refused(tmp_path):
    config = _web_config(tmp_path, "basic_auth_users:\n  prometheus: plaintext\n")
    result = run_exporter("--source", "simulated", "--web.config.file", config)
    assert result.returncode == 2
    assert "basic_auth_users.prometheus: expected a bcrypt hash (make one with: htpasswd" in result.stderr
    assert "plaintext" not in result.stderr  # a password where its hash belongs is still a secret
    config = _web_config(tmp_path, "tls_server_config:\n  cert_file: a.crt\n  keyfile: a.key\n")
    result = run_exporter("--source", "simulated", "--web.config.file", config)
    assert "tls_server_config: unknown key(s) keyfile; did you mean key_file?" in result.stderr


def test_port_in_use_is_a_clear_error():
    process, url = start_exporter(SIMULATED)
    try:
        result = run_exporter(*SIMULATED, "--web.listen-address", url.removeprefix("http://"))
        assert result.returncode == 2
        assert "cannot listen on 127.0.0.1:" in result.stderr and "choose another --web.listen-address" in result.stderr
    finally:
        process.stop()


def test_unknown_flag_exits_2():
    result = run_exporter("--web.listen-adress", ":1")
    assert result.returncode == 2 and "unrecognized arguments: --web.listen-adress" in result.stderr


def test_environment_mirrors_flags():
    env = {**os.environ, "GPULENS_SAMPLER_INTERVAL": "-1"}
    result = subprocess.run(
        [sys.executable, "-m", "gpulens", "exporter", "--source", "simulated"],
        env=env,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
    )
    assert result.returncode == 2
    assert "environment variable GPULENS_SAMPLER_INTERVAL='-1': must be a positive, finite duration, got '-1'" in (
        result.stderr
    )
    result = run_exporter("--source", "simulated", "--sampler.interval", "0")
    assert result.returncode == 2
    assert "argument --sampler.interval: must be a positive, finite duration, got '0'" in result.stderr


def test_a_stalled_tls_client_does_not_block_other_scrapes(tmp_path):
    config = _tls_web_config(tmp_path)
    port = free_port()
    process = GpulensProcess(
        ["exporter", *SIMULATED, "--web.listen-address", f"127.0.0.1:{port}", "--web.config.file", config]
    )
    ca = str(tmp_path / "server.crt")
    try:
        wait_until(lambda: _tls_status(port, ca) == 200, 20, what="TLS exporter")
        stalled = socket.create_connection(("127.0.0.1", port))  # connects, never says hello
        try:
            assert _tls_status(port, ca) == 200
        finally:
            stalled.close()
    finally:
        process.stop()


def _tls_status(port, ca):
    try:
        return requests.get(f"https://127.0.0.1:{port}/metrics", verify=ca, timeout=3).status_code
    except requests.RequestException:
        return None
