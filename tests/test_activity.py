"""The shape of activity between scrapes (core/activity.py): histogram, transitions, steady bursts."""

import random

from gpulens.core.activity import BUCKETS, ActivityShape


def square_wave(shape: ActivityShape, periods: int, busy: int, quiet: int, start: float = 0.0) -> float:
    t = start
    for _ in range(periods):
        for value in [1.0] * busy + [0.0] * quiet:
            shape.observe(t, value)
            t += 1.0
    return t


def test_training_steps_are_counted_sample_by_sample():
    shape = ActivityShape()
    square_wave(shape, periods=10, busy=2, quiet=3)
    counts = shape.counts()
    assert counts.count == 50 and counts.sum == 20.0
    assert dict(zip(BUCKETS, counts.cumulative(), strict=True)) == {
        0.01: 30,
        0.1: 30,
        0.3: 30,
        0.5: 30,
        0.7: 30,
        0.9: 30,
        float("inf"): 50,
    }
    # Starting busy: 10 falls and 9 rises. Rises at 5, 10, ... 45: the first has no period yet, the
    # second no period before it to compare with; the other 7 repeat the 5 s period.
    assert counts.transitions == 19
    assert counts.steady_bursts == 7


def test_requests_at_random_are_rarely_steady():
    rng = random.Random(7)
    shape = ActivityShape()
    t = 0.0
    for _ in range(4000):
        shape.observe(t, 0.95)  # a request: one busy sample
        t += 1.0
        gap = 1 + int(rng.expovariate(1 / 30))  # then quiet for an exponential number of seconds
        for _ in range(gap):
            shape.observe(t, 0.0)
            t += 1.0
    counts = shape.counts()
    assert counts.transitions == 7999
    # Independent exponential periods: P(2/3 <= X2/X1 <= 3/2) = 0.2; whole seconds widen it a little.
    assert round(2 * counts.steady_bursts / counts.transitions, 2) == 0.22


def test_a_gap_breaks_the_sequence():
    shape = ActivityShape()
    shape.observe(0.0, 1.0)
    shape.gap()
    shape.observe(100.0, 0.0)  # not a transition: nobody knows what happened in between
    shape.observe(101.0, 0.6)
    counts = shape.counts()
    assert counts.transitions == 1
    assert counts.at_most(0.5) == 1 and counts.at_most(0.7) == 2
