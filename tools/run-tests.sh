#!/bin/sh
# Runs the C test programs and the busted suite; lists every skipped test
# with its reason, then prints one closing line
#   N passed, M failed, K skipped
# and exits non-zero when anything failed. A skip is only ever a platform
# limit (a feature the running Lua lacks); with LT_SKIP_SLOW=1 the slow
# specs are not defined at all (spec/support/slow.lua) and a "not run here"
# note lists them.
lua=$1
shift
export LUA="$lua"
. "$(dirname "$0")/testcount.sh"
for t in "$@"; do
  out=$("$t" 2>&1)
  rc=$?
  echo "$out"
  tc_program "$out" $rc
done
tap=$(mktemp)
LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;./spec/?.lua;;' \
  busted --lua="$lua" -o tools/busted-tap.lua spec > "$tap" 2>&1
tc_tap "$tap" $?
rm -f "$tap"
tc_total
