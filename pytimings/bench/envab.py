"""Environment A/B of a collective sweep: the same sweep with and without settings such as
``NCCL_P2P_DISABLE=1``, each in fresh processes.

NCCL reads most of its variables once per process (at first use, then cached), and
torch.distributed reads its own when the process group starts; so setting a variable inside a
running rank changes nothing. Each rank that torchrun started therefore launches one child per
variant with the variant's environment, and the children form their own process group on a
port the ranks agree on through torchrun's store. The baseline runs with every A/B variable
removed from the environment; each variant adds its settings on top.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

from pytimings.bench.report import BenchReport, Column, add_fits
from pytimings.errors import UsageError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
BASELINE = "baseline"


def parse_variant(text: str) -> dict[str, str]:
    """``"NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1"`` -> one variant with both settings."""
    settings: dict[str, str] = {}
    for item in text.split():
        name, sep, value = item.partition("=")
        if not sep or not _NAME.match(name):
            raise UsageError(f"--env-ab {text!r}: expected NAME=VALUE, space-separated for several")
        settings[name] = value
    if not settings:
        raise UsageError("--env-ab '': expected NAME=VALUE")
    return settings


def child_environment(
    base: dict[str, str], ab_names: set[str], settings: dict[str, str], port: int
) -> dict[str, str]:
    """The environment of one variant's child: A/B names removed, the variant's set, and a
    private rendezvous (its own store on ``port`` instead of torchrun's agent store)."""
    env = {k: v for k, v in base.items() if k not in ab_names}
    env.update(settings)
    env["MASTER_PORT"] = str(port)
    env.pop("TORCHELASTIC_USE_AGENT_STORE", None)
    return env


def _store(rank: int, world: int) -> Any:
    from torch.distributed import TCPStore  # type: ignore[attr-defined]

    host = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "0") or 0)
    if not port:
        raise UsageError("collective --env-ab: MASTER_PORT is unset; launch with torchrun")
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    return TCPStore(
        host,
        port,
        world,
        is_master=rank == 0 and not agent,
        timeout=timedelta(seconds=300),
        wait_for_workers=False,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def exit_reason(returncode: int) -> str:
    """How a child ended, said truthfully: a signal prints nothing of its own."""
    if returncode >= 0:
        return f"exit status {returncode}; what it printed is above"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        name = f"signal {-returncode}"
    oom = " (the kernel's out-of-memory killer sends it)" if name == "SIGKILL" else ""
    return f"killed by {name}{oom}, printing nothing"


def run_variants(
    child_argv: list[str], variants: list[tuple[str, dict[str, str]]], rank: int, world: int
) -> list[dict[str, Any]] | None:
    """Run the sweep once per variant in child processes; rank 0 gets the children's JSON."""
    store = _store(rank, world)
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "run")
    prefix = f"pytimings/bench/env-ab/{run_id}/{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    ab_names = {name for _, settings in variants for name in settings}
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="pytimings-env-ab-") as tmp:
        for i, (label, settings) in enumerate(variants):
            key = f"{prefix}/{i}/port"
            if rank == 0:
                store.set(key, str(_free_port()))
            port = int(store.get(key).decode())
            env = child_environment(dict(os.environ), ab_names, settings, port)
            out = Path(tmp) / f"{i}.json"
            argv = [*child_argv, "--json", str(out)] if rank == 0 else child_argv
            done = subprocess.run(argv, env=env, check=False)
            if done.returncode != 0:
                raise UsageError(
                    f"collective --env-ab: the {label!r} run failed on rank {rank} "
                    f"({exit_reason(done.returncode)})"
                )
            if rank == 0:
                results.append(json.loads(out.read_text()))
    return results if rank == 0 else None


def compare(runs: list[dict[str, Any]], labels: list[str]) -> BenchReport:
    """One report of every run's rows, each variant's time relative to the baseline's."""
    base = runs[0]
    header = dict(base["header"])
    header.pop("env", None)
    header["env_ab"] = {
        label: run["header"].get("env") for label, run in zip(labels, runs, strict=True)
    }
    header["env_ab_method"] = (
        "each variant in fresh processes (NCCL and torch.distributed read the environment when "
        "they start), launched by every rank; baseline = all A/B variables removed"
    )
    baseline = {(r["op"], r["size_bytes"], r["in_place"]): r for r in base["rows"]}
    rows: list[dict[str, Any]] = []
    notes = list(base["notes"])
    for label, run in zip(labels, runs, strict=True):
        for row in run["rows"]:
            ref = baseline.get((row["op"], row["size_bytes"], row["in_place"]))
            change = None
            if label != BASELINE and ref is not None and ref["time_us"] > 0:
                change = 100.0 * (row["time_us"] - ref["time_us"]) / ref["time_us"]
            rows.append(
                {
                    "variant": label,
                    **row,
                    "baseline_time_us": ref["time_us"] if ref else None,
                    "time_change_pct": change,
                }
            )
    report = BenchReport("collective", header, COLUMNS, rows, notes=notes)
    add_fits(report, ["variant", "op", "in_place"])
    return report


COLUMNS = [
    Column("variant", "variant"),
    Column("op", "op"),
    Column("size_bytes", "size(B)"),
    Column("in_place", "in-place"),
    Column("time_us", "time(µs)", ".2f"),
    Column("baseline_time_us", "baseline(µs)", ".2f"),
    Column("time_change_pct", "change(%)", "+.1f"),
    Column("algbw_gbps", "algbw(GB/s)", ".3f"),
    Column("busbw_gbps", "busbw(GB/s)", ".3f"),
    Column("valid", "valid"),
]
