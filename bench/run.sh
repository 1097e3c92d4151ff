#!/bin/sh
# bench/run.sh [W1 ... W7 W9 W10 R3]: build the C baselines, run each workload's
# baseline and then its Lua script, single-threaded, print every JSON line
# (also kept in bench/last_run.jsonl), then the summary of ratios. Run from anywhere; it
# works in the repository root, where `make` leaves lazytensor.so.
#
#   BENCH_QUICK=1      quarter time budgets (rougher figures, ~2x faster)
#   BENCH_ROUNDS=n     run everything n times (default 1); the summary keeps
#                      the best median of each measurement (for busy hosts)
#   BENCH_TIMEOUT=s    per program (default 200)
#   BENCH_OUT=file     where the JSON lines go (default bench/last_run.jsonl)
#   CC, LUA            compiler (cc) and interpreter (lua5.4)
#
# R3 (only when named: several minutes) is issue 25's before/after set:
# kernel_flops, gp_predict, bo_loop, ski_precond, ski_predict, cv_default
# (n = 2000, 3 seeds) and stochastic_fit (bench/RESULTS.md, "Issue 25").
set -u

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1

export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 GOTO_NUM_THREADS=1
export LUA_CPATH="./?.so;;"
export LUA_PATH="./lua/?.lua;./lua/?/init.lua;./bench/?.lua;;"
CC=${CC:-cc}
LUA=${LUA:-lua5.4}
TIMEOUT=${BENCH_TIMEOUT:-200}
OUT=${BENCH_OUT:-bench/last_run.jsonl}
WORKLOADS=${*:-W1 W2 W3 W4 W5 W6 W7 W9 W10}

for w in $WORKLOADS; do
  case $w in
    W[1-7] | W9 | W10 | R3) ;;
    *) echo "bench/run.sh: unknown workload $w (W1 ... W7, W9, W10, R3)" >&2; exit 1 ;;
  esac
done

PKGS="lapacke openblas fftw3"
# shellcheck disable=SC2086
if ! FLAGS=$(pkg-config --cflags --libs $PKGS); then
  echo "bench/run.sh: pkg-config cannot find $PKGS" >&2
  exit 1
fi
# shellcheck disable=SC2086
$CC -std=c11 -O2 -Wall -Wextra -Werror -o bench/baseline bench/baseline.c $FLAGS -lm || exit 1

[ -f lazytensor.so ] || echo "bench/run.sh: no lazytensor.so in $ROOT (run make); lazytensor rows will be skipped" >&2

: > "$OUT"
RC=$(mktemp) || exit 1
trap 'rm -f "$RC"' EXIT

# the host's load: other processes on the machine skew every figure
loadavg() {
  printf '{"workload":"meta","op":"load_%s","system":"host","n":0,"loadavg":"%s","nproc":%s}\n' \
    "$1" "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)" "$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 0)" | tee -a "$OUT"
}

# run WORKLOAD SYSTEM COMMAND...: stream its lines to stdout and $OUT; if it
# fails or times out, say so in a JSON line
run() {
  w=$1 sys=$2
  shift 2
  { timeout "$TIMEOUT" "$@"; echo $? > "$RC"; } | tee -a "$OUT"
  rc=$(cat "$RC")
  if [ "$rc" != 0 ]; then
    why="exited with status $rc"
    [ "$rc" = 124 ] && why="timed out after $TIMEOUT s"
    printf '{"workload":"%s","op":"*","system":"%s","n":0,"skipped":"%s %s"}\n' \
      "$w" "$sys" "$*" "$why" | tee -a "$OUT"
  fi
}

ROUNDS=${BENCH_ROUNDS:-1}
loadavg start
# each workload's baseline runs right before its lazytensor side, so the two
# see the same load on a shared machine
round=0
while [ "$round" -lt "$ROUNDS" ]; do
  round=$((round + 1))
  for w in $WORKLOADS; do
    if [ "$w" = R3 ]; then
      run R3 lazytensor "$LUA" bench/kernel_flops.lua
      run R3 lazytensor "$LUA" bench/gp_predict.lua
      run R3 lazytensor "$LUA" bench/bo_loop.lua
      run R3 lazytensor "$LUA" bench/ski_precond.lua 20000 1 2000
      run R3 lazytensor "$LUA" bench/ski_predict.lua
      run R3 lazytensor env CV_SEEDS=3 "$LUA" bench/cv_default.lua 2000
      run R3 lazytensor "$LUA" bench/stochastic_fit.lua
      continue
    fi
    case $w in
      W1) s=w1_overhead ;;
      W2) s=w2_kron ;;
      W3) s=w3_lowrank ;;
      W4) s=w4_dense ;;
      W5) s=w5_iterative ;;
      W6) s=w6_toeplitz ;;
      W7) s=w7_mvn ;;
      W9) s=w9_batch ;;
      W10) s=w10_grad ;;
    esac
    # W1's baseline (plain Lua tables), W9's (a Lua loop over the members)
    # and W10's (the untaped calls, gp.exact's hand-wired gradient) are
    # inside their scripts
    [ "$w" != W1 ] && [ "$w" != W9 ] && [ "$w" != W10 ] && run "$w" openblas ./bench/baseline "$w"
    run "$w" lazytensor "$LUA" "bench/$s.lua"
  done
done

loadavg end
echo
"$LUA" bench/summary.lua "$OUT"
