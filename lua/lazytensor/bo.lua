--- lazytensor.bo: Bayesian optimisation on lazytensor.gp models.
--
--   local bo = require "lazytensor.bo"
--   local acq = bo.log_expected_improvement(model, best)   -- minimising
--   local x, value = bo.optimize(acq, {{0, 0}, {1, 1}})      -- x: {1, d}
--
-- Acquisitions (bo/acquisition.lua: analytic; bo/mc.lua: Monte-Carlo
-- batches) are functions of a {q, d} (or {d}) tensor of candidates
-- returning values to maximise, differentiable through lt.grad; minimising
-- unless given {maximize = true}. bo.optimize (bo/optimize.lua) maximises
-- one inside a box by multi-start bounded L-BFGS; bo.thompson
-- (bo/thompson.lua) draws Thompson samples. bo.minimize, the designs and
-- the test problems live in bo/loop.lua, bo/design.lua and bo/problems.lua
-- and are loaded when first used.
local acquisition = require "lazytensor.bo.acquisition"
local mc = require "lazytensor.bo.mc"
local optimize = require "lazytensor.bo.optimize"
local thompson = require "lazytensor.bo.thompson"

local bo = {}

bo.expected_improvement = acquisition.expected_improvement
bo.log_expected_improvement = acquisition.log_expected_improvement
bo.probability_of_improvement = acquisition.probability_of_improvement
bo.upper_confidence_bound = acquisition.upper_confidence_bound
bo.posterior_mean = acquisition.posterior_mean

bo.q_expected_improvement = mc.q_expected_improvement
bo.q_noisy_expected_improvement = mc.q_noisy_expected_improvement
bo.q_upper_confidence_bound = mc.q_upper_confidence_bound

bo.optimize = optimize.optimize
bo.thompson = thompson.thompson

--- The whole loop: bo/loop.lua (loaded on first use).
function bo.minimize(...) return require("lazytensor.bo.loop").minimize(...) end

--- Initial designs: bo/design.lua (loaded on first use).
function bo.sobol(...) return require("lazytensor.bo.design").sobol(...) end
function bo.latin_hypercube(...) return require("lazytensor.bo.design").latin_hypercube(...) end

--- A test problem by name ("branin", "hartmann6", "levy4", ...):
-- bo/problems.lua's get (loaded on first use).
function bo.problem(name) return require("lazytensor.bo.problems").get(name) end

-- bo.problems: the table of bo/problems.lua, loaded when first read.
return setmetatable(bo, {__index = function(t, key)
  if key == "problems" then
    local problems = require "lazytensor.bo.problems"
    rawset(t, "problems", problems)
    return problems
  end
  return nil
end})
