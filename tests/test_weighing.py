"""Causes weighed, not ordered: where several signatures hold, the one whose evidence settles the others is the
class, whatever order they are tried in (rules.weighed(), rules.SETTLES); docs/analyzer.md's class table
names that evidence beside each class, and every pair of signatures that holds on one of the eval's pods is
settled by it. Adding a signature that takes pods from another fails here until the evidence that decides
between the two is named."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from gpulens.analyzer.judging.features import PodFeatures, pod_features
from gpulens.analyzer.judging.rules import CAUSES, GATES, SETTLES, weighed
from gpulens.analyzer.judging.rules.base import Finding
from gpulens.analyzer.outputs.evaluate import make_scenarios, scenario_trace
from gpulens.core.bottlenecks import BY_NAME
from gpulens.core.catalog import model_info
from gpulens.core.thresholds import Thresholds

REPO = Path(__file__).resolve().parent.parent
T = Thresholds()

STALL = Finding("host_stall", 0.6, {"stalling_gpu": "GPU-3: works while its peers wait"}, "checkpoint")
STARVED = Finding("data_starvation", 0.8, {"bursts": "..."})
BANDWIDTH = Finding("memory_bandwidth", 0.7, {"dram_bound_fraction": "..."})


def test_the_evidence_that_excludes_the_other_decides_not_the_confidence_nor_the_order():
    """A checkpoint's stall on one rank and a starved job's bursts both hold: the rank named settles it (starved
    ranks wait together, each on its own input), though starvation is surer and tried later or first."""
    for findings in ([STALL, STARVED], [STARVED, STALL]):
        found = weighed(findings)
        assert found is not None
        assert (found.bottleneck, found.cause, found.also) == ("host_stall", "checkpoint", ("data_starvation",))
        assert found.evidence["deciding"] == f"data_starvation held too, settled: {SETTLES['stalling_gpu'].why}"


def test_where_neither_excludes_the_other_both_are_said_and_what_would_tell_them_apart():
    """Starvation and memory bandwidth with no evidence between them: the surer is named (never the first
    tried), the other beside it, and the evidence says both stay open."""
    for findings in ([BANDWIDTH, STARVED], [STARVED, BANDWIDTH]):
        found = weighed(findings)
        assert found is not None
        assert (found.bottleneck, found.also) == ("data_starvation", ("memory_bandwidth",))
        assert found.evidence["causes_open"].startswith("data_starvation and memory_bandwidth both hold")
        assert found.evidence["would_tell_them_apart"].startswith("no evidence gpulens reads settles these classes")
        assert "deciding" not in found.evidence


def test_where_causes_stay_open_the_evidence_that_would_settle_them_is_named():
    """Uneven work (host_stall, its evidence naming no rank) and starvation: of the evidence that settles stalls
    over starvation, none is in this data; the verdict names each key that would have, for the user to look for."""
    uneven = Finding("host_stall", 0.5, {"uneven": "GPU-1 far busier than GPU-0"}, "uneven")
    found = weighed([uneven, STARVED])
    assert found is not None and (found.bottleneck, found.also) == ("data_starvation", ("host_stall",))
    expected = [f"{key} (host_stall)" for key, rule in sorted(SETTLES.items()) if "data_starvation" in rule.rivals]
    assert found.evidence["would_tell_them_apart"] == (
        "evidence that would settle it, not in this data (docs/analyzer.md's class table): " + "; ".join(expected)
    )
    assert expected[0] == "host_fetch_fraction (host_stall)" and len(expected) == 7


def test_two_causes_of_one_class_are_the_surer_one_whatever_the_order():
    """A pipeline's bubble and a checkpoint's stall, both host_stall: no rival to settle, the surer is named."""
    pipeline = Finding("host_stall", 0.7, {"stages_take_turns": "..."}, "pipeline")
    for findings in ([STALL, pipeline], [pipeline, STALL]):
        assert weighed(findings) is pipeline


def test_a_job_fetching_from_host_through_its_waits_is_offload_not_a_replica_between_requests():
    """The demo's ZeRO-offload job under load: its steps' jitter reads as bursts at random (serving's shape), and
    it fetches 5 GB/s or more from host memory on most samples while it waits. A replica waiting for requests
    moves nothing: the fetches settle it, whichever is surer (found in the stack test, where the serving class,
    named for its confidence, kept the job's host-stall alert from ever firing)."""
    offload = Finding("host_stall", 0.6, {"host_fetch_fraction": "53.7% of samples with >= 5 GB/s ..."}, "offload")
    serving = Finding("overprovisioned_serving", 0.7, {"quiet_fraction": "58.3% of samples ..."}, served=True)
    for findings in ([serving, offload], [offload, serving]):
        found = weighed(findings)
        assert found is not None and (found.bottleneck, found.cause) == ("host_stall", "offload")
        assert found.also == ("overprovisioned_serving",) and "causes_open" not in found.evidence


def test_one_finding_or_none_is_itself():
    assert weighed([]) is None
    assert weighed([STARVED]) is STARVED


def test_every_key_that_settles_is_one_its_classes_write_and_its_rivals_are_classes():
    """A rule on a key no signature of its class writes would never decide: each key is written by a Finding of
    each class it names (the rule that declares it, analyzer/judging/rules/), and settles only classes that exist."""
    modules = sorted((REPO / "analyzer" / "judging" / "rules").glob("*.py"))
    assert [m.name for m in modules if m.name in ("placement.py", "host_stall.py")] == ["host_stall.py", "placement.py"]
    source = "\n".join(module.read_text() for module in modules)
    for key, rule in SETTLES.items():
        assert f'"{key}"' in source.replace(f'"{key}": Settles(', ""), key
        assert set(rule.of) | set(rule.rivals) <= set(BY_NAME), key
        assert not set(rule.of) & set(rule.rivals), key


def test_the_class_table_names_every_deciding_key_beside_its_class_and_nothing_else():
    """docs/analyzer.md's class table: "`key` settles `rival`, `rival`" in a class's row for each rule of
    SETTLES that its signature writes, and no such phrase the code does not have."""
    text = (REPO / "docs" / "analyzer.md").read_text()
    table = text[text.index("| class | what the GPU shows | its deciding evidence") :].split("\n\n")[0]
    documented = set()
    for row in table.splitlines()[2:]:
        name, *_, deciding, _ = row.split("|")[1:]
        for key, rivals in re.findall(r"`(\w+)` settles ((?:`\w+`(?:, )?)+)", deciding):
            documented |= {(name.strip(" `"), key, rival) for rival in re.findall(r"`(\w+)`", rivals)}
    assert documented == {(of, key, rival) for key, rule in SETTLES.items() for of in rule.of for rival in rule.rivals}


@pytest.mark.slow
def test_every_pair_of_signatures_that_holds_on_an_eval_pod_is_settled_by_its_evidence_in_any_order():
    """Every scenario of `gpulens eval` (two a class, each variant of a stall and of placement), at every sampling
    interval: where several causes hold on a pod's window, one of them settles the others (no cause left open),
    that one is the scenario's class, and trying the causes in another order changes nothing."""
    settled = 0
    for scenario in make_scenarios(1000, 2):
        for step in (1.0, 15.0, 30.0, 60.0):
            for f in PodFeatures.rows(pod_features(scenario_trace(scenario, step=step), T)):
                info = model_info(f.gpu_model)
                if not f.pod or any(gate(f, T, info) for gate in GATES):
                    continue
                findings = [found for cause in CAUSES if (found := cause(f, T, info))]
                if len({found.bottleneck for found in findings}) < 2:
                    continue
                found = weighed(findings)
                where = (scenario, step, [x.bottleneck for x in findings])
                assert found is not None and "causes_open" not in found.evidence, where
                assert found.bottleneck == scenario.truth, where
                for order in itertools.islice(itertools.permutations(findings), 24):
                    assert weighed(list(order)) == found, where
                settled += 1
    # The pairs the eval's pods show (placement and interconnect over stalls, stalls over starvation): if none
    # held, this test would prove nothing.
    assert settled >= 10
