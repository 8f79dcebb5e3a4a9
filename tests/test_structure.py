"""The shape issue 77 gave the code, held: no function of the package over MAX_FUNCTION_LINES lines, and the
modules it split (the verdict's rules and records, the store's reads, the plan) each under MAX_MODULE_LINES.
A long function or module is split by concept (docs/architecture.md says where each concept lives)."""

from __future__ import annotations

import ast

from tests.helpers import REPO
from tests.test_classes import package_modules

MAX_FUNCTION_LINES = 120
MAX_MODULE_LINES = 600
#: The modules split by concept, which stay under MAX_MODULE_LINES.
SPLIT = ("analyzer/judging/classify.py", "analyzer/inputs/series.py", "analyzer/outputs/plan.py")


def test_no_function_is_longer_than_a_screenful_or_two():
    long = []
    for path in package_modules(*SPLIT):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []


def test_the_modules_split_by_concept_stay_small():
    sizes = {name: len((REPO / name).read_text().splitlines()) for name in SPLIT}
    assert {name: size for name, size in sizes.items() if size > MAX_MODULE_LINES} == {}
