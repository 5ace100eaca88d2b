#!/usr/bin/env bash
# kernels_validation/run_all.sh [--quick]
#
# Runs every kernels_validation check and benchmark, one after another, in at most about
# 4 minutes on one H200, writing flat files under $OUT as it goes (a killed run still
# leaves what finished):
#   env.json  correctness.csv  paged_attention.csv  copies.csv  gemm.csv  layer.csv  run_all.log
# Each piece has a soft budget (the script stops starting new cases) and a hard limit
# (timeout kills it); the hard limits are also cut so the whole run stays under
# TOTAL_S seconds. Without CUDA (or with --quick) every piece runs its tiny CPU mode.
# Needs only python3 with torch (and Triton on a GPU). PYTHON overrides the interpreter.
# Exits 1, saying why, when no check or benchmark succeeded (no torch: every piece fails;
# or the total budget ran out first); 0 when at least one ran to the end.
set -u

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
: "${OUT:?set OUT to the folder to write into}"
PY="${PYTHON:-python3}"
TOTAL_S="${TOTAL_S:-240}"
MIN_PIECE_S="${MIN_PIECE_S:-15}"  # do not start a piece with less time than this left
mkdir -p "$OUT"
log="$OUT/run_all.log"
export PYTHONUNBUFFERED=1

quick=""
[ "${1:-}" = "--quick" ] && quick="--quick"
why=""  # why nothing may run, said at the end when no piece succeeded
if ! "$PY" -c 'import torch' 2>>"$log"; then
  why="$PY cannot import torch (install torch, or set PYTHON to an interpreter that has it)"
fi
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>>"$log"; then
  quick="--quick"
  echo "no CUDA device visible to torch: running the CPU quick mode" | tee -a "$log"
fi
mode=full
[ -n "$quick" ] && mode=quick
start=$SECONDS

# run NAME SOFT_S HARD_S ARGS...: one piece, its output appended to the log
run() {
  local name=$1 soft=$2 hard=$3
  shift 3
  local left=$((TOTAL_S - (SECONDS - start)))
  if [ "$left" -lt "$MIN_PIECE_S" ]; then
    echo "=== $name: not started, ${left}s of the ${TOTAL_S}s total left" | tee -a "$log"
    [ "$name" != env_info ] && skipped=$((skipped + 1))
    return
  fi
  [ "$hard" -gt "$left" ] && hard=$left
  [ "$soft" -gt 0 ] && [ "$soft" -gt $((hard - 10)) ] && soft=$((hard - 10))
  echo "=== $name: start $(date -u +%H:%M:%S), soft ${soft}s, hard ${hard}s" | tee -a "$log"
  local budget=()
  [ "$soft" -gt 0 ] && budget=(--budget-s "$soft")
  timeout -k 5 "$hard" "$PY" "$here/$name.py" "$@" ${budget[@]+"${budget[@]}"} >>"$log" 2>&1
  local rc=$?
  [ "$rc" -eq 124 ] && echo "=== $name: killed at its hard limit" | tee -a "$log"
  echo "=== $name: rc=$rc after $((SECONDS - start))s in all" | tee -a "$log"
  if [ "$name" != env_info ]; then
    if [ "$rc" -eq 0 ]; then ran=$((ran + 1)); else failed=$((failed + 1)); fi
  fi
}
ran=0     # checks and benchmarks that ended with rc=0
failed=0  # ... that failed or were killed
skipped=0  # ... not started (the total budget ran out)

run env_info 0 30 --out "$OUT/env.json" --mode "$mode"
run check_correctness 20 40 $quick --out "$OUT/correctness.csv"
run bench_paged_attention 45 70 $quick --out "$OUT/paged_attention.csv"
run bench_copies 30 50 $quick --out "$OUT/copies.csv"
run bench_layer 35 60 $quick --out "$OUT/layer.csv"
run bench_gemm 25 40 $quick --out "$OUT/gemm.csv"

echo "=== summary ($mode mode, $((SECONDS - start))s)" | tee -a "$log"
timeout -k 5 20 "$PY" "$here/summarize.py" "$OUT" 2>&1 | tee -a "$log"
# exit 1 when no check or benchmark ran to the end: nothing measured is not a success
if [ "$ran" -eq 0 ]; then
  echo "run_all.sh: no check or benchmark succeeded ($failed failed, $skipped not" \
    "started)${why:+: $why}; see $log" | tee -a "$log" >&2
  exit 1
fi
exit 0
