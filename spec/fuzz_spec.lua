-- Differential fuzzing: random expression trees over every operator type the
-- build has, through the registry and through a plain-Lua dense reference
-- (spec/support/fuzz.lua). `make test` runs a short pass; `make fuzz` a long
-- one (LT_FUZZ_CASES, LT_FUZZ_SEED, LT_FUZZ_MAX_SIZE, LT_FUZZ_MAX_DEPTH select
-- the number of cases, the seed, the matrix sizes and the depth). A failure
-- prints the case's seed and expression.
local lt = require "lazytensor"
local fuzz = require "support.fuzz"

local CASES = tonumber(os.getenv("LT_FUZZ_CASES") or "") or 10000
local MAX_SIZE = tonumber(os.getenv("LT_FUZZ_MAX_SIZE") or "") or 6
local MAX_DEPTH = tonumber(os.getenv("LT_FUZZ_MAX_DEPTH") or "") or 4
local SEED = tonumber(os.getenv("LT_FUZZ_SEED") or "") or 20261130
local BATCHES = 10

describe("differential fuzzing against a dense reference", function()
  local kinds = fuzz.available_leaves()

  it("finds the operator types present", function()
    assert.is_true(#kinds >= 4, "only " .. table.concat(kinds, ", "))
  end)

  local spd_checked, spd_missing, reason = 0, 0, nil
  for b = 1, BATCHES do
    local n = math.floor(CASES / BATCHES) + (b <= CASES % BATCHES and 1 or 0)
    it(("batch %d: %d cases over %s"):format(b, n, table.concat(kinds, ", ")), function()
      local report = fuzz.run{seed = SEED + b, cases = n, kinds = kinds,
                             max_size = MAX_SIZE, max_depth = MAX_DEPTH}
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

  it("checks solve and logdet on SPD expressions", function()
    assert.is_true(spd_checked > 0, ("no SPD expression was checked (%d unavailable: %s)")
      :format(spd_missing, tostring(reason)))
  end)

  it("leaves the state usable and memory bounded", function()
    collectgarbage()
    collectgarbage()
    local a = lt.tensor{{1, 2}, {3, 4}}
    assert.equal(22, (a * a):get(2, 2))
    assert.is_true(lt.memory() < 64 * 1024 * 1024)
  end)
end)
