"""A report judges a piece of its span while the next is read (analyzer/runs/span.py, _read_ahead): the pieces
come in order, the next read is under way while the caller holds the last, a failed read fails the caller
at the piece it failed on, and a caller that stops lets the reading end before the pieces are let go."""

from __future__ import annotations

import threading
from collections.abc import Generator

import pytest

from gpulens.analyzer.runs.span import _read_ahead


class Pieces:
    """A stand-in for the reads of a span: yields what it is given, noting each read and whether it was closed."""

    def __init__(self, items: list[object]):
        self.items = items
        self.started: list[threading.Event] = [threading.Event() for _ in items]
        self.closed = threading.Event()

    def read(self) -> Generator[object, None, None]:
        try:
            for index, item in enumerate(self.items):
                self.started[index].set()
                if isinstance(item, Exception):
                    raise item
                yield item
        finally:
            self.closed.set()


def test_pieces_come_in_order_and_the_next_is_read_while_the_caller_holds_the_last():
    pieces = Pieces(["a", "b", "c"])
    taken = []
    for piece in _read_ahead(pieces.read()):
        taken.append(piece)
        if piece == "a":
            # Condition waits, not sleeps: the read of "b" starts without the caller asking for it.
            assert pieces.started[1].wait(timeout=30)
    assert taken == ["a", "b", "c"] and pieces.closed.is_set()


def test_a_failed_read_fails_the_caller_after_the_pieces_before_it():
    pieces = Pieces(["a", ValueError("the store refused piece 2")])
    taken = []
    with pytest.raises(ValueError, match="piece 2"):
        for piece in _read_ahead(pieces.read()):
            taken.append(piece)
    assert taken == ["a"] and pieces.closed.is_set()


def test_a_caller_that_stops_lets_the_read_under_way_end_and_the_pieces_go():
    pieces = Pieces(["a", "b", "c"])
    ahead = _read_ahead(pieces.read())
    assert next(ahead) == "a"
    ahead.close()  # the caller failed judging "a", or was interrupted
    assert pieces.started[1].is_set() and not pieces.started[2].is_set()
    assert pieces.closed.is_set()
