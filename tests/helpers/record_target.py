"""A program that knows nothing of pytimings, run under ``pytimings record`` by the tests.

Usage: python record_target.py MODE [N]. Modes:

* ``allreduce N``: a torchrun worker (gloo, CPU): N all_reduce of 4096 float32 (16 KiB),
  each checked, then a barrier.
* ``raise``: three forwards of a small ``nn.Linear``, then an uncaught ValueError.
* ``sigterm``: forwards until killed; prints ``ready`` after the third.
* ``fork``: two forwards, a forked child that does two more and leaves through ``sys.exit``
  (atexit runs in it), a spawned Python child, then one more forward; prints whether a
  recording file existed before the parent's own exit (``early-file:`` + a bool).
* ``threads N``: N threads at once, each 10 forwards, then one more in the main thread.
* ``thread-ends``: a thread does 4 forwards and ends, then the main thread does 10.
* ``daemon``: a daemon thread does 3 forwards and waits for ever; the main thread exits.
* ``own-profiler``: 6 forwards inside the program's own torch.profiler; prints how many
  ``aten::linear`` it recorded (``own-profile:`` + the count).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import torch


def _linear() -> torch.nn.Module:
    return torch.nn.Linear(8, 8)


def main() -> None:
    mode = sys.argv[1]
    if mode == "allreduce":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()
        for i in range(int(sys.argv[2])):
            t = torch.full((4096,), float(rank + i))
            dist.all_reduce(t)
            assert t[0].item() == sum(r + i for r in range(world))
        dist.barrier()
        dist.destroy_process_group()
        return
    layer, x = _linear(), torch.ones(2, 8)
    if mode == "raise":
        for _ in range(3):
            layer(x)
        raise ValueError("boom from the target")
    if mode == "sigterm":
        n = 0
        while True:
            layer(x)
            n += 1
            if n == 3:
                print("ready", flush=True)
    if mode == "fork":
        layer(x)
        layer(x)
        pid = os.fork()
        if pid == 0:
            layer(x)
            layer(x)
            sys.exit(0)  # atexit handlers run in the child: they must not save
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        subprocess.run(
            [sys.executable, "-c", "import torch; torch.nn.Linear(2, 2)(torch.ones(1, 2))"],
            check=True,
        )
        out = Path(os.environ["PYTIMINGS_RECORD_OUT"])
        early = any(p.name.startswith(out.stem) for p in out.parent.iterdir())
        print(f"early-file: {early}", flush=True)
        layer(x)
        return
    if mode in ("threads", "thread-ends", "daemon"):
        n_threads = int(sys.argv[2]) if mode == "threads" else 1
        forwards = {"threads": 10, "thread-ends": 4, "daemon": 3}[mode]
        done, never = threading.Event(), threading.Event()

        def work() -> None:
            for _ in range(forwards):
                layer(x)
            done.set()
            if mode == "daemon":
                never.wait()

        threads = [threading.Thread(target=work, daemon=mode == "daemon") for _ in range(n_threads)]
        for t in threads:
            t.start()
        if mode == "daemon":
            done.wait()
            return
        for t in threads:
            t.join()
        for _ in range(10 if mode == "thread-ends" else 1):
            layer(x)
        return
    if mode == "own-profiler":
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in range(6):
                layer(x)
        count = sum(e.name == "aten::linear" for e in prof.events())
        print(f"own-profile: {count}", flush=True)
        return
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
