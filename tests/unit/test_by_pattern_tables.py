"""``--by`` with a glob over ranges of different names (issue 46: ``--by 'probe:*'`` pooled
decode_step, layer and scheduler windows into one table): one table per range name, each
with its own windows' statistics; many names (ProfilerStep#1..#N) pooled and said so."""

from __future__ import annotations

from helpers.synth import make_trace

from pytimings.analysis.attribution import attribute
from pytimings.report.analysis_text import MAX_NAME_TABLES, render_attribution


def _trace(names: list[str], steps: int):  # type: ignore[no-untyped-def]
    """``steps`` windows per name, one after another: a name's k-th window holds one
    kernel of (k + 1) * 10 µs times the name's rank in ``names`` plus one."""
    ops, ranges, t = [], [], 0
    for scale, name in enumerate(names, start=1):
        for k in range(steps):
            length = (k + 1) * 10_000 * scale
            ranges.append({"start": t, "end": t + length + 2_000, "name": name, "domain": "probe"})
            ops.append({"start": t + 1_000, "end": t + 1_000 + length, "name": "gemm"})
            t += length + 10_000
    return make_trace(ops, ranges=ranges)


def test_a_glob_over_several_names_gets_a_table_per_name() -> None:
    a = attribute(_trace(["decode_step", "layer", "scheduler"], 3), by="probe:*")
    text = render_attribution(a, [], ["t"])
    for scale, name in enumerate(["decode_step", "layer", "scheduler"], start=1):
        title = f"Per {name} window (one of 3 ranges --by probe:* matches)"
        assert title in text, text
        table = text.split(title)[1].split("\n\n")[0]
        compute = next(line for line in table.splitlines() if line.startswith("compute"))
        # its own three windows: 10, 20, 30 µs of gemm times its scale, mean 20 x scale
        assert compute.split()[1] == "3", compute
        assert compute.split()[2:4] == [f"{20 * scale:.1f}", "µs"], compute
    assert "Per probe:* window\n" not in text


def test_one_name_and_many_names_are_one_table() -> None:
    text = render_attribution(attribute(_trace(["decode_step"], 3), by="decode_step"), [], ["t"])
    assert "Per decode_step window\n" in text
    many = [f"ProfilerStep#{i}" for i in range(MAX_NAME_TABLES + 1)]
    text = render_attribution(attribute(_trace(many, 1), by="ProfilerStep*"), [], ["t"])
    assert (
        f"Per ProfilerStep* window, pooled over the {len(many)} range names it matches "
        "(ProfilerStep#0, ProfilerStep#1, ProfilerStep#2, ...)" in text
    ), text
