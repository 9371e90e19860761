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
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from pytimings.model.trace import Trace

_ANON = "(anonymous namespace)"
_ANON_TOKEN = "\x00anon\x00"
_CALL_TOKEN = "\x00call\x00"
_INT_TYPES = r"(?:unsigned |signed )?(?:char|short|int|long long|long|__int128)"
_CAST_INT = re.compile(r"\(" + _INT_TYPES + r"\)(-?\d+)")
_CAST_BOOL = re.compile(r"\(bool\)([01])")
_LITERAL_SUFFIX = re.compile(r"\b(\d+)(?:ull|ul|ll|u|l)\b", re.IGNORECASE)
_NSYS_LAMBDA = re.compile(r"\[lambda\([^()]*\) \(instance (\d+)\)\]")
_KINETO_LAMBDA = re.compile(r"\{lambda\([^()]*\)#(\d+)\}")
# Each pattern below anchors on something other than a run of a repeated character (no
# leading `\s*`, no `\w*` from inside a word): `\s*\bconst\b` tried at every space of a run
# scanned the rest of the run, so a name with 32 KB of spaces took seconds, 256 KB minutes.
# Whitespace is collapsed to single spaces before the patterns that allow one around a token.
_CONST = re.compile(r" ?\bconst\b")
_SPACE_AROUND = re.compile(r" ?(::|[<>*&]) ?")
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
    s = _SPACES.sub(" ", s)
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


_QUALIFIER = re.compile(r"(?:\(anonymous namespace\)|(?<!\w)[A-Za-z_]\w*)::(?=[A-Za-z_(])")


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


def range_label(domain: str, name: str) -> str:
    """A range as every command names it: ``domain:name``, or the bare name in the default
    domain (``summary`` prints it, ``analyze --by`` accepts it as well as the bare name)."""
    return f"{domain}:{name}" if domain else name


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


# --------------------------------------------------------------------------- API concepts
# One table for the CUDA runtime (cuda*), the CUDA driver (cu*) and HIP (hip*): each entry
# names a concept and the call stems (vendor prefix and version suffixes removed, see
# :func:`api_stem`) that spell it; the first entry whose pattern matches the whole stem wins.
API_CONCEPTS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (concept, re.compile(pattern))
    for concept, pattern in (
        ("graph_launch", r"GraphLaunch"),
        (
            "kernel_launch",
            r"(?:Ext)?(?:Module)?Launch(?:Cooperative)?Kernel(?:ExC|Ex|GGL|MultiDevice)?",
        ),
        ("memcpy_async", r"Memcpy\w*Async"),
        ("memcpy", r"Memcpy\w*"),  # blocking: returns once the copy is done
        ("memset_async", r"Memset\w*Async"),
        ("memset", r"Memset\w*"),
        ("stream_synchronize", r"StreamSynchronize"),
        ("event_synchronize", r"EventSynchronize"),
        ("device_synchronize", r"DeviceSynchronize|CtxSynchronize"),
        ("stream_wait_event", r"StreamWaitEvent"),
    )
)
# concepts whose call returns only once the GPU has done the work it waits for
SYNCHRONIZING_CONCEPTS = frozenset(
    ("memcpy", "stream_synchronize", "event_synchronize", "device_synchronize")
)
# host operators (Kineto cpu_op names) that copy a GPU value to the host and wait for it
SYNCHRONIZING_CPU_OPS = frozenset(("aten::_local_scalar_dense", "aten::item"))
_VERSION_SUFFIX = re.compile(r"(?:_v\d+|_ptsz|_ptds|_spt)+$")
_VENDOR_PREFIX = re.compile(r"^(?:cuda|hip|cu)(?=[A-Z])")


@lru_cache(maxsize=1 << 12)
def api_stem(name: str) -> str:
    """A call's name without its vendor prefix and version suffixes:
    ``cudaGraphLaunch_v10000``, ``hipGraphLaunch`` and ``cuGraphLaunch_ptsz`` -> ``GraphLaunch``
    (``hipGetDevicePropertiesR0600`` keeps its ``R0600``: it is part of the name)."""
    return _VENDOR_PREFIX.sub("", _VERSION_SUFFIX.sub("", name))


@lru_cache(maxsize=1 << 12)
def api_concept(name: str) -> str | None:
    """The concept of :data:`API_CONCEPTS` a CUDA/HIP runtime or driver call spells, or None."""
    stem = api_stem(name)
    return next((c for c, pat in API_CONCEPTS if pat.fullmatch(stem)), None)


def is_graph_launch(name: str) -> bool:
    """``cudaGraphLaunch``/``hipGraphLaunch``/``cuGraphLaunch`` and their _v/ptsz variants."""
    return api_concept(name) == "graph_launch"


def is_synchronizing(name: str) -> bool:
    """Whether a host activity of this name waits for the GPU: a stream, event or device
    synchronize, a blocking (non-Async) memcpy such as ``cudaMemcpy`` or
    ``hipMemcpyWithStream``, or a cpu_op that reads a GPU value (``aten::item``,
    ``aten::_local_scalar_dense``)."""
    return name in SYNCHRONIZING_CPU_OPS or api_concept(name) in SYNCHRONIZING_CONCEPTS


_AMD_DEVICE = re.compile(r"\b(?:AMD|Radeon|Instinct|MI\d{2,3}X?)\b", re.IGNORECASE)


def vendor(api_names: Iterable[str], device_names: Iterable[str]) -> str:
    """``"HIP"`` when the trace's own names say ROCm (a ``hip*`` call, an AMD device name),
    else ``"CUDA"``: the word reports use for the runtime and its copies."""
    if any(n.startswith("hip") for n in api_names):
        return "HIP"
    if any(_AMD_DEVICE.search(n) for n in device_names):
        return "HIP"
    return "CUDA"


def trace_vendor(trace: Trace) -> str:
    """:func:`vendor` of a trace's API call and device names."""
    strings = trace.strings
    return vendor(
        (strings[i] for i in np.unique(trace.api_calls["name"]).tolist()),
        (strings[i] for i in np.unique(trace.devices["name"]).tolist()),
    )


# PyTorch's emit_nvtx / nsys --pytorch=autograd-nvtx range text (the profiler's
# getNvtxStr): the op name, then ", seq = N", ", op_id = N", ", sizes = [...]",
# ", input_op_ids = ..." as the options ask
NVTX_OP_TEXT = re.compile(
    r"^(?P<name>.+?)(?:, seq = (?P<seq>-?\d+))?(?:, op_id = (?P<op_id>\d+))?"
    r"(?:, sizes = (?P<sizes>\[.*?\]))?(?:, input_op_ids = (?P<input_op_ids>.*))?$"
)


def op_range_parts(text: str) -> tuple[str, dict[str, int | str]]:
    """An emit_nvtx range text's op name and its attributes (``seq``, ``op_id`` as
    integers; ``sizes``, ``input_op_ids`` as written); any other text: itself, none. The
    one rule every table, finding, diff and export names such ranges by."""
    if ", seq = " not in text and ", op_id = " not in text:
        return text, {}
    m = NVTX_OP_TEXT.match(text)
    if m is None:
        return text, {}
    attrs: dict[str, int | str] = {
        k: int(v) if k in ("seq", "op_id") else v
        for k, v in m.groupdict().items()
        if k != "name" and v is not None
    }
    return (m["name"], attrs) if attrs else (text, {})


def op_name_ids(strings: list[str]) -> npt.NDArray[np.int32]:
    """Per string id, the id of its name by :func:`op_range_parts` (itself where the text
    is no emit_nvtx range's); a name not yet in ``strings`` is appended to it."""
    out = np.arange(len(strings), dtype=np.int32)
    index: dict[str, int] | None = None
    for i in range(len(strings)):
        text = strings[i]
        if ", seq = " not in text and ", op_id = " not in text:
            continue
        name, attrs = op_range_parts(text)
        if not attrs:
            continue
        if index is None:
            index = {s: j for j, s in enumerate(strings)}
        if name not in index:
            index[name] = len(strings)
            strings.append(name)
        out[i] = index[name]
    return out
