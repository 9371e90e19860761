"""``pytimings report``: serving runs (load-generator run files, recordings with request
timelines) as one self-contained HTML page (``--html``) or as text."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytimings.analysis.finding import plural
from pytimings.console.args import finite_float
from pytimings.errors import UsageError
from pytimings.serving import cost
from pytimings.serving.metrics import DEFINITIONS


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "files",
        nargs="+",
        metavar="RUN",
        help="`pytimings loadgen` run files (JSON) or recordings (.pyt) with request timelines; "
        "a recording right after a run file is joined with it (as `pytimings join`)",
    )
    p.add_argument("--html", metavar="OUT", help="write the HTML report here (default: text)")
    p.add_argument("--labels", default=None, help="comma-separated names, one per file")
    p.add_argument(
        "--definition", default="vllm", help=f"metric definitions: {', '.join(DEFINITIONS)}"
    )
    p.add_argument(
        "--knee-pct", type=finite_float, default=10.0, help="TPOT mean rise that marks the knee"
    )
    p.add_argument("--title", default=None, help="page title (default: the labels)")
    cost.add_arguments(p)


def labels_for(files: list[str], labels: str | None) -> list[str]:
    if labels is None:
        names = [Path(f).name for f in files]
        return names if len(set(names)) == len(names) else list(files)
    out = [x.strip() for x in labels.split(",")]
    if len(out) != len(files) or not all(out) or len(set(out)) != len(out):
        raise UsageError(f"--labels {labels!r}: need {len(files)} distinct non-empty names")
    return out


def run(args: argparse.Namespace) -> int:
    from pytimings.report.serving_html import write_report
    from pytimings.report.serving_text import render_text
    from pytimings.serving.sources import analyse, join_recordings, load_source

    if args.definition not in DEFINITIONS:
        raise UsageError(
            f"--definition {args.definition!r}: expected one of {', '.join(DEFINITIONS)}"
        )
    if not args.knee_pct > 0:
        raise UsageError(f"--knee-pct must be positive, got {args.knee_pct}")
    price = cost.price_from_args(args)
    labels = labels_for(args.files, args.labels)
    sources = join_recordings(
        [load_source(f, label) for f, label in zip(args.files, labels, strict=True)]
    )
    results = analyse(sources, args.definition, args.knee_pct)
    if not args.html:
        print(render_text(results, args.definition, price))
        return 0
    title = args.title or "Serving: " + ", ".join(labels)
    write_report(results, args.html, title, args.definition, price)
    levels = sum(len(r.levels) for r in results)
    failed = sum(sum(lv.metrics.errors.values()) for r in results for lv in r.levels)
    print(
        f"wrote {args.html}: {plural(len(results), 'run')}, {plural(levels, 'level')}, "
        f"{plural(failed, 'failed request')}"
    )
    return 0
