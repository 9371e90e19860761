"""Threads recording while saves run out of memory under an address-space cap (issue 30 item
5): the process never aborts, and every region a thread closed is either kept or counted as
dropped, exactly.

Before the fix a drop was counted in a per-name map inside the recorder's noexcept hot path;
when no memory was left for a new name's entry the throw ended the process ("terminate called
after throwing an instance of 'std::bad_alloc'"). Now such a drop is counted under
``<dropped out of memory, name not counted>``. The workload runs in a fresh process with
glibc's single malloc arena (``MALLOC_ARENA_MAX=1``), so the recorder's chunks and the saves'
copies come from memory the cap bounds; each thread records once before the cap, so that the
kept records include ones made under it (threads whose first region comes after memory is
gone: the second test)."""

from __future__ import annotations

from typing import Any

import pytest

UNNAMED = "<dropped out of memory, name not counted>"

WORKLOAD = """
import json
import resource
import threading
import pytimings as pt

NT, N, NAMES = 4, 100_000, 50_000
rec = pt.Recorder()
regs = [rec.region.make(f"n{i}", "host", None, None, None, None) for i in range(NAMES)]
plans = [[regs[(i * 7919 + k) % NAMES] for i in range(N)] for k in range(NT)]
ready, go, failed = threading.Barrier(NT + 1), threading.Event(), []

def work(k):
    with regs[k]:
        pass
    ready.wait()
    go.wait()
    try:
        for reg in plans[k]:
            with reg:
                pass
    except MemoryError:
        failed.append(k)

threads = [threading.Thread(target=work, args=(k,)) for k in range(NT)]
for t in threads:
    t.start()
ready.wait()
before = len(rec.recording().records["name"])
vm_kb = int([ln for ln in open("/proc/self/status") if ln.startswith("VmSize")][0].split()[1])
resource.setrlimit(resource.RLIMIT_AS, (vm_kb * 1024 + (2 << 20), resource.RLIM_INFINITY))
go.set()
save_errors = 0
while any(t.is_alive() for t in threads):
    try:
        rec.recording()  # saves while the threads record
    except MemoryError:
        save_errors += 1
for t in threads:
    t.join()
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
r = rec.recording()
print(json.dumps({"failed": failed, "before": before, "kept": len(r.records["name"]) - before,
                  "dropped": sum(r.dropped.values()),
                  "unnamed": r.dropped.get("<dropped out of memory, name not counted>", 0),
                  "lost": r.meta["lost_out_of_memory"], "open": r.meta["open_regions"],
                  "save_errors": save_errors}))
"""


def test_threads_recording_through_failing_saves_keep_or_count_every_region(
    run_script: Any,
) -> None:
    got = run_script(WORKLOAD, MALLOC_ARENA_MAX="1")
    assert got["failed"] == [] and got["before"] == 4
    assert got["kept"] + got["dropped"] == 4 * 100_000, got  # each region once, kept or counted
    assert got["dropped"] > 0 and 0 <= got["unnamed"] <= got["dropped"], got  # the cap was hit
    assert got["lost"] == 0 and got["open"] == {}


# Threads whose first region comes after memory is gone: a thread's state (its buffer, its
# slot in the thread-local list of recorders) cannot be made. Before the fix the first touch
# of the recorder's `thread_local` registered its destructor with glibc, which aborts when
# that registration finds no memory ("failed to register TLS destructor: out of memory"), and
# a thread's first C++ throw made libstdc++'s exception globals, thread-local data glibc
# aborts on failing to allocate ("cannot allocate memory for thread-local data"), as did
# interning a region name never seen before. Everything the workers touch while memory is
# gone exists beforehand: a plain lock as the start signal (acquire/release allocate
# nothing), their iterators over existing objects, a bytearray marking each region closed;
# the main thread takes what malloc has left (never freed: the process ends right after).
FIRST_TOUCH = """
import ctypes
import json
import resource
import threading
import pytimings as pt

NT, N, FIRST = 4, 20_000, "<FIRST>"
malloc = ctypes.CDLL(None).malloc
malloc.restype, malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
rec = pt.Recorder()
if FIRST == "prebuilt":
    plans = [[rec.region.make("late", "host", None, None, None, None)] * N] * NT
else:  # region(name) with a name interned first on that thread, under the cap
    plans = [[f"new{k}"] * N for k in range(NT)]
todo = [iter(list(enumerate(plan))) for plan in plans]
closed = [bytearray(N) for _ in range(NT)]
failed = [False] * NT
start = threading.Lock()
start.acquire()

def work(k):
    start.acquire()
    start.release()
    try:
        for i, what in todo[k]:
            with what if FIRST == "prebuilt" else rec.region(what):
                pass
            closed[k][i] = 1
    except MemoryError:
        failed[k] = True

threads = [threading.Thread(target=work, args=(k,)) for k in range(NT)]
for t in threads:
    t.start()
vm_kb = int([ln for ln in open("/proc/self/status") if ln.startswith("VmSize")][0].split()[1])
resource.setrlimit(resource.RLIMIT_AS, (vm_kb * 1024 + (8 << 20), resource.RLIM_INFINITY))
size = 1 << 20
while size >= 8:  # every byte the cap leaves to malloc, down to its smallest chunks
    if not malloc(size):
        size //= 2
start.release()
for t in threads:
    t.join()
resource.setrlimit(resource.RLIMIT_AS, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
r = rec.recording()
print(json.dumps({"failed": failed, "closed": sum(map(sum, closed)),
                  "kept": len(r.records["name"]), "dropped": sum(r.dropped.values()),
                  "by_name": r.dropped, "lost": r.meta["lost_out_of_memory"],
                  "open": r.meta["open_regions"]}))
"""


@pytest.mark.parametrize("first", ["prebuilt", "new name"])
def test_threads_first_recording_after_memory_is_gone_count_their_regions_dropped(
    run_script: Any, first: str
) -> None:
    got = run_script(FIRST_TOUCH.replace("<FIRST>", first), MALLOC_ARENA_MAX="1")
    if first == "prebuilt":  # nothing to allocate in the user's thread: never a MemoryError
        assert got["failed"] == [False] * 4 and got["closed"] == 4 * 20_000, got
        assert set(got["by_name"]) <= {"late", UNNAMED}, got
    else:  # region() may raise MemoryError interning the name (that region never opened)
        assert set(got["by_name"]) <= {"new0", "new1", "new2", "new3", UNNAMED}, got
    assert got["kept"] + got["dropped"] == got["closed"], got  # each once, kept or counted
    assert got["dropped"] > 0, got  # memory was gone when they started
    assert got["lost"] == 0 and got["open"] == {}, got
