"""`gpulens analyzer`: the live service's flags, and the wiring of its input, its cycle (analyzer/runs/service.py),
its page and its web server."""

from __future__ import annotations

import argparse
import logging
import sys

from gpulens.analyzer.cli.common import check_shard, common_flags, config_of, mixin_config, store_auth, store_flags
from gpulens.core import flags
from gpulens.core.config import parse_duration
from gpulens.core.flags import Subcommands


def register(commands: Subcommands) -> None:
    a = commands.add_parser(
        "analyzer",
        help="serve live verdicts for every pod as Prometheus metrics",
        description="Classify every pod's GPU bottleneck on a cycle, from Prometheus or "
        "from exporters directly, and serve the verdicts and the waste.",
    )
    flags.add(
        a,
        "--input.prometheus",
        dest="prometheus",
        default="",
        help="Prometheus (or Thanos, Mimir, VictoriaMetrics) URL to read exporter metrics from",
    )
    flags.add(
        a,
        "--input.exporter",
        dest="exporters",
        action="append",
        default=[],
        help="an exporter's /metrics URL to scrape directly, optionally node=URL; repeat per exporter",
    )
    store_flags(a, step_help="range-query step in seconds", step=15.0)
    flags.add(
        a,
        "--shard.count",
        dest="shard_count",
        type=int,
        default=1,
        help="analyzer replicas sharing the fleet over one Prometheus; each judges the nodes whose name hashes "
        "to its --shard.index (Prometheus' hashmod)",
    )
    flags.add(
        a,
        "--shard.index",
        dest="shard_index",
        type=int,
        default=0,
        help="this replica's share, 0 to --shard.count - 1 (in a StatefulSet: the pod's index)",
    )
    flags.add(
        a,
        "--exporter.scrape-interval",
        dest="scrape_interval",
        type=flags.duration,
        default=2.0,
        help="seconds between direct scrapes of the exporters",
    )
    flags.add(
        a,
        "--analysis.window",
        dest="window",
        type=flags.duration,
        default=600.0,
        help="seconds of history each verdict looks at",
    )
    flags.add(
        a, "--analysis.interval", dest="interval", type=flags.duration, default=15.0, help="seconds between verdicts"
    )
    flags.add(
        a,
        "--prometheus.read-parts",
        dest="read_parts",
        type=int,
        default=4,
        help="with --input.prometheus: the parts the queries are split into, read in turns: a cycle of one step "
        "reads one, so Prometheus' cost a cycle falls as much, and verdicts rest on the steps every part has "
        "read (3 steps behind the newest at 4); 1 reads every query every cycle",
    )
    flags.add(
        a,
        "--analysis.state-file",
        dest="state_file",
        default="",
        help="with --input.prometheus: a file to keep the window read in (written every minute and at shutdown), "
        "so that a restart reads only what it missed; '' keeps none",
    )
    flags.add(
        a,
        "--analysis.history",
        dest="history",
        default="1d",
        help="how much of each pod's past to keep and serve (episodes, time and waste by class): 6h, 1d, 7d",
    )
    flags.add(
        a,
        "--analysis.team-label",
        dest="team_label",
        default="",
        help="the pod (or namespace) label naming a pod's team, read from kube-state-metrics' kube_pod_labels",
    )
    flags.add(
        a,
        "--analysis.config",
        dest="analysis_config",
        default="",
        help="settings YAML: workload_kinds rules naming what your pods are by label, image or owner "
        "(docs/workloads.md)",
    )
    flags.add(a, "--web.listen-address", dest="listen_address", default=":9849", help="address to serve on")
    flags.add(a, "--web.config.file", dest="web_config_file", default="", help="exporter-toolkit web config")
    common_flags(a)
    a.set_defaults(run=run_service)


def run_service(args: argparse.Namespace) -> int:
    import signal
    import threading

    from prometheus_client import CollectorRegistry

    from gpulens.analyzer.inputs.kinds import load_pools, load_rules
    from gpulens.analyzer.inputs.live import AnalyzerInput, ExporterInput, PrometheusInput
    from gpulens.analyzer.inputs.window import MAX_READ_PARTS, Shard
    from gpulens.analyzer.runs.livepage import LivePage
    from gpulens.analyzer.runs.service import AnalyzerService
    from gpulens.core.config import ConfigError, redact
    from gpulens.core.web import WebConfig, parse_listen_address, serve

    try:
        thresholds, prices = config_of(args)
        if bool(args.prometheus) == bool(args.exporters):
            raise ValueError("give exactly one input: --input.prometheus URL, or one or more --input.exporter URL")
        check_shard(args.shard_count, args.shard_index)
        if not 1 <= args.read_parts <= MAX_READ_PARTS:
            raise ValueError(
                f"--prometheus.read-parts {args.read_parts}: give 1 (every query every cycle) to {MAX_READ_PARTS}"
            )
        if args.shard_count > 1 and not args.prometheus:
            raise ValueError(
                "--shard.count needs --input.prometheus: with --input.exporter, give each replica its own exporters"
            )
        shard = Shard(args.shard_index, args.shard_count) if args.shard_count > 1 else None
        source: AnalyzerInput
        if args.prometheus:
            if not args.prometheus.startswith(("http://", "https://")):
                raise ValueError(f"--input.prometheus {args.prometheus!r} is not an http(s) URL")
            source = PrometheusInput(
                args.prometheus,
                args.window,
                args.query_step,
                timeout=args.timeout,
                selector=args.selector,
                price_metric=args.price_metric,
                shard=shard,
                auth=store_auth(args),
                compression=args.compression,
                dcgm_selector=args.dcgm_selector,
                config=mixin_config(args, thresholds),
                team_label=args.team_label,
                rules=load_rules(args.analysis_config),
                state_file=args.state_file,
                parts=args.read_parts,
                pools=load_pools(args.analysis_config),
            )
        else:
            source = ExporterInput(ExporterInput.parse_targets(args.exporters), args.window, args.scrape_interval)
        history = parse_duration(args.history, "--analysis.history")
        address = parse_listen_address(args.listen_address)
        web_config = WebConfig.load(args.web_config_file)
    except (ValueError, ConfigError) as e:
        print(f"gpulens analyzer: {e}", file=sys.stderr)
        return 2
    # Replicas sharing a Prometheus read it each at its own point of the interval, not all at once.
    phase = args.interval * args.shard_index / args.shard_count
    grid = args.query_step if args.prometheus else None  # the step grid its range queries read
    service = AnalyzerService(source, thresholds, prices, args.interval, history=history, phase=phase, grid_step=grid)
    live = LivePage(service)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(service)
    try:
        server = serve(
            registry,
            address,
            web_config,
            title="gpulens analyzer",
            health=service.health,
            ready=service.ready,
            routes={
                "/": live.page,
                "/api/v1/page": live.changes,
                "/api/v1/verdicts": service.verdicts_json,
                "/api/v1/plan": service.plan_json,
                "/api/v1/changes": service.changes_json,
            },
            exposition=service.exposition,
        )
    except ConfigError as e:
        print(f"gpulens analyzer: {e}", file=sys.stderr)
        return 2
    service.start()
    log = logging.getLogger("gpulens.analyzer")
    host, port = address[0], server.server_address[1]
    reading = f"Prometheus at {redact(args.prometheus)}" if args.prometheus else f"{len(args.exporters)} exporter(s)"
    log.info(
        "serving on %s:%d (the page of verdicts at /, /metrics, /api/v1/verdicts, /api/v1/plan); judging the "
        "last %g s of %s "
        "every %g s",
        host or "*",
        port,
        args.window,
        reading,
        args.interval,
    )
    if shard is not None:
        log.info("judging %s: the nodes whose name hashes to %d modulo %d", shard, shard.index, shard.count)
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
    log.info("shutting down")
    service.stop()
    server.shutdown()
    return 0
