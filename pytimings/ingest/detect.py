"""Which format a trace file is, from its content (magic bytes, the start of the JSON), not
its name; and Nsight Systems reports exported to SQLite with ``nsys`` when it is installed.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

from pytimings.errors import TraceFormatError
from pytimings.fileout import private_dir

__all__ = ["FORMATS", "SQLITE_MAGIC", "detect_format", "export_report", "is_trace"]

FORMATS = ("nsys-sqlite", "nsys-report", "kineto", "recording", "memory-snapshot")
SQLITE_MAGIC = b"SQLite format 3\x00"
GZIP_MAGIC = b"\x1f\x8b"
ARROW_MAGIC = b"ARROW1"
PICKLE_MAGIC = b"\x80"  # the PROTO opcode; then the protocol number (2-5)
PICKLE_PROTOCOLS = (b"\x02", b"\x03", b"\x04", b"\x05")
NSYS_REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
_HEAD_BYTES = 1 << 16


def detect_format(path: str) -> str:
    """'nsys-sqlite', 'nsys-report', 'kineto' or 'recording', from the file's content."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD_BYTES)
    except IsADirectoryError:
        raise TraceFormatError(path, "is a directory") from None
    except OSError as exc:
        raise TraceFormatError(path, f"cannot read ({exc.strerror or exc})") from None
    if not head:
        raise TraceFormatError(path, "is empty")
    if head.startswith(SQLITE_MAGIC):
        return "nsys-sqlite"
    if head.startswith(NSYS_REPORT_MAGIC) or path.lower().endswith(NSYS_REPORT_SUFFIXES):
        return "nsys-report"
    if head.startswith(ARROW_MAGIC) and _looks_like("recording", head):
        return "recording"
    if head[:1] == PICKLE_MAGIC and head[1:2] in PICKLE_PROTOCOLS:  # torch memory snapshot
        return "memory-snapshot"
    if len(head) < 10 and GZIP_MAGIC.startswith(head[:2]):  # shorter than a gzip header
        raise TraceFormatError(path, f"truncated gzip data (the file ends after {len(head)} bytes)")
    text = _gunzip_head(path, head) if head.startswith(GZIP_MAGIC) else head
    if _looks_like("kineto", text):  # a JSON object with Kineto's keys (a BOM allowed)
        return "kineto"
    raise TraceFormatError(
        path,
        "unrecognised trace format (expected an nsys SQLite export or report, a PyTorch "
        "profiler JSON trace, a pytimings recording, or a torch memory snapshot pickle)",
    )


def _looks_like(fmt: str, head: bytes) -> bool:
    """Ask the format's own module (imported only now) whether ``head`` is its format."""
    try:
        if fmt == "kineto":
            kineto = importlib.import_module("pytimings.ingest.kineto")
            return bool(kineto.looks_like_kineto(head))
        recording = importlib.import_module("pytimings.ingest.recording")
        return bool(recording.looks_like_recording(head))
    except ImportError:  # that loader is not part of this build
        return False


def _gunzip_head(path: str, head: bytes) -> bytes:
    """The first decompressed bytes of a gzip file (enough to recognise JSON)."""
    d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        text = d.decompress(head, _HEAD_BYTES)
    except zlib.error as exc:
        raise TraceFormatError(path, f"corrupt gzip data ({exc})") from None
    if not text and not d.eof and len(head) < _HEAD_BYTES:  # the whole file was given
        raise TraceFormatError(path, "truncated or corrupt gzip data (it ends before any content)")
    if not text:
        raise TraceFormatError(path, "corrupt gzip data (nothing decompresses)")
    return text


def export_report(path: str) -> str:
    """An Nsight Systems report exported to SQLite (cached), or a clear error without nsys.

    ``X.sqlite`` beside ``X.nsys-rep`` is used when it is at least as new as the report, and
    written there when no file of that name exists and the directory is writable. Otherwise
    (it exists but is older, or the directory is read-only) the export goes to this user's
    private cache (:func:`~pytimings.fileout.private_dir`): a file pytimings did not write is
    never deleted or replaced, and nothing in a shared ``/tmp`` another user could plant is
    read. nsys writes into a new temporary directory; the export is moved into place only
    once it succeeded, so a failed export leaves nothing behind."""
    nsys = shutil.which("nsys")
    stem = Path(path).name
    for suffix in NSYS_REPORT_SUFFIXES:
        if stem.lower().endswith(suffix):
            stem = stem[: -len(suffix)]
    if nsys is None:
        raise TraceFormatError(
            path,
            "is an Nsight Systems report and nsys is not on PATH to export it; run "
            f"`nsys export --type sqlite -o {stem}.sqlite {path}` and load {stem}.sqlite",
        )
    report_mtime = Path(path).stat().st_mtime
    beside = Path(path).with_name(stem + ".sqlite")
    if beside.exists() and beside.stat().st_mtime >= report_mtime:
        return str(beside)
    key = hashlib.sha256(os.path.abspath(path).encode(errors="surrogateescape")).hexdigest()
    cached = private_dir("nsys-export") / f"{stem}-{key[:16]}.sqlite"
    if cached.exists() and cached.stat().st_mtime >= report_mtime:
        return str(cached)
    out = beside if not beside.exists() and os.access(beside.parent, os.W_OK) else cached
    stale = f" ({beside.name} beside it is older than the report: left as it is)"
    note = stale if beside.exists() else ""
    print(f"pytimings: exporting {path} to {out} with nsys (once; cached){note}", file=sys.stderr)
    try:
        with tempfile.TemporaryDirectory(dir=out.parent, prefix=".pytimings-export-") as work:
            exported = Path(work) / out.name
            cmd = [nsys, "export", "--type", "sqlite", "-o", str(exported), path]
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0 or not exported.is_file():
                last = (done.stderr.strip().splitlines() or ["no output"])[-1]
                problem = f"nsys export failed (exit {done.returncode}): {last}"
                raise TraceFormatError(path, problem)
            _put(exported, out, replace=out == cached)
    except OSError as exc:
        raise TraceFormatError(path, f"cannot export to {out} ({exc.strerror or exc})") from None
    return str(out)


def _put(exported: Path, out: Path, *, replace: bool) -> None:
    """Move a finished export into place: over a stale export of ours in the private cache,
    never over a file beside the report (one that appeared meanwhile is the user's)."""
    if replace:
        os.replace(exported, out)
        return
    try:
        os.link(exported, out)
        return
    except FileExistsError:
        pass
    except OSError:  # a file system without hard links: renamed, unless one appeared
        if not out.exists():
            os.rename(exported, out)
            return
    raise TraceFormatError(
        str(out), "appeared while nsys exported the report; load it or remove it"
    )


def is_trace(path: str) -> bool:
    """Whether ``path`` is a file of a supported format."""
    try:
        detect_format(path)
    except TraceFormatError:
        return False
    return True
