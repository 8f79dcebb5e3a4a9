"""The benchmark figures of the docs are the benchmarks' own output, measured on the current code."""

import pytest

from benchmarks import readme, results


def test_the_benchmarks_pages_figures_are_rendered_from_the_results_files():
    assert readme.current_block(readme.BENCHMARKS.read_text()) == readme.render(), "run benchmarks/readme.py"


def test_the_sizing_pages_figures_are_rendered_from_the_results_files():
    assert readme.current_block(readme.SIZING.read_text()) == readme.render_sizing(), "run benchmarks/readme.py"


@pytest.mark.parametrize("name", sorted(results.SOURCES))
def test_every_results_file_was_measured_on_the_current_code(name):
    document = results.load(name)
    script = results.SOURCES[name][0]
    assert document["benchmark"] == name
    assert document["source_digest"] == results.source_digest(name), (
        f"the code {script} measures has changed since benchmarks/results/{name}.json was written: "
        f"run {script} again, then benchmarks/readme.py"
    )
