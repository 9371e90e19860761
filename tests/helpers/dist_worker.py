"""One rank of the torch.distributed test (gloo on CPU): run every wrapped call once.

Usage: python dist_worker.py RANK WORLD_SIZE INIT_FILE OUT_JSON. Writes what the rank
recorded and whether uninstrument() restored torch.distributed exactly.
"""

from __future__ import annotations

import json
import sys
import warnings

import torch
import torch.distributed as dist

import pytimings
from pytimings.ingest.recording import load_recording_trace
from pytimings.record import distributed as ptd
from pytimings.record.storage import as_recording


def main() -> None:
    rank, world, init_file, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    warnings.simplefilter("ignore", FutureWarning)  # torch 2.13 deprecates *_tensor names
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    before = {op: getattr(dist, op) for op in ptd.OPS if hasattr(dist, op)}
    pytimings.instrument_torch_distributed()
    pytimings.instrument_torch_distributed()  # idempotent: wraps once
    wrapped_twice = any(
        getattr(getattr(dist, op), "__wrapped__", None) is not before[op] for op in before
    )
    n = 1000  # float32 elements: 4000 bytes per tensor
    t = torch.full((n,), float(rank + 1))
    dist.all_reduce(t)
    assert t[0].item() == sum(range(1, world + 1))
    dist.all_gather([torch.empty(n) for _ in range(world)], t)
    dist.all_gather_into_tensor(torch.empty(n * world), t)
    dist.reduce_scatter(torch.empty(n), [torch.ones(n) for _ in range(world)])
    dist.reduce_scatter_tensor(torch.empty(n), torch.ones(n * world))
    dist.all_to_all([torch.empty(n) for _ in range(world)], [torch.ones(n) for _ in range(world)])
    dist.all_to_all_single(torch.empty(n * world), torch.ones(n * world))
    dist.broadcast(t, src=0)
    r = torch.full((n,), float(rank + 1))
    dist.reduce(r, dst=0)
    assert rank != 0 or r[0].item() == sum(range(1, world + 1))
    gathered = [torch.empty(n) for _ in range(world)] if rank == 0 else None
    dist.gather(torch.full((n,), float(rank)), gathered, dst=0)
    assert gathered is None or [g[0].item() for g in gathered] == list(range(world))
    part = torch.empty(n)
    dist.scatter(
        part, [torch.full((n,), float(i)) for i in range(world)] if rank == 0 else None, src=0
    )
    assert part[0].item() == rank
    dist.barrier()
    peer = 1 - rank
    if rank == 0:
        dist.send(torch.ones(n), dst=peer)
        dist.recv(torch.empty(n), src=peer)
    else:
        dist.recv(torch.empty(n), src=peer)
        dist.send(torch.ones(n), dst=peer)
    reqs = [dist.isend(torch.ones(n), dst=peer), dist.irecv(torch.empty(n), src=peer)]
    for r in reqs:
        r.wait()
    ops = [
        dist.P2POp(dist.isend, torch.ones(n), peer),
        dist.P2POp(dist.irecv, torch.empty(n), peer),
    ]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    ops_still_wrapped = all(isinstance(p.op, ptd._P2PFunction) for p in ops)
    dist.all_reduce(t, async_op=True).wait()

    rec = as_recording(None)
    s = pytimings.summary(rec)
    saved = pytimings.save(out + ".pyt")
    trace_rank = load_recording_trace(saved).meta.get("rank")
    pytimings.uninstrument()
    pytimings.uninstrument()  # idempotent
    restored = all(getattr(dist, op) is before[op] for op in before)
    names = [rec.strings[i] for i in rec.records["name"]]
    kinds = [rec.strings[i] for i in rec.records["kind"]]
    result = {
        "records": [
            {"name": nm, "kind": k, "nbytes": int(b), "payload": int(p), "flags": int(f)}
            for nm, k, b, p, f in zip(
                names,
                kinds,
                rec.records["nbytes"],
                rec.records["payload"],
                rec.records["flags"],
                strict=True,
            )
        ],
        "summary": s.to_dict(),
        "restored": restored,
        "wrapped_twice": wrapped_twice,
        "ops_still_wrapped": ops_still_wrapped,
        "instrumented_after": ptd.is_instrumented(),
        "trace_rank": trace_rank,
    }
    dist.destroy_process_group()
    with open(out, "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
