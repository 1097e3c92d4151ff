# tools/testcount.sh — counting test results, sourced by tools/run-tests.sh
# and tools/reliability.sh (POSIX sh). Keeps passed/failed/skipped totals and
# the list of skipped tests; tc_total prints the list and the closing line
#   N passed, M failed, K skipped
passed=0
failed=0
skipped=0
skip_list=""
not_run_list=""

# tc_program OUTPUT RC: adds a test program's closing line
# ("N passed, M failed" or "N passed, M failed, K skipped"); a program that
# exits non-zero without reporting a failure counts as one failure.
tc_program() {
  counts=$(echo "$1" |
    sed -n 's/^\([0-9][0-9]*\) passed, \([0-9][0-9]*\) failed\(, \([0-9][0-9]*\) skipped\)\{0,1\}$/\1 \2 \4/p' |
    tail -1)
  set -- "$1" "$2" $counts
  passed=$((passed + ${3:-0}))
  failed=$((failed + ${4:-0}))
  skipped=$((skipped + ${5:-0}))
  if [ "$2" -ne 0 ] && [ "${4:-0}" = 0 ]; then failed=$((failed + 1)); fi
}

# tc_tap FILE RC: adds busted's TAP output (run with -o tools/busted-tap.lua):
# prints every line but the passes and skips (failures with their messages,
# anything the specs printed), counts "ok", "not ok" and "ok N - # SKIP"
# lines, and keeps the skips and the "# not run" notes (spec/support/slow.lua)
# for tc_total.
tc_tap() {
  grep -v '^ok ' "$1" | grep -v '^# not run' | grep -v '^1\.\.[0-9]*$'
  s=$(grep -c '^ok [0-9]* - # SKIP' "$1")
  p=$(($(grep -c '^ok ' "$1") - s))
  f=$(grep -c '^not ok ' "$1")
  passed=$((passed + p))
  failed=$((failed + f))
  skipped=$((skipped + s))
  skip_list="$skip_list$(sed -n 's/^ok [0-9]* - # SKIP /  /p' "$1")
"
  not_run_list="$not_run_list$(sed -n 's/^# not run: /  /p' "$1")
"
  if [ "$2" -ne 0 ] && [ "$f" = 0 ]; then
    echo "busted exited with status $2"
    failed=$((failed + 1))
  fi
}

# tc_total: the skips with their reasons, the slow specs this run left out
# (informational: they are not defined here, so they are not skips), and
# the closing line. Returns non-zero when anything failed.
tc_total() {
  if [ "$skipped" -gt 0 ]; then
    echo "skipped (platform limits; each with its reason):"
    printf '%s' "$skip_list" | grep -v '^$'
  fi
  if [ -n "$(printf '%s' "$not_run_list" | grep -v '^$')" ]; then
    echo "not run here (LT_SKIP_SLOW=1; slow specs run in the default Lua's full run, not skips):"
    printf '%s' "$not_run_list" | grep -v '^$'
  fi
  echo "$passed passed, $failed failed, $skipped skipped"
  [ "$failed" = 0 ]
}
