"""`gpulens exporter`: the per-node exporter."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from prometheus_client import CollectorRegistry

from gpulens import __version__
from gpulens.core import flags
from gpulens.core.catalog import MODELS
from gpulens.core.config import ConfigError, require_positive
from gpulens.core.flags import Subcommands
from gpulens.core.web import WebConfig, parse_listen_address, serve
from gpulens.exporter.attribution import kubelet
from gpulens.exporter.attribution.attributor import Attribution, KubeletAttribution
from gpulens.exporter.collector import ExporterCollector
from gpulens.exporter.sampler import Sampler
from gpulens.exporter.sources import simulated
from gpulens.exporter.sources.base import Source, SourceUnavailable
from gpulens.exporter.sources.nvml import COLLECTORS
from gpulens.simulator import fleet
from gpulens.simulator.workloads import PROFILES

log = logging.getLogger("gpulens.exporter")

#: Not used by dcgm-exporter (9400), nvidia_gpu_exporter (9835) or node_exporter (9100).
DEFAULT_PORT = 9848


def register(commands: Subcommands) -> None:
    p = commands.add_parser(
        "exporter",
        help="serve GPU metrics for Prometheus",
        description="Serve per-GPU, per-MIG-instance and per-process metrics for Prometheus.",
    )
    flags.add(
        p,
        "--source",
        choices=["nvml", "dcgm", "simulated"],
        default="nvml",
        help="where GPU state comes from: the NVIDIA driver (plus dcgm-exporter with --dcgm.url), "
        "dcgm-exporter alone, or a simulated fleet (no GPU needed)",
    )
    flags.add(
        p,
        "--web.listen-address",
        dest="listen_address",
        default=f":{DEFAULT_PORT}",
        help="address to serve /metrics on",
    )
    flags.add(
        p, "--web.config.file", dest="web_config_file", default="", help="exporter-toolkit web config (TLS, basic auth)"
    )
    flags.add(
        p,
        "--sampler.interval",
        dest="interval",
        type=flags.duration,
        default=1.0,
        help="seconds between samples; busy and idle seconds are integrated at this rate",
    )
    flags.add(
        p,
        "--nvml.rediscover-interval",
        dest="rediscover_interval",
        type=flags.duration,
        default=60.0,
        help="seconds between re-enumerations of GPUs and MIG instances (MIG reconfiguration, GPUs back from reset)",
    )
    _dcgm_flags(p)
    _kubelet_flags(p)
    flags.add(
        p,
        "--path.procfs",
        dest="procfs",
        default="/proc",
        help="the host's /proc, to find the container of each GPU process (mount it with hostPID)",
    )
    flags.add(
        p,
        "--path.var-log",
        dest="var_log",
        default="/var/log",
        help="the host's /var/log, whose containers/ and pods/ links name the pod of each container",
    )
    _simulation_flags(p)
    for name, collector in COLLECTORS.items():
        flags.add(
            p,
            f"--collector.{name}",
            dest=f"collector_{name}",
            action=argparse.BooleanOptionalAction,
            default=True,
            help=f"read {collector.help} (NVML source)",
        )
    flags.add(
        p,
        "--record",
        default="",
        help="also append every sample to this trace CSV, for `gpulens report` later (docs/trace-format.md)",
    )
    flags.add(
        p,
        "--once",
        action="store_true",
        help="sample twice, --sampler.interval apart (GPM activity needs two samples), print the "
        "exposition to stdout and exit: a quick look at what the exporter sees",
    )
    p.set_defaults(run=run)


def _dcgm_flags(p: argparse.ArgumentParser) -> None:
    """Where a node's dcgm-exporter is read, how often, and how old its answer may be."""
    flags.add(
        p,
        "--dcgm.url",
        dest="dcgm_url",
        default="",
        help="this node's dcgm-exporter /metrics, e.g. http://localhost:9400/metrics: its profiling "
        "fields fill what NVML lacks (SM activity before Hopper)",
    )
    flags.add(
        p,
        "--dcgm.interval",
        dest="dcgm_interval",
        type=flags.duration,
        default=5.0,
        help="seconds between reads of dcgm-exporter",
    )
    flags.add(
        p,
        "--dcgm.timeout",
        dest="dcgm_timeout",
        type=flags.duration,
        default=2.0,
        help="seconds to wait for dcgm-exporter",
    )
    flags.add(
        p,
        "--dcgm.max-age",
        dest="dcgm_max_age",
        type=flags.duration,
        default=0.0,
        help="seconds after which DCGM values stop being served when dcgm-exporter stops answering "
        "(default 3 x --dcgm.interval)",
    )


def _kubelet_flags(p: argparse.ArgumentParser) -> None:
    """The kubelet's pod-resources socket, and what it is asked."""
    flags.add(
        p,
        "--kubelet.socket",
        dest="kubelet_socket",
        default=kubelet.DEFAULT_SOCKET,
        help="kubelet pod-resources socket, for the pod of each GPU; '' turns pod attribution off (bare metal)",
    )
    flags.add(
        p,
        "--kubelet.resource-names",
        dest="kubelet_resource_names",
        default=",".join(kubelet.DEFAULT_RESOURCE_NAMES),
        help="comma-separated extended resource names that are GPUs; a trailing * matches a family",
    )
    flags.add(
        p,
        "--kubelet.refresh-interval",
        dest="kubelet_refresh_interval",
        type=flags.duration,
        default=10.0,
        help="seconds between readings of the kubelet; a pod's series go within one interval of its end",
    )
    flags.add(
        p,
        "--kubelet.timeout",
        dest="kubelet_timeout",
        type=flags.duration,
        default=2.0,
        help="deadline in seconds of each call to the kubelet",
    )


def _simulation_flags(p: argparse.ArgumentParser) -> None:
    """A simulated node in place of NVML: its GPUs, profiles, seed and speed."""
    flags.add(
        p,
        "--simulate.config",
        dest="simulate_config",
        default="",
        help=f"fleet YAML for --source=simulated (default: the built-in demo fleet, {fleet.DEFAULT_FLEET.name})",
    )
    flags.add(
        p,
        "--simulate.node",
        dest="simulate_node",
        default="",
        help="which node of the fleet this exporter plays (default: the first)",
    )
    flags.add(
        p,
        "--simulate.gpus",
        dest="simulate_gpus",
        type=int,
        default=0,
        help="instead of a fleet file: this many GPUs on one node",
    )
    flags.add(
        p,
        "--simulate.model",
        dest="simulate_model",
        default="H100-SXM5-80GB",
        help=f"GPU model for --simulate.gpus: {', '.join(MODELS)}",
    )
    flags.add(
        p,
        "--simulate.profiles",
        dest="simulate_profiles",
        default="healthy_training",
        help=f"comma-separated workload profiles for --simulate.gpus, assigned round-robin: {', '.join(PROFILES)}",
    )
    flags.add(p, "--simulate.seed", dest="simulate_seed", type=int, default=0, help="random seed of the simulation")
    flags.add(
        p,
        "--simulate.speed",
        dest="simulate_speed",
        type=float,
        default=1.0,
        help="run the simulated workloads this many times faster than real time",
    )


def build_source(args: argparse.Namespace) -> tuple[Source, Attribution]:
    """The configured source, not yet started, and its pod attribution. Raises ConfigError on bad
    flags."""
    # Each source's modules load only when it is chosen: requests (dcgm-exporter) and the driver
    # bindings cost start time and memory on every node that does not use them.
    fetcher = None
    if args.dcgm_url or args.source == "dcgm":
        from gpulens.exporter.sources.dcgm import DcgmAttribution, DcgmFetcher, DcgmSource

        if not args.dcgm_url.startswith(("http://", "https://")):
            raise ConfigError(
                f"--dcgm.url {args.dcgm_url!r} is not an http(s) URL; give dcgm-exporter's "
                "/metrics, for example http://localhost:9400/metrics"
            )
        fetcher = DcgmFetcher(args.dcgm_url, args.dcgm_interval, args.dcgm_timeout, args.dcgm_max_age or None)
    if args.source == "dcgm":
        assert fetcher is not None  # built above for --source dcgm, or ConfigError
        return DcgmSource(fetcher), DcgmAttribution(fetcher)
    if args.source == "nvml":
        from gpulens.exporter.sources.nvml import NvmlSource

        resources = tuple(r.strip() for r in args.kubelet_resource_names.split(",") if r.strip())
        attribution = KubeletAttribution(
            args.kubelet_socket,
            resources,
            args.kubelet_refresh_interval,
            args.kubelet_timeout,
            args.procfs,
            args.var_log,
        )
        collectors = frozenset(name for name in COLLECTORS if getattr(args, f"collector_{name}"))
        nvml = NvmlSource(rediscover_seconds=args.rediscover_interval, collectors=collectors)
        if fetcher is None:
            return nvml, attribution
        from gpulens.exporter.sources.dcgm import MergedSource

        return MergedSource(nvml, fetcher), attribution
    require_positive(("--simulate.speed", args.simulate_speed), unit="factor")
    if args.simulate_gpus:
        if not 0 < args.simulate_gpus <= 64:  # as a fleet file's nodes: one node's GPUs
            raise ConfigError(
                f"--simulate.gpus must be from 1 to 64 (one node's GPUs), got {args.simulate_gpus}; a larger fleet is "
                "several nodes: --simulate.config FLEET.yaml"
            )
        if args.simulate_model not in MODELS:
            raise ConfigError(f"--simulate.model {args.simulate_model!r} is unknown; choose one of {', '.join(MODELS)}")
        profiles = [p.strip() for p in args.simulate_profiles.split(",") if p.strip()]
        for profile in profiles:
            if profile not in PROFILES:
                raise ConfigError(
                    f"--simulate.profiles: unknown workload profile {profile!r}; choose one of {', '.join(PROFILES)}"
                )
        nodes = fleet.fleet_from_flags(
            args.simulate_gpus,
            args.simulate_model,
            profiles,
            args.simulate_seed,
        )
    else:
        nodes = fleet.fleet_from_file(args.simulate_config or fleet.DEFAULT_FLEET, args.simulate_seed)
    for node in nodes:
        if node.name == args.simulate_node or not args.simulate_node:
            log.warning(
                "serving SIMULATED data (--source simulated): node %s, not this machine's GPUs; "
                'gpulens_exporter_build_info{source="simulated"} says so to every scraper',
                node.name,
            )
            source = simulated.SimulatedSource(node, speed=args.simulate_speed)
            return source, simulated.SimulatedAttribution(node, source.clock)
    raise ConfigError(
        f"--simulate.node {args.simulate_node!r} is not in the fleet; its nodes are {', '.join(n.name for n in nodes)}"
    )


def run(args: argparse.Namespace) -> int:
    try:
        address = parse_listen_address(args.listen_address)
        web_config = WebConfig.load(args.web_config_file)
        source, attribution = build_source(args)
    except (ConfigError, SourceUnavailable) as e:
        print(f"gpulens exporter: {e}", file=sys.stderr)
        return 2
    attribution.start()  # gets ready while the source starts
    try:
        source.start()
    except (ConfigError, SourceUnavailable) as e:
        attribution.close()
        print(f"gpulens exporter: {e}", file=sys.stderr)
        return 2
    recorder = None
    if args.record:
        from gpulens.exporter.recorder import Recorder, RecordError

        try:
            recorder = Recorder(args.record, node=getattr(getattr(source, "node", None), "name", ""))
        except OSError as e:
            print(f"gpulens exporter: cannot open --record file {args.record}: {e.strerror}", file=sys.stderr)
            return 2
        except RecordError as e:
            print(f"gpulens exporter: {e}", file=sys.stderr)
            return 2
    # The first sample waits for the kubelet's first answer (at most one call's deadline): the first
    # scrape has its pods.
    attribution.first_reading(args.kubelet_timeout)
    sampler = Sampler(source, args.interval, attribution=attribution, on_sample=recorder.write if recorder else None)
    registry = CollectorRegistry(auto_describe=False)
    collector = ExporterCollector(sampler, __version__, source.name)
    registry.register(collector)
    if args.once:
        sampler.tick()
        time.sleep(args.interval)
        sampler.tick()
        sys.stdout.write(collector.render_text().decode())
        attribution.close()
        source.close()
        return 0

    sampler.start()

    def health() -> tuple[bool, str]:
        age = time.monotonic() - sampler.snapshot.taken_at
        if sampler.snapshot.node is None:
            return False, "no sample taken yet"
        if age > max(10 * args.interval, 10):
            return False, f"the latest sample is {age:.0f} s old: the {source.name} source is stuck"
        return True, "ok"

    try:
        # The simulated fleet also plays its kubelet's cAdvisor, so the demo has pod CPU use.
        routes = (
            {"/metrics/cadvisor": lambda _query: source.cadvisor_text()}
            if isinstance(source, simulated.SimulatedSource)
            else {}
        )
        server = serve(
            registry,
            address,
            web_config,
            title="gpulens exporter",
            health=health,
            exposition=collector.exposition,
            routes=routes,
        )
    except ConfigError as e:
        print(f"gpulens exporter: {e}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    log.info("serving %s source on %s:%d/metrics", source.name, host or "*", port)
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    log.info("shutting down")
    server.shutdown()
    sampler.stop()
    attribution.close()
    source.close()
    if recorder:
        recorder.close()
    return 0
