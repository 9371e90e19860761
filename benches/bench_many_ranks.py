"""Many ranks: `pt.analyze` per-rank tasks on local processes vs a Dask LocalCluster (same
worker count).

Writes N synthetic per-rank pytimings recordings (tests/helpers/ranks_synth.py: a data-parallel
decode loop, OPS GPU ops per rank, rank 3 a straggler), then times one task per rank on
each executor, wall clock including pool/cluster start-up, and checks both results are
identical (and find the straggler). Reports ranks/s and the Dask/local ratio.

    python benches/bench_many_ranks.py                 # 64 ranks x 200k ops (minutes)
    python benches/bench_many_ranks.py --ranks 8 --ops 20000
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from helpers.ranks_synth import write_ranks

from pytimings.session import analyze


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=64)
    p.add_argument("--ops", type=int, default=200_000, help="GPU ops per rank")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--by", default="decode_step")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pytimings-ranks-") as tmp:
        t = time.perf_counter()
        files = write_ranks(Path(tmp), args.ranks, args.ops)
        size = sum(f.stat().st_size for f in files) / 1e6
        print(
            f"wrote {args.ranks} ranks x {args.ops} ops ({size:.0f} MB) in "
            f"{time.perf_counter() - t:.1f} s"
        )
        results = {}
        for executor in ("local", "dask"):
            t = time.perf_counter()
            a = analyze(files, by=args.by, executor=executor, workers=args.workers)
            dt = time.perf_counter() - t
            results[executor] = (dt, a)
            print(
                f"{executor:6s} {dt:8.2f} s  {args.ranks / dt:6.2f} ranks/s  "
                f"{args.ranks * args.ops / dt / 1e6:5.2f} M ops/s  "
                f"windows {len(a.attribution.windows)}"
            )
        (t_local, local), (t_dask, dask) = results["local"], results["dask"]
        assert dask.to_document() == local.to_document(), "executors disagree"
        assert local.collectives is not None and local.collectives.straggler == 3
        print(
            f"dask/local wall-time ratio {t_dask / t_local:.2f}; results identical; "
            f"straggler rank {local.collectives.straggler}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
