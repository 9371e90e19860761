"""The one output writer (pytimings.fileout): what a path points at is kept, regular files
are replaced atomically under a unique temporary name, errors are one line."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from pytimings.errors import UsageError
from pytimings.fileout import private_dir, write_text, writing

needs_dev_full = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


def test_new_and_regular_files_are_replaced_with_their_mode_kept(tmp_path: Path) -> None:
    p = tmp_path / "out.json"
    write_text(p, "first\n")
    assert p.read_text() == "first\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~_umask()
    os.chmod(p, 0o640)
    inode = p.stat().st_ino
    write_text(p, "second\n")
    assert p.read_text() == "second\n"
    assert p.stat().st_ino != inode  # a new file put in place, not rewritten in place
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.json"]  # no temporary left


def _umask() -> int:
    m = os.umask(0o022)
    os.umask(m)
    return m


def test_a_symlink_stays_a_link_and_its_target_gets_the_content(tmp_path: Path) -> None:
    target = tmp_path / "real" / "data.json"
    target.parent.mkdir()
    target.write_text("old")
    hop = tmp_path / "hop.json"
    hop.symlink_to(target)
    link = tmp_path / "link.json"
    link.symlink_to(hop)  # a chain: link -> hop -> target
    write_text(link, "new")
    assert link.is_symlink() and hop.is_symlink()
    assert os.readlink(link) == str(hop)
    assert target.read_text() == "new"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "real" / "later.json")
    write_text(dangling, "made")
    assert dangling.is_symlink() and (tmp_path / "real" / "later.json").read_text() == "made"


def test_a_fifo_is_written_into_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    write_text(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert not reader.is_alive()
    assert got == [b"through the pipe\n"]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["pipe"]


def test_dev_null_stays_a_device() -> None:
    before = os.stat("/dev/null")
    write_text("/dev/null", "discarded")
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


@needs_dev_full
def test_a_full_disk_is_one_line_naming_the_path() -> None:
    with pytest.raises(UsageError) as err:
        write_text("/dev/full", "x" * 100_000, "--json")
    msg = str(err.value)
    assert msg.startswith("--json /dev/full: cannot write") and "\n" not in msg
    assert "no space left" in msg.lower()
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_errors_are_one_line_and_leave_the_old_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a directory"):
        write_text(tmp_path, "x")
    with pytest.raises(UsageError, match=r"missing/out\.json: cannot write \(No such file"):
        write_text(tmp_path / "missing" / "out.json", "x")
    p = tmp_path / "keep.json"
    p.write_text("old")
    with pytest.raises(RuntimeError), writing(p) as f:
        f.write(b"half")
        raise RuntimeError("the producer failed")
    assert p.read_text() == "old"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["keep.json"]


def test_concurrent_writers_to_one_path_all_succeed_with_one_whole_file(tmp_path: Path) -> None:
    p = tmp_path / "shared.json"
    docs = [f"{i:03d}:" + "y" * (5000 + i) + "\n" for i in range(120)]
    errors: list[BaseException] = []
    start = threading.Barrier(120)

    def save(doc: str) -> None:
        start.wait()
        try:
            write_text(p, doc)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(d,)) for d in docs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert p.read_text() in docs  # one writer's whole document, never a mix
    assert sorted(x.name for x in tmp_path.iterdir()) == ["shared.json"]


@pytest.mark.parametrize("planted", ["open to others", "another user's", "a link", "a file"])
def test_the_private_directory_refuses_what_another_user_could_have_planted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, planted: str
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    base = tmp_path / f"pytimings-{os.geteuid()}"
    assert private_dir("cache") == base / "cache"
    assert {stat.S_IMODE(p.stat().st_mode) for p in (base, base / "cache")} == {0o700}
    shutil.rmtree(base)
    if planted == "open to others":
        base.mkdir(mode=0o777)
        base.chmod(0o777)
    elif planted == "another user's":
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        base.mkdir(mode=0o700)
        os.chown(base, os.geteuid() + 1, -1)
    elif planted == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        base.symlink_to(tmp_path / "elsewhere")
    else:
        base.write_text("")
    with pytest.raises(UsageError, match="not this user's private directory"):
        private_dir("cache")
