"""Writing an output file without replacing what its path points at: the one writer behind
``save`` and every ``--json``/``--out``/``--html``/``--perfetto`` option.

* a regular file or a new path: a uniquely named temporary in the same directory, fsynced,
  then ``os.replace`` (atomic: readers see the old file or the new one, never half of one;
  concurrent writers to one path never share a temporary; the old file's mode is kept);
* a symlink: written through to its target (followed to the end of the chain; the same rule
  then applies to the target), so the link stays a link;
* a device node, a FIFO or any other non-regular file: written into directly (never replaced:
  ``/dev/null`` stays a device);
* ``-``: standard output (every command's machine-readable document can go there, e.g.
  ``--json -``); while a command runs with an output of ``-``, its human-readable text goes
  to stderr (:func:`stdout_reserved`), so the document arrives alone;
* any OS error: one-line :class:`~pytimings.errors.UsageError` naming the path and the reason.

Caches and locks go to :func:`private_dir` (per user, mode 0700, owner checked), never to a
predictable name in a shared ``/tmp``.

A leaf: imports nothing of pytimings but its errors.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from pytimings.errors import UsageError

_umask_lock = threading.Lock()
_document_out: IO[str] | None = None  # the real stdout while stdout_reserved() holds it


@contextmanager
def stdout_reserved() -> Iterator[None]:
    """Hand standard output to the documents written to ``-``: inside, ``print`` goes to
    stderr and :func:`writing` of ``-`` to the stdout that was in force on entry."""
    global _document_out
    _document_out = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _document_out = None


@contextmanager
def _to_stdout() -> Iterator[IO[bytes]]:
    out = _document_out if _document_out is not None else sys.stdout
    out.flush()
    buf = io.BytesIO()
    yield buf
    data = buf.getvalue()
    if hasattr(out, "buffer"):
        out.buffer.write(data)
        out.buffer.flush()
    else:  # a text stream with no bytes underneath (pytest's capture)
        out.write(data.decode())
        out.flush()


def _new_file_mode() -> int:
    """What ``open(path, "w")`` would give a new file (0o666 less the umask)."""
    return 0o666 & ~_umask()


def _umask() -> int:
    try:  # Linux says it without changing it
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _umask_lock:  # elsewhere reading it means setting it: put it back at once
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _fail(label: str, path: str, problem: str) -> UsageError:
    return UsageError(f"{label} {path}: {problem}" if label else f"{path}: {problem}")


def _cannot_write(label: str, path: str, exc: OSError) -> UsageError:
    return _fail(label, path, f"cannot write ({exc.strerror or exc})")


@contextmanager
def writing(path: str | os.PathLike[str], label: str = "") -> Iterator[IO[bytes]]:
    """A binary file to write ``path``'s new content into, put in place by the rules above
    when the block ends without an exception; an error leaves the old content of a regular
    file in place and no temporary behind. ``label`` (an option such as ``--json``) prefixes
    the error message. ``-`` is standard output."""
    name = os.fspath(path)
    if name == "-":
        with _to_stdout() as out:
            yield out
        return
    target = os.path.realpath(name)  # a symlink chain is written through to its end
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot_write(label, name, exc) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise _fail(label, name, "is a directory")
    tmp: str | None = None
    try:
        if st is not None and not stat.S_ISREG(st.st_mode):
            raw: IO[bytes] = open(target, "wb")
        else:
            fd, tmp = tempfile.mkstemp(
                dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.", suffix=".tmp"
            )
            os.fchmod(fd, stat.S_IMODE(st.st_mode) if st is not None else _new_file_mode())
            raw = os.fdopen(fd, "wb")
        with raw:
            yield raw
            raw.flush()
            if tmp is not None:
                os.fsync(raw.fileno())
        if tmp is not None:
            os.replace(tmp, target)
            tmp = None
    except OSError as exc:
        raise _cannot_write(label, name, exc) from None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


@contextmanager
def writing_text(path: str | os.PathLike[str], label: str = "") -> Iterator[IO[str]]:
    """:func:`writing` for UTF-8 text."""
    with writing(path, label) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8", newline="")
        yield text
        text.flush()
        text.detach()  # the binary file is closed (and put in place) by writing()


def write_text(path: str | os.PathLike[str], text: str, label: str = "") -> None:
    """Write ``text`` (UTF-8) to ``path`` by the rules of :func:`writing`."""
    with writing(path, label) as f:
        f.write(text.encode())


def check_writable(flag: str, path: str | os.PathLike[str]) -> None:
    """Fail before any work when ``path`` cannot be written: its directory must exist and be
    writable, and the path itself must not be a directory."""
    target = os.path.abspath(os.fspath(path))
    parent = os.path.dirname(target)
    if not os.path.isdir(parent):
        raise UsageError(f"{flag} {os.fspath(path)}: directory {parent} does not exist")
    if os.path.isdir(target):
        raise UsageError(f"{flag} {os.fspath(path)}: is a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {os.fspath(path)}: directory {parent} is not writable")


def refuse_overwriting_inputs(outputs: dict[str, str], inputs: list[str]) -> None:
    """Refuse an output that is one of the command's own inputs (the same file, symlinks and
    hard links resolved): every output option used to overwrite it, exit 0, and
    ``record -o prog.py -- prog.py`` replaced the user's script with a binary recording.
    ``outputs``: flag -> path as given; ``inputs``: every other path-like argument."""
    existing = [p for p in inputs if p != "-" and os.path.isfile(p)]
    for flag, out in outputs.items():
        if out == "-" or not os.path.isfile(out):
            continue
        for src in existing:
            if os.path.samefile(out, src):
                same = "" if os.path.abspath(src) == os.path.abspath(out) else f" ({src})"
                raise UsageError(f"{flag} {out}: is one of the inputs{same}; give another path")


def figure_format(path: str | os.PathLike[str], label: str = "") -> str | None:
    """The image format a figure path's suffix names (None: matplotlib's default), checked
    against what matplotlib writes, so ``--plot out.json`` is refused before the work.
    Needs matplotlib (callers check it is there first)."""
    from matplotlib.backend_bases import FigureCanvasBase

    fmt = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or None
    known = FigureCanvasBase.get_supported_filetypes()
    if fmt is not None and fmt not in known:
        raise UsageError(
            f"{label + ' ' if label else ''}{os.fspath(path)}: .{fmt} is no image format "
            f"matplotlib writes (use one of {', '.join(sorted(known))})"
        )
    return fmt


def save_figure(fig: Any, path: str | os.PathLike[str], label: str = "", **kwargs: Any) -> None:
    """``fig.savefig`` (matplotlib) by the rules of :func:`writing`, in the format the path's
    suffix names (matplotlib's default without one)."""
    fmt = figure_format(path, label)
    with writing(path, label) as f:
        fig.savefig(f, format=fmt, **kwargs)


def private_dir(purpose: str) -> Path:
    """This user's directory for pytimings' caches and locks (``purpose`` names a
    subdirectory): ``{tmp}/pytimings-{uid}/{purpose}``, made with mode 0700. A predictable
    name in a shared ``/tmp`` is only safe once checked: each level must be a directory (not
    a link) owned by this user with no access for anyone else, or another local user could
    have made it first to plant an nsys "export" or hold a lock; such a directory is refused
    (:class:`~pytimings.errors.UsageError`), never used."""
    uid = os.geteuid()
    base = Path(tempfile.gettempdir()) / f"pytimings-{uid}"
    for level in (base, base / purpose):
        try:
            os.mkdir(level, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            problem = f"cannot make pytimings' private directory ({exc.strerror})"
            raise _fail("", str(level), problem) from None
        st = os.lstat(level)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid or st.st_mode & 0o077:
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a directory"
            raise _fail(
                "",
                str(level),
                f"{kind} of uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}: not this "
                f"user's private directory (uid {uid}, 0700), so pytimings will not keep its "
                "caches and locks there; remove it or point TMPDIR elsewhere",
            )
    return base / purpose
