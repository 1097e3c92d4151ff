-- gp.exact with structure = "auto" resolves the structure once per kernel
-- object (issue 25's BO loop): later changes of the hyperparameters rebuild
-- the covariance in the kind auto chose, with auto's explanation, and the
-- MLL is that of a model built afresh at the same hyperparameters.
local lt = require "lazytensor"
local gp = require "lazytensor.gp"
local ref = require "support.ref"

describe("gp.exact structure = 'auto'", function()
  local structure = gp.structure
  local original = structure.build
  local asked
  before_each(function()
    asked = {}
    structure.build = function(kernel, points, opts)
      asked[#asked + 1] = opts.structure
      return original(kernel, points, opts)
    end
  end)
  after_each(function() structure.build = original end)

  it("chooses once per kernel object, and agrees with a fresh choice", function()
    -- 40 scattered 2-d points: they pass the grid test (40² ≤ 50·40), and
    -- a Matérn kernel is not separable: auto ends at "kernel"
    local P = ref.scattered(40, 2, 13, 5)
    local y = ref.sine_targets(P)
    local function model()
      return gp.exact{x = lt.tensor(P), y = lt.tensor(y), noise = 0.1,
                      kernel = gp.kernels.matern52{lengthscale = {1, 1.2}}}
    end
    local m = model()
    local explain = m:explain()
    local v = m:get_vector()
    v[1] = v[1] + 0.3
    m:set_vector(v)
    local value = m:mll()
    assert.same({"auto", "kernel"}, asked)
    assert.equal(explain, m:explain())
    local fresh = model()
    fresh:set_vector(v)
    assert.equal(fresh:mll(), value)
    -- another kernel object: auto again
    asked = {}
    m.kernel = gp.kernels.rbf{lengthscale = {1, 1}}
    m:mll()
    assert.same({"auto"}, asked)
  end)

  it("leaves an explicit structure alone", function()
    local P = ref.scattered(30, 2, 3, 5)
    local m = gp.exact{x = lt.tensor(P), y = lt.tensor(ref.sine_targets(P)), noise = 0.1,
                       kernel = gp.kernels.rbf{lengthscale = 1}, structure = "dense"}
    m:mll()
    local v = m:get_vector()
    v[1] = v[1] - 0.2
    m:set_vector(v)
    m:mll()
    assert.same({"dense", "dense"}, asked)
  end)
end)
