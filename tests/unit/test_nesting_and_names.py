"""Nesting depth (vectorised vs a stack twin) and kernel-name normalisation."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytimings.ingest._nesting import nesting_depth
from pytimings.ingest.names import normalize_ids, normalize_kernel_name, short_kernel_name


def stack_depth(thread: list[int], start: list[int], end: list[int]) -> list[int]:
    """Python twin: walk each thread's ranges in (start, longer first, input) order."""
    out = [0] * len(start)
    for t in set(thread):
        idx = sorted(
            (i for i in range(len(start)) if thread[i] == t), key=lambda i: (start[i], -end[i], i)
        )
        open_ends: list[int] = []
        for i in idx:
            open_ends = [e for e in open_ends if e > start[i]]
            out[i] = len(open_ends)
            open_ends.append(end[i])
    return out


def test_depth_of_nested_ranges() -> None:
    assert nesting_depth([0, 0, 0, 1], [0, 2, 5, 3], [10, 5, 8, 4]).tolist() == [0, 1, 1, 0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 20), st.integers(0, 8)), max_size=30))
def test_depth_matches_stack_twin(rows: list[tuple[int, int, int]]) -> None:
    thread = [r[0] for r in rows]
    start = [r[1] for r in rows]
    end = [r[1] + r[2] for r in rows]  # zero-length ranges included
    assert nesting_depth(thread, start, end).tolist() == stack_depth(thread, start, end)
    # the same rows in start order, as loaders usually hand them over (no sort taken)
    rows.sort(key=lambda r: (r[1], -r[2]))
    thread = [r[0] for r in rows]
    start = [r[1] for r in rows]
    end = [r[1] + r[2] for r in rows]
    assert nesting_depth(thread, start, end).tolist() == stack_depth(thread, start, end)


@pytest.mark.parametrize(
    ("nsys", "kineto"),
    [
        (
            "void at::native::reduce_kernel<(int)512, (int)1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, (int)4, (int)4>>(T3)",  # noqa: E501
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4> >(at::native::ReduceOp<float, at::native::ArgMaxOps<float>, unsigned int, long, 4, 4>)",  # noqa: E501
        ),
        (
            "void at::native::<unnamed>::vectorized_layer_norm_kernel<c10::BFloat16, float, (bool)1>(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)",  # noqa: E501
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float, true>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)",  # noqa: E501
        ),
        (
            "void f<std::array<char *, (unsigned long)3>>(T1)",
            "void f<std::array<char*, 3ul> >(std::array<char*, 3ul>)",
        ),
        (
            "void k<a::[lambda(int) (instance 2)]>(T1)",
            "void k<a::{lambda(int)#2}>(a::{lambda(int)#2})",
        ),
    ],
)
def test_demangler_styles_compare_equal(nsys: str, kineto: str) -> None:
    assert normalize_kernel_name(nsys) == normalize_kernel_name(kineto)


def test_distinct_kernels_stay_distinct() -> None:
    names = [
        "void k<(int)1>(int)",
        "void k<(int)2>(int)",
        "void k<(bool)0>(int)",
        "void j<(int)1>(int)",
    ]
    assert len({normalize_kernel_name(n) for n in names}) == 4


def test_short_names() -> None:
    n = "void at::native::elementwise_kernel<(int)128, (int)4, void at::native::gpu_kernel_impl_nocast<at::native::CUDAFunctor_add<c10::BFloat16>>(at::TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)"  # noqa: E501
    assert (
        short_kernel_name(n, width=100)
        == "elementwise_kernel<128, 4, gpu_kernel_impl_nocast<CUDAFunctor_add<…>>::{lambda#1}>"
    )
    assert (
        short_kernel_name("nvjet_sm90_tst_256x8_64x6_4x1_v_bz_NNT")
        == "nvjet_sm90_tst_256x8_64x6_4x1_v_bz_NNT"
    )
    assert short_kernel_name(n).endswith("…") and len(short_kernel_name(n)) == 80


def test_normalize_ids_remaps_without_a_row_loop() -> None:
    strings = ["", "void k<(int)1>(T1)", "void k<1>(int)", "other"]
    uniq, codes = normalize_ids(strings, np.array([1, 2, 3, 1]))
    assert [uniq[c] for c in codes] == ["k<1>", "k<1>", "other", "k<1>"]


@pytest.mark.shared
def test_h200_captures_give_the_same_kernel_multiset(shared_dir: Path) -> None:
    h200 = shared_dir / "data" / "h200"
    with gzip.open(h200 / "decode_16steps_h200.pt.trace.json.gz") as f:
        events = json.load(f)["traceEvents"]
    kineto = Counter(normalize_kernel_name(e["name"]) for e in events if e.get("cat") == "kernel")
    db = sqlite3.connect(f"file:{h200 / 'decode_16steps_h200.sqlite'}?mode=ro", uri=True)
    rows = db.execute(
        "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName"
    )
    nsys = Counter(normalize_kernel_name(r[0]) for r in rows)
    db.close()
    assert sum(nsys.values()) == 1047
    assert nsys == kineto
    raw_kineto = Counter(e["name"] for e in events if e.get("cat") == "kernel")
    assert len(raw_kineto) == len(kineto)  # normalising merged no distinct kernels


@pytest.mark.parametrize(
    "name",
    [
        "gemm<" + " " * (64 << 10) + "float>",  # `\s*(::|[<>*&])\s*`, `\s*\bconst\b`
        "k" + " " * (64 << 10) + "const",
        "a" * (64 << 10) + "::f",  # `[A-Za-z_]\w*::` from every letter
    ],
)
def test_normalising_a_hostile_name_takes_linear_time(name: str) -> None:
    """One kernel named with 64 KB of spaces held summary/analyze/diff about 2 minutes
    (quadratic patterns); it is now a few milliseconds of work per 64 KB."""
    import time

    normalize_kernel_name.cache_clear()
    short_kernel_name.cache_clear()
    began = time.perf_counter()
    short = short_kernel_name(name)
    assert time.perf_counter() - began < 2.0
    assert "  " not in normalize_kernel_name(name) and short


def test_whitespace_inside_a_name_normalises_as_one_space() -> None:
    assert normalize_kernel_name("void f<int  const\t*>(int)") == "f<int*>"
    assert normalize_kernel_name("a ::  b <  c  >") == "a::b<c>"
