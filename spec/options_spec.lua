-- Per-call options (A:solve(b, opts), ...), lt.with_settings and
-- lt.settings take only settings' names and values of their types: an
-- unknown name or a mistyped value is an error naming the call, with every
-- setting left as it was (issue 19, item 10: they used to be ignored), and
-- names with a zero byte are refused everywhere (C would read "add\0x" as
-- "add").
local lt = require "lazytensor"

local function message(f)
  local ok, err = pcall(f)
  assert.is_false(ok, "expected an error")
  return tostring(err)
end

local function spd(n)
  lt.manual_seed(3)
  local X = lt.randn(n, n)
  return lt.psd(X * X:t() + n * lt.eye(n))
end

describe("options", function()
  local A, b = spd(30), lt.ones(30)
  after_each(function() lt.settings.progress = nil end)

  it("reject unknown names on every operation that takes them", function()
    local calls = {
      solve = function(o) return A:solve(b, o) end,
      inv_quad = function(o) return A:inv_quad(b, o) end,
      logdet = function(o) return A:logdet(o) end,
      inv_quad_logdet = function(o) return A:inv_quad_logdet(b, o) end,
      root = function(o) return A:root(o) end,
      root_inv = function(o) return A:root_inv(o) end,
      eigh = function(o) return A:eigh(o) end,
    }
    for name, call in pairs(calls) do
      assert.matches("lazytensor: " .. name .. ": settings: unknown setting 'fast_computations'",
        message(function() return call{fast_computations = true} end), 1, true)
      assert.matches("lazytensor: " .. name .. ": settings: cg_tolerance must be a number, got string",
        message(function() return call{cg_tolerance = "tight"} end), 1, true)
    end
    assert.matches("settings: a setting's name must be a string, got number",
      message(function() return A:solve(b, {5}) end), 1, true)
  end)

  it("leave every setting as it was when one entry is wrong", function()
    local before = {}
    for _, name in ipairs{"max_cholesky_size", "cg_tolerance", "max_cg_iterations"} do
      before[name] = lt.settings[name]
    end
    local f = function() end
    for _ = 1, 10 do -- entries come in any order: some good ones go first
      message(function()
        return A:solve(b, {max_cholesky_size = 0, max_cg_iterations = 7, progress = f,
                           cg_tolerance = 1e-3, bogus = 1})
      end)
      message(function()
        return lt.with_settings({max_cholesky_size = 0, cg_tolerance = "x"}, function() end)
      end)
    end
    for name, v in pairs(before) do assert.equal(v, lt.settings[name], name) end
    assert.is_nil(lt.settings.progress)
  end)

  it("apply progress for one call, and restore it", function()
    local events = 0
    local x, info = A:solve(b, {max_cholesky_size = 0, progress = function() events = events + 1 end})
    assert.equal("cg", info.method)
    assert.is_true(events > 0, "progress was not called")
    assert.is_true((A * x - b):norm() < 1e-4 * b:norm())
    assert.is_nil(lt.settings.progress)
    events = 0
    A:solve(b, {max_cholesky_size = 0})
    assert.equal(0, events)
  end)

  it("restore progress after with_settings, as every other setting", function()
    local outer = function() end
    lt.settings.progress = outer
    lt.with_settings({progress = false, max_cg_iterations = 5}, function()
      assert.is_nil(lt.settings.progress)
      lt.settings.progress = function() end -- set inside: restored on the way out
      assert.equal(5, lt.settings.max_cg_iterations)
    end)
    assert.equal(outer, lt.settings.progress)
    assert.equal(1000, lt.settings.max_cg_iterations)
    pcall(lt.with_settings, {progress = function() end}, function() error("inside") end)
    assert.equal(outer, lt.settings.progress)
  end)

  it("check lt.settings writes the same way", function()
    assert.matches("lazytensor: settings: progress must be a function (or nil, false), got true",
      message(function() lt.settings.progress = true end), 1, true)
    assert.matches("lazytensor: settings: unknown setting 'fast_computations'",
      message(function() lt.settings.fast_computations = true end), 1, true)
    assert.matches("lazytensor: settings: max_cg_iterations must be a number, got string",
      message(function() lt.settings.max_cg_iterations = "5" end), 1, true)
    lt.settings.progress = false
    assert.is_nil(lt.settings.progress)
  end)
end)

describe("names with a zero byte", function()
  local d = lt.diag{1, 2}

  it("are refused by lt.implements, lt.call, lt.explain and lt.settings", function()
    local zero = "add\0x"
    assert.matches("lazytensor: implements: the operation must be a name, got a string with a zero byte",
      message(function() lt.implements(zero, "diag", function() return lt.NotImplemented end) end),
      1, true)
    assert.matches("lazytensor: implements: a type must be a name, got a string with a zero byte",
      message(function() lt.implements("add", "diag\0x", function() return lt.NotImplemented end) end),
      1, true)
    assert.matches("lazytensor: implements: the operation must be a name, got an empty string",
      message(function() lt.implements("", "diag", function() end) end), 1, true)
    assert.matches("lazytensor: call: the operation must be a name, got a string with a zero byte",
      message(function() return lt.call(zero, d, d) end), 1, true)
    assert.matches("lazytensor: explain: the operation must be a name",
      message(function() return lt.explain(zero, d, d) end), 1, true)
    assert.matches("unknown setting", message(function() return lt.settings["cg_tolerance\0x"] end),
      1, true)
    assert.matches("unknown setting",
      message(function() return lt.solve(lt.eye(2), lt.ones(2), {["cg_tolerance\0x"] = 1}) end),
      1, true)
    -- nothing was registered under "add"
    assert.equal("diag", lt.type(d + d))
    assert.not_matches("Lua rule", lt.explain("add", d, d), 1, true)
  end)
end)

describe("definition tables", function()
  -- lt.kernel's spec and lt.operator's definition name their keys: a
  -- misspelt one used to be dropped (a kernel with the default variance, an
  -- operator without its flag), now it is an error naming it.
  local x = lt.tensor{0, 1, 2}
  local id = function(X) return X end

  it("reject unknown keys in a kernel spec", function()
    assert.matches("lazytensor: kernel: spec: unknown key 'lenghtscale' (expected kind, "
      .. "lengthscale, variance, period, alpha, derivative, offset, degree, num_mixtures, "
      .. "weights, means or scales)",
      message(function() return lt.kernel(x, {kind = "rbf", lengthscale = 1, lenghtscale = 2}) end),
      1, true)
    assert.matches("lazytensor: kernel: spec: a key must be a name",
      message(function() return lt.kernel(x, {kind = "rbf", lengthscale = 1, 0.5}) end), 1, true)
    assert.equal("kernel", lt.type(lt.kernel(x, {kind = "rbf", lengthscale = 1, variance = 2})))
  end)

  it("reject unknown keys and mistyped flags in an operator definition", function()
    assert.matches("lazytensor: operator: the definition: unknown key 'symetric' (expected shape, "
      .. "matmul, t_matmul, psd, symmetric",
      message(function() return lt.operator{shape = {3, 3}, matmul = id, symetric = true} end),
      1, true)
    assert.matches("lazytensor: operator: psd must be true, false or nil, got string",
      message(function() return lt.operator{shape = {3, 3}, matmul = id, psd = "yes"} end), 1, true)
    assert.matches("lazytensor: operator: name must be a string, got number",
      message(function() return lt.operator{shape = {3, 3}, matmul = id, name = 5} end), 1, true)
    local A = lt.operator{shape = {3, 3}, matmul = id, psd = true, symmetric = true, name = "I"}
    assert.is_true(A:is_psd())
    -- the gradients' keys are keys of the definition
    local B = lt.operator{shape = {3, 3}, matmul = id, params = {a = 1},
      bilinear_derivative = function() return {a = 0} end,
      with_params = function() return A end}
    assert.same({a = 1}, B:params())
  end)

  it("reject unknown keys in bilinear_derivative's table of weights", function()
    local D = lt.diag{1, 2}
    assert.matches("lazytensor: bilinear_derivative: the weights: unknown key 'D' (expected W, L, "
      .. "R or d)", message(function() return D:bilinear_derivative{D = lt.tensor{1, 1}} end),
      1, true)
    local g = D:bilinear_derivative{d = lt.tensor{3, 4}}
    assert.equal(4, g[D].diag[2])
  end)
end)

describe("with_params", function()
  local D, T = lt.diag{1, 2}, lt.toeplitz{2, 1}
  local A = D * T

  it("refuses a parameter its leaf does not have", function()
    assert.matches("lazytensor: with_params: the diag operator has no parameter 'diagg'",
      message(function() return A:with_params{[D] = {diagg = lt.tensor{5, 5}}} end), 1, true)
  end)

  it("refuses values for an operator that is not under it", function()
    local X = lt.diag{3, 3}
    assert.matches("lazytensor: with_params: a diag operator given values is not under this "
      .. "operator", message(function() return A:with_params{[X] = {diag = lt.tensor{5, 5}}} end),
      1, true)
    -- D + I folds into a new diag: D is not under it
    local F = D + lt.identity(2)
    assert.matches("is not under this operator",
      message(function() return F:with_params{[D] = {diag = lt.tensor{5, 5}}} end), 1, true)
  end)

  it("uses every value it is given", function()
    local B = A:with_params{[T] = {column = lt.tensor{1, 0}}, [D] = {diag = lt.tensor{5, 6}}}
    assert.same({{5, 0}, {0, 6}}, B:dense():totable())
  end)
end)

describe("the pure-Lua modules' options", function()
  -- data, interp and svg check their option tables (lazytensor.options) as
  -- the C module checks its own: a misspelt option used to be ignored.
  local data = require "lazytensor.data"
  local interp = require "lazytensor.interp"
  local svg = require "lazytensor.svg"

  it("reject unknown options, naming them and the known ones", function()
    assert.matches("lazytensor: read_csv: unknown option 'seperator' (expected comment, header, "
      .. "missing, sep or strings)",
      message(function() return data.read_csv("/nonexistent.csv", {seperator = ";"}) end), 1, true)
    assert.matches("lazytensor: interp.fill: unknown option 'nrow'",
      message(function() return interp.fill({{1, 2}}, {nrow = 1}) end), 1, true)
    assert.matches("lazytensor: svg.chart: unknown option 'xlable'",
      message(function() return svg.chart{xlable = "x"} end), 1, true)
    assert.matches("lazytensor: svg.heatmap: unknown option 'colourmap'",
      message(function() return svg.heatmap({{1, 2}}, {colourmap = "gray"}) end), 1, true)
  end)

  it("reject mistyped values", function()
    assert.matches("lazytensor: read_matrix: option sep must be a string, got number",
      message(function() return data.read_matrix("/nonexistent.csv", {sep = 5}) end), 1, true)
    assert.matches("lazytensor: svg.chart: option legend must be a string or boolean, got number",
      message(function() return svg.chart{legend = 1} end), 1, true)
    assert.matches("lazytensor: svg.document: options must be a table, got string",
      message(function() return svg.document("big") end), 1, true)
    local filled, n = interp.fill({{1, 0 / 0, 3}}, {ncols = 3})
    assert.same({{1, 2, 3}}, filled)
    assert.equal(1, n)
  end)
end)
