"""The process-wide name table (issue 30 item 12): a save writes only the names its
records use, and the table is bounded (names beyond 65,536 distinct ones are recorded under
one placeholder name and counted, with a one-time warning). Each case runs in a fresh
process: the table lives as long as the process."""

from __future__ import annotations

from typing import Any


def test_a_save_writes_only_the_names_its_records_use(run_script: Any) -> None:
    """50k distinct names under a 1,000-record cap, then clear() and one region: the file
    used to carry all 50k names."""
    got = run_script("""
        import json, os, tempfile
        import pytimings as pt
        from pytimings.ingest.recording_file import load_recording
        rec = pt.Recorder(max_records=1000)
        for i in range(50_000):
            with rec.region(f"name-{i}"):
                pass
        rec.clear()
        with rec.region("kept", kind="compute"):
            pass
        path = os.path.join(tempfile.mkdtemp(), "r.pyt")
        pt.save(path, rec)
        back = load_recording(path)
        names = [back.strings[i] for i in back.records["name"]]
        kinds = [back.strings[i] for i in back.records["kind"]]
        print(json.dumps({"strings": sorted(back.strings), "names": names, "kinds": kinds,
                          "bytes": os.path.getsize(path)}))
    """)
    assert got["strings"] == ["compute", "kept"]
    assert got["names"] == ["kept"] and got["kinds"] == ["compute"]
    assert got["bytes"] < 64 * 1024


def test_names_beyond_the_limit_are_recorded_under_one_name_and_counted(run_script: Any) -> None:
    """The limit was 2**20 names: a million per-request names (f"decode {request_id}") kept
    +526 MB after clear(). It is 65,536, and its first overflow says why and what to do."""
    got = run_script("""
        import json, warnings
        import pytimings as pt
        from pytimings import _core
        rec = pt.Recorder()
        rec.mark("m0")  # interns its kind too
        base = len(_core.strings())
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(1, (1 << 16) - base + 6):  # five names past the limit
                rec.mark(f"m{i}")
        r = rec.recording()
        names = [r.strings[i] for i in r.records["name"][-6:]]
        print(json.dumps({"table": len(_core.strings()), "over": _core.names_over_limit(),
                          "meta": r.meta["names_over_limit"], "last": names,
                          "records": len(r.records["name"]),
                          "warnings": [str(w.message) for w in caught]}))
    """)
    assert got["records"] >= 1 << 16  # every region is recorded, names or not
    assert got["over"] == got["meta"] == 5
    assert got["table"] == (1 << 16) + 1  # the limit plus the placeholder
    assert got["last"][0].startswith("m") and got["last"][1:] == ["<names beyond the limit>"] * 5
    assert len(got["warnings"]) == 1, got["warnings"]  # once, not at each of the five
    assert "65536 distinct region names" in got["warnings"][0]
    assert "payload=" in got["warnings"][0]


def test_a_million_per_request_names_cost_a_bounded_table(run_script: Any) -> None:
    got = run_script("""
        import json, warnings
        import pytimings as pt

        def rss():
            with open("/proc/self/status") as f:
                return int(next(ln for ln in f if ln.startswith("VmRSS")).split()[1]) << 10

        warnings.simplefilter("ignore")
        rec = pt.Recorder(max_records=1000)
        before = rss()
        for request_id in range(300_000):
            with rec.region(f"decode {request_id}"):
                pass
        rec.clear()
        print(json.dumps({"grown": rss() - before}))
    """)
    assert got["grown"] < 48 << 20, got  # 2**20 names: +526 MB; 200k: +73 MB


def test_the_table_is_bounded_in_bytes_and_keeps_no_name_beyond_it(run_script: Any) -> None:
    """A count alone bounded nothing: 2**20 names of 256 KiB each would be 256 GiB. The
    table holds at most 64 MiB of name text, and a name beyond the limit is interned (and
    counted) at each use instead of being kept as a key of the binding's name -> id dict:
    that dict kept every distinct name past the limit (here 320 MiB more)."""
    got = run_script("""
        import json
        import pytimings as pt
        from pytimings import _core

        def rss():
            with open("/proc/self/status") as f:
                return int(next(ln for ln in f if ln.startswith("VmRSS")).split()[1]) << 10

        rec = pt.Recorder(max_records=10)
        big = 256 << 10
        for i in range(320):  # 80 MiB of distinct names
            rec.mark(f"{i:05d}" + "x" * big)
        table = sum(len(s) for s in _core.strings())
        over_before, before = _core.names_over_limit(), rss()
        for i in range(320, 1600):  # 320 MiB more, all beyond the limit
            rec.mark(f"{i:05d}" + "x" * big)
        print(json.dumps({"table": table, "over_before": over_before,
                          "over": _core.names_over_limit(), "grown": rss() - before,
                          "names": len(_core.strings())}))
    """)
    assert got["table"] <= 64 << 20
    assert got["over_before"] >= 320 - (64 << 20) // (256 << 10)  # what did not fit
    assert got["over"] == got["over_before"] + 1280  # each counted
    assert got["grown"] < 32 << 20, got  # none of the 320 MiB kept
