"""What each workload is, from what Kubernetes says of its pod (analyzer/inputs/kinds.py)."""

from __future__ import annotations

import pytest

from gpulens.analyzer.inputs.kinds import DEFAULT_RULES, KindRule, PodFacts, WorkloadKind, kind_of, load_rules
from gpulens.core.config import ConfigError

JUPYTERHUB = {"app": "jupyterhub", "component": "singleuser-server", "hub.jupyter.org/username": "alice"}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        # JupyterHub's user servers are bare pods; Kubeflow's notebooks StatefulSet pods with notebook-name.
        (PodFacts("Pod", JUPYTERHUB, ("quay.io/jupyter/pytorch-notebook:cuda12-python-3.11",)), ("notebook", "")),
        (
            PodFacts("StatefulSet", {"notebook-name": "nb"}, ("kubeflownotebookswg/jupyter-pytorch-cuda-full",)),
            ("notebook", ""),
        ),
        # A notebook image alone, in a Deployment: a notebook, not a serving replica.
        (PodFacts("Deployment", {}, ("jupyter/scipy-notebook:2024-05-27",)), ("notebook", "")),
        (PodFacts("Deployment", {"app": "chat"}, ("vllm/vllm-openai:v0.6.3",)), ("serving", "vllm")),
        (PodFacts("StatefulSet", {}, ("nvcr.io/nvidia/tritonserver:24.05-trtllm-python-py3",)), ("serving", "triton")),
        (PodFacts("Deployment", {}, ("ghcr.io/huggingface/text-generation-inference:2.4.0",)), ("serving", "tgi")),
        (PodFacts("Deployment", {}, ("lmsysorg/sglang:v0.4.0-cu124",)), ("serving", "sglang")),
        # KServe's predictor with a custom image: serving, its engine unknown.
        (PodFacts("Deployment", {"serving.kserve.io/inferenceservice": "llm"}, ("acme/predictor:1",)), ("serving", "")),
        # A Job running vLLM for offline batch inference runs to completion: a job.
        (PodFacts("Job", {}, ("vllm/vllm-openai:v0.6.3",)), ("job", "")),
        (PodFacts("PyTorchJob", {}, ("pytorch/pytorch:2.4.0",)), ("job", "")),
        (PodFacts("Pod", {"kueue.x-k8s.io/queue-name": "gpu"}, ("acme/train:1",)), ("job", "")),
        (PodFacts("Deployment", {}, ("acme/api:1",)), ("serving", "")),
        # A StatefulSet of an unknown image, or a bare pod: nothing says.
        (PodFacts("StatefulSet", {}, ("acme/thing:1",)), ("unknown", "")),
        (PodFacts("Pod", {}, ("acme/thing:1",)), ("unknown", "")),
        (PodFacts(), ("unknown", "")),
    ],
)
def test_each_common_stack_is_known_by_its_labels_image_or_owner(pod, expected):
    found = kind_of(pod)
    assert (found.kind, found.engine) == expected
    assert bool(found.source) == (expected[0] != "unknown")


def test_the_evidence_names_the_rule_that_matched():
    assert kind_of(PodFacts("Pod", JUPYTERHUB)) == WorkloadKind("notebook", "", "label component=singleuser-server")
    assert kind_of(PodFacts("StatefulSet", {"notebook-name": "nb"})).source == "label notebook-name=nb"
    assert kind_of(PodFacts("Deployment", {}, ("acme/api:1",))).source == "owner Deployment"
    assert kind_of(PodFacts("CronJob", {}, ("acme/train:1",))).source == "owner CronJob"
    assert kind_of(PodFacts("StatefulSet", {}, ("docker.io/acme/x:1", "lmsysorg/sglang:v0.4.0-cu124"))) == WorkloadKind(
        "serving", "sglang", "image lmsysorg/sglang:v0.4.0-cu124"
    )


def test_a_platform_teams_rules_come_before_the_defaults(tmp_path):
    """A team whose notebooks run as Deployments labelled `workbench: "true"` names them so; the defaults
    still apply to the rest."""
    settings = tmp_path / "settings.yaml"
    settings.write_text(
        "workload_kinds:\n  - {kind: notebook, labels: {workbench: 'true'}}\n"
        "  - {kind: job, image: 'registry.acme/batch/*'}\n"
    )
    rules = load_rules(str(settings))
    assert rules[2:] == DEFAULT_RULES
    assert kind_of(PodFacts("Deployment", {"workbench": "true"}, ("acme/ide:1",)), rules).kind == "notebook"
    assert kind_of(PodFacts("Deployment", {}, ("registry.acme/batch/etl:7",)), rules).kind == "job"
    assert kind_of(PodFacts("Deployment", {}, ("vllm/vllm-openai:v0.6.3",)), rules) == WorkloadKind(
        "serving", "vllm", "image vllm/vllm-openai:v0.6.3"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "workload_kinds:\n  - {kind: training, image: x}\n",
            "workload_kinds[0].kind: expected one of notebook, serving, job",
        ),
        ("workload_kinds:\n  - {kind: job}\n", "workload_kinds[0]: a rule needs labels, an image or owner_kinds"),
        ("workload_kind: []\n", "unknown key(s) workload_kind; did you mean workload_kinds?"),
    ],
)
def test_a_bad_rule_is_refused_naming_it_and_the_fix(tmp_path, text, message):
    settings = tmp_path / "settings.yaml"
    settings.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_rules(str(settings))
    assert message in str(error.value)


def test_a_rule_with_nothing_to_match_matches_no_pod():
    assert not KindRule("serving").matches(PodFacts("Deployment", {"a": "b"}, ("x",)))
