-- Settings: reading and writing, with_settings (restored also on error),
-- per-call option tables.
local lt = require "lazytensor"

local defaults = {
  max_cholesky_size = 800, cg_tolerance = 1e-6, max_cg_iterations = 1000,
  num_trace_samples = 10, max_lanczos_iterations = 100, cholesky_jitter = 1e-8,
  cholesky_max_tries = 3, preconditioner_size = -1, num_threads = 0, -- -1: adaptive
}

describe("settings", function()
  it("have the documented defaults", function()
    for name, value in pairs(defaults) do
      assert.equal(value, lt.settings[name], name)
    end
  end)

  it("kernel_cache_bytes: a quarter of physical memory, at most 1 GiB; 0 allowed, negative not", function()
    local v = lt.settings.kernel_cache_bytes
    assert.is_true(v > 0 and v <= 2 ^ 30 and v % 1 == 0, tostring(v))
    local f = io.open("/proc/meminfo", "r")
    if f then -- Linux: MemTotal is the physical memory ("*a": Lua 5.1 reads no "a")
      local kb = tonumber(f:read("*a"):match("MemTotal:%s*(%d+)"))
      f:close()
      assert.is_true(math.abs(v - math.min(2 ^ 30, kb * 1024 / 4)) <= 4096 + 2 ^ 20, tostring(v))
    end
    lt.with_settings({kernel_cache_bytes = 0}, function()
      assert.equal(0, lt.settings.kernel_cache_bytes)
    end)
    assert.equal(v, lt.settings.kernel_cache_bytes)
    assert.is_false(pcall(function() lt.settings.kernel_cache_bytes = -1 end))
    assert.equal(v, lt.settings.kernel_cache_bytes)
  end)

  it("read back what was written", function()
    local old = lt.settings.max_cg_iterations
    lt.settings.max_cg_iterations = 250
    assert.equal(250, lt.settings.max_cg_iterations)
    lt.settings.max_cg_iterations = old
    assert.equal(old, lt.settings.max_cg_iterations)
    lt.settings.cholesky_jitter = 1e-6
    assert.equal(1e-6, lt.settings.cholesky_jitter)
    lt.settings.cholesky_jitter = defaults.cholesky_jitter
  end)

  it("with_settings applies them for the call and restores them", function()
    local inside = lt.with_settings({max_cg_iterations = 5, cg_tolerance = 1e-3}, function()
      return {lt.settings.max_cg_iterations, lt.settings.cg_tolerance}
    end)
    assert.same({5, 1e-3}, inside)
    assert.equal(1000, lt.settings.max_cg_iterations)
    assert.equal(1e-6, lt.settings.cg_tolerance)
  end)

  it("with_settings passes results and extra arguments through", function()
    local a, b = lt.with_settings({}, function(x, y) return y, x end, 1, 2)
    assert.equal(2, a)
    assert.equal(1, b)
  end)

  it("with_settings restores them when the function raises", function()
    local ok, err = pcall(lt.with_settings, {max_cg_iterations = 7}, function()
      assert.equal(7, lt.settings.max_cg_iterations)
      error("inside")
    end)
    assert.is_false(ok)
    assert.matches("inside", err)
    assert.equal(1000, lt.settings.max_cg_iterations)
    -- and when the library raises inside
    ok = pcall(lt.with_settings, {cholesky_max_tries = 0}, function()
      return lt.tensor{{1, 2}, {2, 1}}:cholesky()
    end)
    assert.is_false(ok)
    assert.equal(3, lt.settings.cholesky_max_tries)
  end)

  it("with_settings rejects bad values and changes nothing", function()
    local ok, err = pcall(lt.with_settings, {max_cg_iterations = 9, cholesky_jitter = -1},
                          function() end)
    assert.is_false(ok)
    assert.matches("lazytensor: with_settings: settings: cholesky_jitter must be at least 0", err, 1, true)
    assert.equal(1000, lt.settings.max_cg_iterations)
  end)

  it("jitter settings decide whether a PSD singular cholesky succeeds", function()
    local A = lt.tensor{{1, 1}, {1, 1}}
    assert.is_false(pcall(lt.with_settings, {cholesky_max_tries = 0}, function() return A:cholesky() end))
    assert.is_false(pcall(lt.with_settings, {cholesky_jitter = 0}, function() return A:cholesky() end))
    assert.is_true(pcall(lt.with_settings, {cholesky_jitter = 1e-10, cholesky_max_tries = 3},
                         function() return A:cholesky() end))
  end)

  describe("per-call options", function()
    -- A rule on lt.operator solves that reads the settings in force.
    local seen, active = nil, false
    lt.implements("solve", "operator", function()
      if not active then return lt.NotImplemented end
      seen = lt.settings.max_cg_iterations
      return lt.NotImplemented
    end)
    local op = lt.operator{shape = {2, 2}, matmul = function(X) return X * 2 end,
                           symmetric = true, psd = true}

    it("apply to one solve and are restored", function()
      active = true
      local x = op:solve(lt.tensor{2, 4}, {max_cg_iterations = 17})
      active = false
      assert.equal(17, seen)
      assert.near(1, x:get(1), 1e-12)
      assert.near(2, x:get(2), 1e-12)
      assert.equal(1000, lt.settings.max_cg_iterations)
    end)

    it("are restored when the solve fails", function()
      active = true
      local ok = pcall(lt.solve, op, lt.tensor{1, 2, 3}, {max_cg_iterations = 3})
      assert.is_false(ok)
      ok = pcall(lt.solve, lt.tensor{{1, 1}, {1, 1}}, lt.tensor{1, 2}, {max_cg_iterations = 3})
      active = false
      assert.is_false(ok)
      assert.equal(1000, lt.settings.max_cg_iterations)
    end)

    it("reject bad values", function()
      local ok, err = pcall(lt.solve, lt.eye(2), lt.tensor{1, 1}, {max_cg_iterations = -3})
      assert.is_false(ok)
      assert.matches("lazytensor: solve: settings: max_cg_iterations must be at least 1", err, 1, true)
      assert.equal(1000, lt.settings.max_cg_iterations)
    end)
  end)
end)
