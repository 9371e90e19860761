"""Kernel names that compare equal across demanglers, and short names for display.

Nsight Systems and Kineto demangle the same symbol differently. For one kernel of the
H200 captures (../shared/data/h200) nsys writes ``void at::native::<unnamed>::
vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)1>(int, T2, const T1 *, ...)``
and Kineto writes ``void at::native::(anonymous namespace)::
vectorized_layer_norm_kernel<c10::BFloat16, float, true>(int, float, c10::BFloat16 const*,
...)``.
:func:`normalize_kernel_name` maps both to one key: it keeps the qualified name and every
template argument and drops what only the demangler decides: casts on integer template
arguments (``(int)512`` -> ``512``, ``(bool)1`` -> ``true``) and literal suffixes
(``2ul`` -> ``2``), ``<unnamed>`` vs ``(anonymous namespace)``, the lambda spelling
(``[lambda(int) (instance 1)]`` vs ``{lambda(int)#1}``), return types, function parameter
lists (nsys prints template parameters ``T1`` where Kineto prints the types), ``const``
placement and spaces around ``::``, ``<``, ``>``, ``*`` and ``&``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import numpy.typing as npt

_ANON = "(anonymous namespace)"
_ANON_TOKEN = "\x00anon\x00"
_CALL_TOKEN = "\x00call\x00"
_INT_TYPES = r"(?:unsigned |signed )?(?:char|short|int|long long|long|__int128)"
_CAST_INT = re.compile(r"\(" + _INT_TYPES + r"\)(-?\d+)")
_CAST_BOOL = re.compile(r"\(bool\)([01])")
_LITERAL_SUFFIX = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b", re.IGNORECASE)
_NSYS_LAMBDA = re.compile(r"\[lambda\([^()]*\) \(instance (\d+)\)\]")
_KINETO_LAMBDA = re.compile(r"\{lambda\([^()]*\)#(\d+)\}")
_CONST = re.compile(r"\s*\bconst\b")
_SPACE_AROUND = re.compile(r"\s*(::|[<>*&])\s*")
_VOID_RETURN = re.compile(r"(?:^|(?<=[<,\s]))void\s+(?=[\w:])")
_SPACES = re.compile(r"\s+")


@lru_cache(maxsize=1 << 16)
def normalize_kernel_name(name: str) -> str:
    """A demangler-independent key for a kernel name (see the module docstring)."""
    s = name.strip()
    s = s.replace("<unnamed>", _ANON_TOKEN).replace(_ANON, _ANON_TOKEN)
    s = _NSYS_LAMBDA.sub(r"{lambda#\1}", s)
    s = _KINETO_LAMBDA.sub(r"{lambda#\1}", s)
    s = s.replace("operator ()", _CALL_TOKEN).replace("operator()", _CALL_TOKEN)
    s = _CAST_BOOL.sub(lambda m: "true" if m.group(1) == "1" else "false", s)
    s = _CAST_INT.sub(r"\1", s)
    s = _LITERAL_SUFFIX.sub(r"\1", s)
    s = _strip_parameter_lists(s)
    s = _CONST.sub("", s)
    s = _VOID_RETURN.sub("", s)
    s = _SPACE_AROUND.sub(r"\1", s)
    s = _SPACES.sub(" ", s).strip()
    return s.replace(_ANON_TOKEN, _ANON).replace(_CALL_TOKEN, "operator()")


def _strip_parameter_lists(s: str) -> str:
    """Drop every parenthesised group (function parameter lists, at any depth)."""
    out: list[str] = []
    depth = 0
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(depth - 1, 0)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|[A-Za-z_]\w*)::(?=[A-Za-z_(])")


@lru_cache(maxsize=1 << 16)
def short_kernel_name(name: str, width: int = 80, depth: int = 2) -> str:
    """A readable short form: normalised, namespaces and class qualifiers dropped, template
    arguments nested deeper than ``depth`` elided (``<…>``), cut to ``width`` characters."""
    s = _QUALIFIER.sub("", normalize_kernel_name(name))
    out: list[str] = []
    level = 0
    for ch in s:
        if ch == "<":
            level += 1
            if level == depth + 1:
                out.append("<…")
            elif level <= depth:
                out.append(ch)
        elif ch == ">":
            if level <= depth + 1:
                out.append(">")
            level = max(level - 1, 0)
        elif level <= depth:
            out.append(ch)
    short = "".join(out)
    return short if len(short) <= width else short[: width - 1] + "…"


def normalize_ids(
    strings: Sequence[str], ids: npt.ArrayLike
) -> tuple[list[str], npt.NDArray[np.int32]]:
    """Normalised names of string ids: (unique normalised strings, index into them per id).

    Works per distinct id, then one numpy take: no Python work per row.
    """
    arr = np.asarray(ids, dtype=np.int64)
    uniq, inv = np.unique(arr, return_inverse=True)
    table: dict[str, int] = {}
    codes = np.fromiter(
        (table.setdefault(normalize_kernel_name(strings[int(u)]), len(table)) for u in uniq),
        dtype=np.int32,
        count=len(uniq),
    )
    return list(table), codes[inv.reshape(-1)] if len(uniq) else np.empty(0, np.int32)
