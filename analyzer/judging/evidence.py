"""A verdict's evidence: text that keeps its figures as numbers until an output renders them.

The classifier writes each item of evidence as a sentence with its figures and the thresholds they passed
("95% of samples >= 20%: one rank ..."). The API, the page, the metrics' labels and the reports show that
text as written; the terminal table shows its figures in units a person reads at a glance (95%, 300 s,
31.0 GiB). An `Evidence` is the text (a str, so every output that shows text shows it unchanged, and JSON
carries it as a string) built from its parts, its figures kept as `Figure` records: the table renders each
in its unit from the number, never by reading numbers back out of words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

#: What a figure measures: a share 0-1 (written in %), seconds, or bytes (shown in GiB).
Unit = Literal["fraction", "seconds", "bytes"]


@dataclass(frozen=True)
class Figure:
    """A number in evidence: its value, its unit, and how the evidence text shows it (a share in percent to a
    tenth; other measures to the classifier's rounding, 3 significant digits, a threshold as configured)."""

    value: float
    unit: Unit
    shown: str

    def in_units(self) -> str:
        if self.unit == "fraction":
            return self.shown
        if self.unit == "seconds":
            return f"{self.shown} s"
        return f"{self.value / 2**30:.1f} GiB"


def percent(value: float) -> str:
    """A share 0-1 in percent, to a tenth ("95%", "7.6%", "17.4%"; never "7.607%" beside "17.44%"); a share
    under a tenth of a percent to two significant digits ("0.04%"), so that it does not read as none."""
    points = value * 100
    if points != 0 and abs(points) < 0.095:
        return f"{points:.2g}%"
    return f"{points:.1f}".removesuffix(".0") + "%"


def share(value: float) -> Figure:
    """A share 0-1, measured or a threshold: written in percent (0.95 as "95%", a threshold of 0.02 as "2%")."""
    return Figure(value, "fraction", percent(value))


def seconds(value: float, spec: str = ".0f") -> Figure:
    return Figure(value, "seconds", format(value, spec))


def byte_count(value: float) -> Figure:
    return Figure(value, "bytes", f"{value:.0f}")


class Evidence(str):
    """One item of evidence: its text (what `str` holds), and the parts it was built from, text and figures."""

    parts: tuple[str | Figure, ...]

    def __new__(cls, *parts: str | Figure) -> Evidence:
        text = super().__new__(cls, "".join(p.shown if isinstance(p, Figure) else p for p in parts))
        text.parts = parts
        return text

    def __reduce__(self) -> tuple[type[Evidence], tuple[str | Figure, ...]]:
        return Evidence, self.parts  # pickled with its figures (report shards cross processes)

    def in_units(self) -> str:
        return "".join(p.in_units() if isinstance(p, Figure) else p for p in self.parts)


def in_units(evidence: str) -> str:
    """An item of evidence as a person reads it: its figures in their units (text read back from JSON, or
    written without figures, as it is)."""
    return evidence.in_units() if isinstance(evidence, Evidence) else evidence


def item_in_units(key: str, evidence: str) -> str:
    """ "key: value" as a person reads an item of evidence: its figures in their units, and its key without the
    unit its name gives programs where the figure is shown in another ("memory_held: 0.7 GiB", not
    "memory_held_bytes: 0.7 GiB")."""
    shown = in_units(evidence)
    if shown != str(evidence):
        key = key.removesuffix("_bytes").removesuffix("_seconds")
    return f"{key}: {shown}"


def duration(seconds: float) -> str:
    """A duration as people write one, to the precision that matters at its size: "45 s", "1 min",
    "12 min", "3 h 20 min", "2 d 4 h" (never "0.0166667 h" or "0.0 h")."""
    if not seconds > 0:
        return "0 s"
    if seconds < 59.5:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h" + (f" {minutes} min" if minutes else "")
    days, hours = divmod(round(seconds / 3600), 24)
    return f"{days} d" + (f" {hours} h" if hours else "")


def gpu_count(gpus: float) -> str:
    """GPUs as the outputs write them: whole where whole, else to a tenth (a notebook culled after an hour
    holds 0.9 of its GPU over the span; 16.842 GPUs claims a precision the plan does not have)."""
    return f"{gpus:.0f}" if abs(gpus - round(gpus)) < 0.05 else f"{gpus:.1f}"
