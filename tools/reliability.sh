#!/bin/sh
# Reliability checks (Makefile targets check-asan, check-valgrind, check-tsan,
# fuzz-c). Usage: tools/reliability.sh asan|valgrind|tsan|fuzz-c [lua]
#
# Sanitizer builds go to build/<kind>-<lua>/ so they never clobber the normal
# lazytensor.so; the busted suite loads the module from there.
# Prints "N passed, M failed, K skipped" (tools/testcount.sh) and exits
# non-zero when anything failed.
set -u
kind=$1
lua=${2:-lua5.4}
jobs=$(nproc 2>/dev/null || echo 2)
busted_bin=$(command -v busted)
export OPENBLAS_NUM_THREADS=1 # deterministic, and no pool threads for the tools to chase
. "$(dirname "$0")/testcount.sh"

# run_prog CMD...: runs a test program, shows its output, counts its line.
run_prog() {
  out=$("$@" 2>&1)
  rc=$?
  echo "$out"
  tc_program "$out" $rc
}

# run_busted PREFIX...: the busted suite (TAP), run through the given command
# prefix (a sanitizer preload, valgrind), with the module from $cpath.
run_busted() {
  [ -d spec ] || { echo "no spec directory"; return; }
  tap=$(mktemp)
  LUA_CPATH="$cpath;;" LUA_PATH='./lua/?.lua;./lua/?/init.lua;./spec/?.lua;;' \
    "$@" "$lua" "$busted_bin" -o tools/busted-tap.lua spec > "$tap" 2>&1
  tc_tap "$tap" $?
  rm -f "$tap"
}

ctests() {
  for c in tests/c/*.c; do
    [ -f "$c" ] || continue
    echo "$1/ctest/$(basename "$c" .c)"
  done
}

case $kind in
asan)
  b=build/asan-$lua
  san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  make --no-print-directory -j"$jobs" LUA="$lua" BUILD="$b" OPT="-O1 -g $san" LDFLAGS="$san" \
    "$b/lazytensor.so" "$b/host/allocfail" "$b/host/threads" $(ctests "$b") || exit 1
  export ASAN_OPTIONS="detect_leaks=1:exitcode=23" # no suppressions needed
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  for t in $(ctests "$b") "$b/host/allocfail" "$b/host/threads"; do run_prog "$t"; done
  cpath="./$b/?.so"
  # The ASan runtime must come first. The module is preloaded too: lua_close
  # dlcloses C modules, and the libraries they pulled in (OpenBLAS, FFTW)
  # would be unmapped with their process-lifetime caches, which LSan then
  # reports as leaks from "<unknown module>". Preloaded, they stay mapped as
  # in any host that links the library, and every stack has symbols.
  run_busted env LD_PRELOAD="$(gcc -print-file-name=libasan.so) $PWD/$b/lazytensor.so"
  ;;
valgrind)
  b=build/$lua
  make --no-print-directory -j"$jobs" LUA="$lua" all "$b/host/threads" "$b/host/allocfail" \
    $(ctests "$b") || exit 1
  vg="valgrind -q --leak-check=full --errors-for-leak-kinds=definite --error-exitcode=1
      --suppressions=$PWD/tools/valgrind.supp --gen-suppressions=all"
  # C tests, except the numerically heavy ones (minutes of BLAS under the
  # simulator; they run under ASan in check-asan): VALGRIND_SKIP lists them.
  for t in $(ctests "$b"); do
    case " ${VALGRIND_SKIP-test_linalg} " in
      *" $(basename "$t") "*) echo "skipped under valgrind: $t (heavy BLAS; see check-asan)"; continue ;;
    esac
    run_prog $vg "$t"
  done
  run_prog $vg "$b/host/threads" 200
  # allocfail under memcheck: one script, both modes (the full set runs in
  # make test and under ASan).
  run_prog $vg "$b/host/allocfail" tests/host/scripts/operator.lua
  cpath="./?.so"
  # Preloaded for the reason given under asan: unmapped by lua_close, FFTW's
  # process-lifetime planner would read as "definitely lost" (288 bytes
  # holding 118 kB) with no symbols to tell whose it is.
  run_busted env LD_PRELOAD="$PWD/lazytensor.so" $vg
  ;;
tsan)
  b=build/tsan-$lua
  san="-fsanitize=thread -fno-omit-frame-pointer"
  # No target_clones (kernel_tilemul.c): their ifunc resolvers run while the
  # loader relocates, before the TSan runtime is up, and the instrumented
  # resolver crashes the program at start (segmentation fault, no report).
  make --no-print-directory -j"$jobs" LUA="$lua" BUILD="$b" OPT="-O1 -g $san -DLT_NO_TARGET_CLONES" \
    LDFLAGS="$san" \
    "$b/host/threads" || exit 1
  export TSAN_OPTIONS="halt_on_error=1:exitcode=66"
  run_prog "$b/host/threads" 1000
  ;;
fuzz-c)
  # Two libFuzzer harnesses, each for LT_FUZZ_SECONDS (60): fuzz_dense (the
  # C core's entry points) and fuzz_lua (the binding's input parsing; it
  # hosts Lua 5.4). LT_FUZZ_TARGETS picks some of them.
  b=build/fuzz-$lua
  san="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
  targets=""
  for name in ${LT_FUZZ_TARGETS:-fuzz_dense fuzz_lua}; do
    if [ "$name" = fuzz_lua ] && [ "$lua" != lua5.4 ]; then
      echo "skipped fuzz_lua: it hosts Lua 5.4 (LUA=$lua)"
      continue
    fi
    targets="$targets $b/fuzz/$name"
  done
  # -Wno-psabi: clang warns that kernel_tilemul.c's vector types change the
  # ABI without AVX, which -Werror turns into an error (GCC does not warn)
  make --no-print-directory -j"$jobs" CC=clang LUA="$lua" BUILD="$b" OPT="-O1 -g -Wno-psabi $san" \
    LDFLAGS="-fsanitize=address,undefined" $targets || exit 1
  secs=${LT_FUZZ_SECONDS:-60}
  export ASAN_OPTIONS="detect_leaks=1"
  for t in $targets; do
    name=$(basename "$t")
    case $name in
      fuzz_lua) seeds=tests/fuzz/corpus_lua; corpus=$b/corpus_lua; opts="-max_len=2048 -len_control=20" ;;
      *) seeds=tests/fuzz/corpus; corpus=$b/corpus; opts="-max_len=512" ;;
    esac
    mkdir -p "$corpus"
    log=$b/$name.log
    echo "$name: $secs s (log: $log)"
    if "$t" -max_total_time="$secs" $opts -timeout=10 -rss_limit_mb=2048 \
         -artifact_prefix="$b/$name-" -print_final_stats=1 "$corpus" "$seeds" > "$log" 2>&1; then
      tail -8 "$log"
      passed=$((passed + 1))
    else
      tail -60 "$log"
      echo "FAIL $name: libFuzzer found a problem (the input: $b/$name-crash-* / leak-* / timeout-*;"
      echo "     FUZZ_LUA_TRACE=1 $t INPUT prints fuzz_lua's program)"
      failed=$((failed + 1))
    fi
  done
  ;;
*)
  echo "usage: $0 asan|valgrind|tsan|fuzz-c [lua]"
  exit 2
  ;;
esac
tc_total
