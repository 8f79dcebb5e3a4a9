"""Real parts for tests: the fake libnvidia-ml, the exporter as a process, a real Prometheus."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from gpulens.demo import free_port, listening_address  # noqa: F401 (one home for them; the tests import free_port from here)

REPO = Path(__file__).resolve().parents[1]
FAKE_NVML_SOURCE = REPO / "tests" / "fake_nvml" / "fake_nvml.c"


def build_fake_nvml(out_dir: Path, driver_branch: int | None = None) -> Path:
    """Compile tests/fake_nvml/fake_nvml.c into out_dir/libnvidia-ml.so.1 with gcc; with `driver_branch`,
    as a driver of that branch, without the entry points added since (the file's header lists them)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / "libnvidia-ml.so.1"
    branch = [f"-DDRIVER_BRANCH={driver_branch}"] if driver_branch else []
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-Wall", "-Werror", *branch, "-o", str(library), str(FAKE_NVML_SOURCE)]
        + ["-lpthread"],
        check=True,
    )
    return library


class FakeNvml:
    """The GPU state the fake library serves. write() replaces the state file atomically, as the
    tests must: the library re-reads it whenever the file is replaced."""

    def __init__(self, library_dir: Path, state_path: Path):
        self.library_dir = library_dir
        self.state_path = state_path

    def env(self) -> dict[str, str]:
        """Environment for a process that should load the fake instead of a real driver."""
        return {**os.environ, "LD_LIBRARY_PATH": str(self.library_dir), "FAKE_NVML_STATE": str(self.state_path)}

    def write(
        self,
        gpus: list[dict],
        *,
        driver_version: str = "535.54.03",
        nvml_version: str = "12.535.54.03",
        init_error: int = 0,
        topology: dict[tuple[int, int], int] | None = None,
        p2p: dict[tuple[int, int], str] | None = None,
        count_calls: str = "nvmlDeviceGetCount_v2",
    ) -> None:
        """The state the library serves from now on; `count_calls`: the NVML function whose calls calls()
        counts (by default the enumerations: discovery and each rediscovery)."""
        lines = [
            f"driver_version={driver_version}",
            f"nvml_version={nvml_version}",
            f"init_error={init_error}",
            f"device_count={len(gpus)}",
            f"count_calls={count_calls}",
        ]
        for index, gpu in enumerate(gpus):
            lines += [f"gpu{index}.{key}={value}" for key, value in gpu.items()]
        for (a, b), level in (topology or {}).items():
            lines.append(f"topo.{a}.{b}={level}")
        for (a, b), path in (p2p or {}).items():
            lines.append(f"p2p.{a}.{b}={path}")
        fd, tmp = tempfile.mkstemp(dir=self.state_path.parent, prefix=".state-")
        with os.fdopen(fd, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, self.state_path)

    def calls(self) -> int:
        """Calls so far of the function write()'s `count_calls` names, as the library counted them."""
        try:
            return int(self.state_path.with_name(self.state_path.name + ".calls").read_text())
        except FileNotFoundError:
            return 0

    def wait_for_calls(self, more: int, what: str, timeout: float = 10.0) -> None:
        """Wait until the counted function has been called `more` times after now (`what` they are)."""
        target = self.calls() + more
        wait_until(lambda: self.calls() >= target, timeout, what=what)


class ScriptedHttp:
    """A real HTTP server on a free loopback port answering each GET or POST with the next of `answers`
    ((status, body, headers); a body not bytes or str is sent as JSON), the last one again once they run
    out. Records each request's headers and body."""

    def __init__(self, answers: list[tuple[int, object, dict[str, str]]]):
        self.answers, self.requests = list(answers), []
        scripted = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                length = int(self.headers.get("Content-Length", 0))
                scripted.requests.append((dict(self.headers), self.rfile.read(length).decode()))
                status, body, headers = scripted.answers.pop(0) if len(scripted.answers) > 1 else scripted.answers[0]
                data = (
                    body
                    if isinstance(body, bytes)
                    else body.encode()
                    if isinstance(body, str)
                    else json.dumps(body).encode()
                )
                self.send_response(status)
                for name, header in headers.items():
                    self.send_header(name, header)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_GET  # the analyzer's Prometheus queries are form POSTs

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def wait_until(condition, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll until condition() returns something truthy; return it, or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


#: Where processes started by the tests keep their logs: set by conftest.py to a folder in pytest's
#: own temporary tree, which pytest cleans (tmp_path_retention_policy in pyproject.toml).
PROCESS_LOGS: Path | None = None


class GpulensProcess:
    """`python -m gpulens ARGS` as a child process, its log captured in a file."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None, workdir: Path | None = None):
        if workdir is None:
            # Under pytest's temporary tree (conftest.py sets PROCESS_LOGS), never a folder of /tmp left behind.
            assert PROCESS_LOGS is not None, "tests/conftest.py's process_logs fixture sets PROCESS_LOGS"
            workdir = Path(tempfile.mkdtemp(prefix="gpulens-", dir=PROCESS_LOGS))
        self.workdir = workdir
        self.args = args
        self.log_path = self.workdir / f"gpulens-{os.getpid()}-{time.monotonic_ns()}.log"
        self._log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gpulens", *args],
            env=env or dict(os.environ),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def wait_listening(self, timeout: float = 20.0) -> str:
        """The URL of a server started with `--web.listen-address 127.0.0.1:0`, once it answers /healthz:
        the port it was given, from its log (see gpulens.demo.listening_address)."""
        address: list[str] = []

        def ready():
            if self.process.poll() is not None:
                raise AssertionError(f"gpulens exited with {self.process.returncode}:\n{self.log}")
            if not address:
                found = listening_address(self.log)
                if found is None:
                    return False
                address.append(found)
            try:
                return requests.get(f"http://{address[0]}/healthz", timeout=1).status_code == 200
            except requests.RequestException:
                return False

        wait_until(ready, timeout, what=f"gpulens {' '.join(self.args)} to listen")
        return f"http://{address[0]}"

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after `timeout` seconds; the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


def start_exporter(args: list[str], env: dict[str, str] | None = None) -> tuple[GpulensProcess, str]:
    process = GpulensProcess(["exporter", "--web.listen-address", "127.0.0.1:0", *args], env=env)
    return process, process.wait_listening()


def start_nvml_exporter(fake_nvml: FakeNvml, *args: str, interval: str = "0.1") -> tuple[GpulensProcess, str]:
    """The exporter on the fake libnvidia-ml, sampling every `interval` seconds."""
    return start_exporter(["--source", "nvml", "--sampler.interval", interval, *args], env=fake_nvml.env())


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """Parse an exposition into {(sample name, frozenset of label items): value}."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(parsed: dict, name: str, **labels) -> float | None:
    """The one sample of `name` whose labels include `labels`; None if there is none."""
    found = [v for (n, ls), v in parsed.items() if n == name and set(labels.items()) <= ls]
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} series"
    return found[0] if found else None


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run([require_binary("openssl"), *args], check=True, capture_output=True, cwd=cwd)


def certificate(directory: Path, name: str, subject: str, san: str, ca: str | None = "ca") -> None:
    """An EC key and a certificate for it in `directory`, signed by `ca` (None: self-signed)."""
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key", cwd=directory)
    openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=directory)
    (directory / f"{name}.ext").write_text(f"subjectAltName={san}\n")
    signer = ["-signkey", f"{name}.key"] if ca is None else ["-CA", f"{ca}.crt", "-CAkey", f"{ca}.key"]
    openssl(
        "x509", "-req", "-in", f"{name}.csr", *signer, "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        cwd=directory,
    )  # fmt: skip


def certificate_authority(directory: Path) -> Path:
    """A CA (ca.key, ca.crt) in `directory`, to sign certificate()s with."""
    openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ca.key", cwd=directory)
    openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=test CA", "-days", "1", "-out", "ca.crt", cwd=directory
    )  # fmt: skip
    return directory


def gpulens(*args, **kwargs) -> subprocess.CompletedProcess:
    """`gpulens ARGS` run as a user runs it, from the checkout: its exit code, stdout and stderr."""
    return subprocess.run(
        [sys.executable, "-m", "gpulens", *args], capture_output=True, text=True, cwd=REPO, **{"timeout": 120, **kwargs}
    )


def report_json(*args: str) -> dict:
    """`gpulens report ARGS --format json` as a user runs it: its document, once it exited 0 (else its stderr
    fails the test)."""
    done = gpulens("report", *args, "--format", "json", timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def require_binary(name: str) -> str:
    """Path of a binary the tests run for real (Prometheus, Alertmanager, Chromium). Skips on a laptop
    without it; fails under CI=true, where .ci/run must have installed it."""
    path = shutil.which(name)
    if path is None:
        message = (
            f"{name} is not installed (Debian: apt-get install prometheus prometheus-alertmanager chromium "
            "victoria-metrics)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


#: The FinOps Foundation's FOCUS validator, as PyPI has it (it checks FOCUS 1.0), and what its pandera 0.17
#: imports from multimethod before 2.0 (`overload`), which its requirements leave open.
FOCUS_VALIDATOR = ("focus-validator==1.0.0", "multimethod<2")


def focus_validator() -> Path:
    """The Python of a virtual environment holding FOCUS_VALIDATOR, made once under build/ (ignored by git): it
    pins numpy below 2 and pandas below 3, which gpulens' own environment is past. Skips where PyPI cannot be
    reached; fails under CI=true, whose machine reaches the package registries."""
    venv = REPO / "build" / "focus-validator"
    python = venv / "bin" / "python"
    made = venv / "installed.txt"
    if not (made.exists() and made.read_text() == " ".join(FOCUS_VALIDATOR)):
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        result = subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", *FOCUS_VALIDATOR],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            message = f"pip install {' '.join(FOCUS_VALIDATOR)} failed: {result.stderr[-2000:]}"
            if os.environ.get("CI") == "true":
                pytest.fail(message)
            pytest.skip(message)
        made.write_text(" ".join(FOCUS_VALIDATOR))
    return python


class ServerProcess:
    """A real server binary on a free loopback port: `flags(address)` are its flags, given the address to
    listen on; started with its log in `workdir`, ready when `ready_path` answers 200 (over https with
    `tls`: requests' verify and cert), stopped with SIGTERM (SIGKILL after 10 s)."""

    def __init__(
        self,
        name: str,
        workdir: Path,
        flags: Callable[[str], list[str]],
        ready_path: str,
        scheme: str = "http",
        tls: dict | None = None,
    ):
        binary = require_binary(name)
        address = f"127.0.0.1:{free_port()}"
        self.url = f"{scheme}://{address}"
        log_path = workdir / f"{name}.log"
        self._log = open(log_path, "w")
        self.process = subprocess.Popen([binary, *flags(address)], stdout=self._log, stderr=subprocess.STDOUT)

        def ready():
            if self.process.poll() is not None:
                raise AssertionError(f"{name} exited: {log_path.read_text()}")
            try:
                return requests.get(self.url + ready_path, timeout=1, **(tls or {})).status_code == 200
            except requests.RequestException:
                return False

        try:
            wait_until(ready, 30, what=f"{name} to become ready")
        except AssertionError:
            self.stop()  # a server that never became ready must not outlive the test
            raise

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


class _PrometheusProject(ServerProcess):
    """A server of the Prometheus project (Prometheus, Alertmanager): --web.listen-address, /-/ready."""

    def __init__(self, name: str, workdir: Path, flags: list[str], **kwargs):
        super().__init__(
            name, workdir, lambda address: [*flags, f"--web.listen-address={address}"], "/-/ready", **kwargs
        )


class Prometheus(_PrometheusProject):
    """A real Prometheus server on a free loopback port, scraping the given targets."""

    def __init__(self, workdir: Path, targets: list[str], scrape_interval: str = "1s", extra_config: str = ""):
        config = workdir / "prometheus.yml"
        target_list = ", ".join(f"'{t}'" for t in targets)
        config.write_text(f"""global:
  scrape_interval: {scrape_interval}
  evaluation_interval: {scrape_interval}
scrape_configs:
  - job_name: gpulens
    static_configs:
      - targets: [{target_list}]
{extra_config}""")
        super().__init__("prometheus", workdir, [f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}"])

    def query(self, expr: str) -> list[dict]:
        response = requests.get(self.url + "/api/v1/query", params={"query": expr}, timeout=10)
        body = response.json()
        assert body["status"] == "success", body
        return body["data"]["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        params = {"query": expr, "start": start, "end": end, "step": step}
        body = requests.get(self.url + "/api/v1/query_range", params=params, timeout=30).json()
        assert body["status"] == "success", body
        return body["data"]["result"]


class BackfilledPrometheus(_PrometheusProject):
    """A real Prometheus serving history written by `promtool tsdb create-blocks-from openmetrics`: the
    way a week of data reaches a Prometheus without a week of scrapes. No scrape targets; `flags` are
    passed on (a query limit, a web config)."""

    def __init__(self, workdir: Path, openmetrics: str, flags: tuple[str, ...] = (), **kwargs):
        tsdb = workdir / "tsdb"
        tsdb.mkdir(parents=True, exist_ok=True)
        source = workdir / "history.om"
        source.write_text(openmetrics)
        subprocess.run(
            [require_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", "-q", str(source), str(tsdb)],
            check=True,
            capture_output=True,
        )
        source.unlink()
        config = workdir / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 1m\n")
        super().__init__(
            "prometheus",
            workdir,
            [f"--config.file={config}", f"--storage.tsdb.path={tsdb}", "--storage.tsdb.retention.time=100y", *flags],
            **kwargs,
        )


class VictoriaMetrics(ServerProcess):
    """A real single-node VictoriaMetrics (Debian's victoria-metrics) on a free loopback port; `load()`
    writes samples through its /api/v1/import/prometheus, as vmagent or a migration would."""

    def __init__(self, workdir: Path, flags: tuple[str, ...] = ()):
        super().__init__(
            "victoria-metrics",
            workdir,
            lambda address: [
                f"-storageDataPath={workdir / 'vm-data'}",
                f"-httpListenAddr={address}",
                "-retentionPeriod=100y",
                *flags,
            ],
            "/health",
        )

    def load(self, text: str) -> None:
        """Samples in Prometheus' text format (timestamps in milliseconds), searchable once this returns."""
        requests.post(self.url + "/api/v1/import/prometheus", data=text.encode(), timeout=120).raise_for_status()
        requests.get(self.url + "/internal/force_flush", timeout=30).raise_for_status()


class Alertmanager(_PrometheusProject):
    """A real Alertmanager on a free loopback port with the given config file, no clustering."""

    def __init__(self, workdir: Path, config: Path):
        flags = [
            f"--config.file={config}",
            f"--storage.path={workdir / 'alertmanager-data'}",
            "--cluster.listen-address=",
        ]
        super().__init__("prometheus-alertmanager", workdir, flags)

    def post(self, alerts: list[dict]) -> None:
        """Alerts as Prometheus sends them: labels and annotations (API v2)."""
        requests.post(self.url + "/api/v2/alerts", json=alerts, timeout=5).raise_for_status()

    def alerts(self) -> list[dict]:
        return requests.get(self.url + "/api/v2/alerts", timeout=5).json()

    def groups(self) -> list[tuple[str, dict[str, str], int]]:
        """Alertmanager's aggregation groups as (receiver, group labels, active alerts), sorted: each group
        with an active alert is one notification, so this set is every page and ticket it will send."""
        return active_groups(self.url)


def active_groups(url: str) -> list[tuple[str, dict[str, str], int]]:
    """Alertmanager.groups() of the Alertmanager at `url`."""
    groups = requests.get(url + "/api/v2/alerts/groups", timeout=5).json()
    found = [
        (g["receiver"]["name"], g["labels"], sum(a["status"]["state"] == "active" for a in g["alerts"])) for g in groups
    ]
    return sorted((g for g in found if g[2]), key=lambda g: (g[0], sorted(g[1].items())))


def start_demo_stack(workdir: Path, thresholds: str, **settings):
    """The demo's whole stack (simulated exporters, analyzer, Prometheus, Alertmanager, receiver) with
    `thresholds` (YAML: shortened alert timings) and 1 s scrapes; Stack's other settings as given."""
    from gpulens.demo import Stack

    require_binary("prometheus")
    require_binary("prometheus-alertmanager")
    (workdir / "thresholds.yaml").write_text(thresholds)
    return Stack(
        workdir / "demo", thresholds_file=str(workdir / "thresholds.yaml"), scrape_interval=1, **settings
    ).start()


def serve_analyzer(**served) -> ThreadingHTTPServer:
    """The analyzer's web server (core/web) on a free port of 127.0.0.1, plain HTTP, healthy, serving what
    `served` gives serve() (`routes`, `exposition`); shutdown() stops it."""
    from prometheus_client import CollectorRegistry

    from gpulens.core.web import WebConfig, serve

    return serve(
        CollectorRegistry(auto_describe=False),
        ("127.0.0.1", 0),
        WebConfig(),
        title="analyzer",
        health=lambda: (True, "ok"),
        **served,
    )
