-- lt.settings.progress: iterative methods report their progress through it.
local lt = require "lazytensor"

-- An n×n symmetric positive definite matrix, well conditioned.
local function spd(n)
  lt.manual_seed(7)
  local X = lt.randn(n, n)
  return lt.psd(X * X:t() + n * lt.eye(n))
end

describe("settings.progress", function()
  after_each(function() lt.settings.progress = nil end)

  it("reads back what was set, and nil clears it", function()
    local f = function() end
    lt.settings.progress = f
    assert.are.equal(f, lt.settings.progress)
    lt.settings.progress = nil
    assert.is_nil(lt.settings.progress)
    assert.has_error(function() lt.settings.progress = 42 end)
  end)

  it("is called by an iterative solve", function()
    local A, b = spd(60), lt.ones(60)
    local events = {}
    lt.settings.progress = function(ev) events[#events + 1] = ev end
    local x, info = lt.with_settings({max_cholesky_size = 10}, function()
      return A:solve(b)
    end)
    assert.is_true((A * x - b):norm() <= 1e-4 * b:norm())
    assert.equal("cg", info.method) -- above max_cholesky_size: iterative
    assert.is_true(#events > 0, "no progress events from " .. tostring(info.method))
    local ev = events[1]
    assert.are.equal("string", type(ev.method))
    assert.are.equal("number", type(ev.iteration))
    assert.are.equal("number", type(ev.value))
    assert.is_true(events[#events].iteration >= ev.iteration)
  end)

  it("raises an error of the callback once the computation returns", function()
    local A, b = spd(40), lt.ones(40)
    lt.settings.progress = function() error("stop here") end
    local ok, err = pcall(lt.with_settings, {max_cholesky_size = 10}, function()
      local _, info = A:solve(b)
      return info
    end)
    assert.is_false(ok, "the callback's error was lost (method "
                    .. tostring(ok and err.method) .. ")")
    assert.truthy(tostring(err):find("stop here", 1, true))
    -- The error is raised once: the next failure reports itself.
    lt.settings.progress = nil
    local ok2, err2 = pcall(lt.zeros, -1)
    assert.is_false(ok2)
    assert.is_nil(tostring(err2):find("stop here", 1, true))
    assert.truthy(tostring(err2):find("lazytensor:", 1, true))
  end)

  it("is called by the GP optimiser", function()
    local gp = require "lazytensor.gp"
    local x = lt.linspace(0, 1, 20)
    local y = (x * 6):sqrt()
    local model = gp.exact{x = x, y = y, kernel = gp.kernels.rbf{lengthscale = 0.3}}
    local events = {}
    lt.settings.progress = function(ev) events[#events + 1] = ev end
    local result = model:fit{max_iter = 5}
    assert.is_true(result.iterations >= 1)
    assert.is_true(#events >= result.iterations, "the optimiser's iterations reach progress")
    local seen = false
    for _, ev in ipairs(events) do
      if type(ev.method) == "string" and ev.method:find("^gp%.") then
        seen = true
        assert.are.equal("number", type(ev.iteration))
        assert.are.equal("number", type(ev.value))
      end
    end
    assert.is_true(seen, "no event from gp.fit")
  end)
end)
