"""`gpulens alerts --out DIR`: write the Prometheus rules (plain and as a PrometheusRule), the
Alertmanager config and the runbooks (see alerts/rules.py and alerts/routing.py)."""

from __future__ import annotations

import argparse
import dataclasses

import yaml

from gpulens.alerts import routing, rules
from gpulens.core import flags, mixin
from gpulens.core.config import write_generated
from gpulens.core.flags import Subcommands

RULES_FILE = "gpulens-rules.yaml"
ALERTMANAGER_FILE = "alertmanager.yml"
RUNBOOKS_FILE = "runbooks.md"
PROMETHEUS_RULE_FILE = "gpulens-prometheusrule.yaml"
ALERTMANAGER_CONFIG_FILE = "gpulens-alertmanagerconfig.yaml"
#: A kustomize Component holding the PrometheusRule and the AlertmanagerConfig for
#: deploy/kubernetes/prometheus-operator (kustomize reads files only below a kustomization). A Component,
#: because its replacements must read the deployment's settings, which the including kustomization holds.
KUSTOMIZATION_FILE = "kustomization.yaml"
DEFAULT_WEBHOOK = "http://127.0.0.1:9850/alerts"
#: The ConfigMap of a Kubernetes deployment's settings (deploy/kubernetes/settings/settings.env) and the keys
#: the generated resources read from it.
SETTINGS = "gpulens-settings"
GRAFANA_URL_SETTING = "grafana-url"
#: The default receivers' webhooks: setting key by receiver name.
WEBHOOK_SETTINGS = {"pages": "alerts-pages-url", "tickets": "alerts-tickets-url"}


def dump_yaml(document: object) -> str:
    """Deterministic YAML: keys in the order written, no line wrapping of long expressions."""
    return yaml.safe_dump(document, sort_keys=False, width=10_000, allow_unicode=True)


def _replacement(setting: str, kind: str, field_path: str, **options: object) -> dict:
    """A kustomize replacement writing one setting of SETTINGS into `field_path` of the gpulens `kind`."""
    target: dict = {"select": {"kind": kind, "name": "gpulens"}, "fieldPaths": [field_path]}
    if options:
        target["options"] = options
    return {"source": {"kind": "ConfigMap", "name": SETTINGS, "fieldPath": f"data.{setting}"}, "targets": [target]}


def _component(settings: routing.AlertSettings) -> dict:
    """The kustomize Component: the two resources and the replacements filling in the settings."""
    replacements = [
        # Each dashboard_url is <Grafana>/d/<dashboard>?<variables>: replace what comes before "/d/".
        _replacement(
            GRAFANA_URL_SETTING,
            "PrometheusRule",
            "spec.groups.*.rules.*.annotations.dashboard_url",
            delimiter="/d/",
            index=0,
        )
    ]
    if not settings.receivers_from_file:
        replacements += [
            _replacement(key, "AlertmanagerConfig", f"spec.receivers.[name={receiver}].webhookConfigs.0.url")
            for receiver, key in WEBHOOK_SETTINGS.items()
        ]
    return {
        "apiVersion": "kustomize.config.k8s.io/v1alpha1",
        "kind": "Component",
        "resources": [PROMETHEUS_RULE_FILE, ALERTMANAGER_CONFIG_FILE],
        "replacements": replacements,
    }


def _secret_keys(resource: dict) -> list[str]:
    """The keys of routing.RECEIVER_SECRET the AlertmanagerConfig reads, in its receivers' order."""
    return [
        value["key"]
        for receiver in resource["spec"]["receivers"]
        for integration, configs in receiver.items()
        if integration != "name"
        for config in configs
        for value in config.values()
        if isinstance(value, dict) and value.get("name") == routing.RECEIVER_SECRET
    ]


def _alertmanager_config_file(header: str, settings: routing.AlertSettings) -> str:
    resource = routing.alertmanager_config_resource(settings)
    notes = [
        "# For the Prometheus operator: the routing of alertmanager.yml as an AlertmanagerConfig. Its Alertmanager",
        "# must set alertmanagerConfigMatcherStrategy: {type: None}, or the operator narrows these routes to",
        "# alerts whose namespace is this resource's (docs/kubernetes.md, deploy/kubernetes/prometheus-operator/).",
    ]
    if keys := _secret_keys(resource):
        notes += [
            f"# The receivers' secrets live in the Secret {routing.RECEIVER_SECRET}; create it before applying:",
            f"#   kubectl -n {resource['metadata']['namespace']} create secret generic {routing.RECEIVER_SECRET} \\",
            *(f"#     --from-literal={key}=... \\" for key in keys[:-1]),
            f"#     --from-literal={keys[-1]}=...",
        ]
    return header + "\n".join(notes) + "\n" + dump_yaml(resource)


def generate(config: mixin.MixinConfig, settings: routing.AlertSettings | None = None) -> dict[str, str]:
    """File name -> content of everything `gpulens alerts` writes; `settings` default to pages and
    tickets delivered to DEFAULT_WEBHOOK."""
    settings = settings or routing.AlertSettings.load("", DEFAULT_WEBHOOK)
    config = dataclasses.replace(
        config,
        severities={**config.severities, **settings.severities},
        budgets={**config.budgets, **{scope: b for scope, b in settings.budgets.items() if b}},
    )
    header = "# Generated by `gpulens alerts` from alerts/rules.py and gpulens/core/mixin.py; do not edit by hand.\n"
    prometheus_rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "gpulens", "namespace": "gpulens", "labels": {"app.kubernetes.io/part-of": "gpulens"}},
        "spec": rules.rule_groups(config),
    }
    return {
        RULES_FILE: header + dump_yaml(rules.rule_groups(config)),
        PROMETHEUS_RULE_FILE: header
        + "# For the Prometheus operator: kubectl apply -k deploy/kubernetes/prometheus-operator applies it.\n"
        + dump_yaml(prometheus_rule),
        ALERTMANAGER_CONFIG_FILE: _alertmanager_config_file(header, settings),
        KUSTOMIZATION_FILE: header
        + "# The PrometheusRule and the AlertmanagerConfig with the deployment's settings filled in, for\n"
        + "# deploy/kubernetes/prometheus-operator, which reads the settings in deploy/kubernetes/settings/.\n"
        + dump_yaml(_component(settings)),
        ALERTMANAGER_FILE: header + dump_yaml(routing.alertmanager_config(settings)),
        RUNBOOKS_FILE: rules.runbooks_markdown(config),
    }


def register(commands: Subcommands) -> None:
    p = commands.add_parser("alerts", help="write the Prometheus alert rules, Alertmanager config and runbooks")
    mixin.add_flags(p)
    flags.add(
        p,
        "--alertmanager.webhook-url",
        dest="webhook_url",
        default=DEFAULT_WEBHOOK,
        help="where the generated Alertmanager config delivers (…/pages and …/tickets) without --alerting.config",
    )
    flags.add(
        p,
        "--alerting.config",
        dest="alerting_config",
        default="",
        help="YAML of severities, Alertmanager receivers and owners (alerts/settings.example.yaml)",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    return write_generated(
        "alerts",
        args.out,
        lambda: generate(mixin.config_from(args), routing.AlertSettings.load(args.alerting_config, args.webhook_url)),
    )
