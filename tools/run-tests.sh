#!/bin/sh
# Runs the C test programs and the busted suite; prints one closing line
# "N passed, M failed" and exits non-zero when anything failed.
lua=$1
shift
export LUA="$lua"
passed=0
failed=0
for t in "$@"; do
  out=$("$t" 2>&1)
  rc=$?
  echo "$out"
  p=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\1/p' | tail -1)
  f=$(echo "$out" | sed -n 's/^\([0-9]*\) passed, \([0-9]*\) failed$/\2/p' | tail -1)
  passed=$((passed + ${p:-0}))
  failed=$((failed + ${f:-0}))
  if [ $rc -ne 0 ] && [ "${f:-0}" = 0 ]; then failed=$((failed + 1)); fi
done
tap=$(mktemp)
LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;./spec/?.lua;;' \
  busted --lua="$lua" -o TAP spec > "$tap" 2>&1
rc=$?
grep -v '^ok ' "$tap"
p=$(grep -c '^ok ' "$tap")
f=$(grep -c '^not ok ' "$tap")
passed=$((passed + p))
failed=$((failed + f))
if [ $rc -ne 0 ] && [ "$f" = 0 ]; then
  echo "busted exited with status $rc"
  failed=$((failed + 1))
fi
rm -f "$tap"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
