"""The process-wide name table (issue 30 item 12): a save writes only the names its
records use, and the table is bounded (names beyond 2**20 distinct ones are recorded under
one placeholder name and counted). Each case runs in a fresh process: the table lives as
long as the process."""

from __future__ import annotations

from typing import Any


def test_a_save_writes_only_the_names_its_records_use(run_script: Any) -> None:
    """100k distinct names under a 1,000-record cap, then clear() and one region: the file
    used to carry all 100k names."""
    got = run_script("""
        import json, os, tempfile
        import pytimings as pt
        from pytimings.ingest.recording_file import load_recording
        rec = pt.Recorder(max_records=1000)
        for i in range(100_000):
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
    got = run_script("""
        import json
        import pytimings as pt
        from pytimings import _core
        rec = pt.Recorder()
        rec.mark("m0")  # interns its kind too
        base = len(_core.strings())
        for i in range(1, (1 << 20) - base + 6):  # five names past the limit
            rec.mark(f"m{i}")
        r = rec.recording()
        names = [r.strings[i] for i in r.records["name"][-6:]]
        print(json.dumps({"table": len(_core.strings()), "over": _core.names_over_limit(),
                          "meta": r.meta["names_over_limit"], "last": names,
                          "records": len(r.records["name"])}))
    """)
    assert got["records"] >= 1 << 20  # every region is recorded, names or not
    assert got["over"] == got["meta"] == 5
    assert got["table"] == (1 << 20) + 1  # the limit plus the placeholder
    assert got["last"][0].startswith("m") and got["last"][1:] == ["<names beyond the limit>"] * 5
