"""A real CPU-only torch.profiler capture with a known answer: 4 steps of a small model, each
inside ``record_function("step")``; in step 3, a 20 ms ``time.sleep`` inside
``record_function("sleepy")``. Needs torch (callers importorskip it)."""

from __future__ import annotations

import time
from pathlib import Path


def cpu_capture(path: Path) -> int:
    """Write the capture to ``path`` (Kineto JSON); return the slept time in ns as measured
    around the sleep."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one op thread: less contention on a shared 2-core box
    try:
        model = torch.nn.Sequential(
            torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
        )
        x = torch.randn(16, 64)
        model(x)  # warm-up: the first addmm initialises the BLAS (tens of ms on some boxes)
        slept = 0
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for i in range(4):
                with record_function("step"):
                    model(x)
                    if i == 2:
                        with record_function("sleepy"):
                            t0 = time.perf_counter_ns()
                            time.sleep(0.02)
                            slept = time.perf_counter_ns() - t0
                    model(x)
    finally:
        torch.set_num_threads(threads)
    prof.export_chrome_trace(str(path))
    return slept
