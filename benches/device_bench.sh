#!/usr/bin/env bash
# One call on a lent GPU machine (see ../shared/device/README.md): build there, run the
# `gpu`-marked bench tests with PYTIMINGS_REQUIRE_GPU=1, then the bench sweeps, everything
# logged under $OUT, and a short summary printed last. Each step has its own time limit so
# one slow step cannot eat the session.
set -uo pipefail
OUT=${OUT:-/tmp/pytimings-bench}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
if ! $PY -m pip install --no-build-isolation -q -e . >"$OUT/build.log" 2>&1; then
  tail -n 30 "$OUT/build.log"; exit 1
fi
PYTIMINGS_REQUIRE_GPU=1 timeout 300 $PY -m pytest -q -p no:cacheprovider \
  tests/gpu/test_bench_gpu.py >"$OUT/pytest_gpu.log" 2>&1
echo "gpu tests: exit $?"
plot() { $PY -c "import matplotlib" 2>/dev/null && echo --plot "$OUT/$1.png"; }
run() { local name=$1; shift; timeout 150 $PY -m pytimings.cli bench "$@" \
  --json "$OUT/$name.json" $(plot "$name") >"$OUT/$name.txt" 2>&1; echo "$name: exit $?"; }
run copy copy --sizes 4K:1G --samples 10 --warmup 3
run latency latency
run kv kv --blocks 16:256
tail -n 15 "$OUT/pytest_gpu.log"
grep -h "^note:" "$OUT"/copy.txt "$OUT"/latency.txt "$OUT"/kv.txt
