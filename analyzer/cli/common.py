"""What the analyzer's commands that read a store share: its flags (selectors, step, time-out, credentials),
the thresholds and prices every command takes, the typed records a run is given (analyzer/runs/report.py)
made of them, and how a time or a span given on the command line is read."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from gpulens.core import catalog, flags, mixin
from gpulens.core.config import parse_duration
from gpulens.core.thresholds import Thresholds
from gpulens.core.times import rfc3339

if TYPE_CHECKING:
    from gpulens.analyzer.inputs.store import StoreAuth
    from gpulens.analyzer.runs.report import Attribution, StoreReport, StoreSource
    from gpulens.core.mixin import MixinConfig


def store_flags(p: argparse.ArgumentParser, step_help: str, step: float) -> None:
    """What reading a store takes, the same for the report and the service: selectors, step, time-out and
    credentials (analyzer/inputs/store.py). Each flag's default is kept (`store_defaults`), so that a report of
    files can refuse the flags it would ignore."""
    defaults: dict[str, tuple[str, object]] = {}

    def add(flag: str, **kwargs: Any) -> None:
        flags.add(p, flag, **kwargs)
        defaults[kwargs["dest"]] = (flag, p.get_default(kwargs["dest"]))

    add(
        "--prometheus.selector",
        dest="selector",
        default="",
        help='label matchers added to every gpulens series besides its job (--exporter.job), e.g. cluster="eu-1"',
    )
    add(
        "--prometheus.dcgm-selector",
        dest="dcgm_selector",
        default="",
        help='label matchers added to every dcgm-exporter series besides its job (--dcgm.job), e.g. cluster="eu-1"',
    )
    add(
        "--prometheus.dcgm-pod-labels",
        dest="dcgm_pod_labels",
        choices=["auto", "exported", "plain"],
        default="auto",
        help="where dcgm-exporter's series name the GPU's pod: exported_pod (the GPU Operator's ServiceMonitor), "
        "pod (honorLabels), or auto: exported_pod wherever a series has it",
    )
    mixin.add_job_flags(add, named=False)
    add("--prometheus.step", dest="query_step", type=flags.duration, default=step, help=step_help)
    add("--prometheus.timeout", dest="timeout", type=flags.duration, default=30.0, help="seconds a query may take")
    add(
        "--prometheus.compression",
        dest="compression",
        choices=["auto", "gzip", "none"],  # store.COMPRESSIONS, not imported: the exporter shares this CLI
        default="auto",
        help="answers gzipped (for slow or metered links) or not (none: the store spends about half the CPU); "
        "auto: none for a store on this host or a Kubernetes service, gzip elsewhere (docs/stores.md)",
    )
    add(
        "--prometheus.bearer-token-file",
        dest="bearer_token_file",
        default="",
        help="file holding a bearer token for the store (re-read when it changes)",
    )
    add("--prometheus.basic-auth.username", dest="basic_auth_username", default="", help="basic auth user")
    add(
        "--prometheus.basic-auth.password-file",
        dest="basic_auth_password_file",
        default="",
        help="file holding the basic auth password",
    )
    add(
        "--prometheus.header",
        dest="headers",
        action="append",
        default=[],
        help="'Name: value' sent with every query, e.g. 'X-Scope-OrgID: team-a' for a Mimir tenant; repeat",
    )
    add(
        "--prometheus.price-metric",
        dest="price_metric",
        default="node_gpu_hourly_cost",
        help="metric of USD per GPU-hour by node (OpenCost's): the live analyzer prices the nodes it prices by it "
        "over --prices, a report and a digest compare their cost with it (docs/showback.md); '' reads none",
    )
    add("--prometheus.ca-file", dest="ca_file", default="", help="CA certificate (PEM) of the store")
    add("--prometheus.cert-file", dest="cert_file", default="", help="client certificate (PEM) for mTLS")
    add("--prometheus.key-file", dest="key_file", default="", help="client certificate's key (PEM)")
    p.set_defaults(store_defaults=defaults)


def store_auth(args: argparse.Namespace) -> StoreAuth:
    """The store's credentials from the flags, checked: ConfigError naming the flag otherwise."""
    from gpulens.analyzer.inputs.store import StoreAuth

    auth = StoreAuth(
        bearer_token_file=args.bearer_token_file,
        basic_auth_username=args.basic_auth_username,
        basic_auth_password_file=args.basic_auth_password_file,
        headers=tuple(StoreAuth.parse_header(h) for h in args.headers),
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
    )
    auth.check()
    return auth


def mixin_config(args: argparse.Namespace, thresholds: Thresholds) -> MixinConfig:
    from gpulens.core.mixin import MixinConfig

    return MixinConfig(
        thresholds=thresholds,
        dcgm_pod_labels=args.dcgm_pod_labels,
        **{name: getattr(args, name) for name in mixin.JOBS_READ},
    )


def common_flags(p: argparse.ArgumentParser) -> None:
    flags.add(p, "--thresholds", default="", help="YAML overriding analyzer thresholds (gpulens/core/thresholds.py)")
    flags.add(p, "--prices", default="", help="YAML of GPU model: USD per GPU-hour (gpulens/core/catalog.py)")


def config_of(args: argparse.Namespace) -> tuple[Thresholds, dict[str, float]]:
    return Thresholds.load(args.thresholds), catalog.load_prices(args.prices)


def attribution(args: argparse.Namespace, thresholds: Thresholds) -> Attribution:
    """What the flags say attributes pods: the jobs read, --team-label and --analysis.config."""
    from gpulens.analyzer.runs.report import Attribution

    return Attribution(mixin_config(args, thresholds), args.team_label, args.analysis_config)


def store_source(args: argparse.Namespace, thresholds: Thresholds) -> StoreSource:
    """How the flags say to reach and read the store (credentials checked: ConfigError naming the flag)."""
    from gpulens.analyzer.runs.report import StoreSource

    return StoreSource(
        args.prometheus,
        store_auth(args),
        args.timeout,
        args.compression,
        attribution(args, thresholds),
        args.selector,
        args.dcgm_selector,
    )


def changes_shown(args: argparse.Namespace) -> bool:
    """Whether the output shows the workloads' changes: every format but the CSVs of the pods, the waste and the
    cluster, whose store (or recording) is then not asked for them."""
    return not (args.format == "csv" and args.by not in ("change", "plan"))


def check_shard(count: int, index: int) -> None:
    """ValueError where --shard.count and --shard.index cannot name a share (the report's and the service's)."""
    if count < 1 or not 0 <= index < count:
        raise ValueError(
            f"--shard.index {index} of --shard.count {count}: give a count of 1 or more and an index from 0 to "
            "count - 1"
        )


def store_report(args: argparse.Namespace, thresholds: Thresholds, since_text: str, until_text: str) -> StoreReport:
    """The store report the flags ask for over `since_text` to `until_text` (--since's and --until's forms)."""
    import time

    from gpulens.analyzer.runs.report import StoreReport

    if not args.prometheus.startswith(("http://", "https://")):
        raise ValueError(f"--prometheus {args.prometheus!r} is not an http(s) URL")
    if not since_text:
        raise ValueError("--prometheus needs --since: how far back to read (7d, 24h, an RFC 3339 time or unix seconds)")
    end = when(until_text, "--until") if until_text else time.time()
    start = since(since_text, end)
    if start >= end:
        raise ValueError(f"--since {since_text} is not before --until {rfc3339(end)}")
    return StoreReport(
        store_source(args, thresholds),
        start,
        end,
        args.query_step,
        args.processes,
        tuple(args.merge),
        timelines=args.format == "html",
        changes=changes_shown(args),
        price_metric=args.price_metric,
    )


#: Seconds past which a bare --since number is a time (unix seconds, as --until takes), not a span: 31 years
#: (10**9 is 2001-09-09T01:46:40Z), more history than any store holds.
SINCE_IS_A_TIME = 1e9


def since(text: str, until: float) -> float:
    """--since as unix seconds: a duration before `until` (7d, or a number of seconds), else a time as --until
    takes it (RFC 3339, or unix seconds: a number too large to be a span of history, SINCE_IS_A_TIME)."""
    try:
        back = parse_duration(text, "--since")
    except ValueError:
        return when(text, "--since", "a duration (7d, 24h), ")
    return when(text, "--since") if back >= SINCE_IS_A_TIME else until - back


def when(text: str, flag: str, or_else: str = "") -> float:
    from gpulens.analyzer.inputs.readers import parse_timestamp

    try:
        return parse_timestamp(text)
    except ValueError:
        raise ValueError(
            f"{flag} {text!r} is not a time: give {or_else}RFC 3339 (2026-11-23T00:00:00Z) or unix seconds"
        ) from None
