"""Adding a class, or a cause of host_stall, means its record (core/bottlenecks.py), the Rule that finds it (a module
of analyzer/judging/rules/, in its RULES), a simulator profile that `gpulens eval` judges it on
(analyzer/outputs/evaluate.py) and signature tests at its thresholds' edges (tests/test_signatures.py):
docs/architecture.md says so, and these tests fail naming what a class or cause lacks."""

from __future__ import annotations

import ast
from pathlib import Path

from gpulens.analyzer.outputs import evaluate
from gpulens.core.bottlenecks import CLASSES, POD_CLASSES, STALL_CAUSES
from tests.helpers import REPO


def literals(tree: ast.AST) -> set[str]:
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def parsed(path: str) -> ast.Module:
    return ast.parse((REPO / path).read_text())


def stall_causes_named(tree: ast.AST) -> set[str]:
    """The causes a module looks up as STALL_CAUSES["..."]."""
    return {
        node.slice.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "STALL_CAUSES"
        and isinstance(node.slice, ast.Constant)
    }


def rule_modules() -> list[str]:
    """The rules' modules (analyzer/judging/rules/), each found (a glob that reaches nothing fails)."""
    modules = sorted(str(path.relative_to(REPO)) for path in (REPO / "analyzer/judging/rules").glob("*.py"))
    assert {"analyzer/judging/rules/gates.py", "analyzer/judging/rules/host_stall.py"} <= set(modules)
    return modules


def findings_of(tree: ast.AST) -> set[str]:
    """The classes the Findings made in `tree` name: their first argument, a name or a choice of names."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Finding":
            names |= literals(node.args[0])
    return names


def found_by_rules() -> set[str]:
    """The classes a Finding of the rules names."""
    return set().union(*(findings_of(parsed(module)) for module in rule_modules()))


def causes_of_rules() -> set[str]:
    """The host_stall causes the rules give a fix for: STALL_CAUSES["..."], and the causes _stall_shape
    names (looked up with STALL_CAUSES.get)."""
    trees = [parsed(module) for module in rule_modules()]
    return set().union(*(stall_causes_named(tree) | (literals(tree) & set(STALL_CAUSES)) for tree in trees))


def test_each_rule_declares_every_class_its_decision_finds():
    """A Rule's `finds` are the classes the Findings of its decision name, and of the functions of its module it
    calls, however deep: the weighing of rivals (SETTLES) fills each settling key's classes from them."""
    from gpulens.analyzer.judging.rules import RULES

    for rule in RULES:
        module = rule.decide.__module__.removeprefix("gpulens.").replace(".", "/") + ".py"
        functions = {
            node.name: node for node in parsed(module).body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        reached, todo = set(), [rule.decide.__name__]
        while todo:
            name = todo.pop()
            if name in reached or name not in functions:
                continue
            reached.add(name)
            todo += [
                n.func.id for n in ast.walk(functions[name]) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            ]
        found = set().union(*(findings_of(functions[name]) for name in reached))
        assert set(rule.finds) == found, rule.decide.__name__


def judged_by_eval() -> set[str]:
    """The classes `gpulens eval` has scenarios of: its window scenarios' and variants' labels, and the
    day-scale ones'."""
    labels = {label for label, (_, models, _) in evaluate.SCENARIOS.items() if models}
    labels |= {label for label, variants in evaluate.VARIANTS.items() if variants}
    return labels | set(evaluate.DAY_SCENARIOS.values())


def test_every_pod_class_has_a_rule_an_eval_profile_and_signature_tests():
    rules, eval_labels = found_by_rules(), judged_by_eval()
    tested = literals(parsed("tests/test_signatures.py"))
    lacking = {
        name: [
            what
            for what, has in (
                ("a rule in analyzer/judging/rules/", name in rules),
                ("an eval scenario", name in eval_labels),
                ("a signature test", name in tested),
            )
            if not has
        ]
        for name in POD_CLASSES
    }
    assert {name: what for name, what in lacking.items() if what} == {}


def test_every_host_stall_cause_has_a_rule_and_a_signature_test_of_its_fix():
    """Each cause's fix is given by a rule, and a signature test asserts that fix (STALL_CAUSES["..."])."""
    asserted = stall_causes_named(parsed("tests/test_signatures.py"))
    rules = causes_of_rules()
    lacking = {
        cause: [what for what, has in (("a rule", cause in rules), ("a signature test", cause in asserted)) if not has]
        for cause in STALL_CAUSES
    }
    assert {cause: what for cause, what in lacking.items() if what} == {}


def test_every_eval_variant_plays_a_simulator_profile():
    from gpulens.simulator.workloads import PROFILES

    profiles = {profile for variants in evaluate.VARIANTS.values() for profile, _, _, _ in variants.values()}
    profiles |= {profile for profile, _, _ in evaluate.SCENARIOS.values()} | set(evaluate.DAY_SCENARIOS)
    assert profiles - set(PROFILES) == set()


def package_modules(*named: str) -> list[Path]:
    """Every module of the package where it lives (the parts' own folders; gpulens/ holds the rest and links to
    them). A glob that stopped reaching a folder (as analyzer/*.py did when the analyzer grew sub-packages)
    fails here, on the modules `named` and one of each folder, rather than check nothing."""
    modules = [
        path
        for top in ("analyzer", "exporter", "dashboards", "alerts", "gpulens")
        for path in sorted((REPO / top).rglob("*.py"))
        if not any(part.is_symlink() for part in (path, *path.parents))
    ]
    reached = {str(path.relative_to(REPO)) for path in modules}
    folders = [f"analyzer/{part}/__init__.py" for part in ("cli", "inputs", "judging", "outputs", "runs")]
    assert {*named, *folders, "exporter/cli.py", "alerts/rules.py", "dashboards/gpulens.py"} - reached == set()
    return modules


def test_no_output_decides_on_a_verdicts_evidence():
    """Evidence is what a verdict shows a person; what outputs act on is typed (Verdict.cause, Verdict.facts).
    No module tests an evidence key (`"..." in v.evidence`, `.evidence.get`) to decide what to do."""
    deciding = []
    modules = package_modules("analyzer/judging/classify.py", "analyzer/outputs/plan.py", "gpulens/core/bottlenecks.py")
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            tests_key = isinstance(node, ast.Compare) and any(
                isinstance(op, ast.In | ast.NotIn) and isinstance(right, ast.Attribute) and right.attr == "evidence"
                for op, right in zip(node.ops, node.comparators, strict=True)
            )
            gets = (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "get"
                and isinstance(node.func.value, ast.Attribute)
                and node.func.value.attr == "evidence"
            )
            if tests_key or gets:
                deciding.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert deciding == []


def reached_from(module: str, name: str) -> list[ast.FunctionDef]:
    """The functions of the rules package that `name` of `module` (a rules module's stem) calls, however deep,
    itself included: calls by name, resolved in its module or where it imports them from the rules package."""
    functions: dict[tuple[str, str], tuple[ast.FunctionDef, dict[str, str]]] = {}
    for path in rule_modules():
        tree = parsed(path)
        stem = path.rsplit("/", 1)[1].removesuffix(".py")
        imported = {
            alias.asname or alias.name: node.module.removeprefix("gpulens.analyzer.judging.rules").lstrip(".")
            or "__init__"
            for node in tree.body
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpulens.analyzer.judging.rules")
            for alias in node.names
        }
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                functions[stem, node.name] = (node, imported)
    reached: dict[tuple[str, str], ast.FunctionDef] = {}
    todo = [(module, name)]
    while todo:
        key = todo.pop()
        if key in reached or key not in functions:
            continue
        node, imported = functions[key]
        reached[key] = node
        calls = [
            call.func.id for call in ast.walk(node) if isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
        ]
        todo += [(imported.get(called, key[0]), called) for called in calls]
    return list(reached.values())


def test_each_rule_declares_the_features_and_thresholds_it_reads():
    """A Rule's `features` and `thresholds` are the PodFeatures fields (`f.`) and Thresholds (`t.`) its decision
    reads, however deep within the rules: what a person tuning a threshold, or changing a feature, reads to find
    the rules it moves."""
    import dataclasses

    from gpulens.analyzer.judging.features import PodFeatures
    from gpulens.analyzer.judging.rules import RULES
    from gpulens.core.thresholds import Thresholds

    for rule in RULES:
        functions = reached_from(rule.decide.__module__.rsplit(".", 1)[1], rule.decide.__name__)
        read = [node for function in functions for node in ast.walk(function) if isinstance(node, ast.Attribute)]
        named = {(node.value.id, node.attr) for node in read if isinstance(node.value, ast.Name)}
        assert rule.features == tuple(sorted(attr for owner, attr in named if owner == "f")), rule.decide.__name__
        assert rule.thresholds == tuple(sorted(attr for owner, attr in named if owner == "t")), rule.decide.__name__
        assert set(rule.features) <= set(PodFeatures._fields), rule.decide.__name__
        assert set(rule.thresholds) <= {field.name for field in dataclasses.fields(Thresholds)}, rule.decide.__name__


#: The modules whose job is to name classes: the record of each (core/bottlenecks.py), the rules that find them
#: (each names the class it finds) and `gpulens eval`'s scenarios (each labelled with the class it plays).
NAMING_CLASSES = ("gpulens/core/bottlenecks.py", "analyzer/judging/rules/", "analyzer/outputs/evaluate.py")
#: Literals of a class name the rest of the package may hold. Code that decides on a class by name imports it
#: from core/bottlenecks.py (IDLE, UNEXPLAINED, ...), so that renaming a class cannot miss a use of it; what is
#: left is words that are not classes there (a slot's idle share, a connection's idle state, the simulator's
#: profile names). Issue 77 found 66.
MOST_CLASS_LITERALS = 25


def test_class_names_are_written_out_in_few_places_besides_their_record_rules_and_scenarios():
    names = set(CLASSES)
    written = []
    for path in package_modules("gpulens/core/bottlenecks.py", *rule_modules(), "analyzer/outputs/evaluate.py"):
        where = str(path.relative_to(REPO))
        if where.startswith(NAMING_CLASSES):
            continue
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
        }
        written += [
            f"{where}:{node.lineno} {node.value}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and node.value in names and id(node) not in docstrings
        ]
    assert len(written) <= MOST_CLASS_LITERALS, written
