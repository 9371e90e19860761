"""Writes the capture traces of this folder from the replays of a real trace (README.md).

Usage: python make_captures.py \
    ../shared/data/external/hta/negative_queue_length_values_check/rank0.json.gz
"""

from __future__ import annotations

import gzip
import json
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCH = {"kernel": "cudaLaunchKernel", "gpu_memset": "cudaMemsetAsync"}


def replayed_graphs(path: str) -> list[list[dict]]:
    """The distinct graphs the trace replays: per graph, its GPU ops in start order."""
    events = json.loads(gzip.open(path).read())["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("name") == "cudaGraphLaunch"}
    by_launch = defaultdict(list)
    for e in events:
        if e.get("cat") in LAUNCH and e.get("args", {}).get("correlation") in launches:
            by_launch[e["args"]["correlation"]].append(e)
    seen: dict[tuple, list[dict]] = {}
    for corr in sorted(by_launch):
        ops = sorted(by_launch[corr], key=lambda e: e["ts"])
        seen.setdefault(tuple((e["cat"], e["name"]) for e in ops), ops)
    return list(seen.values())


def capture(graphs: list[tuple[int, list[tuple[str, str]]]], named: bool) -> dict:
    """A Kineto trace of one thread capturing ``graphs`` (number, [(cat, name)]): per graph
    begin capture, per node a cpu_op ``gNN.nMM`` around its launch call, end capture and
    instantiate; ``named``: with a GPU op record per captured launch (its name)."""
    ev: list[dict] = []
    t, corr = 1000.0, 1

    def api(name: str, ts: float) -> dict:
        nonlocal corr
        corr += 1
        return {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": name,
            "pid": 7,
            "tid": 7,
            "ts": ts,
            "dur": 2.0,
            "args": {"correlation": corr, "External id": corr},
        }

    for g, nodes in graphs:
        ev.append(api("cudaStreamBeginCapture", t))
        t += 5
        for j, (cat, name) in enumerate(nodes):
            op = {
                "ph": "X",
                "cat": "cpu_op",
                "name": f"g{g:02d}.n{j:02d}",
                "pid": 7,
                "tid": 7,
                "ts": t,
                "dur": 6.0,
                "args": {"Input Dims": [[g, j]], "Input type": ["float"]},
            }
            call = api(LAUNCH[cat], t + 2)
            ev += [op, call]
            if named:
                ev.append(
                    {
                        "ph": "X",
                        "cat": cat,
                        "name": name,
                        "pid": 0,
                        "tid": 7,
                        "ts": t + 3,
                        "dur": 1.0,
                        "args": {
                            "device": 0,
                            "stream": 7,
                            "correlation": call["args"]["correlation"],
                        },
                    }
                )
            t += 10
        ev.append(api("cudaStreamEndCapture", t))
        ev.append(api("cudaGraphInstantiate", t + 5))
        t += 20
    return {"traceEvents": ev, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]}


def main() -> None:
    graphs = [[(e["cat"], e["name"]) for e in ops] for ops in replayed_graphs(sys.argv[1])]
    numbered = list(enumerate(graphs))[::-1]  # captured in another order than replayed
    (HERE / "capture_kinds.json").write_text(json.dumps(capture(numbered, named=False)))
    # the two 20-node graphs left out
    named = [(g, list(nodes)) for g, nodes in numbered if len(nodes) < 20]
    for _, nodes in named:
        if len(nodes) == 2 and nodes[0][0] == nodes[1][0] == "kernel":
            nodes[1] = ("kernel", nodes[1][1] + "_other")  # one graph's kernel renamed
            break
    (HERE / "capture_named.json").write_text(json.dumps(capture(named, named=True)))
    other = [(0, [("kernel", "other_kernel_a"), ("kernel", "other_kernel_b")])]
    (HERE / "capture_other.json").write_text(json.dumps(capture(other, named=True)))


if __name__ == "__main__":
    main()
