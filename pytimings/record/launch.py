"""``pytimings record``'s startup hook: recording switched on in a program nobody changed.

How it gets in: ``pytimings record`` runs the command with ``PYTHONPATH`` starting with a
temporary directory that holds a ``sitecustomize.py`` (:data:`SITECUSTOMIZE`). Python
imports it at startup, before the program's first line; it calls :func:`startup`, then
imports the ``sitecustomize`` the environment had before, if any (chained). The options
travel in ``PYTIMINGS_RECORD_*`` environment variables (:class:`Options`), so processes a
launcher starts (torchrun's workers) inherit them. A Python started with ``-I``/``-E``
ignores ``PYTHONPATH`` and is not recorded.

Which processes record: the command's own Python process (a direct child of ``pytimings
record``); when the command is a launcher (torchrun, ``python -m torch.distributed.run``),
the launcher's direct children (the workers) instead of the launcher. Processes the program
starts itself record nothing: a forked child is disarmed (its recorder disabled, nothing
saved from it, so the parent's file is never touched), a spawned one sees that its parent is
not the one expected.

Files: ``OUT`` for one process; when a world size is set (torchrun's ``WORLD_SIZE``/``RANK``,
or an initialised default group) ``OUT`` with ``.rank{R}`` before its suffix. Every save
goes through :func:`pytimings.save` (atomic: a reader sees the previous file or the new one,
never half of one). Saved:

* at normal exit (atexit), ``sys.exit`` included;
* on an uncaught exception and on SIGINT (which Python raises as ``KeyboardInterrupt``): the
  chained ``sys.excepthook`` notes the exception in ``meta["record"]["exception"]`` and the
  atexit save follows;
* on SIGTERM: the handler saves, then restores the default action and re-raises the signal
  (the process dies of SIGTERM as it would have). Python runs handlers between bytecodes,
  so a main thread blocked in a long C call saves when that call returns;
* a SIGINT or SIGTERM that arrives during a save (a second Ctrl-C during the exit save, a
  SIGTERM while it waits for the telemetry's last sample) waits until the file is written;
  after the last save it then takes its default action, after another it reaches the
  handler it would have reached;
* every ``flush_every`` seconds (a daemon thread): the recording so far is saved to the same
  file. That resolves outstanding GPU events and re-anchors the GPU clock, frees the native
  buffers (the records stay in the process, 72 bytes each) and bounds what a SIGKILL or an
  OOM kill loses to that interval. Each flush rewrites the whole file.

* before ``os.exec*`` replaces the program (``os.execv``/``os.execve``, which every
  ``os.exec*`` calls, are wrapped): the regions so far are saved to the process's file with
  reason ``exec``; the new image, if it is a Python the hook reaches, records to the same
  name with ``.exec1`` (``.exec2``, ...) before the suffix, so neither replaces the other.
  An exec that fails leaves recording as it was (the final save comes at exit as usual).

``os._exit`` (and SIGKILL) saves nothing beyond the last flush.

Each save adds to the recording's meta: ``record`` (argv, options, why it was saved, the
exception), ``wall_offset_end_ns``/``wall_offset_end_uncertainty_ns`` (the wall-clock
offset sampled again at the save; the start one is the recorder's ``wall_offset_ns``;
with the recorder's ``boot_id``, :mod:`pytimings.ingest.clocks` puts ranks on one timeline)
and, with ``--kineto``, which steps the profiler trace beside it holds
(:mod:`pytimings.record.kineto`). At the final save each process prints a short summary
(the top regions by host time, collectives with busbw) to stderr.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

from pytimings.record.kineto import StepCapture, StepRange, trace_path

ENV_OUT = "PYTIMINGS_RECORD_OUT"
ENV_COMM = "PYTIMINGS_RECORD_COMM"
ENV_COPIES = "PYTIMINGS_RECORD_COPIES"
ENV_MODULES = "PYTIMINGS_RECORD_MODULES"
ENV_FLUSH_EVERY = "PYTIMINGS_RECORD_FLUSH_EVERY"
ENV_KINETO = "PYTIMINGS_RECORD_KINETO"
ENV_TELEMETRY = "PYTIMINGS_RECORD_TELEMETRY"  # seconds between GPU telemetry samples
ENV_PARENT = "PYTIMINGS_RECORD_PARENT"  # pid whose direct children record
ENV_LAUNCHER = "PYTIMINGS_RECORD_LAUNCHER"  # "1": that child is a launcher; its children record
ENV_EXEC_COUNT = "PYTIMINGS_RECORD_EXEC"  # execs so far in this process (names .exec{N})

SUMMARY_ROWS = 10
_DEFERRED_SIGNALS = (signal.SIGINT, signal.SIGTERM)

SITECUSTOMIZE = '''\
"""Written by `pytimings record`: switch recording on, then run the sitecustomize the
environment had before (pytimings.record.launch explains)."""
import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
_sys.path[:] = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
try:
    from pytimings.record.launch import startup as _startup
except ImportError as _exc:
    print(f"pytimings record: not recording {_sys.executable}: {_exc}", file=_sys.stderr)
else:
    _startup()
_me = _sys.modules.pop("sitecustomize")
try:
    import sitecustomize  # noqa: F401  (the next one on the path)
except ImportError as _exc:
    if _exc.name != "sitecustomize":
        raise
finally:
    _sys.modules["sitecustomize"] = _me  # the import system expects this module there
'''


@dataclass(frozen=True)
class Options:
    """What ``pytimings record`` asked for, as it travels in the environment."""

    out: str  # absolute path
    comm: bool = True
    copies: bool = False
    modules: str | None = None
    flush_every: float | None = None
    kineto: str | None = None  # NAME:FIRST-LAST (pytimings.record.kineto)
    telemetry: float | None = None  # seconds between samples (pytimings.record.telemetry)

    def to_env(self) -> dict[str, str]:
        env = {
            ENV_OUT: self.out,
            ENV_COMM: "1" if self.comm else "0",
            ENV_COPIES: "1" if self.copies else "0",
        }
        if self.modules is not None:
            env[ENV_MODULES] = self.modules
        if self.flush_every is not None:
            env[ENV_FLUSH_EVERY] = repr(self.flush_every)
        if self.kineto is not None:
            env[ENV_KINETO] = self.kineto
        if self.telemetry is not None:
            env[ENV_TELEMETRY] = repr(self.telemetry)
        return env

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Options | None:
        out = env.get(ENV_OUT)
        if not out:
            return None
        flush = env.get(ENV_FLUSH_EVERY)
        telemetry = env.get(ENV_TELEMETRY)
        return cls(
            out=out,
            comm=env.get(ENV_COMM, "1") == "1",
            copies=env.get(ENV_COPIES, "0") == "1",
            modules=env.get(ENV_MODULES) or None,
            flush_every=float(flush) if flush else None,
            kineto=env.get(ENV_KINETO) or None,
            telemetry=float(telemetry) if telemetry else None,
        )


def hook_environment(opts: Options, *, launcher: bool, hook_dir: str) -> dict[str, str]:
    """The variables ``pytimings record`` adds to the command's environment."""
    env = opts.to_env()
    env[ENV_PARENT] = str(os.getpid())
    if launcher:
        env[ENV_LAUNCHER] = "1"
    old = os.environ.get("PYTHONPATH")
    env["PYTHONPATH"] = hook_dir if not old else hook_dir + os.pathsep + old
    return env


def write_hook(directory: str | os.PathLike[str]) -> Path:
    path = Path(directory) / "sitecustomize.py"
    path.write_text(SITECUSTOMIZE)
    return path


def startup() -> None:
    """Called by the written sitecustomize: arm recording if this process is one to record."""
    opts = Options.from_env(os.environ)
    parent = os.environ.get(ENV_PARENT, "")
    if opts is None or not parent.isdigit() or os.getppid() != int(parent):
        return
    if os.environ.pop(ENV_LAUNCHER, None) == "1":
        os.environ[ENV_PARENT] = str(os.getpid())  # the launcher's children record
        return
    arm(opts)


_session: Session | None = None


def arm(opts: Options) -> Session:
    """Record this process as ``opts`` says, saving as the module docstring describes."""
    global _session
    # imported now: at exit some of what saving imports (pyarrow) could no longer register
    # its own atexit handlers
    from pytimings.record import hooks, storage, summary  # noqa: F401
    from pytimings.record.recorder import default_recorder

    if _session is not None:
        raise RuntimeError("pytimings record: this process is already armed")
    default_recorder()  # started on import: its wall-clock offset is sampled now
    _session = Session(opts)
    hooks.install(
        hooks.Patches(
            comm=opts.comm, copies=opts.copies, modules=opts.modules, capture=_session.capture
        )
    )
    return _session


class Session:
    """One recorded process: where it saves, and the handlers that save."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.pid = os.getpid()
        self.exception: dict[str, str] | None = None
        self._lock = threading.Lock()
        self._finishing = threading.RLock()  # held by the last save until it is written
        self._deferring = False  # _signals_deferred() is active (main thread)
        self._pending_signal: int | None = None
        self._written: Path | None = None
        self._finished = False
        self._stop = threading.Event()
        self.capture = (
            None
            if opts.kineto is None
            else StepCapture(StepRange.parse(opts.kineto), lambda: trace_path(self.output_path()))
        )
        atexit.register(self.finish, "exit")
        self._previous_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, self._on_signal)
        os.register_at_fork(after_in_child=self._disarm_child)
        self._wrap_exec()
        if opts.flush_every is not None:
            threading.Thread(target=self._flusher, name="pytimings-flush", daemon=True).start()
        self.telemetry = None
        if opts.telemetry is not None:
            from pytimings.record.telemetry import sample_telemetry

            self.telemetry = sample_telemetry(every_s=opts.telemetry)

    # -- where
    def output_path(self) -> Path:
        from pytimings.record.storage import process_rank

        out = Path(self.opts.out)
        rank = process_rank().get("rank")
        return out if rank is None else out.with_name(f"{out.stem}.rank{rank}{out.suffix}")

    # -- saving
    def save(self, reason: str) -> Path | None:
        """Save what is recorded so far; None in a forked child (never the parent's file), and
        None for a periodic flush once the last save has begun: a flush that waited for the
        lock behind it would replace the final file with an older reason or, cut off when the
        interpreter stops its daemon thread, leave a temporary file behind."""
        if os.getpid() != self.pid:
            return None
        with self._signals_deferred(), self._lock:
            if reason == "flush" and self._finished:
                return None
            return self._save_locked(reason)

    def _save_locked(self, reason: str) -> Path:
        from pytimings import _core
        from pytimings.record.recorder import default_recorder
        from pytimings.record.storage import save

        rec = default_recorder().recording()
        end_offset, end_unc = _core.wall_offset_ns()
        rec.meta.update(
            wall_offset_end_ns=end_offset,
            wall_offset_end_uncertainty_ns=end_unc,
            record={
                "argv": list(sys.orig_argv),
                "options": asdict(self.opts),
                "reason": reason,
                "exception": self.exception,
                "kineto": None if self.capture is None else self.capture.written,
            },
        )
        path = self.output_path()
        save(path, rec)
        if self._written is not None and self._written != path:
            self._written.unlink(missing_ok=True)  # a rank appeared since: one file per process
        self._written = path
        return path

    def finish(self, reason: str) -> None:
        """The last save (once), then the summary on stderr."""
        if self._finished or os.getpid() != self.pid:
            return
        with self._finishing, self._signals_deferred(last=True):
            self._finished = True
            self._stop.set()
            try:
                if self.telemetry is not None:
                    self.telemetry()  # its last sample is in the save
                if self.capture is not None:
                    self.capture.close()
                path = self.save(reason)
            except Exception as exc:  # never mask the program's own exit status with ours
                print(f"pytimings record: could not save the recording: {exc}", file=sys.stderr)
                return
            if path is not None:
                kineto = None if self.capture is None else self.capture.written
                _print_summary(path, reason, None if kineto is None else kineto["path"])

    @contextlib.contextmanager
    def _signals_deferred(self, *, last: bool = False) -> Iterator[None]:
        """SIGINT and SIGTERM that arrive inside wait until the block is done (the file is
        written): a second Ctrl-C during the exit save raised KeyboardInterrupt inside it
        (nothing saved, exit 0). After the last save the signal takes its default action (the
        process dies of it); after another it goes to the handler it would have reached.
        Python runs signal handlers on the main thread only: elsewhere nothing is deferred."""
        if threading.current_thread() is not threading.main_thread() or self._deferring:
            yield
            return
        previous = {signum: signal.getsignal(signum) for signum in _DEFERRED_SIGNALS}
        self._deferring = True
        try:
            for signum in _DEFERRED_SIGNALS:
                signal.signal(signum, self._defer)
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
            self._deferring = False
        pending, self._pending_signal = self._pending_signal, None
        if pending is not None and last:
            self._reraise(pending)
        elif pending is not None:
            signal.raise_signal(pending)

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        if self._pending_signal is None:
            self._pending_signal = signum

    # -- handlers
    def _excepthook(
        self, typ: type[BaseException], value: BaseException, tb: TracebackType | None
    ) -> None:
        self.exception = {
            "type": typ.__qualname__,
            "message": str(value),
            "traceback": "".join(traceback.format_exception(typ, value, tb)),
        }
        self._previous_excepthook(typ, value, tb)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # A finish under way on another thread (an exec there), or waiting in this one for
        # the telemetry's last sample before the handler came in: the signal waits for its
        # file (the handler used to re-raise at once: no recording).
        self.finish(f"signal {signal.Signals(signum).name}")
        if os.getpid() == self.pid:  # (a forked child saves nothing: nothing to wait for)
            with self._signals_deferred(last=True), self._finishing:
                pass
        self._reraise(signum)

    def _reraise(self, signum: int) -> None:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _flusher(self) -> None:
        assert self.opts.flush_every is not None
        while not self._stop.wait(self.opts.flush_every):
            try:
                self.save("flush")
            except Exception as exc:
                print(f"pytimings record: periodic save failed: {exc}", file=sys.stderr)

    def _wrap_exec(self) -> None:
        """Save before ``os.execv``/``os.execve`` (the other ``os.exec*`` call these through
        the module's globals): exec replaces the process without running exit handlers."""
        for name in ("execv", "execve"):
            original = getattr(os, name)

            def wrapper(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
                env = args[2] if len(args) > 2 else kwargs.get("env", os.environ)
                undo = self._before_exec(args[0] if args else kwargs.get("path"), env)
                try:
                    return _original(*args, **kwargs)
                except BaseException:
                    undo()
                    raise

            setattr(os, name, wrapper)

    def _before_exec(self, program: Any, env: Any) -> Callable[[], None]:
        """Save for an exec; point a Python new image at the next ``.exec{N}`` file. Returns
        what undoes it should the exec fail."""
        if os.getpid() != self.pid or self._finished:
            return lambda: None
        out = Path(self.opts.out)
        n = int(env.get(ENV_EXEC_COUNT, "0")) + 1 if isinstance(env, Mapping) else 1
        base = out.stem.rsplit(".exec", 1)[0] if ".exec" in out.stem else out.stem
        nxt = out.with_name(f"{base}.exec{n}{out.suffix}")
        self.finish("exec")
        saved: dict[str, str | None] = {}
        if isinstance(env, MutableMapping):
            for key, value in {ENV_OUT: str(nxt), ENV_EXEC_COUNT: str(n)}.items():
                saved[key] = env.get(key)
                env[key] = value
        print(
            f"pytimings record: pid {self.pid} execs {program}: its regions so far are in "
            f"{self.output_path()}; a Python program it becomes records to {nxt.name}",
            file=sys.stderr,
        )

        def undo() -> None:
            self._finished = False  # recording goes on: the exit save covers it all
            if isinstance(env, MutableMapping):
                for key, value in saved.items():
                    if value is None:
                        env.pop(key, None)
                    else:
                        env[key] = value

        return undo

    def _disarm_child(self) -> None:
        from pytimings.record.recorder import default_recorder

        default_recorder().disable()
        self._finished = True
        if self.capture is not None:
            self.capture.disarm()


def _print_summary(path: Path, reason: str, kineto_path: str | None) -> None:
    """The end-of-run summary on stderr: where each file went, the top regions."""
    from pytimings.record.summary import Summary, summary
    from pytimings.table import Table

    s = summary(path)
    top = Summary(
        Table({c: s.table[c][:SUMMARY_ROWS] for c in s.table.columns}), s.dropped_total, s.meta
    )
    where = f"rank {s.meta['rank']}" if "rank" in s.meta else f"pid {os.getpid()}"
    trace = "" if kineto_path is None else f"; the Kineto trace in {kineto_path}"
    print(
        f"pytimings record: {where}: {s.total_count} records saved to {path} ({reason}){trace}; "
        f"top {min(SUMMARY_ROWS, len(s))} of {len(s)} regions by host time:\n{top}",
        file=sys.stderr,
    )


def session() -> Session | None:
    """This process's recording session, if ``pytimings record`` armed it."""
    return _session


__all__ = ["Options", "Session", "arm", "hook_environment", "session", "startup", "write_hook"]
