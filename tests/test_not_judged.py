"""The columns no verdict reads (trace.NOT_JUDGED) are not asked of a store (analyzer/inputs/series.py): these tests
hold the features and the verdicts to that, on a simulated pod of every class, so that a signature that
starts reading one of them fails here rather than judging a store's fleet without it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from gpulens.analyzer.judging.features import pod_features
from gpulens.analyzer.judging.history import analyze
from gpulens.analyzer.outputs import evaluate
from gpulens.core import trace as tr
from gpulens.core.thresholds import Thresholds


def without_unjudged(trace: pd.DataFrame) -> pd.DataFrame:
    """`trace` as a store's read gives it: the NOT_JUDGED columns blank."""
    blank = trace.copy()
    blank[list(tr.NOT_JUDGED)] = np.nan
    return blank


@pytest.mark.slow
def test_every_class_is_judged_the_same_without_the_columns_a_store_is_not_asked_for():
    scenarios = evaluate.make_scenarios(seed=7, per_class=2)
    assert {s.label for s in scenarios} == set(evaluate.SCENARIOS)  # every class (and its variants)
    carried = 0
    for scenario in scenarios:
        trace = evaluate.scenario_trace(scenario, window=300.0)
        # The simulator writes both columns (a test of blanking blanks would pass whatever the features read).
        carried += int(trace[list(tr.NOT_JUDGED)].notna().all(axis=None))
        blank = without_unjudged(trace)
        # Every feature (a window's verdict is judged from them alone: classify.judge).
        pd.testing.assert_frame_equal(pod_features(blank, Thresholds()), pod_features(trace, Thresholds()))
    assert carried >= len(scenarios) // 2


@pytest.mark.slow
def test_a_day_of_every_profile_is_judged_the_same_without_them():
    """Over a day in windows (history.ledgers), at a store's 30 s."""
    for scenario in evaluate.make_day_scenarios(seed=7, per_profile=1, spans=(2 * 3600.0,)):
        trace, _ = evaluate.day_traces(scenario, (30.0,))[30.0]
        assert [v.to_dict() for v in analyze(without_unjudged(trace))] == [v.to_dict() for v in analyze(trace)]
