#!/bin/sh
# bench/w10_tiny_count.sh [DIR]: instructions per tiny operation of W10
# (bench/w10_tiny_loop.lua: plain, recorded, whole lt.grad) by cachegrind,
# steady state: (I(3 loops) - I(1 loop)) / (2 * 10^4), the collection of
# earlier tapes included. Independent of the machine's load. DIR: the
# build to count (default: this tree), bench/w10_tiny_loop.lua of this tree.
here=$(cd "$(dirname "$0")/.." && pwd)
tree=${1:-$here}
count() { # op mode reps → instructions
  (cd "$tree" && valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \
    lua5.4 "$here/bench/w10_tiny_loop.lua" "$1" "$2" "$3" 2>&1) |
    sed -n 's/.*I *refs: *//p' | tr -d ,
}
for op in ${OPS:-diag+dense dense*dense scale}; do
  for mode in plain recorded grad; do
    a=$(count "$op" "$mode" 1)
    b=$(count "$op" "$mode" 3)
    echo "$op $mode $(( (b - a) / 20000 ))"
  done
done
