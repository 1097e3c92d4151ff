-- The demos run end to end and say what the issue asks of them: the CO2
-- forecast continues the trend, the volcano GP beats bilinear interpolation.
-- The interpreter the suite runs under (tools/run-tests.sh exports LUA).
local function run(script)
  local lua = os.getenv("LUA") or "lua5.4"
  local env = "LUA_CPATH='./?.so;;' LUA_PATH='./lua/?.lua;./lua/?/init.lua;;'"
  local cmd = string.format("%s %s %s 2>&1", env, lua, script)
  local p = assert(io.popen(cmd))
  local out = p:read("*a")
  local ok = p:close()
  return ok, out
end

describe("examples", function()
  it("volcano: the Kronecker GP beats bilinear interpolation on held-out cells", function()
    local ok, out = run("examples/volcano.lua")
    assert.is_true(ok, out)
    local gp_rmse, bi_rmse =
      out:match("held%-out RMSE: GP ([%d.]+) m, bilinear interpolation ([%d.]+) m")
    assert.is_truthy(gp_rmse, out)
    assert.is_true(tonumber(gp_rmse) < tonumber(bi_rmse))
    assert.matches("structure: kron_masked", out, 1, true)
  end)

  it("co2: picks Toeplitz and forecasts a rising, seasonal series", function()
    local ok, out = run("examples/co2.lua")
    assert.is_true(ok, out)
    assert.matches("structure: toeplitz", out, 1, true)
    local f1998 = tonumber(out:match("forecast 1998%.0: ([%d.]+) ppm"))
    local f2007 = tonumber(out:match("forecast 2007%.0: ([%d.]+) ppm"))
    -- Last observation (Dec 1997) is 364.5 ppm; the trend is ~1.5 ppm a year.
    assert.is_true(f1998 > 360 and f1998 < 370)
    assert.is_true(f2007 > f1998 + 5)
  end)

  it("learn_covariance: L-BFGS on lt.grad's gradients converges through folded operators", function()
    local ok, out = run("examples/learn_covariance.lua")
    assert.is_true(ok, out)
    local before = tonumber(out:match("initial log%-likelihood (%-?[%d.]+)"))
    local after = tonumber(out:match("\nlog%-likelihood (%-?[%d.]+)"))
    assert.is_truthy(before and after, out)
    assert.is_true(after > before + 1000)
    assert.matches("%(ftol%)", out) -- converged, not stopped
    local lengthscale = tonumber(out:match("kernel: lengthscale ([%d.]+) m"))
    assert.is_true(lengthscale > 10 and lengthscale < 200, out) -- between the grid step and the hill
    assert.matches("gradient check at the optimum: passed", out, 1, true)
  end)

  it("deep_kernel: a network's features under an RBF kernel, trained end to end by lt.grad", function()
    local ok, out = run("examples/deep_kernel.lua")
    assert.is_true(ok, out)
    local dk = tonumber(out:match("deep kernel%s+held%-out RMSE ([%d.]+)"))
    local ard = tonumber(out:match("ARD GP%s+held%-out RMSE ([%d.]+)"))
    assert.is_truthy(dk and ard, out)
    -- the same data's spread is 77: both models predict, the deep kernel as well as ARD
    assert.is_true(dk < 65 and ard < 65, out)
    assert.matches("gradient check at the optimum: passed", out, 1, true)
    assert.matches("wrote out/deep_kernel.svg", out, 1, true)
  end)

  it("diabetes_ard: ARD fits the training patients better and finds irrelevant inputs", function()
    local ok, out = run("examples/diabetes_ard.lua")
    assert.is_true(ok, out)
    local iso = tonumber(out:match("isotropic%s+LML (%-?[%d.]+)"))
    local ard = tonumber(out:match("ARD%s+LML (%-?[%d.]+)"))
    assert.is_truthy(iso and ard, out)
    assert.is_true(ard > iso + 1, out) -- 10 lengthscales against 1 on the same data
    -- body mass index and s5 (a serum measurement) are the strongest predictors
    -- in this data set's literature; ARD ranks them among its three shortest
    local first3 = out:match("most relevant input first:\n(.-\n.-\n.-\n)")
    assert.is_truthy(first3, out)
    assert.matches("bmi", first3, 1, true)
    assert.matches("s5", first3, 1, true)
    assert.matches("(irrelevant)", out, 1, true)
    local rmse = tonumber(out:match("ARD%s+LML %-?[%d.]+%s+held%-out RMSE ([%d.]+)"))
    assert.is_true(rmse > 40 and rmse < 70, out) -- the targets' sd is about 77
    assert.matches("wrote out/diabetes_ard.svg", out, 1, true)
  end)
  -- about 20 s of CPU: slow
  require("support.slow")(it)("breast_cancer: both GP classifiers are accurate and calibrated",
                              function()
    local ok, out = run("examples/breast_cancer.lua")
    assert.is_true(ok, out)
    for _, model in ipairs{"laplace", "variational"} do
      local acc, nlpd = out:match(model .. " held%-out: accuracy ([%d.]+), NLPD ([%d.]+)")
      assert.is_truthy(acc, out)
      -- 114 held-out rows; both measured 0.9825 (2 errors): the floors allow 5
      assert.is_true(tonumber(acc) >= 0.95, out)
      assert.is_true(tonumber(nlpd) < 0.15, out)
    end
    assert.matches("wrote out/breast_cancer.svg", out, 1, true)
  end)
end)
