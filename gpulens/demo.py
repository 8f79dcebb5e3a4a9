"""`gpulens demo`: the whole system on a simulated fleet, without Docker and without a GPU.

One simulated exporter per node of the fleet, the analyzer, and, when the Debian packages
`prometheus` and `prometheus-alertmanager` are installed, Prometheus (loading the generated rules)
and Alertmanager (delivering to a webhook receiver inside the demo), all on free loopback ports. The
configs are the ones docker-compose.yml uses (`configs()` writes both), so the two demos cannot drift.
Ctrl-C stops every child; children also die with the demo if it is killed (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpulens import demo_view
from gpulens.alerts import cli as alerts_cli
from gpulens.alerts.routing import AlertSettings
from gpulens.core import mixin
from gpulens.core.config import ConfigError, write_atomically, write_generated
from gpulens.core.flags import Subcommands
from gpulens.core.thresholds import WORKLOAD_DURATIONS, WORKLOAD_RATES, Thresholds
from gpulens.core.web import Route, WebConfig, serve
from gpulens.receiver import AlertReceiver
from gpulens.simulator.cluster import SimPod, kube_state_metrics
from gpulens.simulator.engines import engine_text
from gpulens.simulator.fleet import DEFAULT_FLEET, SimNode, fleet_from_file
from gpulens.simulator.workloads import SimGpu, engine_load

if TYPE_CHECKING:
    from rich.console import Console, Group

log = logging.getLogger("gpulens.demo")

#: Alert timings in minutes rather than hours, so that the simulated problems page while you watch.
DEMO_THRESHOLDS = Path(__file__).with_name("demo-thresholds.yaml")
EXPORTER_PORT, ANALYZER_PORT, RECEIVER_PORT = 9848, 9849, 9850
#: The simulated cluster's port: kube-state-metrics' own (its Helm chart's and manifests' default).
CLUSTER_PORT = 8080


class DemoError(Exception):
    """A part of the demo could not start; the message says which and why."""


@dataclass
class Plan:
    """Where each part of the demo listens and how it is configured."""

    exporters: dict[str, str]  # node -> host:port
    analyzer: str
    receiver_url: str
    prometheus: str | None = None
    alertmanager: str | None = None
    scrape_interval: float = 5.0
    rules_file: str = "gpulens-rules.yaml"
    #: The simulated fleet also plays its kubelet's cAdvisor (pod CPU); a real node has its kubelet.
    simulated: bool = True
    #: The simulated cluster (simulator/cluster.py, engines.py), where one serves: kube-state-metrics on
    #: /metrics, and the engine metrics of the serving pods named in `engines` (namespace, pod).
    cluster: str | None = None
    engines: tuple[tuple[str, str], ...] = ()


def prometheus_config(plan: Plan) -> dict:
    """Prometheus scraping the exporters (and, on the simulated fleet, their kubelet cAdvisor
    endpoint) with `honor_labels` so gpulens' namespace/pod labels stay as they are, each exporter
    labelled with its node, and the analyzer."""
    exporters = [{"targets": [address], "labels": {"node": node}} for node, address in plan.exporters.items()]
    interval = f"{plan.scrape_interval:g}s"
    jobs = [{"job_name": mixin.MixinConfig.exporter_job, "honor_labels": True, "static_configs": exporters}]
    if plan.simulated:
        jobs.append(
            {
                "job_name": "kubelet-cadvisor",
                "honor_labels": True,
                "metrics_path": "/metrics/cadvisor",
                "static_configs": exporters,
            }
        )
    if plan.cluster:
        # As kube-prometheus-stack scrapes it: its namespace and pod labels are the pods', not its own.
        jobs.append(
            {"job_name": "kube-state-metrics", "honor_labels": True, "static_configs": [{"targets": [plan.cluster]}]}
        )
    if plan.cluster and plan.engines:
        # Each engine as a pod target, with the namespace and pod labels Kubernetes discovery gives it.
        engines = [
            {
                "targets": [plan.cluster],
                "labels": {"namespace": namespace, "pod": pod, "__metrics_path__": engine_path(namespace, pod)},
            }
            for namespace, pod in plan.engines
        ]
        jobs.append({"job_name": "serving-engines", "static_configs": engines})
    jobs.append({"job_name": mixin.MixinConfig.analyzer_job, "static_configs": [{"targets": [plan.analyzer]}]})
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [plan.rules_file],
        "scrape_configs": jobs,
    }
    if plan.alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [plan.alertmanager]}]}]}
    return config


#: Where the compose demo's Grafana answers (docker-compose.yml publishes it on the host's port 3000).
COMPOSE_GRAFANA_URL = "http://localhost:3000"


def configs(plan: Plan, thresholds: Thresholds, grafana_url: str = "") -> dict[str, str]:
    """Every config file the demo needs, by relative path: Prometheus, rules, Alertmanager. Without a
    `grafana_url` (the native demo runs none), each alert's dashboard_url leads to the analyzer's page
    instead, at the pod's row for a pod's alert."""
    if grafana_url:
        mixin_config = mixin.MixinConfig(thresholds, grafana_url=grafana_url)
    else:
        mixin_config = mixin.MixinConfig(thresholds, analyzer_page_url=f"http://{plan.analyzer}/")
    alert_files = alerts_cli.generate(mixin_config, AlertSettings.load("", f"{plan.receiver_url}/alerts"))
    rules = alert_files[alerts_cli.RULES_FILE]
    header = "# Generated by gpulens/demo.py (`gpulens demo --write-configs DIR`); do not edit by hand.\n"
    return {
        "prometheus.yml": header + alerts_cli.dump_yaml(prometheus_config(plan)),
        plan.rules_file: rules,
        "alertmanager.yml": alert_files[alerts_cli.ALERTMANAGER_FILE],
    }


def free_port(host: str = "127.0.0.1") -> int:
    """A port free now: for the servers that cannot listen on port 0 and say which port they got
    (Prometheus, Alertmanager). gpulens' own servers listen on port 0 (`listening_address`)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct free ports: each socket is held open until all are chosen, so the kernel
    cannot hand one out twice."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]


#: The line a gpulens server logs once its socket is bound ("serving simulated source on
#: 127.0.0.1:40123/metrics", "serving on 127.0.0.1:40124 (the page ...", "serving the simulated cluster on
#: ..."): the port it was given when asked for port 0.
_SERVING = re.compile(r"\bserving (?:[^\n]*? )?on (\S+:\d+)")


def listening_address(log: str) -> str | None:
    """HOST:PORT a gpulens server started with `--web.listen-address HOST:0` listens on, from its log
    (None until it has bound). Asking the kernel for the port when the socket is bound leaves no moment
    in which another process can take it, as a port chosen before the server starts can be."""
    found = _SERVING.search(log)
    return found.group(1) if found else None


def _die_with_parent() -> None:
    """In the child, before exec: get SIGTERM when the demo dies, however it dies (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class SimulatedCluster:
    """What the cluster around the simulated fleet says of its pods: kube-state-metrics (their controllers,
    labels and images: simulator/cluster.py) on /metrics, and each serving pod's engine metrics (vLLM,
    Triton: simulator/engines.py) on /engines/NAMESPACE/POD/metrics, from the requests its GPU serves on the
    same simulated clock as the exporters (`speed` simulated seconds per real second from now). Serves from
    the moment it is made."""

    def __init__(self, nodes: list[SimNode], speed: float = 1.0, host: str = "127.0.0.1", port: int = 0):
        from prometheus_client import CollectorRegistry

        self.nodes = nodes
        self.pods = [pod for node in nodes for pod in node.pods]
        self.waiting = list(getattr(nodes, "pending", []))  # a Fleet's pods waiting for a node
        self.started, self.speed = time.time(), speed
        #: Each pod's GPUs: it runs while one of them does.
        self.gpus_of: dict[tuple[str, str], list[SimGpu]] = {}
        for gpu in (g for node in nodes for g in node.gpus):  # its pods run, and their traffic changes, from now
            gpu.started = self.started
            if gpu.pod is not None:
                self.gpus_of.setdefault((gpu.pod.namespace, gpu.pod.pod), []).append(gpu)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Cluster(self))
        first_gpus = {(g.pod.namespace, g.pod.pod): g for node in nodes for g in node.gpus if g.pod and g.role == 0}
        self.engines = {
            (pod.namespace, pod.pod): (pod, first_gpus[(pod.namespace, pod.pod)]) for pod in self.pods if pod.engine
        }
        routes = {engine_path(*key): self._engine_route(*value) for key, value in self.engines.items()}
        self.server = serve(
            registry,
            (host, port),
            WebConfig(),
            title="simulated cluster: kube-state-metrics and serving engines",
            health=lambda: (True, "ok"),
            routes=routes,
        )
        self.address = f"{host}:{self.server.server_address[1]}"

    def now(self) -> float:
        """Simulated unix seconds: real time, sped up by `speed` from the moment the cluster was made."""
        return self.started + (time.time() - self.started) * self.speed

    def running(self, now: float) -> list[SimPod]:
        """The fleet's pods that run at `now` (a pod whose GPUs ended, scaled away or culled, is gone)."""
        return [p for p in self.pods if any(g.running(now) for g in self.gpus_of.get((p.namespace, p.pod), []))]

    def kube_state_text(self) -> str:
        """kube-state-metrics' exposition now: the pods that run, those waiting, the nodes, and each
        Deployment's and StatefulSet's replicas (its pods that run: the demo scales by ending pods)."""
        running = self.running(self.now())
        replicas = {(p.namespace, p.owner_kind, p.owner_name): 0 for p in self.pods if p.owner_kind}
        for p in running:
            if p.owner_kind:
                replicas[(p.namespace, p.owner_kind, p.owner_name)] += 1
        # Created an hour before the demo started: a waiting pod has waited an hour when the demo begins.
        nodes = [node.info() for node in self.nodes]
        return kube_state_metrics(running + self.waiting, nodes, self.started - 3600, replicas)

    def _engine_route(self, pod: SimPod, gpu: SimGpu) -> Route:
        model = "meta-llama/Llama-3.1-8B-Instruct" if pod.engine == "vllm" else pod.owner_name or pod.pod

        def route(_query: Mapping[str, str]) -> tuple[int, str, bytes]:
            now = self.now()
            if not gpu.running(now):
                return 404, "text/plain; charset=utf-8", b"the pod has ended: its engine serves no more\n"
            text = engine_text(pod.engine, engine_load(gpu, now, self.started), model)
            return 200, "text/plain; version=0.0.4; charset=utf-8", text.encode()

        return route

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def engine_path(namespace: str, pod: str) -> str:
    """Where the simulated cluster serves a pod's engine metrics."""
    return f"/engines/{namespace}/{pod}/metrics"


class _Cluster:
    """A collector of the simulated cluster's kube-state-metrics families, as they stand at each scrape."""

    def __init__(self, cluster: SimulatedCluster):
        self.cluster = cluster

    def collect(self) -> list:
        from prometheus_client.parser import text_string_to_metric_families

        return list(text_string_to_metric_families(self.cluster.kube_state_text()))


@dataclass
class Child:
    """A process of the demo: where it listens (None until a gpulens server has said which port it got)
    and the path that answers 200 once it is ready."""

    name: str
    process: subprocess.Popen
    log_path: Path
    address: str | None
    ready_path: str

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _answering(candidates: list[tuple[str, str]]) -> str | None:
    """The first URL whose probe (itself when "") answers 200, or None."""
    import requests  # here, as in every function of the demo that needs it: `gpulens` starts without it

    for url, probe in candidates:
        try:
            if requests.get(probe or url, timeout=2).status_code == 200:
                return url
        except requests.RequestException:
            continue
    return None


@dataclass
class Stack:
    """The demo's processes. `start()` brings everything up or raises DemoError having stopped
    what it started; `stop()` leaves nothing running."""

    workdir: Path
    fleet_file: str = ""
    speed: float = 5.0
    thresholds_file: str = str(DEMO_THRESHOLDS)
    scrape_interval: float = 2.0  # 60 samples in the analyzer's window: min_samples is 30
    window: float = 120.0
    interval: float = 10.0
    #: The analyzer's history: half an hour of the demo (two and a half simulated), in bins of 5 s, so that the
    #: minute-long windows its changes are judged over are drawn from several bins, not from one of a day's.
    history: float = 1800.0
    with_prometheus: bool = True
    #: A Grafana with gpulens' dashboards the alerts link to; "": they link to the analyzer's page.
    grafana_url: str = ""
    children: list[Child] = field(default_factory=list)
    receiver: AlertReceiver | None = None
    cluster: SimulatedCluster | None = None
    plan: Plan | None = None

    def start(self) -> Stack:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        """The exporters, then the analyzer, each on a port of its own choosing (port 0), then Prometheus
        and Alertmanager, whose configs name where the others listen."""
        thresholds = Thresholds.load(self.thresholds_file)
        fleet = fleet_from_file(self.fleet_file or DEFAULT_FLEET)
        nodes = [n.name for n in fleet]
        prometheus = shutil.which("prometheus") if self.with_prometheus else None
        alertmanager = (shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")) if prometheus else None
        self.receiver = AlertReceiver()
        if prometheus:
            self.cluster = SimulatedCluster(fleet, self.speed)
        self.workdir.mkdir(parents=True, exist_ok=True)
        judged_at = self.workdir / "analyzer-thresholds.yaml"
        write_atomically(judged_at, analyzer_thresholds(thresholds, self.speed))
        fleet_flags = ["--simulate.config", self.fleet_file] if self.fleet_file else []
        exporters = {
            node: self._spawn(
                f"exporter {node}",
                [
                    sys.executable,
                    "-m",
                    "gpulens",
                    "exporter",
                    "--source",
                    "simulated",
                    *fleet_flags,
                    "--simulate.node",
                    node,
                    "--simulate.speed",
                    f"{self.speed:g}",
                    # One sample per simulated second, as NVML is read on a
                    # real node: sampling slower than the workloads' rhythm
                    # would alias their bursts.
                    "--sampler.interval",
                    f"{min(1.0, 1.0 / self.speed):g}",
                ],
                "/healthz",
            )
            for node in nodes
        }
        store_port, alertmanager_port = free_ports(2)
        store = f"127.0.0.1:{store_port}" if prometheus else None
        if store:
            source = [
                "--input.prometheus",
                f"http://{store}",
                "--prometheus.step",
                f"{self.scrape_interval:g}",
                "--exporter.job",
                mixin.MixinConfig.exporter_job,
            ]
        else:
            source = [
                f"--input.exporter={node}=http://{self._address(child)}/metrics" for node, child in exporters.items()
            ]
            source += ["--exporter.scrape-interval", f"{self.scrape_interval:g}"]
        analyzer = self._spawn(
            "analyzer",
            [
                sys.executable,
                "-m",
                "gpulens",
                "analyzer",
                *source,
                "--thresholds",
                str(judged_at),
                "--analysis.window",
                f"{self.window:g}",
                "--analysis.interval",
                f"{self.interval:g}",
                "--analysis.history",
                f"{self.history:g}",
            ],
            "/metrics",
        )
        self.plan = Plan(
            {node: self._address(child) for node, child in exporters.items()},
            self._address(analyzer),
            self.receiver.url,
            store,
            f"127.0.0.1:{alertmanager_port}" if alertmanager else None,
            self.scrape_interval,
            cluster=self.cluster.address if self.cluster else None,
            engines=tuple(self.cluster.engines) if self.cluster else (),
        )
        for name, text in configs(self.plan, thresholds, self.grafana_url).items():
            write_atomically(self.workdir / name, text)
        if prometheus and self.plan.prometheus:
            self._spawn(
                "prometheus",
                [
                    prometheus,
                    f"--config.file={self.workdir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.workdir / 'prometheus-data'}",
                    f"--web.listen-address={self.plan.prometheus}",
                ],
                "/-/ready",
                self.plan.prometheus,
            )
        if alertmanager and self.plan.alertmanager:
            self._spawn(
                "alertmanager",
                [
                    alertmanager,
                    f"--config.file={self.workdir / 'alertmanager.yml'}",
                    f"--storage.path={self.workdir / 'alertmanager-data'}",
                    f"--web.listen-address={self.plan.alertmanager}",
                    "--cluster.listen-address=",
                ],  # no clustering: no fixed port 9094
                "/-/ready",
                self.plan.alertmanager,
            )
        for child in self.children:
            self._wait_ready(child)
        # stop() goes in the reverse of this order: the analyzer before the store it reads.
        self.children.remove(analyzer)
        self.children.append(analyzer)

    def _spawn(self, name: str, argv: list[str], ready_path: str, address: str | None = None) -> Child:
        """Start `argv`; a gpulens server (no `address`) listens on a port of its own choosing."""
        log_path = self.workdir / f"{name.replace(' ', '-')}.log"
        if address is None:
            argv = [*argv, "--web.listen-address", "127.0.0.1:0"]
        with open(log_path, "w") as log_file:
            process = subprocess.Popen(
                argv, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent
            )
        child = Child(name, process, log_path, address, ready_path)
        self.children.append(child)
        return child

    def _address(self, child: Child, timeout: float = 30.0) -> str:
        """Where `child` listens, waiting for a gpulens server to log the port it was given."""
        deadline = time.monotonic() + timeout
        while child.address is None:
            self._check_running(child)
            try:
                child.address = listening_address(child.log_path.read_text(errors="replace"))
            except OSError:
                pass
            if child.address is None:
                if time.monotonic() > deadline:
                    raise DemoError(
                        f"{child.name} did not say where it listens within {timeout:.0f} s; its log "
                        f"({child.log_path}) ends:\n{child.log_tail()}"
                    )
                time.sleep(0.1)
        return child.address

    @staticmethod
    def _check_running(child: Child) -> None:
        if child.process.poll() is not None:
            raise DemoError(
                f"{child.name} exited with status {child.process.returncode}; its log "
                f"({child.log_path}) ends:\n{child.log_tail()}"
            )

    def _wait_ready(self, child: Child, timeout: float = 30.0) -> None:
        import requests

        url = f"http://{self._address(child, timeout)}{child.ready_path}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._check_running(child)
            try:
                if requests.get(url, timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise DemoError(
            f"{child.name} did not become ready at {url} within {timeout:.0f} s; its log "
            f"({child.log_path}) ends:\n{child.log_tail()}"
        )

    def endpoints(self) -> dict[str, str]:
        plan = self.plan
        assert plan is not None, "start() the stack first"
        out = {f"exporter {node}": f"http://{address}/metrics" for node, address in plan.exporters.items()}
        out["analyzer"] = f"http://{plan.analyzer}/"  # its page of verdicts; JSON at /api/v1/verdicts
        # Only links that answer on this system: Debian's Prometheus serves its classic UI alone
        # (/alerts is 404), and Debian's Alertmanager ships without its web UI's script (its API works).
        if plan.prometheus:
            prometheus = f"http://{plan.prometheus}"
            link = _answering([(f"{prometheus}/alerts", ""), (f"{prometheus}/classic/alerts", "")])
            if link:
                out["prometheus"] = link
        if plan.alertmanager:
            alertmanager = f"http://{plan.alertmanager}"
            link = _answering(
                [(f"{alertmanager}/#/alerts", f"{alertmanager}/script.js"), (f"{alertmanager}/api/v2/alerts", "")]
            )
            if link:
                out["alertmanager"] = link
        out["alert receiver"] = f"{plan.receiver_url}/"
        if plan.cluster:
            out["kube-state-metrics"] = f"http://{plan.cluster}/metrics"
        return out

    def stop(self) -> None:
        """SIGTERM each child, waiting for it before its inputs go (the analyzer first, Prometheus before
        the exporters, so that none logs a failed read at shutdown); SIGKILL what is still there after 10 s
        in all."""
        deadline = time.monotonic() + 10
        for child in reversed(self.children):
            if child.process.poll() is None:
                child.process.terminate()
            try:
                child.process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                child.process.kill()
                child.process.wait()
        self.children.clear()
        for server in (self.receiver, self.cluster):
            if server:
                server.stop()
        self.receiver = self.cluster = None


# --- the command ---------------------------------------------------------------------------------


def register(commands: Subcommands) -> None:
    from gpulens.core import flags

    p = commands.add_parser("demo", help="run the whole system on a simulated fleet (no GPU, no Docker)")
    flags.add(
        p,
        "--simulate.config",
        dest="fleet",
        default="",
        help="fleet YAML (default: the built-in demo fleet with every bottleneck class)",
    )
    flags.add(p, "--simulate.speed", dest="speed", type=float, default=5.0, help="simulated seconds per real second")
    flags.add(
        p,
        "--thresholds",
        default=str(DEMO_THRESHOLDS),
        help="thresholds and alert timings (default: the demo's, in minutes)",
    )
    flags.add(
        p,
        "--demo.dir",
        dest="workdir",
        default="",
        help="directory for configs, data and logs (default: a temporary one, removed at exit)",
    )
    flags.add(
        p,
        "--demo.duration",
        dest="duration",
        type=flags.duration,
        default=0.0,
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    flags.add(
        p,
        "--demo.no-prometheus",
        dest="no_prometheus",
        action="store_true",
        help="run only the exporters and the analyzer, even if Prometheus is installed",
    )
    flags.add(
        p,
        "--demo.grafana-url",
        dest="grafana_url",
        default="",
        help="a Grafana with gpulens' dashboards (gpulens dashboards) for the alerts to link to (default: they "
        "link to the analyzer's page, which the demo serves)",
    )
    flags.add(
        p,
        "--write-configs",
        dest="write_configs",
        default="",
        help="write the compose demo's configs to this directory and exit",
    )
    flags.add(
        p,
        "--demo.cluster-only",
        dest="cluster_only",
        default="",
        help="serve only the simulated cluster at this HOST:PORT: its kube-state-metrics and serving engines' "
        "metrics (docker-compose.yml's simulated-cluster service)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.write_configs:
        return _write_compose_configs(args)
    if args.cluster_only:
        return _serve_cluster(args)
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    keep = bool(args.workdir)
    workdir = Path(args.workdir) if keep else Path(tempfile.mkdtemp(prefix="gpulens-demo-"))
    stack = Stack(
        workdir,
        fleet_file=args.fleet,
        speed=args.speed,
        thresholds_file=args.thresholds,
        with_prometheus=not args.no_prometheus,
        grafana_url=args.grafana_url.rstrip("/"),
    )
    try:
        if not shutil.which("prometheus") and not args.no_prometheus:
            print(
                "prometheus is not installed, so the demo runs without it and without alerts "
                "(Debian: apt-get install prometheus prometheus-alertmanager).",
                file=sys.stderr,
            )
        print("starting gpulens on a simulated fleet...", file=sys.stderr)
        stack.start()
        print("\n".join(f"  {name:<22} {url}" for name, url in stack.endpoints().items()), file=sys.stderr)
        print(f"  {'configs and logs':<22} {workdir}" + ("" if keep else " (removed at exit)"), file=sys.stderr)
        print(
            "Pods need about two minutes of data before their class shows; pages follow. Ctrl-C stops.\n",
            file=sys.stderr,
        )
        _show_live(stack, stopping, args.duration)
    except (DemoError, ConfigError, OSError) as e:
        print(f"gpulens demo: {e}", file=sys.stderr)
        return 1
    finally:
        stack.stop()
        if not keep:
            shutil.rmtree(workdir, ignore_errors=True)
    print("gpulens demo: stopped, nothing left running.", file=sys.stderr)
    return 0


#: The speed of docker-compose.yml's simulated exporters (--simulate.speed).
COMPOSE_SPEED = 5.0


def analyzer_thresholds(thresholds: Thresholds, speed: float) -> str:
    """The --thresholds file the demo's analyzer judges a fleet played `speed` times faster than real time
    with: `thresholds`, their workload durations and rates scaled to that clock (Thresholds.at_speed)."""
    return thresholds.at_speed(speed).to_yaml(
        f"Generated by gpulens demo: the demo's thresholds for a fleet played {speed:g} times faster than real\n"
        f"time ({', '.join(WORKLOAD_DURATIONS)} divided by {speed:g}, {', '.join(WORKLOAD_RATES)} multiplied)."
    )


def compose_configs(thresholds: Thresholds, fleet_file: str = "") -> dict[str, str]:
    """The configs docker-compose.yml mounts: the same generators, with compose's service names;
    prometheus-gpu.yml for the `gpu` profile (one real node, no simulated cAdvisor)."""
    fleet = fleet_from_file(fleet_file or DEFAULT_FLEET)
    plan = Plan(
        {node.name: f"exporter-{node.name}:{EXPORTER_PORT}" for node in fleet},
        f"analyzer:{ANALYZER_PORT}",
        f"http://alert-receiver:{RECEIVER_PORT}",
        "prometheus:9090",
        "alertmanager:9093",
        scrape_interval=2.0,
        cluster=f"simulated-cluster:{CLUSTER_PORT}",
        engines=tuple((p.namespace, p.pod) for node in fleet for p in node.pods if p.engine),
    )
    gpu_plan = Plan(
        {"gpu-node": f"exporter-gpu:{EXPORTER_PORT}"},
        plan.analyzer,
        plan.receiver_url,
        plan.prometheus,
        plan.alertmanager,
        scrape_interval=2.0,
        simulated=False,
    )
    files = configs(plan, thresholds, COMPOSE_GRAFANA_URL)
    files["prometheus-gpu.yml"] = configs(gpu_plan, thresholds, COMPOSE_GRAFANA_URL)["prometheus.yml"]
    files["analyzer-thresholds.yaml"] = analyzer_thresholds(thresholds, COMPOSE_SPEED)
    return files


def _serve_cluster(args: argparse.Namespace) -> int:
    from gpulens.core.web import parse_listen_address

    try:
        host, port = parse_listen_address(args.cluster_only)
        nodes = fleet_from_file(args.fleet or DEFAULT_FLEET)
        server = SimulatedCluster(nodes, args.speed, host or "0.0.0.0", port)
    except ConfigError as e:
        print(f"gpulens demo: {e}", file=sys.stderr)
        return 2
    log.info(
        "serving the simulated cluster on %s (kube-state-metrics at /metrics, %d serving engines at %s)",
        server.address,
        len(server.engines),
        engine_path("NAMESPACE", "POD"),
    )
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    server.stop()
    return 0


def _write_compose_configs(args: argparse.Namespace) -> int:
    return write_generated(
        "demo", args.write_configs, lambda: compose_configs(Thresholds.load(args.thresholds), args.fleet)
    )


def _verdicts(stack: Stack) -> list[dict]:
    import requests

    assert stack.plan is not None, "start() the stack first"
    try:
        return requests.get(f"http://{stack.plan.analyzer}/api/v1/verdicts", timeout=2).json()["verdicts"]
    except (requests.RequestException, ValueError, KeyError):
        return []


def _view(stack: Stack, endpoints: Mapping[str, str], width: int, height: int) -> Group:
    """The live view (demo_view.py) of what the analyzer and the alert receiver say now."""
    firing = stack.receiver.firing() if stack.receiver else {}
    by_subject: dict[str, list[str]] = {}
    for (alertname, subject, path), _ in firing.items():
        by_subject.setdefault(subject, []).append(f"{alertname.removeprefix('Gpulens')} ({path.rsplit('/', 1)[-1]})")
    verdicts = _verdicts(stack)
    units = {v.get("unit", "") for v in verdicts}
    others = [
        f"{subject or '-'}: {', '.join(sorted(a))}" for subject, a in sorted(by_subject.items()) if subject not in units
    ]
    return demo_view.view(demo_view.rows_of(verdicts, by_subject), endpoints, others, width, height)


def _show_live(stack: Stack, stopping: threading.Event, duration: float, console: Console | None = None) -> None:
    """Refresh the table every 2 s (in place on a terminal, every 30 s as plain text otherwise)
    until Ctrl-C, `duration`, or a child exiting."""
    from rich.console import Console
    from rich.live import Live

    console = console or Console()
    if not console.is_terminal:
        console = Console(file=console.file, width=160)  # a log: no need to squeeze the table into 80 columns
    started = time.monotonic()
    endpoints = stack.endpoints()  # asked once: some are found by trying the links

    def drawn():
        size = console.size if console.is_terminal else (console.width, 10_000)  # a log scrolls: every row
        return _view(stack, endpoints, *size)

    def running() -> bool:
        if stopping.is_set():  # Ctrl-C reaches the children too: their exit is expected then
            return False
        for child in stack.children:
            if child.process.poll() is not None:
                raise DemoError(
                    f"{child.name} stopped unexpectedly (status {child.process.returncode}); its log ends:\n"
                    f"{child.log_tail()}"
                )
        return not (duration and time.monotonic() - started >= duration)

    if console.is_terminal:
        # Redrawn only when the data is read again (every 2 s), not by a timer in between, on a screen of its
        # own (the terminal's alternate screen, given back at the end): each frame is drawn from the top, cut to
        # the terminal's height, so that no line of an earlier, taller frame stays behind (tmux, small windows).
        live = Live(drawn(), console=console, auto_refresh=False, screen=True, vertical_overflow="ellipsis")
        with live:
            while running():
                stopping.wait(2)
                live.update(drawn(), refresh=True)
    else:
        while running():
            console.print(drawn())
            stopping.wait(30 if not duration else min(30, duration))
