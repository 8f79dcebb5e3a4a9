"""Schemas for the YAML files gpulens reads (fleet, thresholds, prices, web config).

A schema says, for every key, what its value must be; `validate` checks a parsed document against one
and returns it converted, or raises ConfigError naming the file, the key (as a path: nodes[2].gpus)
and what was expected. A key the schema does not name is an error, so a typo never silently does
nothing. Numbers must be finite: YAML reads `.nan` and `.inf` as floats, and a NaN threshold would
write an alert rule `< nan` that never fires.
"""

from __future__ import annotations

import difflib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpulens.core.config import PROMQL_DURATION, ConfigError, duration_seconds


class Invalid(Exception):
    """A value that does not fit its schema: the key path where it sits and what was expected."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}" if where else problem)


def _shown(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # Python writes no integer of over 4,300 digits
        return "a number of thousands of digits"
    return text if len(text) <= 60 else text[:57] + "..."


class Schema(ABC):
    """What a value must be."""

    @abstractmethod
    def check(self, value: Any, where: str) -> Any:
        """The value, converted; Invalid naming `where` (the key path) when it does not fit."""

    @abstractmethod
    def describe(self) -> str:
        """What the value must be, as an error message says it ("a number at least 0")."""


@dataclass
class Number(Schema):
    """A finite number (an integer or a float, never a bool or a string) from low to high."""

    low: float = -math.inf
    high: float = math.inf
    #: The low bound itself excluded (a duration or a factor must be above 0).
    above_low: bool = False
    #: What the number is, as messages say it: "a ratio", "a price in USD per GPU-hour".
    noun: str = "a number"

    def describe(self) -> str:
        if self.low > -math.inf and self.high < math.inf and not self.above_low:
            return f"{self.noun} from {self.low:g} to {self.high:g}"
        if self.low > -math.inf:
            return f"{self.noun} {'above' if self.above_low else 'of at least'} {self.low:g}"
        return self.noun + (f" of at most {self.high:g}" if self.high < math.inf else "")

    def check(self, value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            raise Invalid(where, f"expected {self.describe()}, got {_shown(value)}")
        if value < self.low or value > self.high or (self.above_low and value == self.low):
            raise Invalid(where, f"expected {self.describe()}, got {value!r}")
        return float(value)


#: The largest whole number a config may hold where no bound of its own says otherwise: the largest a
#: float holds exactly (2^53), far above any count, seed or size gpulens reads.
LARGEST_INTEGER = 2**53


@dataclass
class Integer(Schema):
    """A whole number from low to high."""

    low: int | None = None
    high: int | None = None

    def describe(self) -> str:
        if self.low is not None and self.high is not None:
            return f"a whole number from {self.low} to {self.high}"
        return "a whole number" + (f" of at least {self.low}" if self.low is not None else "")

    def check(self, value: Any, where: str) -> int:
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or (self.low is not None and value < self.low)
            or (self.high is not None and value > self.high)
        ):
            raise Invalid(where, f"expected {self.describe()}, got {_shown(value)}")
        if self.high is None and abs(value) > LARGEST_INTEGER:  # it would overflow the arrays it goes into
            raise Invalid(where, f"expected {self.describe()}, at most {LARGEST_INTEGER:,}, got {_shown(value)}")
        return value


@dataclass
class Text(Schema):
    """A string: one of `choices` when given, else any that `valid` accepts (without CR or LF when
    `one_line`: header values and names must not break a line)."""

    choices: tuple[str, ...] = ()
    valid: Callable[[str], object] | None = None
    what: str = "a string"
    one_line: bool = True
    #: A password hash or a key: never shown in a message.
    secret: bool = False

    def describe(self) -> str:
        return f"one of {', '.join(self.choices)}" if self.choices else self.what

    def check(self, value: Any, where: str) -> str:
        shown = "a value not shown here (it is a secret)" if self.secret else _shown(value)
        if (
            not isinstance(value, str)
            or (self.choices and value not in self.choices)
            or (self.valid is not None and not self.valid(value))
        ):
            raise Invalid(where, f"expected {self.describe()}, got {shown}")
        if self.one_line and ("\r" in value or "\n" in value):
            raise Invalid(where, f"expected {self.describe()} on one line, got {shown}")
        return value


#: The longest duration a config may give: ten years. Prometheus' and Alertmanager's durations end at
#: 292 years (nanoseconds in 64 bits); a generated rule with a longer `for:` would be refused by promtool.
LONGEST_DURATION = 10 * 365 * 86400.0


@dataclass
class Duration(Schema):
    """A duration as Prometheus writes one (30s, 5m, 1h30m) or a number of seconds, from 0 to ten years."""

    def describe(self) -> str:
        return "a duration such as 30s, 5m or 1h30m"

    def check(self, value: Any, where: str) -> float:
        if isinstance(value, str) and PROMQL_DURATION.fullmatch(value):
            seconds = duration_seconds(value)
            if seconds > LONGEST_DURATION:
                raise Invalid(where, f"expected {self.describe()}, at most 10y (3650d), got {value!r}")
            return seconds
        number = Number(low=0, high=LONGEST_DURATION, noun=self.describe() + " or seconds")
        return number.check(value, where)


@dataclass
class Opaque(Schema):
    """A non-empty mapping passed on as it is, for a tool that checks it itself (an Alertmanager
    receiver: amtool check-config)."""

    what: str = "a mapping"

    def describe(self) -> str:
        return self.what

    def check(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict) or not value:
            raise Invalid(where, f"expected {self.what}, got {_shown(value)}")
        return value


@dataclass
class Flag(Schema):
    """true or false."""

    def describe(self) -> str:
        return "true or false"

    def check(self, value: Any, where: str) -> bool:
        if not isinstance(value, bool):
            raise Invalid(where, f"expected true or false, got {_shown(value)}")
        return value


@dataclass
class ListOf(Schema):
    """A list of items of one schema (a single item is read as a list of one when `single` is set)."""

    item: Schema
    min_length: int = 0
    single: bool = False

    def describe(self) -> str:
        return f"a list of {self.item.describe()}"

    def check(self, value: Any, where: str) -> list:
        if self.single and not isinstance(value, list):
            value = [value]
        if not isinstance(value, list) or len(value) < self.min_length:
            need = "a non-empty list" if self.min_length else "a list"
            raise Invalid(where, f"expected {need} of {self.item.describe()}, got {_shown(value)}")
        return [self.item.check(v, f"{where}[{i}]") for i, v in enumerate(value)]


@dataclass
class MapOf(Schema):
    """A mapping of any keys (checked by `key`) to values of one schema."""

    value: Schema
    key: Schema = field(default_factory=Text)

    def describe(self) -> str:
        return f"a mapping of {self.key.describe()} to {self.value.describe()}"

    def check(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise Invalid(where, f"expected {self.describe()}, got {_shown(value)}")
        out = {}
        for k, v in value.items():
            # YAML reads a key like 7 or 3.5 as a number; a key is the text written.
            key = self.key.check(str(k) if isinstance(k, int | float) and not isinstance(k, bool) else k, where)
            out[key] = self.value.check(v, f"{where}.{key}" if where else str(key))
        return out


@dataclass
class Record(Schema):
    """A mapping with known keys, each with its schema; `required` keys must be present. Absent optional
    keys are absent from the result (the caller's default applies); a key set to null counts as absent."""

    keys: Mapping[str, Schema]
    required: tuple[str, ...] = ()
    what: str = "a mapping"

    def describe(self) -> str:
        return f"{self.what} with keys {', '.join(self.keys)}"

    def check(self, value: Any, where: str) -> dict:
        if not isinstance(value, dict):
            raise Invalid(where, f"expected {self.what} with keys {', '.join(self.keys)}, got {_shown(value)}")
        unknown = [str(k) for k in value if k not in self.keys]
        if unknown:
            guesses = [g for k in unknown for g in difflib.get_close_matches(k, self.keys, n=1)]
            hint = f"did you mean {', '.join(guesses)}?" if guesses else f"the known keys are {', '.join(self.keys)}"
            raise Invalid(where, f"unknown key(s) {', '.join(sorted(unknown))}; {hint}")
        missing = [k for k in self.required if value.get(k) is None]
        if missing:
            raise Invalid(where, f"required key(s) {', '.join(missing)} missing")
        return {k: self.keys[k].check(v, f"{where}.{k}" if where else k) for k, v in value.items() if v is not None}


def validate(document: Any, schema: Schema, source: str, empty: Any = None) -> Any:
    """`document` (parsed YAML) checked against `schema`; ConfigError naming `source` (the flag and the
    file), the key and what was expected. An empty file is `empty` when given."""
    if document is None and empty is not None:
        return empty
    try:
        return schema.check(document, "")
    except Invalid as e:
        raise ConfigError(f"{source}: {e}") from None
