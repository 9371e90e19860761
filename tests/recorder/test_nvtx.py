"""NVTX ranges as a tool sees them, through the injection library in tests/native/."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

RunScript = Callable[..., Any]  # the run_script fixture (conftest.py)

WORKLOAD = """
import json, threading
import pytimings as pt
from pytimings.record.recorder import Recorder

with pt.region("step", kind="compute", payload=11):
    with pt.region("allreduce", kind="comm", nbytes=1024):
        pass
    try:
        with pt.region("fails", kind="memory"):
            raise RuntimeError("x")
    except RuntimeError:
        pass
    pt.mark("tick", kind="custom-kind", payload=5)

@pt.timed("decorated")
def f():
    raise KeyError("y")
try:
    f()
except KeyError:
    pass

def worker():
    with pt.region("in-thread", kind="host"):
        pass
t = threading.Thread(target=worker); t.start(); t.join()

r = Recorder()
r.disable()
with r.region("invisible"):
    pass
from pytimings import _core
print(json.dumps({"strings": _core.strings()}))
"""


def parse(log: Path) -> dict[str, Any]:
    out: dict[str, Any] = {
        "domains": {},
        "strings": {},
        "categories": {},
        "events": defaultdict(list),
    }
    for line in log.read_text().splitlines():
        kind, *rest = line.split(" ")
        if kind == "domain":
            out["domains"][rest[0]] = rest[1]
        elif kind == "string":
            out["strings"][rest[1]] = " ".join(rest[2:])
        elif kind == "category":
            out["categories"][int(rest[1])] = " ".join(rest[2:])
        elif kind in ("push", "mark"):
            _domain, tid, cat, msg, payload = rest
            name = out["strings"].get(msg)
            value = None if payload == "-" else int(payload)
            out["events"][tid].append((kind, name, int(cat), value))
        elif kind == "pop":
            out["events"][rest[1]].append(("pop", None, None, None))
    return out


def test_regions_are_nvtx_ranges_in_the_pytimings_domain(
    nvtx_injection: Path, run_script: RunScript, tmp_path: Path
) -> None:
    log = tmp_path / "nvtx.log"
    result = run_script(WORKLOAD, NVTX_INJECTION64_PATH=str(nvtx_injection), NVTX_TEST_LOG=str(log))
    seen = parse(log)
    assert list(seen["domains"].values()) == ["pytimings"]
    # category = kind, numbered by the kind's string id + 1, named after it
    strings = result["strings"]
    for kind in ("compute", "comm", "memory", "host", "custom-kind"):
        assert seen["categories"][strings.index(kind) + 1] == kind
    events = seen["events"]
    assert len(events) == 2  # the main thread and the worker
    main = max(events.values(), key=len)
    (worker,) = (v for v in events.values() if v is not main)

    def name_cat(ev: tuple[str, str | None, int | None, int | None]) -> tuple[Any, ...]:
        kind, name, cat, payload = ev
        if kind == "pop":
            return ("pop",)
        assert cat is not None
        return (kind, name, seen["categories"][cat], payload)

    assert [name_cat(e) for e in main] == [
        ("push", "step", "compute", 11),
        ("push", "allreduce", "comm", None),
        ("pop",),
        ("push", "fails", "memory", None),
        ("pop",),  # closed although an exception left it
        ("mark", "tick", "custom-kind", 5),
        ("pop",),
        ("push", "decorated", "host", None),
        ("pop",),
    ]
    assert [name_cat(e) for e in worker] == [("push", "in-thread", "host", None), ("pop",)]
    assert "invisible" not in [e[1] for e in main]  # a disabled recorder emits nothing


def test_ranges_balance_under_many_exceptions(
    nvtx_injection: Path, run_script: RunScript, tmp_path: Path
) -> None:
    log = tmp_path / "nvtx.log"
    result = run_script(
        """
        import collections, json, random
        import pytimings as pt
        random.seed(1)
        def nest(d):
            with pt.region(f"level{d}"):
                if random.random() < 0.3:
                    raise ValueError(d)
                if d < 6:
                    nest(d + 1)
        for _ in range(300):
            try:
                nest(0)
            except ValueError:
                pass
        rec = pt.default_recorder().recording()
        counts = collections.Counter(rec.strings[i] for i in rec.records["name"])
        print(json.dumps(counts))
        """,
        NVTX_INJECTION64_PATH=str(nvtx_injection),
        NVTX_TEST_LOG=str(log),
    )
    (events,) = parse(log)["events"].values()
    depth = 0
    for kind, name, _cat, _payload in events:
        if kind == "push":
            assert name == f"level{depth}"
            depth += 1
        elif kind == "pop":
            depth -= 1
            assert depth >= 0
    assert depth == 0
    pushes: dict[str, int] = defaultdict(int)
    for kind, name, _cat, _payload in events:
        if kind == "push":
            assert name is not None
            pushes[name] += 1
    assert pushes == result  # every range the tool saw is a record, and vice versa
    assert pushes["level0"] == 300
