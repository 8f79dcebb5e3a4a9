"""Changes found, not declared (issue 74, part 1): each change a workload went through, from what
kube-state-metrics says of its replicas and its autoscaler, one event per change."""

from __future__ import annotations

from gpulens.analyzer.inputs.cluster import WorkloadHistory
from gpulens.analyzer.judging.changes import Change, PodSpell, changes, held_changes, steps_of
from gpulens.analyzer.outputs.outcomes import windows_of
from gpulens.core.thresholds import Thresholds

T0 = 1_762_646_400.0  # 2025-11-09 00:00 UTC
STEP = 60.0


def series(*values: float, start: float = T0) -> list[tuple[float, float]]:
    return [(start + STEP * k, v) for k, v in enumerate(values)]


def test_a_scale_made_in_steps_is_one_change_from_the_first_value_to_the_last():
    """8 -> 6 -> 4 -> 2 a minute apart (a scale done in three commands, or a controller walking down) is one
    change, 8 -> 2, from the first step seen at a new value to the last."""
    points = series(8, 8, 6, 4, 2, 2, 2)
    assert steps_of(points, 600.0) == [(8.0, 2.0, T0 + 2 * STEP, T0 + 4 * STEP)]


def test_steps_further_apart_than_the_settling_time_are_changes_of_their_own():
    points = series(8, 4, *[4] * 15, 2)
    assert steps_of(points, 600.0) == [(8.0, 4.0, T0 + STEP, T0 + STEP), (4.0, 2.0, T0 + 17 * STEP, T0 + 17 * STEP)]


def test_steps_that_end_where_they_began_are_no_change():
    """A replica scaled up and back within minutes (a restart by hand, a rollout's surge) changed nothing."""
    assert steps_of(series(4, 5, 4, 4), 600.0) == []
    assert steps_of(series(4, 4, 4), 600.0) == []
    assert steps_of([], 600.0) == []


def test_an_autoscaled_workloads_replicas_are_its_autoscalers_and_only_its_bounds_change():
    """A Deployment an HPA targets moves with its load all day: not a change. Its HPA's max cut from 10 to 4 is."""
    history = WorkloadHistory(
        [
            ("serve", "Deployment", "chat", series(3, 5, 8, 4, 2)),  # the HPA's doing
            ("serve", "Deployment", "ranker", series(8, 8, 2, 2)),  # scaled by hand
            ("research", "StatefulSet", "notebook-bob", series(1, 1, 1, 0)),  # a notebook's culler stopped it
        ],
        [("serve", "Deployment", "chat", series(2, 2, 2, 2, 2), series(10, 10, 10, 4, 4))],
    )
    found = changes(history, 600.0)
    assert found == [
        Change(
            "serve",
            "serve/Deployment/ranker",
            "replicas",
            8.0,
            2.0,
            T0 + 2 * STEP,
            T0 + 2 * STEP,
            "kube-state-metrics: kube_deployment_spec_replicas",
        ),
        Change(
            "research",
            "research/StatefulSet/notebook-bob",
            "replicas",
            1.0,
            0.0,
            T0 + 3 * STEP,
            T0 + 3 * STEP,
            "kube-state-metrics: kube_statefulset_replicas",
        ),
        Change(
            "serve",
            "serve/Deployment/chat",
            "autoscaler_max_replicas",
            10.0,
            4.0,
            T0 + 3 * STEP,
            T0 + 3 * STEP,
            "kube-state-metrics: kube_horizontalpodautoscaler_spec_max_replicas",
        ),
    ]


def _change(start: float, end: float | None = None, workload: str = "serve/Deployment/chat") -> Change:
    return Change("serve", workload, "replicas", 4.0, 2.0, start, start if end is None else end, "kube-state-metrics")


def test_a_changes_windows_are_equal_leave_its_transition_out_and_stop_at_the_workloads_other_changes():
    """Before ends a step before the change was first seen; after starts change_settle_seconds after its last
    step (pods ending, models loading); each as long as the shorter side's room, at most a week."""
    t = Thresholds()
    span = (T0, T0 + 30 * 86400.0)
    change = _change(T0 + 10 * 86400.0, T0 + 10 * 86400.0 + 2 * STEP)
    w = windows_of(change, [], span, STEP, t)
    assert (w.before_end, w.after_start, w.length, w.short_side) == (
        change.start - STEP,
        change.end + 600.0,
        7 * 86400.0,  # change_window_max_seconds
        "",
    )
    assert (w.before_start, w.after_end) == (w.before_end - 7 * 86400.0, w.after_start + 7 * 86400.0)
    # The workload's next change, two days on, cuts both windows to the room after: the same length on each side.
    later = _change(change.end + 2 * 86400.0)
    w = windows_of(change, [later], span, STEP, t)
    assert w.length == later.start - STEP - (change.end + 600.0) == w.before_end - w.before_start
    # An earlier change's settling ends the before window's room.
    earlier = _change(change.start - 3 * 3600.0)
    w = windows_of(change, [earlier], span, STEP, t)
    assert w.length == change.start - STEP - (earlier.end + 600.0)


def test_a_change_too_near_the_spans_end_is_too_early_and_says_which_side_is_short():
    t = Thresholds()
    change = _change(T0 + 86400.0)
    assert windows_of(change, [], (T0, change.end + 1800.0), STEP, t).short_side == "after"
    assert windows_of(change, [], (change.start - 1800.0, T0 + 5 * 86400.0), STEP, t).short_side == "before"


A100, H100 = "1 x NVIDIA A100-SXM4-80GB", "1 x NVIDIA H100 80GB HBM3"


def _spell(held: str, first: float, last: float, kind: str = "serving", workload: str = "serve/Deployment/chat"):
    """A pod on `held` GPUs from `first` to `last` (seconds after T0)."""
    return PodSpell("serve", workload, kind, held, T0 + first, T0 + last)


def test_a_rolling_update_onto_other_gpus_is_one_change_over_its_overlap():
    """Three pods on A100s replaced one by one by three on H100s, a minute apart, the old ones ending as the new
    are ready: one change, from the first new pod's start to the last old pod's end."""
    spells = [_spell(A100, 0, 3600 + 60 * k) for k in range(3)]
    spells += [_spell(H100, 3600 + 60 * k - 30, 7200) for k in range(3)]
    [change] = held_changes(spells, 600.0, T0 + 7200, set())
    assert (change.what, change.before, change.after) == ("gpus_per_pod", A100, H100)
    assert (change.start, change.end) == (T0 + 3570, T0 + 3720)
    assert change.fewer is None  # another GPU: its cost says which way it went
    assert change.values() == f"{A100} -> {H100}"


def test_gpus_that_change_and_change_back_within_the_settling_time_are_no_change_and_a_pods_restart_none():
    spells = [_spell(A100, 0, 1000), _spell(H100, 1000, 1200), _spell(A100, 1200, 7200)]
    assert held_changes(spells, 600.0, T0 + 7200, set()) == []
    restarted = [_spell(A100, 0, 1000), _spell(A100, 1060, 7200)]
    assert held_changes(restarted, 600.0, T0 + 7200, set()) == []


def test_a_notebook_whose_pod_ended_is_a_change_unless_its_controller_said_so():
    notebook = [_spell(A100, 0, 3000, kind="notebook", workload="research/Pod/jupyter-carol")]
    [ended] = held_changes(notebook, 600.0, T0 + 7200, set())
    assert (ended.what, ended.before, ended.after, ended.start, ended.fewer) == ("ended", A100, "none", T0 + 3000, True)
    assert held_changes(notebook, 600.0, T0 + 7200, {"research/Pod/jupyter-carol"}) == []
    # Ended less than the settling time before the span's end: it may be restarting.
    assert held_changes(notebook, 600.0, T0 + 3300, set()) == []
    # A serving pod that ended is its controller's business (its replicas), not a culled server.
    assert held_changes([_spell(A100, 0, 3000)], 600.0, T0 + 7200, set()) == []


def test_a_gpus_rates_are_unknown_for_a_rate_window_after_its_pod_left_even_a_cycle_later():
    """gpulens' rates reach back a rate window (a minute at steps of 15 s) over the samples before each row: a
    GPU's rows within it after its pod left still show the pod's kernels, and are told apart (their rates made
    unknown), so that a GPU freed by a busy pod is not judged to run kernels without one. A pod that left before
    the rows read (a live cycle's window begins after it) counts, from the newest step it held the GPU."""
    import numpy as np

    from gpulens.analyzer.inputs.window import left_by_a_pod

    ts = np.array([0, 30, 60, 90, 120, 150, 180] * 3, dtype=float)
    gpu = np.repeat([0, 1, 2], 7)
    pod = np.array([5, 5, 0, 0, 0, 0, 0] + [0] * 7 + [0, 7, 7, 0, 0, 0, 7])
    left, held = left_by_a_pod(gpu, ts, pod, np.full(3, np.nan), 60.0)
    # GPU 0: last held at 30, so 60 (30 s on) goes, 90 (a minute on) stays; GPU 1, never held, stays; GPU 2: last
    # held at 60, so 90 goes, and another pod came at 180.
    assert np.flatnonzero(left).tolist() == [2, 17]
    assert held.tolist()[0] == 30 and np.isnan(held[1]) and held[2] == 180
    # A cycle later, the rows of GPU 1 begin 20 s after a pod (read in an earlier cycle) last held it at -20.
    left, _ = left_by_a_pod(np.zeros(3, dtype=int), np.array([0.0, 30.0, 60.0]), np.zeros(3), np.array([-20.0]), 60.0)
    assert left.tolist() == [True, True, False]
