"""Everything a user gave is checked before any work (issue 43 item 6): each mistake that used
to be refused after the report was printed is now the first and only output: nothing on
stdout, one line on stderr, exit status 2. And ``--device N`` with several rank files
selects the ranks that have device N instead of failing on the first that lacks it."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.recording_factory import make_recording

from pytimings.cli import main
from pytimings.commands.example import example_path

MS = 1_000_000


def _only_error(capsys: pytest.CaptureFixture[str], argv: list[str], said: str) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "", out[:400]
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert said in err, err


@pytest.fixture
def host_only(tmp_path: Path) -> str:
    """A pytimings recording with host regions and no GPU op: no window to draw."""
    from pytimings.record import storage

    rows = [
        {"name": "decode_step", "start": 0, "end": 10 * MS},
        {"name": "decode_step", "start": 10 * MS, "end": 16 * MS},
    ]
    return str(storage.save(tmp_path / "host.pyt", make_recording(rows)))


def test_a_format_without_out_is_refused_before_the_report(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """It printed the 93 lines of the report, then the error."""
    _only_error(capsys, ["analyze", "--example", "--format", "csv"], "--format and --out go")


@pytest.mark.parametrize("by", [[], ["--by", "decode_step"]], ids=["whole", "by"])
def test_html_of_a_host_only_recording_is_refused_before_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, host_only: str, by: list[str]
) -> None:
    """It printed the host report, then '--html: the attribution has no windows to draw'
    (without plotly the refusal is that it is missing: one line too)."""
    argv = ["analyze", host_only, *by, "--html", str(tmp_path / "r.html")]
    _only_error(capsys, argv, "--html")
    assert not (tmp_path / "r.html").exists()


def test_html_of_several_host_only_recordings_is_refused_before_the_report(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Several files go to per-rank tasks: the refusal came after their report too."""
    from pytimings.record import storage

    rows = [{"name": "decode_step", "start": 0, "end": 10 * MS}]
    files = [str(storage.save(tmp_path / f"host{r}.pyt", make_recording(rows))) for r in (0, 1)]
    argv = ["analyze", *files, "--workers", "1", "--html", str(tmp_path / "r.html")]
    _only_error(capsys, argv, "--html")
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize("trace", [["--example"], [str(example_path())]], ids=["example", "path"])
def test_a_what_if_kind_the_trace_lacks_is_the_only_output(
    capsys: pytest.CaptureFixture[str], trace: list[str]
) -> None:
    """With --example the line naming the bundled capture came first."""
    argv = ["analyze", *trace, "--what-if", "comm:all_gather=0.5"]
    _only_error(capsys, argv, "no communication op is of kind 'all_gather'")


def test_a_device_the_trace_lacks_is_the_only_output(capsys: pytest.CaptureFixture[str]) -> None:
    _only_error(capsys, ["analyze", "--example", "--device", "3"], "device 3 not in the trace")


def test_an_output_in_a_missing_directory_is_the_only_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["analyze", "--example", "--json", str(tmp_path / "no" / "a.json")]
    _only_error(capsys, argv, "does not exist")


def test_a_table_file_under_a_file_is_the_only_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """It printed the report, then failed writing the windows table."""
    (tmp_path / "f").write_text("")
    argv = ["analyze", "--example", "--format", "csv", "--out", str(tmp_path / "f" / "w.csv")]
    _only_error(capsys, argv, "is not a directory")


def test_export_critical_path_without_its_ranges_is_the_only_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["export", "--example", "--perfetto", str(tmp_path / "t.json"), "--critical-path"]
    _only_error(capsys, argv, "give --by NAME")


def test_export_critical_path_of_a_missing_range_is_the_only_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With --example the line naming the bundled capture came first."""
    argv = ["export", "--example", "--perfetto", str(tmp_path / "t.json")]
    _only_error(capsys, [*argv, "--by", "nonexist", "--critical-path"], "--by 'nonexist'")
    assert not (tmp_path / "t.json").exists()


def _dlrm(shared_dir: Path) -> list[str]:
    files = sorted((shared_dir / "data/external/param/dlrm_kineto").glob("*.json.gz"))
    if len(files) < 6:
        pytest.skip("the PARAM DLRM per-rank Kineto traces are not unpacked in ../shared")
    return [str(f) for f in files]


def test_a_device_on_one_rank_of_several_files_is_analysed(
    capsys: pytest.CaptureFixture[str], shared_dir: Path
) -> None:
    """Each DLRM rank ran on its own GPU: `--device 5` failed on rank 0 ('device 5 not in
    the trace'); it is rank 5's device, so rank 5 is analysed, alone."""
    assert main(["analyze", *_dlrm(shared_dir), "--device", "5", "-q"]) == 0
    out = capsys.readouterr().out
    assert "GPU 5" in out
    assert not any(f"GPU {d}" in out for d in (0, 1, 2, 3, 4, 6, 7))


def test_a_device_on_no_rank_of_several_files_is_the_only_output(
    capsys: pytest.CaptureFixture[str], shared_dir: Path
) -> None:
    argv = ["analyze", *_dlrm(shared_dir), "--device", "9"]
    _only_error(capsys, argv, "device 9 not in the traces; they have devices 0, 1, 2")
