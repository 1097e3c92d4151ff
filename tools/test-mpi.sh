#!/bin/sh
# make test-mpi: the distributed specs (spec/mpi/*_mpispec.lua) under
# mpirun, first on one rank — which records the exact bits of each named
# result (spec/mpi/support.lua) — then on 2 and 3 ranks (3 oversubscribed
# on a 2-core machine), where every rank checks its results against the
# one-rank bits. Each rank's busted output goes to a file of its own and
# every rank's tests are counted; ends with "N passed, M failed, K skipped".
lua=$1
here=$(cd "$(dirname "$0")" && pwd)
. "$here/testcount.sh"
# mpirun refuses root unless told (CI's containers run as root).
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Containers often forbid the cross-process reads (CMA) OpenMPI's shared
# memory uses for large messages; plain copies work everywhere.
export OMPI_MCA_btl_vader_single_copy_mechanism="${OMPI_MCA_btl_vader_single_copy_mechanism:-none}"
export LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;./spec/?.lua;;'
work=$(mktemp -d)
reference="$work/one-rank.bits"
busted_bin=$(command -v busted)
for np in 1 2 3; do
  if [ "$np" = 1 ]; then mode="LT_MPI_RECORD=$reference"; else mode="LT_MPI_COMPARE=$reference"; fi
  echo "=== mpirun -np $np"
  # timeout: a hang (a rank waiting for a collective the others never
  # reach) fails the run instead of blocking CI
  # --bind-to none: every run's ranks see all the cores, so the thread
  # count the ranks agree on (lazytensor.mpi) is the same for 1, 2 and 3
  # ranks — dense BLAS and LAPACK results change with it
  env "$mode" LT_MPI_NP=$np timeout 900 mpirun --oversubscribe --bind-to none -np "$np" \
    sh -c 'exec "$0" "$1" -p _mpispec -o tools/busted-tap.lua spec/mpi \
             > "$2/np$3.rank$OMPI_COMM_WORLD_RANK.tap" 2>&1' \
    "$lua" "$busted_bin" "$work" "$np"
  rc=$?
  r=0
  while [ "$r" -lt "$np" ]; do
    tap="$work/np$np.rank$r.tap"
    if [ -f "$tap" ]; then
      echo "--- rank $r of $np"
      tc_tap "$tap" $rc
    else
      echo "rank $r of $np wrote no output (mpirun status $rc)"
      failed=$((failed + 1))
    fi
    r=$((r + 1))
  done
done
rm -rf "$work"
tc_total
