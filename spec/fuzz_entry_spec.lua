-- NaN and infinite input at the GP layer's and the distributions' public
-- entry points, with and without {grad = true} (spec/support/fuzz_entry.lua;
-- issue 26). LT_ENTRY_CASES and LT_ENTRY_SEED select the run; a failure
-- names its seed, the entry point and the poisoned input.
local fz = require "support.fuzz_entry"

local CASES = tonumber(os.getenv("LT_ENTRY_CASES") or "") or 600
local SEED = tonumber(os.getenv("LT_ENTRY_SEED") or "") or 20261203

describe("NaN and infinite input at the public entry points", function()
  it(("%d cases: poisoned calls raise a lazytensor: error, clean ones give finite numbers")
     :format(CASES), function()
    local report = fz.run{seed = SEED, cases = CASES}
    assert.equal(CASES, report.stats.cases)
    -- both kinds of case ran (a fuzzer that only poisons could pass by refusing all)
    assert.is_true(report.stats.clean >= CASES / 10, "too few clean cases")
    assert.is_true(report.stats.poisoned >= CASES / 2, "too few poisoned cases")
    if #report.failures > 0 then
      error(("%d of %d cases failed; the first ones:\n%s"):format(report.stats.failed, CASES,
                                                                  table.concat(report.failures, "\n")), 0)
    end
  end)
end)
