#!/bin/sh
# Checks `make install`: installs into a temporary DESTDIR, builds
# examples/embed/host.c against the installed headers and libraries found
# through the installed pkg-config files (shared core), runs it, and loads
# the installed Lua module with only the installed paths. Prints
# "N passed, M failed". LUA selects the interpreter (lua5.4 by default).
lua=${LUA:-lua5.4}
prefix=/opt/lazytensor
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT INT TERM
passed=0
failed=0
ok() { passed=$((passed + 1)); }
fail() { failed=$((failed + 1)); echo "not ok: install: $1"; }
finish() {
  echo "install check ($lua): $passed passed, $failed failed"
  echo "$passed passed, $failed failed"
  [ "$failed" = 0 ]
  exit
}

if make --no-print-directory -s install LUA="$lua" PREFIX=$prefix DESTDIR="$dest" \
    > "$dest/install.log" 2>&1; then ok; else cat "$dest/install.log"; fail "make install"; finish; fi
root=$dest$prefix
for f in include/lazytensor.h include/lazytensor_lua.h lib/liblazytensor.a \
         lib/liblazytensor-$lua.a lib/pkgconfig/lazytensor.pc lib/pkgconfig/lazytensor-$lua.pc; do
  if [ -f "$root/$f" ]; then ok; else fail "missing $f"; fi
done
soname=$(readelf -d "$root/lib/liblazytensor.so" 2>/dev/null | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
if [ -n "$soname" ] && [ -e "$root/lib/$soname" ]; then ok; else fail "soname ($soname) link"; fi

# The .pc files, relocated to where DESTDIR put the files.
mkdir -p "$dest/pc"
for pc in "$root"/lib/pkgconfig/*.pc; do
  sed "s|^prefix=.*|prefix=$root|" "$pc" > "$dest/pc/${pc##*/}"
done
if grep -q '^libdir=${prefix}/lib$' "$root/lib/pkgconfig/lazytensor.pc"; then ok
else fail "lazytensor.pc: libdir relative to prefix"; fi
export PKG_CONFIG_PATH="$dest/pc"
if pkg-config --exists "lazytensor-$lua"; then ok; else fail "pkg-config lazytensor-$lua"; finish; fi
if pkg-config --modversion lazytensor | grep -q '^[0-9]'; then ok; else fail "pkg-config version"; fi
host=$dest/host
# shellcheck disable=SC2046
if ${CC:-cc} -std=c11 -Wall -Wextra -Werror examples/embed/host.c -o "$host" \
    $(pkg-config --cflags "lazytensor-$lua") $(pkg-config --libs "lazytensor-$lua") \
    $(pkg-config --static --libs-only-l lazytensor | sed 's/-llazytensor//') 2> "$dest/cc.log"; then
  ok
  if LD_LIBRARY_PATH="$root/lib" "$host" examples/embed/script.lua > "$dest/host.log" 2>&1; then ok
  else cat "$dest/host.log"; fail "the host built from the installed files"; fi
else
  cat "$dest/cc.log"; fail "building the host from the installed files"
fi

# A private prefix, used exactly as the README's "The C library from a
# private prefix" says: make install PREFIX=DIR (no DESTDIR), pkg-config
# through PKG_CONFIG_PATH, then an rpath, LD_LIBRARY_PATH or the static
# library. examples/c/solve.c checks its own answers (exit 0).
priv=$dest/private
if make --no-print-directory -s install LUA="$lua" PREFIX="$priv" > "$dest/private.log" 2>&1
then ok; else cat "$dest/private.log"; fail "make install PREFIX=<private>"; finish; fi
libdir=$(PKG_CONFIG_PATH="$priv/lib/pkgconfig" pkg-config --variable=libdir lazytensor)
if [ "$libdir" = "$priv/lib" ]; then ok; else fail "private prefix: libdir is '$libdir'"; fi
cc_private() { # output, extra flags...
  out=$1
  shift
  # shellcheck disable=SC2046
  PKG_CONFIG_PATH="$priv/lib/pkgconfig" ${CC:-cc} -std=c11 -Wall -Wextra -Werror \
    examples/c/solve.c -o "$out" "$@" -lm 2> "$dest/cc-private.log"
}
pc() { PKG_CONFIG_PATH="$priv/lib/pkgconfig" pkg-config "$@"; }
# shellcheck disable=SC2046
if cc_private "$dest/solve-rpath" $(pc --cflags --libs lazytensor) -Wl,-rpath,"$libdir" &&
   env -u LD_LIBRARY_PATH "$dest/solve-rpath" > "$dest/run.log" 2>&1; then ok
else cat "$dest/cc-private.log" "$dest/run.log" 2>/dev/null; fail "private prefix: rpath"; fi
# shellcheck disable=SC2046
if cc_private "$dest/solve-plain" $(pc --cflags --libs lazytensor); then
  # without an rpath the loader cannot find it (the error the README quotes) ...
  if env -u LD_LIBRARY_PATH "$dest/solve-plain" > "$dest/run.log" 2>&1; then
    fail "private prefix: ran without rpath or LD_LIBRARY_PATH (the README says it cannot)"
  elif grep -q 'liblazytensor.so.0: cannot open shared object file' "$dest/run.log"; then ok
  else cat "$dest/run.log"; fail "private prefix: unexpected error without rpath"; fi
  # ... and LD_LIBRARY_PATH is the other way
  if LD_LIBRARY_PATH="$libdir" "$dest/solve-plain" > "$dest/run.log" 2>&1; then ok
  else cat "$dest/run.log"; fail "private prefix: LD_LIBRARY_PATH"; fi
else
  cat "$dest/cc-private.log"; fail "private prefix: building against the shared library"
fi
# shellcheck disable=SC2046
if cc_private "$dest/solve-static" $(pc --cflags lazytensor) "$libdir/liblazytensor.a" \
     $(pc --static --libs lazytensor) &&
   ! readelf -d "$dest/solve-static" | grep -q 'NEEDED.*liblazytensor' &&
   env -u LD_LIBRARY_PATH "$dest/solve-static" > "$dest/run.log" 2>&1; then ok
else cat "$dest/cc-private.log" "$dest/run.log" 2>/dev/null; fail "private prefix: static"; fi

v=$(if [ "$lua" = luajit ]; then echo 5.1; else echo "${lua#lua}"; fi)
if LUA_PATH="$root/share/lua/$v/?.lua" LUA_CPATH="$root/lib/lua/$v/?.so" \
    "$lua" -e 'local lt = require "lazytensor"; assert(lt.zeros(2, 2):numel() == 4)' 2>&1; then ok
else fail "the installed Lua module"; fi
finish
