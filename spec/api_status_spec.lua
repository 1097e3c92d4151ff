-- doc/API.md's "Status in this version" against the library: every
-- backticked name in a row is probed. Before a row's "not yet" (or "in
-- progress") the probe must find the feature working; after it, the probe
-- must find it absent. A name without a probe fails too, so a new row or a
-- new name needs one here, and a feature that lands or goes makes the table
-- wrong at once, never stale.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"

local function file_exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

-- The Makefile has a target of that name.
local function make_target(name)
  return read("Makefile"):find("\n" .. name:gsub("%-", "%%-") .. ":") ~= nil
end

-- A small exact model (spec merged in): its mll must be a finite number.
local X, Y = {0.1, 0.35, 0.5, 0.8, 0.95, 1.3}, {0.2, 0.9, 1.1, 0.4, -0.1, -0.8}
local function model(extra)
  local spec = {x = X, y = Y, kernel = gp.kernels.rbf{lengthscale = 0.4}}
  for k, v in pairs(extra or {}) do spec[k] = v end
  return spec
end
local function finite(v) return type(v) == "number" and v == v and v > -math.huge and v < math.huge end
local function mll_of(m) return finite((m:mll())) end

local function pd() return lt.tensor{{4, 1, 0}, {1, 3, 1}, {0, 1, 2}} end

-- mpi.f: the module's source registers it. The module itself is not
-- loaded here: loading it starts MPI in this process and sets the shared
-- context's num_threads and types (lazytensor.mpi's agreed thread count,
-- its mpi_kernel type), which the specs run after this one would see.
-- spec/mpi (make test-mpi) runs the module.
local MPI_SOURCE = "src/mpi/lua_mpi.c"
local function mpi_function(name)
  return file_exists(MPI_SOURCE) and read(MPI_SOURCE):find('"' .. name .. '"', 1, true) ~= nil
end

-- name (as written between backticks) → true when the library offers it.
local PROBES = {
  ["A:dense()"] = function()
    -- every PSD operator's dense form is known PSD, lt.kernel's too
    local K = lt.kernel(lt.tensor{{0}, {0.5}, {1.5}}, {kind = "rbf", lengthscale = 1})
    return K:dense():is_psd() == true and lt.diag{1, 2}:dense():is_psd() == true
  end,
  ["A:clone()"] = function() return lt.psd(pd()):clone():is_psd() == true end,
  add_diag = function() return lt.psd(pd()):add_diag(1):is_psd() == true end,
  ['"ldl"'] = function()
    local _, info = lt.tensor{{1, 2}, {2, 1}}:solve(lt.tensor{1, 1})
    local _, pinfo = pd():solve(lt.tensor{1, 1, 1})
    return info.method == "ldl" and pinfo.method == "cholesky"
  end,
  ["info.method"] = function()
    local _, info = pd():solve(lt.tensor{1, 1, 1})
    return type(info.method) == "string"
  end,
  max_cholesky_size = function() return lt.settings.max_cholesky_size == 800 end,
  ["A:params()"] = function() return lt.is_tensor(lt.diag{1, 2}:params().diag) end,
  ["A:bilinear_derivative(L, R)"] = function()
    local D = lt.diag{1, 2}
    local g = D:bilinear_derivative(lt.tensor{1, 0}, lt.tensor{1, 0})
    return g[D].diag:get(1) == 1 and g[D].diag:get(2) == 0
  end,
  ["A:with_params"] = function()
    local D = lt.diag{1, 2}
    return D:with_params{[D] = {diag = lt.tensor{3, 4}}}:get(2, 2) == 4
  end,
  ["A:inv_quad_logdet(b, {grad = true})"] = function()
    local D = lt.diag{2, 4}
    local q, ld, g = D:inv_quad_logdet(lt.tensor{2, 2}, {grad = true})
    -- bᵀD⁻¹b = 2 + 1, log det = log 8, d/dd_i = −b_i²/d_i² + 1/d_i
    return math.abs(q - 3) < 1e-12 and math.abs(ld - math.log(8)) < 1e-12
           and math.abs(g[D].diag:get(1) - (-1 + 0.5)) < 1e-12
  end,
  ["d:log_prob(x, {grad = true})"] = function()
    local d = lt.mvn(lt.zeros(2), lt.diag{1, 1})
    local lp, g = d:log_prob(lt.tensor{0, 0}, {grad = true})
    return math.abs(lp + math.log(2 * math.pi)) < 1e-12 and type(g) == "table"
  end,
  ["lt.grad"] = function() return lt.grad ~= nil end,
  ["lt.gradcheck"] = function() return lt.gradcheck(function(p) return p * p end, 1.5) end,
  ["gp.kernels.custom"] = function()
    local k = require("lazytensor.gp").kernels.custom{params = {l = 1},
      k = function(x1, x2, p) return lt.kernel(x1, x2, {kind = "rbf", lengthscale = p.l}) end}
    return k.kind == "custom"
  end,
  ["lazytensor.gp"] = function() return type(gp.exact) == "function" end,
  ["gp.exact"] = function() return mll_of(gp.exact(model())) end,
  scale = function() return mll_of(gp.exact(model{kernel = gp.kernels.scale(gp.kernels.rbf{})})) end,
  ["+"] = function()
    return mll_of(gp.exact(model{kernel = gp.kernels.rbf{} + gp.kernels.matern32{}}))
  end,
  ["*"] = function()
    return mll_of(gp.exact(model{kernel = gp.kernels.rbf{} * gp.kernels.periodic{}}))
  end,
  dims = function()
    return mll_of(gp.exact(model{x = {{0.1, 5}, {0.35, 4}, {0.5, 3}, {0.8, 2}, {0.95, 1}, {1.3, 0}},
                                 kernel = gp.kernels.rbf{dims = {1}}}))
  end,
  mll = function() return mll_of(gp.exact(model())) end,
  mll_and_grad = function()
    local v, g = gp.exact(model()):mll_and_grad()
    return finite(v) and type(g) == "table" and #g > 0
  end,
  fit = function()
    local m = gp.exact(model())
    local before = m:mll()
    m:fit{max_iter = 5}
    return m:mll() >= before
  end,
  predict = function()
    local mean, var = gp.exact(model()):predict({0.6})
    return finite(mean:get(1)) and var:get(1) > 0
  end,
  posterior = function() return gp.exact(model()):posterior({0.6}):mean():size(1) == 1 end,
  ["gp.sgpr"] = function()
    return type(gp.sgpr) == "function" and mll_of(gp.sgpr(model{inducing = 3}))
  end,
  ["gp.multitask"] = function()
    if type(gp.multitask) ~= "function" then return false end
    local y = {}
    for i, v in ipairs(Y) do y[i] = {v, 0.5 * v + 0.1} end
    return mll_of(gp.multitask(model{y = lt.tensor(y), rank = 1}))
  end,
  ['structure = "ski"'] = function()
    local m = gp.exact(model{structure = "ski", grid = 50})
    return mll_of(m) and m:explain():find("^ski") ~= nil
  end,
  ["lazytensor.mpi"] = function() return file_exists(MPI_SOURCE) end,
  ["make mpi"] = function() return make_target("mpi") end,
  ["make test-mpi"] = function() return make_target("test-mpi") end,
  ["mpi.rank"] = function() return mpi_function("rank") end,
  ["mpi.size"] = function() return mpi_function("size") end,
  ["mpi.kernel"] = function() return mpi_function("kernel") end,
  ["gp.exact{..., distributed = true}"] = function()
    return read("lua/lazytensor/gp/init.lua"):find('"distributed"', 1, true) ~= nil
  end,
}

-- The rows of the status table: {part = , present = {names}, absent = {names}}.
local function status_rows()
  local doc = read("doc/API.md")
  local from = assert(doc:find("# Status in this version", 1, true), "no status section")
  local to = doc:find("\n# ", from + 1, true) or #doc
  local rows = {}
  for line in doc:sub(from, to):gmatch("[^\n]+") do
    local part, status = line:match("^| (.-) | (.*) |$")
    if part and part ~= "part" and not part:find("^%-") then
      local cut = status:find("not yet", 1, true) or status:find("in progress", 1, true)
      local row = {part = part, present = {}, absent = {}}
      -- a name before the cut is offered; one after it is not. A name
      -- quoted just before "is in progress" belongs to the absent side.
      for pos, name in status:gmatch("()`([^`]+)`") do
        local tail = status:sub(pos + #name + 2, pos + #name + 20)
        local later = (cut and pos > cut) or tail:find("^, is in progress") or
                      tail:find("^ is in progress") or tail:find("^, is not yet")
        table.insert(later and row.absent or row.present, name)
      end
      rows[#rows + 1] = row
    end
  end
  return rows
end

-- Names that are file paths are checked to exist (spec files).
local function probe(name)
  if name:find("^spec/") then return file_exists(name) end
  local f = PROBES[name]
  assert(f, "doc/API.md's status names `" .. name .. "`, which has no probe in "
            .. "spec/api_status_spec.lua: add one")
  local ok, v = pcall(f)
  return ok and v == true
end

describe("doc/API.md's status table", function()
  local rows = status_rows()

  it("has a row for each part of the contract", function()
    local parts = {}
    for _, r in ipairs(rows) do parts[#parts + 1] = r.part end
    assert.same({"Loading, values, dense tensors, constructors, arithmetic, linear algebra, the "
                 .. "registry, settings, errors, distributions", "Properties follow the matrix",
                 "Batches", "Gradients", "`lazytensor.gp`", "`lazytensor.mpi`"}, parts)
  end)

  for _, r in ipairs(rows) do
    it("row '" .. r.part .. "': what it says is here works, what it says is not is absent",
       function()
         for _, name in ipairs(r.present) do
           assert.is_true(probe(name), "the status says `" .. name .. "` is in this version, "
                                        .. "but its probe fails")
         end
         for _, name in ipairs(r.absent) do
           assert.is_false(probe(name), "the status says `" .. name .. "` is not yet in this "
                                         .. "version, but the library has it: update the row")
         end
       end)
  end

  it("the probes are not vacuous: a feature the library lacks fails its probe", function()
    -- lt.grad is in progress on another branch; until it lands its probe
    -- must say false, and the row must say "in progress"
    if lt.grad == nil then assert.is_false(probe("lt.grad")) end
    assert.is_false(pcall(probe, "lt.nonexistent_feature"))
  end)
end)
