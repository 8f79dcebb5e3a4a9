"""What every alert case shares: the series' labels, the dashboards' links, the annotations' texts."""

import urllib.parse

from gpulens.core import mixin

EXPORTER = 'job="gpulens-exporter",instance="n1:9848",node="n1"'
ANALYZER = 'job="gpulens-analyzer",instance="analyzer:9849"'
RUNBOOKS = "https://github.com/gpulens/gpulens/blob/main/alerts/generated/runbooks.md"
#: Links open the panel that shows the alert's signal (viewPanel), for the alert's cluster (empty here).
FLEET_DASHBOARD = "http://localhost:3000/d/gpulens-fleet?var-cluster="
ANALYZER_PANEL = f"http://localhost:3000/d/gpulens-node?var-cluster=&viewPanel={mixin.NODE_ANALYZER_PANEL.id}"


def pod_link(ns, pod, panel):
    return f"http://localhost:3000/d/gpulens-pod?var-cluster=&var-namespace={ns}&var-pod={pod}&viewPanel={panel.id}"


def gpu_link(n, panel, cluster=""):
    query = urllib.parse.urlencode({"var-cluster": cluster, "var-node": "n1", "var-gpu": n})  # Go's urlquery's
    return f"http://localhost:3000/d/gpulens-node?{query}&viewPanel={panel.id}"


CLUSTER = "eu west&1#b"


def node_link(node, panel):
    return f"http://localhost:3000/d/gpulens-node?var-cluster=&var-node={node}&viewPanel={panel.id}"


STARVING_FIX = "Raise DataLoader num_workers."


def gpu(n, **extra):
    labels = f'{EXPORTER},gpu="{n}",uuid="GPU-{n}"'
    return labels + "".join(f',{k}="{v}"' for k, v in extra.items())


def annotations(name, summary, description, dashboard, **verdict):
    out = {
        "summary": summary,
        "description": description,
        "runbook_url": f"{RUNBOOKS}#{name.lower()}",
        "dashboard_url": dashboard,
    }
    out.update(verdict)
    return out


def verdict_of(confidence, evidence, recommendation):
    return {"confidence": confidence, "evidence": evidence, "recommendation": recommendation}


NO_VERDICT = verdict_of(
    "unknown",
    "none: the analyzer has no verdict for this pod",
    "Check the analyzer: it has no verdict for this pod (GpulensAnalyzerDown?).",
)
STARVING = verdict_of("95%", "switches_per_minute=12.0 >= 2.0", STARVING_FIX)
IDLE = verdict_of("85%", "idle_for_seconds=600 >= 300", "Release the GPU.")


def low_sm(ns, pod, value, verdict, cause, bottleneck_text, confidence_text, fix, waste):
    return {
        "exp_labels": {
            "severity": "critical",
            "component": "pod",
            "node": "n1",
            "namespace": ns,
            "pod": pod,
        },
        "exp_annotations": annotations(
            "GpulensPodLowSmActivity",
            f"{ns}/{pod} keeps its GPUs' SMs busy only {value} of the time: {cause}",
            f"SM activity of {ns}/{pod} on n1 has stayed under 30% for 30m. The analyzer's verdict: "
            f"{bottleneck_text} ({confidence_text} confidence). Try: {fix}",
            pod_link(ns, pod, mixin.POD_SM_PANEL),
            **verdict,
            bottleneck=cause,
            waste=waste,
        ),
    }


def ticket_without_verdict(alertname, pod, bottleneck, summary, panel):
    """The firing case at 35m of a class ticket for nlp/<pod> on n1, held since the start, with no verdict
    info series for the pod."""
    return {
        "eval_time": "35m",
        "alertname": alertname,
        "exp_alerts": [
            {
                "exp_labels": {
                    "severity": "warning",
                    "component": "pod",
                    "node": "n1",
                    "namespace": "nlp",
                    "pod": pod,
                    "bottleneck": bottleneck,
                },
                "exp_annotations": annotations(
                    alertname,
                    summary,
                    f"The analyzer has classified nlp/{pod} on n1 as {bottleneck} for 30m. The analyzer's "
                    "verdict: none yet (unknown confidence). Try: see the runbook",
                    pod_link("nlp", pod, panel),
                    **NO_VERDICT,
                ),
            }
        ],
    }


def no_waste(ns, cause):
    return f"The analyzer has counted no waste for {ns} and {cause} yet."


#: The page's waste annotation for a pod the analyzer has no verdict for.
UNKNOWN_WASTE = "The analyzer has no verdict for this pod: its cause's waste is unknown."
