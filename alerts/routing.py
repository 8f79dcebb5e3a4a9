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
from gpulens.core.mixin import BUDGET_SCOPES, MixinConfig
from gpulens.core.schema import ListOf, MapOf, Number, Opaque, Record, Text, validate

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
    #: (regular expression on the team, owner), first match wins, before the namespaces: the alerts that carry
    #: a workload's team (a change that regressed) go to the team.
    teams: tuple[tuple[str, Owner], ...] = ()
    #: What each team and namespace may spend on GPUs in USD a month (`budgets`: teams, namespaces), by scope
    #: (mixin.BUDGET_SCOPES) and name: the budget alerts follow each (docs/showback.md, "Budgets").
    budgets: dict[str, dict[str, float]] = field(default_factory=dict)
    #: False for the default receivers (one webhook for pages, one for tickets), whose URLs a
    #: Kubernetes deployment sets in its settings rather than here.
    receivers_from_file: bool = False

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
            budgets={scope: document.get("budgets", {}).get(f"{scope}s", {}) for scope in BUDGET_SCOPES},
            receivers=receivers,
            receivers_from_file="receivers" in document,
            default=owner(owners["default"], "owners.default") if "default" in owners else cls.default,
            nodes=owner(owners["nodes"], "owners.nodes") if "nodes" in owners else None,
            namespaces=tuple(
                (entry["match"], owner(entry, f"owners.namespaces[{i}]"))
                for i, entry in enumerate(owners.get("namespaces", []))
            ),
            teams=tuple(
                (entry["match"], owner(entry, f"owners.teams[{i}]")) for i, entry in enumerate(owners.get("teams", []))
            ),
        )


def _is_regex(text: str) -> bool:
    """A regular expression Alertmanager reads: compiled by RE2 (google-re2), the syntax of Go's regexp, so
    that one Python reads and Go refuses (lookaround, backreferences, \\Z, verbose mode) is refused here,
    not by Alertmanager after the files are written."""
    import re2  # type: ignore[import-untyped]  # google-re2 ships no type information

    options = re2.Options()
    options.log_errors = False  # the schema's message says it, once
    try:
        re2.compile(text, options)
    except re2.error:
        return False
    return True


def _matched(owner: dict, what: str) -> ListOf:
    """A list of owners, each with the regular expression on `what` it takes."""
    return ListOf(
        Record(
            {
                "match": Text(
                    valid=_is_regex,
                    what=f"a regular expression on {what}, in the syntax Alertmanager reads (Go's RE2: no lookaround, "
                    "backreferences, possessive quantifiers, \\Z or verbose mode)",
                ),
                **owner,
            },
            required=("match", "pages", "tickets"),
        )
    )


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
                    "namespaces": _matched(owner, "the namespace"),
                    "teams": _matched(owner, "the team (the label the analyzer reads teams from)"),
                }
            ),
            "budgets": Record(
                {
                    f"{scope}s": MapOf(
                        Number(low=0, above_low=True, noun="a budget in USD a month (30 days)"),
                        key=Text(valid=bool, what=f"a {scope}'s name"),
                    )
                    for scope in BUDGET_SCOPES
                }
            ),
        },
        what="a mapping",
    )


@dataclass(frozen=True)
class Matcher:
    """One label matcher of a route or an inhibition, written in either of the forms below."""

    label: str
    op: str  # =, !=, =~ or !~
    value: str

    def text(self) -> str:
        """Alertmanager's form, the value quoted and escaped (json quoting is Alertmanager's)."""
        return f"{self.label}{self.op}{json.dumps(self.value)}"

    def resource(self) -> dict:
        """The AlertmanagerConfig resource's form."""
        return {"name": self.label, "matchType": self.op, "value": self.value}


@dataclass(frozen=True)
class Route:
    """A node of the routing tree; empty fields are inherited from the parent, as in Alertmanager."""

    receiver: str = ""
    matchers: tuple[Matcher, ...] = ()
    group_by: tuple[str, ...] = ()
    routes: tuple[Route, ...] = ()


@dataclass(frozen=True)
class Inhibition:
    """While an alert matching `source` fires, alerts matching `target` with the same `equal` labels are muted."""

    source: Matcher
    target: Matcher
    equal: tuple[str, ...]


#: kube-prometheus' timings, on the root route: a group's first notification waits 30 s for its siblings.
TIMINGS = {"group_wait": "30s", "group_interval": "5m", "repeat_interval": "12h"}


def _by_severity(owner: Owner) -> tuple[Route, ...]:
    return (Route(owner.pages, (Matcher("severity", "=", "critical"),)), Route(owner.tickets))


def routing_tree(settings: AlertSettings) -> Route:
    """The routing tree: GPU and exporter alerts to the nodes' owner, alerts that carry a team (a workload's
    change) to the team's owner, pod alerts to their namespace's owner, the rest to the default owner; pages
    (critical) and tickets apart under each owner."""
    node_route = Route(
        matchers=(Matcher("component", "=~", "gpu|exporter"),),
        group_by=tuple(NODE_GROUPING),
        routes=_by_severity(settings.nodes or settings.default),
    )
    team_routes = tuple(
        Route(matchers=(Matcher("team", "=~", pattern),), routes=_by_severity(owner))
        for pattern, owner in settings.teams
    )
    namespace_routes = tuple(
        Route(matchers=(Matcher("namespace", "=~", pattern),), routes=_by_severity(owner))
        for pattern, owner in settings.namespaces
    )
    return Route(
        settings.default.tickets,
        group_by=tuple(POD_GROUPING),
        routes=(node_route, *team_routes, *namespace_routes, _by_severity(settings.default)[0]),
    )


INHIBITIONS = (
    Inhibition(
        Matcher("alertname", "=", PAGE),
        Matcher("alertname", "=~", "|".join(CLASS_ALERTS)),
        ("cluster", "namespace", "pod"),
    ),
    Inhibition(
        Matcher("alertname", "=", "GpulensExporterDown"),
        Matcher("component", "=~", "pod|gpu"),
        ("cluster", "node"),
    ),
    Inhibition(
        Matcher("alertname", "=", "GpulensGpuLost"),
        Matcher("alertname", "=~", "GpulensGpuThrottled|GpulensGpuXidFault"),
        ("cluster", "uuid"),
    ),
)


def _route_config(route: Route, root: bool = False) -> dict:
    return {
        **({"receiver": route.receiver} if route.receiver else {}),
        **({"matchers": [m.text() for m in route.matchers]} if route.matchers else {}),
        **({"group_by": list(route.group_by)} if route.group_by else {}),
        **(TIMINGS if root else {}),
        **({"routes": [_route_config(r) for r in route.routes]} if route.routes else {}),
    }


def alertmanager_config(settings: AlertSettings) -> dict:
    """The Alertmanager config (alertmanager.yml): receivers, the routing tree and the inhibitions."""
    return {
        "route": _route_config(routing_tree(settings), root=True),
        "receivers": [{"name": name, **body} for name, body in settings.receivers.items()],
        "inhibit_rules": [
            {
                "source_matchers": [rule.source.text()],
                "target_matchers": [rule.target.text()],
                "equal": list(rule.equal),
            }
            for rule in INHIBITIONS
        ],
    }


#: The Secret holding what an AlertmanagerConfig takes only from a Secret (API keys, Slack URLs, passwords).
RECEIVER_SECRET = "gpulens-alertmanager"
#: Per Alertmanager integration: the fields the Prometheus operator's AlertmanagerConfig (v1alpha1) takes
#: only as a reference into a Secret. Integrations not listed here have no AlertmanagerConfig form yet.
SECRET_FIELDS: dict[str, tuple[str, ...]] = {
    "webhook_configs": (),
    "slack_configs": ("api_url",),
    "pagerduty_configs": ("routing_key", "service_key"),
    "email_configs": ("auth_password", "auth_secret"),
    "opsgenie_configs": ("api_key",),
    "msteams_configs": ("webhook_url",),
    "telegram_configs": ("bot_token",),
}
#: Alertmanager field names whose AlertmanagerConfig spelling is not plain camelCase.
_RESOURCE_SPELLING = {
    "api_url": "apiURL",
    "client_url": "clientURL",
    "icon_url": "iconURL",
    "image_url": "imageURL",
    "thumb_url": "thumbURL",
    "chat_id": "chatID",
    "message_thread_id": "messageThreadID",
    "require_tls": "requireTLS",
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return _RESOURCE_SPELLING.get(name, head + "".join(word.capitalize() for word in rest))


def secret_key(receiver: str, field_name: str) -> str:
    """The key in RECEIVER_SECRET of one receiver's secret field (a Secret key allows [-._a-zA-Z0-9])."""
    return re.sub(r"[^-._a-zA-Z0-9]", "-", f"{receiver}-{field_name}".replace("_", "-"))


def _receiver_resource(name: str, body: dict, where: str) -> dict:
    """One receiver in the AlertmanagerConfig's form; ConfigError for what that form cannot carry."""
    resource: dict = {"name": name}
    for integration, configs in body.items():
        if integration not in SECRET_FIELDS:
            raise ConfigError(
                f"{where}.{integration}: the Prometheus operator's AlertmanagerConfig is generated for "
                f"{', '.join(SECRET_FIELDS)}; use one of those or load alertmanager.yml into Alertmanager directly"
            )
        converted = []
        for i, config in enumerate(configs):
            entry: dict = {}
            for key, value in config.items():
                if isinstance(value, dict):
                    raise ConfigError(
                        f"{where}.{integration}[{i}].{key}: the AlertmanagerConfig takes it in another form; "
                        "drop it from the settings, or load alertmanager.yml into Alertmanager directly"
                    )
                if key in SECRET_FIELDS[integration]:
                    entry[_camel(key)] = {"name": RECEIVER_SECRET, "key": secret_key(name, key)}
                else:
                    entry[_camel(key)] = value
            converted.append(entry)
        resource[_camel(integration)] = converted
    return resource


def _route_resource(route: Route, root: bool = False) -> dict:
    return {
        **({"receiver": route.receiver} if route.receiver else {}),
        **({"matchers": [m.resource() for m in route.matchers]} if route.matchers else {}),
        **({"groupBy": list(route.group_by)} if route.group_by else {}),
        **({_camel(key): value for key, value in TIMINGS.items()} if root else {}),
        **({"routes": [_route_resource(r) for r in route.routes]} if route.routes else {}),
    }


def alertmanager_config_resource(settings: AlertSettings, namespace: str = "gpulens") -> dict:
    """The same routing as an AlertmanagerConfig (monitoring.coreos.com/v1alpha1) for the Prometheus operator.

    Secret fields (API keys, Slack URLs) become references into the Secret RECEIVER_SECRET. The
    operator confines such a resource to alerts labelled with its own namespace unless the Alertmanager
    sets `alertmanagerConfigMatcherStrategy: {type: None}` (docs/kubernetes.md, on prometheus-operator/)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": {"name": "gpulens", "namespace": namespace, "labels": {"app.kubernetes.io/part-of": "gpulens"}},
        "spec": {
            "route": _route_resource(routing_tree(settings), root=True),
            "receivers": [
                _receiver_resource(name, body, f"receivers.{name}") for name, body in settings.receivers.items()
            ],
            "inhibitRules": [
                {
                    "sourceMatch": [rule.source.resource()],
                    "targetMatch": [rule.target.resource()],
                    "equal": list(rule.equal),
                }
                for rule in INHIBITIONS
            ],
        },
    }
