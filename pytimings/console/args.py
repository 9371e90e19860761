"""Argument types shared by every command: values argparse would accept but the work would
break on later (a traceback, or an option silently off) are refused while parsing, with
one line naming the flag, exit status 2.

``--fail-on "$UNSET"`` passes an empty string: taken as absent, it switched a CI gate off;
``--seed -1`` reached numpy's generator; ``--flush-every inf`` killed the flush thread;
``--iterations 10**20`` overflowed a C size."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["SEED", "HelpFormatter", "bounded_int", "finite_float", "nonempty", "top_rows"]


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` with each option's default, where its help does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            action.option_strings
            and "default" not in text.lower()
            and default not in (None, False, [], argparse.SUPPRESS)
            and text != argparse.SUPPRESS
        ):
            text += " (default: %(default)s)"
        return text


def nonempty(value: str) -> str:
    """A text option that must say something (an unset shell variable passes '')."""
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty (an unset variable?)")
    return value


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An integer option from ``low`` to ``high``."""

    def parse(value: str) -> int:
        try:
            n = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None
        if not low <= n <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, got {n}")
        return n

    parse.__name__ = "integer"  # argparse names the type in its messages
    return parse


def finite_float(value: str) -> float:
    """A number option that must be finite (inf and nan would pass every ``>`` check or
    none, and turn into nonsense downstream)."""
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {value!r}") from None
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {value!r}")
    return x


SEED = bounded_int(0, 2**63 - 1)  # numpy's generators take non-negative seeds


def top_rows(value: str) -> int | None:
    """``--top N``: rows shown per table; ``0`` or ``all``: every row (None)."""
    if value.strip().lower() == "all":
        return None
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count or 'all', got {value!r}") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (all), a positive count or 'all', got {n}")
    return None if n == 0 else n
