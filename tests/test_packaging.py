"""One installed name: gpulens. A user's own `alerts` or `analyzer` package must not collide with ours."""

import os
import re
import subprocess
import sys
import zipfile

import pytest

from tests.helpers import REPO

USER_CODE = """
import gpulens.alerts.rules, gpulens.analyzer.judging.classify, gpulens.dashboards.style, gpulens.exporter.sampler
import alerts, analyzer
print(alerts.OWNER, analyzer.OWNER)
for name in ("exporter", "dashboards"):
    try:
        __import__(name)
    except ImportError:
        print(name, "absent")
    else:
        print(name, "IMPORTABLE")
"""


@pytest.mark.slow
def test_only_gpulens_is_installed_and_a_users_own_alerts_package_imports(tmp_path):
    # The user's project, outside this repository, has packages named like gpulens' parts.
    for name in ("alerts", "analyzer"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text(f"OWNER = 'user-{name}'\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", USER_CODE], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n") == ["user-alerts user-analyzer", "exporter absent", "dashboards absent", ""]


@pytest.mark.slow
def test_the_wheel_holds_one_top_level_package_with_every_part_and_its_data(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("gpulens-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top_level = {n.split("/")[0] for n in names}
    assert {name for name in top_level if not name.endswith(".dist-info")} == {"gpulens"}
    for path in (
        "gpulens/core/metrics.py",
        "gpulens/simulator/fleets/demo.yaml",
        "gpulens/demo-thresholds.yaml",
        "gpulens/exporter/sampler.py",
        "gpulens/analyzer/judging/classify.py",
        "gpulens/dashboards/gpulens.py",
        "gpulens/alerts/rules.py",
    ):
        assert path in names, path
    # The parts' folders are packaged through the symlinks as real files, not as links.
    info = zipfile.ZipFile(wheel).getinfo("gpulens/exporter/sampler.py")
    assert info.file_size == (REPO / "exporter" / "sampler.py").stat().st_size


def test_every_test_the_fault_table_names_exists():
    # docs/reliability.md backs each fault with a test: a renamed or deleted test must not leave a row
    # pointing at nothing.
    import ast
    import re

    text = (REPO / "docs" / "reliability.md").read_text()
    named = re.findall(r"`(test_\w+\.py)::(test_\w+)`|`::(test_\w+)`", text)
    tests, current = [], None
    for path, name, continued in named:
        current = path or current
        tests.append((current, name or continued))
    assert len(tests) >= 25
    defined: dict[str, set[str]] = {}
    for path, name in tests:
        if path not in defined:
            tree = ast.parse((REPO / "tests" / path).read_text())
            defined[path] = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        assert name in defined[path], f"docs/reliability.md names {path}::{name}, which does not exist"


def test_docs_verdicts_names_every_field_of_a_verdict_an_episode_and_a_class_share():
    """docs/verdicts.md's tables list each field (with its unit) of Verdict, Episode, ClassShare, Size and DayUse: a
    field added to one of them without its row fails here, as does a row for a field that is gone."""
    from dataclasses import fields

    from gpulens.analyzer.judging.classify import ClassShare, DayUse, Episode, Verdict
    from gpulens.analyzer.judging.sizing import Size

    sections = (REPO / "docs" / "verdicts.md").read_text().split("\n## ")[1:]
    documented = [
        {
            name
            for line in section.splitlines()
            if line.startswith("| `")
            for name in re.findall(r"`(\w+)`", line.split("|")[1])
        }
        for section in sections
    ]
    assert documented == [
        {f.name for f in fields(Verdict)} | {"unit"},
        {f.name for f in fields(Episode)},
        {f.name for f in fields(ClassShare)},
        {f.name for f in fields(Size)},
        {f.name for f in fields(DayUse)},
    ]
