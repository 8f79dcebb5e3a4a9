"""pack(): every unit's need after the plan placed onto each model's GPUs (first fit, decreasing): the whole GPUs
and nodes the plan frees, which the actions' shares of a GPU alone do not say."""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

from gpulens.analyzer.judging.classify import Verdict
from gpulens.analyzer.outputs.actions import MONTH_HOURS, SCHEDULING_CONFIDENCE, Action, Packed, kept
from gpulens.core.catalog import model_info


def pack(verdicts: list[Verdict], actions: list[Action], prices: dict[str, float]) -> list[Packed]:
    """Each model's GPUs after the plan: the actions' needs, and the whole GPUs of every unit no action
    changes, packed first-fit decreasing onto the GPUs of the model."""
    # The cluster's actions move pods or change settings; the GPUs their pods need stay as they are.
    changed = {unit for a in actions if a.action not in SCHEDULING_CONFIDENCE for unit in a.units}
    needs = [n for a in actions for n in a.needs]
    needs += [n for v in verdicts if v.unit not in changed for n in kept(v)]
    present: dict[str, set[tuple[str, str]]] = defaultdict(set)
    nodes: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for v in verdicts:
        for gpu in v.gpus:
            board = gpu.split("/")[0]  # a MIG instance's board
            present[v.gpu_model].add((v.node, board))
            nodes[v.gpu_model][v.node].add(board)
    out = []
    for model in sorted(set(present) | {n.gpu_model for n in needs}):
        mine = [n for n in needs if n.gpu_model == model]
        boards = {n.board for n in mine if n.sharing == "whole" and n.board}
        whole = len(boards) + sum(1 for n in mine if n.sharing == "whole" and not n.board)
        needed, bound = whole, whole
        for sharing in ("mig", "time-slicing"):
            shares = [Fraction(n.share).limit_denominator(64) for n in mine if n.sharing == sharing]
            needed += _first_fit_decreasing(shares)
            bound += math.ceil(sum(shares, Fraction(0)))
        have = len(present.get(model, ()))
        per_node = min((len(gpus) for gpus in nodes[model].values()), default=0)
        freed = have - needed
        out.append(
            Packed(
                model,
                have,
                len(nodes[model]),
                needed,
                bound,
                freed,
                freed // per_node if per_node and freed > 0 else 0,
                round(freed * model_info(model, prices).price_per_hour * MONTH_HOURS, 2),
            )
        )
    return out


def _first_fit_decreasing(shares: list[Fraction]) -> int:
    """GPUs that hold `shares` (each at most 1), placed largest first on the first GPU with room."""
    free: list[Fraction] = []
    for share in sorted(shares, reverse=True):
        room = next((k for k, left in enumerate(free) if left >= share), None)
        if room is None:
            free.append(1 - share)
        else:
            free[room] -= share
    return len(free)
