-- Adversarial fuzzing of the core's claims (spec/support/fuzz_adversarial.lua):
-- flags of composed operands, writes to shared dense children, NaN and
-- infinite input, deep nesting. `make test` runs a short pass (a few
-- seconds); `make fuzz` a long one. LT_ADV_CASES (cases per mode),
-- LT_ADV_SEED, LT_ADV_DEEP_CASES and LT_ADV_DEEP_STEPS select the run. A
-- failure prints its seed and the statements that rebuild the case.
local adv = require "support.fuzz_adversarial"

local CASES = tonumber(os.getenv("LT_ADV_CASES") or "") or 150
local SEED = tonumber(os.getenv("LT_ADV_SEED") or "") or 20260119
local DEEP_CASES = tonumber(os.getenv("LT_ADV_DEEP_CASES") or "") or 8
local DEEP_STEPS = tonumber(os.getenv("LT_ADV_DEEP_STEPS") or "") or 20000

local function report_failures(report)
  if #report.failures > 0 then
    error(("%d of %d cases failed; the first ones:\n%s"):format(report.stats.failed,
      report.stats.cases, table.concat(report.failures, "\n\n")), 0)
  end
end

describe("adversarial fuzzing of the core's claims", function()
  for _, mode in ipairs{"compose", "write", "nan"} do
    it(("%s: %d cases"):format(mode, CASES), function()
      local report = adv.run{seed = SEED, cases = CASES, mode = mode}
      assert.equal(CASES, report.stats.cases)
      assert.is_true(report.stats.checks >= CASES, "too few checks: " .. report.stats.checks)
      report_failures(report)
    end)
  end

  it(("deep nesting: %d chains of up to %d steps, in a child process"):format(DEEP_CASES, DEEP_STEPS),
     function()
    local res = adv.deep{seed = SEED, cases = DEEP_CASES, max_steps = DEEP_STEPS}
    if res.crashed or res.failed > 0 then
      error(("deep nesting: %s\n%s"):format(res.crashed and "the child process died" or
        (res.failed .. " failure(s)"), res.output:sub(-3000)), 0)
    end
    assert.equal(DEEP_CASES + 1, res.cases)
  end)
end)
