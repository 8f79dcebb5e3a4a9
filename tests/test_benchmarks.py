"""The benchmark figures of the docs are the benchmarks' own output, each naming the commit whose code it
measured (benchmarks/results.py: figures stand for their commit until the benchmarks run again, once per
issue that changes measured code; `benchmarks/results.py` lists what has changed since)."""

import json
import subprocess

import pytest

from benchmarks import readme, results


def test_the_benchmarks_pages_figures_are_rendered_from_the_results_files():
    assert readme.current_block(readme.BENCHMARKS.read_text()) == readme.render(), "run benchmarks/readme.py"


def test_the_sizing_pages_figures_are_rendered_from_the_results_files():
    assert readme.current_block(readme.SIZING.read_text()) == readme.render_sizing(), "run benchmarks/readme.py"


@pytest.mark.parametrize("name", sorted(results.SOURCES))
def test_every_results_file_measured_the_code_of_the_commit_it_names(name):
    """The digest a run took of the code it measured is the digest of that code at the commit it names, and
    the commit is in main's history: the page's "measured on" is true, whatever changed after it."""
    document = results.load(name)
    script = results.SOURCES[name][0]
    assert document["benchmark"] == name
    commit = document["commit"]
    ancestor = subprocess.run(["git", "merge-base", "--is-ancestor", commit, "HEAD"], cwd=results.REPO)
    assert ancestor.returncode == 0, f"benchmarks/results/{name}.json names {commit}, not in this history"
    assert document["source_digest"] == results.source_digest(name, commit), (
        f"benchmarks/results/{name}.json was measured on code that differs from its commit {commit[:12]} "
        f"(uncommitted changes): run {script} again on committed code, then benchmarks/readme.py"
    )


@pytest.mark.parametrize("name", sorted(results.SOURCES))
def test_the_measured_files_are_the_ones_pathlib_globs(name):
    """What a digest covers, read from git's file lists (so a commit's code can be digested), is what the
    globs of results.SOURCES mean to pathlib in the working tree."""
    patterns = results.SOURCES[name]
    left_out = {p for glob in patterns if glob.startswith("!") for p in results.REPO.glob(glob[1:])}
    globbed = {p for glob in patterns if not glob.startswith("!") for p in results.REPO.glob(glob) if p.is_file()}
    expected = sorted(p.relative_to(results.REPO).as_posix() for p in globbed - left_out)
    assert results.measured_paths(name) == expected
    assert len(expected) >= 3  # the benchmark, and code it measures


def test_the_files_changed_since_the_measured_commit_are_listed(tmp_path, monkeypatch):
    """The closing note's list, on a repository of two commits: nothing while the measured code is as the
    results file's commit has it, or differs in its comments, docstrings and layout alone; then the edited,
    added and removed measured files, and no other."""
    repo = tmp_path / "repo"

    def git(*args: str) -> str:
        command = ["git", "-c", "user.name=gpulens", "-c", "user.email=gpulens@example.com", *args]
        return subprocess.run(command, cwd=repo, capture_output=True, text=True, check=True).stdout

    for path, text in {
        "benchmarks/analyzer.py": "bench",
        "analyzer/frame.py": "frame",
        "analyzer/old.py": "old",
        "gpulens/core/trace.py": "trace",
        "gpulens/core/units.py": 'def mib(n):\n    """Bytes."""\n    return n / 2**20  # binary\n',
        "docs/analyzer.md": "docs",
    }.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "measured")
    (repo / "benchmarks" / "results").mkdir()
    monkeypatch.setattr(results, "REPO", repo)
    monkeypatch.setattr(results, "RESULTS", repo / "benchmarks" / "results")
    (repo / "benchmarks" / "results" / "analyzer-cycle.json").write_text(
        json.dumps({"benchmark": "analyzer-cycle", "commit": git("rev-parse", "HEAD").strip()})
    )
    assert results.changed_since("analyzer-cycle") == []
    said_otherwise = 'def mib(n):\n    """Bytes, as a number of MiB."""\n\n    return n / 2**20  # 1,048,576\n'
    (repo / "gpulens" / "core" / "units.py").write_text(said_otherwise)
    assert results.changed_since("analyzer-cycle") == []  # the same code: its figures stand
    (repo / "analyzer" / "frame.py").write_text("frame, changed")
    (repo / "analyzer" / "new.py").write_text("new")  # not yet committed: listed all the same
    (repo / "analyzer" / "old.py").unlink()
    (repo / "docs" / "analyzer.md").write_text("docs, changed")  # not measured
    assert results.changed_since("analyzer-cycle") == ["analyzer/frame.py", "analyzer/new.py", "analyzer/old.py"]
    (repo / "gpulens" / "core" / "units.py").write_text(said_otherwise.replace("2**20", "10**6"))
    assert "gpulens/core/units.py" in results.changed_since("analyzer-cycle")
