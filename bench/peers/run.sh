#!/bin/sh
# bench/peers/run.sh [W5] [W8] [GPY] [BO] [SVGP]: lazytensor and linear_operator (with
# torch autograd) side by side on the same problems, one after the other for
# each problem so that both see the same load; GPY runs GPyTorch 1.12's own
# model classes (bench/peers/gpy_peer.py's docstring lists its rows); BO runs
# lazytensor.bo.minimize (bench/bo_regret.lua) against a BoTorch-style loop
# written with GPyTorch 1.12 (bench/peers/bo_peer.py) and random search on
# the same initial designs, compared by bench/peers/bo_compare.lua; SVGP runs
# GPyTorch 1.12's ApproximateGP SVGP (bench/peers/svgp_peer.py) against
# gp.variational (bench/peers/svgp_side.lua): the bound and its gradient at
# the same parameters, the time a minibatch step, 10^6 points.
# `make bench-peers` runs all five.
#
# Each problem's data and exact answers are made by bench/peers/lt_side.lua
# (into $BENCH_PEERS_DATA); bench/peers/peers.py reads them. Every
# measurement is a JSON line (kept in $BENCH_OUT); bench/peers/compare.lua
# then pairs the two systems' lines: both times, both accuracies, and the
# speed-up (the peer's time over lazytensor's).
#
# The peer needs Debian's python3-torch, python3-numpy, python3-scipy and a
# linear_operator source tree ($LO_SRC; bench/peers/setup.sh says how to get
# one). Without them the lazytensor rows still run and every peer row says
# why it is missing.
#
#   BENCH_PEERS_SIZES   W8's n (default "1000 4000 20000")
#   BENCH_PEERS_KINDS   W8's kernels (default "rbf matern52")
#   BENCH_PEERS_DIMS    W8's d (default "2 5")
#   BENCH_PEERS_PATHS   W8's paths (default "exact iterative")
#   BENCH_THREADS       threads for both systems (default 1)
#   BENCH_TIMEOUT       seconds per program (default 1800)
#   BENCH_PEERS_GPY     GPY's rows (default "exact iterative predict love
#                       sgpr bo ski1d ski2d multitask multitask_shared
#                       spread"; also exact4000 iterative4000 bo60; the
#                       exact answers of ski1d, ski2d and multitask* take
#                       minutes the first time, kept in the data directory)
#   BENCH_BO_PROBLEMS   BO's problems, bench/bo_regret.lua's names, "name" or
#                       "name:budget" (default "branin hartmann6 levy4":
#                       budgets 30, 60, 60)
#   BENCH_BO_SEEDS      BO's seeds = initial designs (default 10)
#   BENCH_SVGP_ROWS     SVGP's rows (default "elbo step big"; big: 10^6
#                       points, one epoch a side, about 10 minutes each)
#   LO_SRC              linear_operator tree (default ../linear_operator_src
#                       beside the repository)
#   GPYT_SRC            GPyTorch v1.12 tree (default ../gpytorch_src)
set -u

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT" || exit 1

LUA=${LUA:-lua5.4}
PY=${PYTHON:-/usr/bin/python3}
DIR=${BENCH_PEERS_DATA:-bench/peers/data}
OUT=${BENCH_OUT:-bench/peers/last_run.jsonl}
TIMEOUT=${BENCH_TIMEOUT:-1800}
SIZES=${BENCH_PEERS_SIZES:-1000 4000 20000}
KINDS=${BENCH_PEERS_KINDS:-rbf matern52}
DIMS=${BENCH_PEERS_DIMS:-2 5}
PATHS=${BENCH_PEERS_PATHS:-exact iterative}
WORKLOADS=${*:-W5 W8 GPY BO SVGP}
LO_SRC=${LO_SRC:-$ROOT/../linear_operator_src}
GPYT_SRC=${GPYT_SRC:-$ROOT/../gpytorch_src}
GPY_ROWS=${BENCH_PEERS_GPY:-exact iterative predict love sgpr bo ski1d ski2d multitask multitask_shared spread}
BO_PROBLEMS=${BENCH_BO_PROBLEMS:-branin hartmann6 levy4}
BO_SEEDS=${BENCH_BO_SEEDS:-10}
SVGP_ROWS=${BENCH_SVGP_ROWS:-elbo step big}
export LO_SRC GPYT_SRC BENCH_THREADS="${BENCH_THREADS:-1}"
# BLAS threads follow BENCH_THREADS on both sides
export OPENBLAS_NUM_THREADS="$BENCH_THREADS" OMP_NUM_THREADS="$BENCH_THREADS"
export LUA_CPATH="./?.so;;" LUA_PATH="./lua/?.lua;./lua/?/init.lua;./bench/?.lua;;"

[ -f lazytensor.so ] || { echo "bench/peers/run.sh: no lazytensor.so (run make)" >&2; exit 1; }
mkdir -p "$DIR" || exit 1

# Why the peer cannot run, or nothing when it can.
peer_missing() {
  [ -x "$PY" ] || { echo "no $PY (Debian python3)"; return; }
  "$PY" -c "import torch, numpy, scipy" 2>/dev/null ||
    { echo "python3 cannot import torch, numpy and scipy (apt-get install python3-torch python3-numpy python3-scipy)"; return; }
  [ -f "$LO_SRC/linear_operator/__init__.py" ] ||
    { echo "no linear_operator source tree at $LO_SRC (see bench/peers/setup.sh)"; return; }
  [ -f "$LO_SRC/linear_operator/version.py" ] ||
    { echo "$LO_SRC/linear_operator/version.py is missing (see bench/peers/setup.sh)"; return; }
}
MISSING=$(peer_missing)
[ -n "$MISSING" ] && echo "bench/peers/run.sh: peer rows skipped: $MISSING" >&2
GPY_MISSING=$MISSING
[ -z "$GPY_MISSING" ] && [ ! -f "$GPYT_SRC/gpytorch/__init__.py" ] &&
  GPY_MISSING="no GPyTorch source tree at $GPYT_SRC (see bench/peers/setup.sh)"

: > "$OUT"
RC=$(mktemp) || exit 1
trap 'rm -f "$RC"' EXIT

# run SYSTEM WORKLOAD COMMAND...: its lines to stdout and $OUT; a JSON line
# when it fails or times out.
run() {
  system=$1 workload=$2
  shift 2
  { timeout "$TIMEOUT" "$@"; echo $? > "$RC"; } | tee -a "$OUT"
  rc=$(cat "$RC")
  if [ "$rc" != 0 ]; then
    why="exited with status $rc"
    [ "$rc" = 124 ] && why="timed out after $TIMEOUT s"
    printf '{"workload":"%s","op":"*","system":"%s","args":"%s","skipped":"%s"}\n' \
      "$workload" "$system" "$*" "$why" | tee -a "$OUT"
  fi
}

# peer ARGS...: the peer's side of one problem, or the reason it is skipped.
peer() {
  if [ -n "$MISSING" ]; then
    printf '{"workload":"%s","op":"*","system":"linear_operator","args":"%s","skipped":"%s"}\n' \
      "$1" "$*" "$MISSING" | tee -a "$OUT"
  else
    run linear_operator "$1" "$PY" bench/peers/peers.py "$DIR" "$@"
  fi
}

printf '{"workload":"meta","op":"load_start","loadavg":"%s","nproc":%s,"threads":%s}\n' \
  "$(cut -d' ' -f1-3 /proc/loadavg)" "$(getconf _NPROCESSORS_ONLN)" "$BENCH_THREADS" | tee -a "$OUT"
for w in $WORKLOADS; do
  case $w in
    W5)
      run lazytensor W5 "$LUA" bench/peers/lt_side.lua "$DIR" W5
      peer W5
      ;;
    W8)
      for n in $SIZES; do
        for d in $DIMS; do
          for kind in $KINDS; do
            for path in $PATHS; do
              run lazytensor W8 "$LUA" bench/peers/lt_side.lua "$DIR" W8 "$n" "$d" "$kind" "$path"
              peer W8 "$n" "$d" "$kind" "$path"
            done
          done
        done
      done
      ;;
    GPY)
      # the data and exact answers need only numpy and scipy
      # shellcheck disable=SC2086
      run data GPY "$PY" bench/peers/gpy_peer.py "$DIR" data $GPY_ROWS
      for row in $GPY_ROWS; do
        run lazytensor GPY "$LUA" bench/peers/gpy_side.lua "$DIR" "$row"
        if [ -n "$GPY_MISSING" ]; then
          printf '{"workload":"GPY","op":"*","system":"gpytorch","args":"GPY %s","skipped":"%s"}\n' \
            "$row" "$GPY_MISSING" | tee -a "$OUT"
        else
          run gpytorch GPY "$PY" bench/peers/gpy_peer.py "$DIR" run "$row"
        fi
      done
      ;;
    BO)
      # lazytensor writes each problem's designs once (seeds 1..BO_SEEDS,
      # its scrambled Sobol); the GPyTorch loop and random search read them
      mkdir -p "$DIR/bo_designs" || exit 1
      for p in $BO_PROBLEMS; do
        if [ -f "$DIR/bo_designs/bo_init_${p%%:*}_1.txt" ]; then
          designs="--designs $DIR/bo_designs"
        else
          designs="--write-designs $DIR/bo_designs"
        fi
        # shellcheck disable=SC2086
        run lazytensor BO "$LUA" bench/bo_regret.lua --problems "$p" --seeds "$BO_SEEDS" \
          --no-random $designs
        if [ -n "$GPY_MISSING" ]; then
          printf '{"workload":"BO","op":"*","system":"gpytorch","args":"BO %s","skipped":"%s"}\n' \
            "$p" "$GPY_MISSING" | tee -a "$OUT"
        else
          # shellcheck disable=SC2046
          run gpytorch BO "$PY" bench/peers/bo_peer.py "$DIR/bo_designs" run "$p" $(seq "$BO_SEEDS")
          # shellcheck disable=SC2046
          run random BO "$PY" bench/peers/bo_peer.py "$DIR/bo_designs" random "$p" $(seq "$BO_SEEDS")
        fi
      done
      ;;
    SVGP)
      # the peer writes the data and the given parameters (numpy), then
      # GPyTorch's bound and gradient, which lazytensor's side reads
      run data SVGP "$PY" bench/peers/svgp_peer.py "$DIR" data
      for row in $SVGP_ROWS; do
        for m in $([ "$row" = big ] && echo 500 || echo 100 500); do
          if [ -n "$GPY_MISSING" ]; then
            printf '{"workload":"SVGP","op":"%s","system":"gpytorch","m":%s,"skipped":"%s"}\n' \
              "$row" "$m" "$GPY_MISSING" | tee -a "$OUT"
          else
            run gpytorch SVGP "$PY" bench/peers/svgp_peer.py "$DIR" "$row" "$m"
          fi
          run lazytensor SVGP "$LUA" bench/peers/svgp_side.lua "$DIR" "$row" "$m"
        done
      done
      ;;
    *) echo "bench/peers/run.sh: unknown workload $w (W5, W8, GPY, BO, SVGP)" >&2; exit 1 ;;
  esac
done
printf '{"workload":"meta","op":"load_end","loadavg":"%s"}\n' "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT"
echo
case " $WORKLOADS " in
  *" SVGP "*) "$LUA" bench/peers/svgp_side.lua "$DIR" compare "$OUT"; echo ;;
esac
case " $WORKLOADS " in
  *" BO "* | *" SVGP "*) # compare.lua takes every lazytensor line: BO's go to bo_compare.lua
    grep -v '"workload": *"\(BO\|bo_regret\|SVGP\)"' "$OUT" > "$RC.main"
    "$LUA" bench/peers/compare.lua "$RC.main"
    rm -f "$RC.main"
    case " $WORKLOADS " in
      *" BO "*) echo; "$LUA" bench/peers/bo_compare.lua "$OUT" ;;
    esac
    ;;
  *) "$LUA" bench/peers/compare.lua "$OUT" ;;
esac
