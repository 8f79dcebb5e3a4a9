"""The rules that judge one window of a unit (analyzer/judging/classify.py runs them). Each module holds a class's
signature as a Rule: its decision, its helpers and the evidence that settles its rivals. Here is their one order
(RULES: the gates, then the causes), and weighed(), which picks among causes that hold together by the evidence
that excludes the others (SETTLES), never by the order they were tried.

Adding a class takes four files and its tests: its record (core/bottlenecks.py), its Rule in a module here (in
that module's RULES), a simulator profile (simulator/workloads.py) and an eval scenario that plays it
(analyzer/outputs/evaluate.py), and signature tests at its thresholds' edges (tests/test_signatures.py);
tests/test_classes.py names what a class lacks."""

from __future__ import annotations

from dataclasses import replace

from gpulens.analyzer.judging.rules import gates, host_stall, memory, placement, serving, starvation
from gpulens.analyzer.judging.rules.base import Finding, Rule, Settles, Signature

#: Every rule, in the order it is tried: the gates first (too few samples, then idle: whatever else its earlier
#: samples show, a unit is not worked on now), each deciding alone where it holds; then every cause, all tried,
#: where several hold the one whose evidence settles the others is the class (weighed()), whatever their order.
#: A module lists its own (its RULES), so that a class added to a module is added here too.
RULES: tuple[Rule, ...] = (
    *gates.RULES,
    *memory.RULES,
    *placement.RULES,
    *host_stall.RULES,
    *starvation.RULES,
    *serving.RULES,
)
GATES: tuple[Signature, ...] = tuple(rule.decide for rule in RULES if rule.gate)
CAUSES: tuple[Signature, ...] = tuple(rule.decide for rule in RULES if not rule.gate)
#: By evidence key: what it settles, and the classes of the rule whose evidence it is.
SETTLES: dict[str, Settles] = {
    key: replace(settles, of=rule.finds) for rule in RULES for key, settles in rule.settles.items()
}


def weighed(findings: list[Finding]) -> Finding | None:
    """The finding whose evidence settles every other class that held (SETTLES), with those classes as what
    else was consistent (Finding.also) and the deciding evidence; None where none held. Where no finding settles
    the others, the causes stay open: the most confident (then by name: never by the order tried) is the class,
    the others beside it, and its evidence says both and what would tell them apart."""
    if len(findings) <= 1:
        return findings[0] if findings else None

    def settled(finding: Finding) -> dict[str, str]:
        """The rivals its evidence settles, each with why."""
        return {
            rival: rule.why
            for key in finding.evidence
            if (rule := SETTLES.get(key)) and finding.bottleneck in rule.of
            for rival in rule.rivals
        }

    classes = {finding.bottleneck for finding in findings}
    deciding = [
        (finding, settles) for finding in findings if classes - {finding.bottleneck} <= set(settles := settled(finding))
    ]
    if len({finding.bottleneck for finding, _ in deciding}) == 1:
        # Two findings of the winning class (a pipeline's and a checkpoint's host_stall): the surer, then by cause.
        finding, settles = min(deciding, key=lambda pair: (-pair[0].confidence, pair[0].cause))
        others = sorted(classes - {finding.bottleneck})
        if not others:
            return finding
        why = "; ".join(sorted({settles[rival] for rival in others}))
        evidence = {**finding.evidence, "deciding": f"{', '.join(others)} held too, settled: {why}"}
        return replace(finding, evidence=evidence, also=(*finding.also, *others))
    finding = min(findings, key=lambda found: (-found.confidence, found.bottleneck))
    rivals = sorted(classes - {finding.bottleneck})
    evidence = {
        **finding.evidence,
        "causes_open": f"{finding.bottleneck} and {', '.join(rivals)} both hold, and no evidence here excludes "
        f"either: {finding.bottleneck} is named for its higher confidence",
        "would_tell_them_apart": _would_settle(classes),
    }
    return replace(finding, evidence=evidence, also=(*finding.also, *rivals))


def _would_settle(classes: set[str]) -> str:
    """What would settle a choice between `classes` that held together: the evidence keys (SETTLES) by which
    one of them rules out another, which this data did not show."""
    keys = sorted(
        f"{key} ({', '.join(sorted(set(rule.of) & classes))})"
        for key, rule in SETTLES.items()
        if set(rule.of) & classes and set(rule.rivals) & classes
    )
    if not keys:
        return (
            "no evidence gpulens reads settles these classes against each other: the pod's CPU and its limit, the "
            "GPU's power and PCIe both ways, and gpulens' exporter's every second between scrapes show more of each"
        )
    return f"evidence that would settle it, not in this data (docs/analyzer.md's class table): {'; '.join(keys)}"
