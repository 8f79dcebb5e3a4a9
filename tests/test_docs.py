"""The README and docs/ as a reader follows them: every relative link leads to a file that exists, and every
#anchor to a heading of it (as GitHub makes anchors from headings); the README opens with its two commands."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _prose(text: str) -> str:
    """The text outside fenced code blocks (a link in a code sample is not one)."""
    return re.sub(r"```.*?```", "", text, flags=re.S)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but hyphens dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "")).strip().lower().replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", _prose(page.read_text())):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", _prose(file.read_text()), re.M)
            if anchor not in {_anchor(h) for h in headings}:
                broken.append(f"{target}: no such heading")
    assert not broken, f"{page.relative_to(REPO)}: " + "; ".join(broken)


def test_the_readme_opens_with_the_demo_and_the_tests():
    """The first code block holds the two commands a fresh machine runs: the demo, then every test."""
    first = re.search(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)[1]
    commands = [line for line in first.splitlines() if line and not line.startswith("#")]
    assert commands == [
        "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/gpulens demo",
        "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && .venv/bin/pytest",
    ]


def test_ci_runs_the_readmes_test_command_and_cites_what_exists():
    """CI's script ends with the README's test command, exactly, and the pages and sections its comments cite
    exist (it cited a README "Tests" section there was none of)."""
    script = (REPO / ".ci" / "run").read_text()
    first = re.search(r"```sh\n(.*?)```", (REPO / "README.md").read_text(), re.S)[1]
    tests = [line for line in first.splitlines() if line and not line.startswith("#")][-1]
    assert script.rstrip().splitlines()[-1] == tests
    for page, section in re.findall(r"\((\S+\.md), \"([^\"]+)\"\)", script):
        headings = re.findall(r"^#+ (.+)$", (REPO / page).read_text(), re.M)
        assert section in headings, f".ci/run cites {page}'s section {section!r}, which it does not have"
    assert re.findall(r"\((\S+\.md), \"([^\"]+)\"\)", script) == [("docs/development.md", "Developing")]
