"""Who receives which alert: the alert settings file and the Alertmanager config generated from it.

A deployment says in one YAML file (`gpulens alerts --alerting.config FILE`, example in
alerts/settings.example.yaml) which alerts page (`severities`), which Alertmanager receivers exist
(`receivers`, written as Alertmanager writes them), and who owns what (`owners`): the nodes' owner gets
GPU, node and exporter alerts, each namespace's owner its pods' alerts, the default owner the rest. Every
owner has a receiver for pages (severity critical) and one for tickets (everything else).

Grouping and muting follow kube-prometheus and the issue this came from: pod alerts are grouped by
cluster, namespace and alert, so a hundred replicas with one problem make one notification (each class
ticket is an alert of its own; the page carries its pods' causes as annotations, which must not split
it, since a label that changes restarts an alert's `for:`); GPU alerts by cluster, node and alert. While
the low-SM page fires for a pod, its class tickets are muted (the page carries the same verdict); while a
node's exporter is down, its pod and GPU alerts are muted (they are blind); while a GPU is lost, its
other faults are.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from gpulens.alerts import rules
from gpulens.core.config import ConfigError, read_yaml
from gpulens.core.mixin import MixinConfig
from gpulens.core.schema import ListOf, MapOf, Opaque, Record, Text, validate

SEVERITIES = ("critical", "warning")
#: The page: while it fires for a pod, the pod's other underuse alerts are muted.
PAGE = "GpulensPodLowSmActivity"
#: Alerts about a pod's use of its GPUs, muted by the page (the application-XID ticket is another matter).
CLASS_ALERTS = (
    "GpulensPodGpuIdle",
    "GpulensPodDataStarvation",
    "GpulensPodMemoryFragmentation",
    "GpulensPodHostStall",
)
#: `cluster` is the external label multi-cluster setups (Thanos, Mimir) add; absent, it groups nothing apart.
POD_GROUPING = ["cluster", "namespace", "alertname"]
NODE_GROUPING = ["cluster", "node", "alertname"]


@dataclass(frozen=True)
class Owner:
    """The receivers of one owner: `pages` for critical alerts, `tickets` for the others."""

    pages: str
    tickets: str


@dataclass(frozen=True)
class AlertSettings:
    """A deployment's alert settings; the defaults deliver pages and tickets to one webhook."""

    severities: dict[str, str] = field(default_factory=dict)
    #: Receiver name -> Alertmanager receiver body (webhook_configs, slack_configs, pagerduty_configs, ...).
    receivers: dict[str, dict] = field(default_factory=dict)
    default: Owner = Owner("pages", "tickets")
    #: The owner of GPUs, nodes and exporters (hardware and driver faults); the default owner when unset.
    nodes: Owner | None = None
    #: (regular expression on the namespace, owner), first match wins.
    namespaces: tuple[tuple[str, Owner], ...] = ()

    @classmethod
    def load(cls, path: str, webhook_url: str) -> AlertSettings:
        """The settings in `path` (defaults when empty); receivers default to `webhook_url`'s /pages and
        /tickets. ConfigError naming the key and the fix."""
        base = webhook_url.rstrip("/")
        webhook = {
            name: {"webhook_configs": [{"url": f"{base}/{name}", "send_resolved": True}]}
            for name in ("pages", "tickets")
        }
        if not path:
            return cls(receivers=webhook)
        source = f"--alerting.config {path}"
        document = validate(read_yaml(path, "--alerting.config"), _schema(), source, empty={})
        receivers = document.get("receivers", webhook)
        owners = document.get("owners", {})

        def owner(entry: dict, where: str) -> Owner:
            for role in ("pages", "tickets"):
                if entry[role] not in receivers:
                    raise ConfigError(
                        f"{source}: {where}.{role}: no receiver named {entry[role]!r}; "
                        f"add it under receivers or use one of {', '.join(sorted(receivers))}"
                    )
            return Owner(entry["pages"], entry["tickets"])

        if "receivers" in document and "default" not in owners:
            raise ConfigError(f"{source}: owners.default missing: say which receivers get what no other owner takes")
        return cls(
            severities=document.get("severities", {}),
            receivers=receivers,
            default=owner(owners["default"], "owners.default") if "default" in owners else cls.default,
            nodes=owner(owners["nodes"], "owners.nodes") if "nodes" in owners else None,
            namespaces=tuple(
                (entry["match"], owner(entry, f"owners.namespaces[{i}]"))
                for i, entry in enumerate(owners.get("namespaces", []))
            ),
        )


def _is_regex(text: str) -> bool:
    try:
        re.compile(text)
    except re.error:
        return False
    return True


def _schema() -> Record:
    owner = {"pages": Text(what="a receiver name"), "tickets": Text(what="a receiver name")}
    alert_names = tuple(a.name for a in rules.alerts(MixinConfig()))
    return Record(
        {
            "severities": MapOf(Text(choices=SEVERITIES), key=Text(choices=alert_names)),
            "receivers": MapOf(Opaque("an Alertmanager receiver (webhook_configs, slack_configs, ...)")),
            "owners": Record(
                {
                    "default": Record(owner, required=("pages", "tickets")),
                    "nodes": Record(owner, required=("pages", "tickets")),
                    "namespaces": ListOf(
                        Record(
                            {"match": Text(valid=_is_regex, what="a regular expression on the namespace"), **owner},
                            required=("match", "pages", "tickets"),
                        )
                    ),
                }
            ),
        },
        what="a mapping",
    )


def _matcher(label: str, op: str, value: str) -> str:
    """An Alertmanager matcher with the value quoted and escaped (json quoting is Alertmanager's)."""
    return f"{label}{op}{json.dumps(value)}"


def _by_severity(owner: Owner) -> list[dict]:
    return [{"receiver": owner.pages, "matchers": [_matcher("severity", "=", "critical")]}, {"receiver": owner.tickets}]


def alertmanager_config(settings: AlertSettings) -> dict:
    """The Alertmanager config: receivers, the routing tree by owner and severity, and inhibitions."""
    routes: list[dict] = [
        {
            "matchers": [_matcher("component", "=~", "gpu|exporter")],
            "group_by": NODE_GROUPING,
            "routes": _by_severity(settings.nodes or settings.default),
        }
    ]
    routes += [
        {"matchers": [_matcher("namespace", "=~", pattern)], "routes": _by_severity(owner)}
        for pattern, owner in settings.namespaces
    ]
    routes.append(_by_severity(settings.default)[0])
    return {
        "route": {
            "receiver": settings.default.tickets,
            "group_by": POD_GROUPING,
            # kube-prometheus' timings: a group's first notification waits 30 s for its siblings.
            "group_wait": "30s",
            "group_interval": "5m",
            "repeat_interval": "12h",
            "routes": routes,
        },
        "receivers": [{"name": name, **body} for name, body in settings.receivers.items()],
        "inhibit_rules": [
            {
                "source_matchers": [_matcher("alertname", "=", PAGE)],
                "target_matchers": [_matcher("alertname", "=~", "|".join(CLASS_ALERTS))],
                "equal": ["cluster", "namespace", "pod"],
            },
            {
                "source_matchers": [_matcher("alertname", "=", "GpulensExporterDown")],
                "target_matchers": [_matcher("component", "=~", "pod|gpu")],
                "equal": ["cluster", "node"],
            },
            {
                "source_matchers": [_matcher("alertname", "=", "GpulensGpuLost")],
                "target_matchers": [_matcher("alertname", "=~", "GpulensGpuThrottled|GpulensGpuXidFault")],
                "equal": ["cluster", "uuid"],
            },
        ],
    }
