#!/bin/sh
# Installs the rock into a temporary tree with the command README shows,
# `luarocks make --lua-version=V ...` (plus --tree), and loads it from there
# with only that tree's paths. Prints "N passed, M failed". LUA selects the
# interpreter (lua5.4 by default); --lua-version builds for it (LuaJIT: 5.1
# headers, the ABI LuaJIT loads), where luarocks' default (5.1 on Debian)
# would build a module lua5.4 cannot load.
lua=${LUA:-lua5.4}
case $lua in
  luajit*) ver=5.1 ;;
  lua5.*) ver=${lua#lua} ;;
  *) echo "rock-smoke: unknown interpreter $lua"; echo "0 passed, 1 failed"; exit 1 ;;
esac
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT INT TERM
if ! LT_ROCK_NO_COPY=1 luarocks make --lua-version="$ver" --tree="$tree" \
    rockspec/lazytensor-scm-1.rockspec > "$tree/build.log" 2>&1; then
  cat "$tree/build.log"
  echo "rock-smoke: luarocks make failed"
  echo "0 passed, 1 failed"
  exit 1
fi
LUA_PATH="$tree/share/lua/$ver/?.lua;$tree/share/lua/$ver/?/init.lua" \
LUA_CPATH="$tree/lib/lua/$ver/?.so" \
  "$lua" - "$tree" <<'LUA'
local tree = ...
local passed, failed = 0, 0
local function check(ok, what)
  if ok then passed = passed + 1 else failed = failed + 1; print("not ok: rock " .. what) end
end
check(not package.cpath:find(";;", 1, true) and package.cpath:sub(1, #tree) == tree,
      "cpath holds only the tree")
local ok, lt = pcall(require, "lazytensor")
check(ok, "require 'lazytensor' from the tree: " .. tostring(lt))
if ok then
  check(type(lt._VERSION) == "string", "_VERSION")
  local a = lt.tensor{{1, 2}, {3, 4}}
  check((a + lt.diag{1, 1}):get(2, 2) == 5, "arithmetic works")
  -- Pure-Lua submodules are installed as lazytensor.<name> (and packages
  -- such as lazytensor.gp with their init.lua).
  local dir = tree .. "/share/lua/" .. _VERSION:sub(5) .. "/lazytensor/"
  for _, name in ipairs{"mvn", "optim", "gp", "gp.kernels"} do
    local f = io.open(dir .. name:gsub("%.", "/") .. ".lua") or io.open(dir .. name .. "/init.lua")
    if f then
      f:close()
      local mok, m = pcall(require, "lazytensor." .. name)
      check(mok and type(m) == "table", "require 'lazytensor." .. name .. "' from the tree: " .. tostring(m))
    end
  end
  check(lt.gp == nil or type(lt.gp) == "table", "lt.gp from the tree")
end
print(("rock smoke (%s, tree %s): %d passed, %d failed"):format(_VERSION, tree, passed, failed))
print(("%d passed, %d failed"):format(passed, failed))
os.exit(failed == 0 and 0 or 1)
LUA
