-- Differential fuzzing: random expression trees over every operator type the
-- build has, through the registry and through a plain-Lua dense reference
-- (spec/support/fuzz.lua), and their linear algebra under the exact, the
-- iterative and a split (threshold) regime, every converged result checked
-- against its reconstruction or residual (spec/support/fuzz_numeric.lua).
-- `make test` runs a short pass; `make fuzz` a long one. Environment:
--   LT_FUZZ_CASES, LT_FUZZ_MAX_SIZE, LT_FUZZ_MAX_DEPTH  expression cases
--   LT_FUZZ_NUMERIC_CASES (+ the same sizes, depth ≤ 4)  linear algebra cases
--   LT_FUZZ_LARGE_CASES    operators just above max_cholesky_size = 30
--   LT_FUZZ_DEFAULT_CASES  the same just above the default 800
--   LT_FUZZ_GRAD_CASES     gradient mode: lt.grad of random trees (depth 3-4)
--                          against central differences (spec/support/fuzz_grad.lua)
--   LT_FUZZ_SEED
-- A failure prints the case's seed, its settings and the expression.
local lt = require "lazytensor"
local fuzz = require "support.fuzz"
local numeric = require "support.fuzz_numeric"
local fuzz_grad = require "support.fuzz_grad"

local function env_number(name, default) return tonumber(os.getenv(name) or "") or default end

local CASES = env_number("LT_FUZZ_CASES", 10000)
local MAX_SIZE = env_number("LT_FUZZ_MAX_SIZE", 6)
local MAX_DEPTH = env_number("LT_FUZZ_MAX_DEPTH", 4)
local NUMERIC_CASES = env_number("LT_FUZZ_NUMERIC_CASES", 600)
local LARGE_CASES = env_number("LT_FUZZ_LARGE_CASES", 20)
local DEFAULT_CASES = env_number("LT_FUZZ_DEFAULT_CASES", 2)
local GRAD_CASES = env_number("LT_FUZZ_GRAD_CASES", 300)
local SEED = env_number("LT_FUZZ_SEED", 20261130)
local BATCHES = 10

local function raise_failures(report)
  if #report.failures > 0 then
    error(("%d failure(s); first ones:\n%s"):format(report.stats.failed or #report.failures,
      table.concat(report.failures, "\n")), 0)
  end
end

describe("differential fuzzing against a dense reference", function()
  local kinds = fuzz.available_leaves()

  it("finds the operator types present", function()
    assert.is_true(#kinds >= 4, "only " .. table.concat(kinds, ", "))
  end)

  local spd_checked, spd_missing, reason = 0, 0, nil
  local reports = {}
  for b = 1, BATCHES do
    local n = math.floor(CASES / BATCHES) + (b <= CASES % BATCHES and 1 or 0)
    it(("batch %d: %d cases over %s"):format(b, n, table.concat(kinds, ", ")), function()
      local report = fuzz.run{seed = SEED + b, cases = n, kinds = kinds,
                             max_size = MAX_SIZE, max_depth = MAX_DEPTH}
      reports[#reports + 1] = report
      spd_checked = spd_checked + report.stats.spd
      spd_missing = spd_missing + report.stats.spd_unavailable
      reason = reason or report.stats.spd_unavailable_reason
      assert.equal(n, report.stats.cases)
      if #report.failures > 0 then
        error(("%d mismatch(es); first ones:\n%s"):format(#report.failures,
          table.concat(report.failures, "\n")), 0)
      end
    end)
  end

  -- The types come from the registry (lt.types()): one the fuzzer cannot
  -- make, as a leaf or through the arithmetic, is named here.
  it("makes every registered type", function()
    local missing = fuzz.unseen(reports)
    assert.equal(0, #missing, "never made: " .. table.concat(missing, ", ")
      .. " (give each a leaf maker in spec/support/fuzz.lua)")
  end)

  it("checks solve and logdet on SPD expressions", function()
    assert.is_true(spd_checked > 0, ("no SPD expression was checked (%d unavailable: %s)")
      :format(spd_missing, tostring(reason)))
  end)

  for b = 1, BATCHES do
    local n = math.floor(NUMERIC_CASES / BATCHES) + (b <= NUMERIC_CASES % BATCHES and 1 or 0)
    it(("linear algebra batch %d: %d cases (exact, iterative, threshold regimes)"):format(b, n), function()
      local report = numeric.run{seed = SEED + 100 + b, cases = n, kinds = kinds,
                                 max_size = MAX_SIZE, max_depth = math.min(MAX_DEPTH, 4)}
      assert.equal(n, report.stats.cases)
      raise_failures(report)
    end)
  end

  it(("%d operators just above max_cholesky_size = 30 (kron, blockdiag, K + σ²I, ...)"):format(LARGE_CASES),
     function()
    local report = numeric.run_large{seed = SEED + 200, cases = LARGE_CASES, threshold = 30}
    assert.equal(LARGE_CASES, report.stats.cases)
    raise_failures(report)
  end)

  it(("%d operators just above the default max_cholesky_size (800)"):format(DEFAULT_CASES), function()
    local report = numeric.run_large{seed = SEED + 300, cases = DEFAULT_CASES, threshold = 800}
    assert.equal(DEFAULT_CASES, report.stats.cases)
    raise_failures(report)
  end)

  for b = 1, BATCHES do
    local n = math.floor(GRAD_CASES / BATCHES) + (b <= GRAD_CASES % BATCHES and 1 or 0)
    it(("gradient batch %d: lt.grad of %d random trees against central differences"):format(b, n),
       function()
      local report = fuzz_grad.run{seed = SEED + 400 + b, cases = n}
      assert.equal(n, report.stats.trees)
      assert.equal(0, report.stats.missing)
      assert.equal(0, report.stats.wrong)
      raise_failures(report)
    end)
  end

  it("leaves the state usable and memory bounded", function()
    collectgarbage()
    collectgarbage()
    local a = lt.tensor{{1, 2}, {3, 4}}
    assert.equal(22, (a * a):get(2, 2))
    assert.is_true(lt.memory() < 64 * 1024 * 1024)
  end)
end)
