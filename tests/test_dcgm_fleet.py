"""A fleet that runs only NVIDIA's dcgm-exporter, through the generated recording rules and dashboards.

A real Prometheus scrapes dcgm-exporter output over HTTP and evaluates the rules `gpulens alerts`
writes; the dashboards' queries then run against it. Three exporters, as fleets have them:
- a T4 node recorded on a GPU Operator cluster (tests/fixtures/captures, the default counter set),
  scraped as the Operator's ServiceMonitor does: the exporter pod's own namespace/pod/container are
  target labels, so the GPU's pod arrives as `exported_pod`; a relabelling adds the node's name, as
  docs for older releases advise (their Hostname is the exporter pod's name);
- an A100 split into MIG instances (recorded; instances are labelled GPU_I_ID);
- an H100 with the profiling counter set and the error fields the recordings lack, scraped with
  honorLabels (the pod stays `pod`) and Hostname holding the node's name, as current releases write it.
Expected values come from the exposition text, parsed here by the test itself.
"""

import json
import re

import pytest

from gpulens.alerts import cli as alerts_cli
from gpulens.core import mixin
from gpulens.core.metrics import BY_NAME
from gpulens.dashboards import gpulens as dashboards
from tests.helpers import REPO, Prometheus, ScriptedHttp, wait_until
from tests.test_stack import dashboard_queries, substitute

pytestmark = pytest.mark.slow

CAPTURES = REPO / "tests" / "fixtures" / "captures" / "dcgm-exporter"
T4 = (CAPTURES / "t4x2-one-pod.prom").read_text()
MIG = (CAPTURES / "a100-mig-2x1g5gb-2g10gb.prom").read_text()
T4_NODE = "gpu-node-7"
T4_POD = ("runai-reservation", "runai-reservation-gpu-qa-mig-worker-gpu-1-kvltw")
H100_POD = ("inference", "llm-0")

_H100_LABELS = (
    'gpu="0",UUID="GPU-5e1c0a55-h100",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="h100-node-3",'
    'DCGM_FI_DRIVER_VERSION="550.90.07",container="server",namespace="inference",pod="llm-0"'
)
_H100_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": 97,
    "DCGM_FI_PROF_SM_ACTIVE": 0.42,
    "DCGM_FI_PROF_SM_OCCUPANCY": 0.3,
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.2,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.1,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 2.5e8,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 1.5e9,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": 4e10,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": 4e10,
    "DCGM_FI_DEV_FB_USED": 30000,
    "DCGM_FI_DEV_FB_FREE": 51000,
    "DCGM_FI_DEV_SM_CLOCK": 1755,
    "DCGM_FI_DEV_MAX_SM_CLOCK": 1980,
    "DCGM_FI_DEV_PCIE_LINK_GEN": 4,
    "DCGM_FI_DEV_PCIE_MAX_LINK_GEN": 5,
    "DCGM_FI_DEV_PCIE_LINK_WIDTH": 16,
    "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH": 16,
    "DCGM_FI_DEV_POWER_USAGE": 352.5,
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": 700,
    "DCGM_FI_DEV_GPU_TEMP": 55,
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": 2,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 0,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": 0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
    "DCGM_FI_DEV_XID_ERRORS": 0,
}
H100 = "".join(f"# TYPE {name} gauge\n{name}{{{_H100_LABELS}}} {value}\n" for name, value in _H100_FIELDS.items())


def rows(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of each sample of `name` in exposition text."""
    out = []
    for line in text.splitlines():
        match = re.fullmatch(rf"{name}\{{(.*)\}} (\S+)", line)
        if match:
            out.append((dict(re.findall(r'(\w+)="([^"]*)"', match[1])), float(match[2])))
    return out


def device(labels: dict[str, str]) -> str:
    """A device as the rules name it: the UUID, with /gi<id> for a MIG instance."""
    return labels["UUID"] + (f"/gi{labels['GPU_I_ID']}" if labels.get("GPU_I_ID") else "")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("dcgm-fleet")
    rules = workdir / "rules.yaml"
    rules.write_text(alerts_cli.generate(mixin.MixinConfig())[alerts_cli.RULES_FILE])
    plain = {"Content-Type": "text/plain; version=0.0.4"}
    exporters = [ScriptedHttp([(200, body, plain)]) for body in (T4, MIG, H100)]
    t4, mig, h100 = (e.url.removeprefix("http://") for e in exporters)
    operator = "namespace: gpu-operator, container: nvidia-dcgm-exporter"
    prometheus = Prometheus(
        workdir,
        [],
        extra_config=f"""  - job_name: nvidia-dcgm-exporter
    static_configs:
      - targets: ['{t4}']
        labels: {{{operator}, pod: nvidia-dcgm-exporter-s228n, node: {T4_NODE}}}
      - targets: ['{mig}']
        labels: {{{operator}, pod: nvidia-dcgm-exporter-q28k4}}
  - job_name: dcgm-honor-labels
    honor_labels: true
    static_configs:
      - targets: ['{h100}']
        labels: {{{operator}, pod: nvidia-dcgm-exporter-h7m2x, job: nvidia-dcgm-exporter}}
rule_files: ['{rules}']
""",
    )
    try:
        # Every GPU in the rules (two T4s, three MIG instances, the H100), and two scrapes of each
        # exporter, which rates and increases over the dashboards' 20 s need.
        wait_until(
            lambda: (
                len(prometheus.query(mixin.GPU_ACTIVITY)) == 6
                and len(prometheus.query(mixin.POD_GPU_ACTIVITY)) == 2
                and len(prometheus.query('count_over_time(up{job="nvidia-dcgm-exporter"}[20s]) >= 2')) == 3
            ),
            60,
            what="the rules to hold every GPU, and two scrapes of each exporter",
        )
        yield prometheus
    finally:
        prometheus.stop()
        for exporter in exporters:
            exporter.close()


def by_device(result: list[dict]) -> dict[str, float]:
    return {r["metric"]["uuid"]: float(r["value"][1]) for r in result}


def test_the_per_gpu_rules_hold_every_gpu_in_gpulens_units_and_labels(fleet):
    everything = T4 + MIG + H100
    busy = {device(labels): value * 0.01 for labels, value in rows(everything, "DCGM_FI_DEV_GPU_UTIL")}
    assert by_device(fleet.query(mixin.GPU_BUSY)) == busy
    # Activity: SM activity where the counter set has it (the H100), else the graphics engine's.
    sm = {device(labels): value for labels, value in rows(everything, "DCGM_FI_PROF_SM_ACTIVE")}
    engine = {device(labels): value for labels, value in rows(everything, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")}
    activity = fleet.query(mixin.GPU_ACTIVITY)
    assert by_device(activity) == engine | sm
    assert len(engine) == 2 + 3 + 1 and "GPU-5e1c0a55-h100" in sm  # two T4s, three MIG instances, the H100
    # Each MIG instance is its own device (gpu "0/gi7"); nodes: relabelled, else Hostname.
    labels = {r["metric"]["uuid"]: (r["metric"]["node"], r["metric"]["gpu"]) for r in activity}
    assert {labels[uuid] for uuid in labels if uuid.startswith("GPU-7099682b")} == {
        ("nvidia-dcgm-exporter-q28k4", f"0/gi{i}") for i in (5, 7, 9)
    }
    assert labels["GPU-5e1c0a55-h100"] == ("h100-node-3", "0")
    assert {labels[uuid][0] for uuid in labels if uuid in busy and "h100" not in uuid} == {T4_NODE}
    used = {device(labels): value for labels, value in rows(everything, "DCGM_FI_DEV_FB_USED")}
    free = {device(labels): value for labels, value in rows(everything, "DCGM_FI_DEV_FB_FREE")}
    assert by_device(fleet.query(mixin.GPU_MEMORY_USED)) == pytest.approx(
        {uuid: used[uuid] / (used[uuid] + free[uuid]) for uuid in used}, rel=1e-12
    )


def test_each_held_gpu_is_its_pods_and_no_exporter_pod_holds_one(fleet):
    """The T4's pod arrives as exported_pod, the H100's as pod; the other T4 and the MIG instances are
    labelled with the dcgm-exporter pod itself, which holds nothing."""
    [(t4_labels, t4_engine)] = [
        (labels, value) for labels, value in rows(T4, "DCGM_FI_PROF_GR_ENGINE_ACTIVE") if labels["pod"]
    ]
    pods = {
        (r["metric"]["namespace"], r["metric"]["pod"], r["metric"]["node"], r["metric"]["uuid"]): float(r["value"][1])
        for r in fleet.query(mixin.POD_GPU_ACTIVITY)
    }
    assert pods == {
        (*T4_POD, T4_NODE, t4_labels["UUID"]): t4_engine,
        (*H100_POD, "h100-node-3", "GPU-5e1c0a55-h100"): _H100_FIELDS["DCGM_FI_PROF_SM_ACTIVE"],
    }


def _names(expr: str) -> set[str]:
    return set(re.findall(r"gpulens_\w+", expr))


#: Settings with a budget of each scope: every rule the budgets make.
BUDGETED = mixin.MixinConfig(budgets={scope: {"a": 1.0} for scope in mixin.BUDGET_SCOPES})


def test_every_dashboard_panel_has_data_from_dcgm_exporter_alone(fleet):
    """A panel says in its description when it has nothing for GPUs only dcgm-exporter reports; every
    other panel shows them, except those that read the analyzer's verdicts, cAdvisor, kube-state-metrics or the
    serving engines (not run here)."""
    # cAdvisor's and kube-state-metrics' series, and the serving engines': none runs beside this fleet.
    needs_others = {"container_cpu_usage_seconds_total", "kube_pod_container_resource_limits", "kube_pod_owner"}
    descriptions = {}
    for name, text in dashboards.generate(mixin.MixinConfig()).items():
        for panel in json.loads(text)["panels"]:
            descriptions[(name, panel["title"])] = panel.get("description", "")
    panels: dict[tuple[str, str], bool] = {}
    for name, title, expr in dashboard_queries():
        analyzer = any(BY_NAME[n].group == "analyzer" for n in _names(expr) if n in BY_NAME) or any(
            rule["record"] in expr
            for rule in mixin.budget_rules(BUDGETED)  # the analyzer's spend, and the budgets
        )
        if analyzer or any(other in expr for other in needs_others):
            continue
        pods = ["/".join(T4_POD), "/".join(H100_POD)] if "$pod" in expr else ["/".join(T4_POD)]
        has_data = any(fleet.query(substitute(expr, pod)) for pod in pods)
        panels[(name, title)] = panels.get((name, title), False) or has_data
    empty = {key for key, has_data in panels.items() if not has_data}
    unmarked = {key for key in empty if key[1].startswith("variable") or dashboards.DCGM_EMPTY not in descriptions[key]}
    assert not unmarked, f"empty on a dcgm-exporter-only fleet, and not said so: {sorted(unmarked)}"
    # What is marked is what gpulens alone has: none of these could show a dcgm-exporter GPU.
    assert empty == {
        ("gpulens-pod.json", "Throttled share of time"),
        ("gpulens-node.json", "GPU answering"),
        ("gpulens-node.json", "Clock events by reason"),
        ("gpulens-node.json", "XID errors"),
        ("gpulens-node.json", "NVLink links down and errors"),
        ("gpulens-node.json", "Exporter collectors"),
        ("gpulens-node.json", "Exporter sample age"),
    }
