--- Standard test functions for Bayesian optimisation (minimisation), with
-- their bounds, known minimum and a minimiser — the definitions of
-- Surjanovic & Bingham's Virtual Library of Simulation Experiments and of
-- BoTorch's test_functions.
--
--   local problems = require "lazytensor.bo.problems"
--   local p = problems.branin
--   p(x)                -- f at x: a Lua array or a 1-d tensor of p.dim numbers
--   p.bounds            -- {{lo_1, ...}, {hi_1, ...}}
--   p.optimum           -- the known minimum value
--   p.minimizers        -- the known minimisers (arrays), p.minimizers[1] one of them
--   problems.ackley(5)  -- the dimension-generic ones take d
local problems = {}

local cos, sin, exp, sqrt, pi = math.cos, math.sin, math.exp, math.sqrt, math.pi

local Problem = {}
Problem.__index = Problem

local function fail(fmt, ...)
  error("lazytensor: bo: problems: " .. string.format(fmt, ...), 0)
end

-- x as a Lua array of dim numbers (a 1-d tensor's entries).
local function coordinates(self, x)
  if type(x) == "userdata" and x.totable then x = x:totable() end
  if type(x) ~= "table" or #x ~= self.dim then
    fail("%s takes %d coordinates, got %s", self.name, self.dim,
         type(x) == "table" and tostring(#x) or type(x))
  end
  for i = 1, self.dim do
    if type(x[i]) ~= "number" then fail("%s: x[%d] is not a number", self.name, i) end
  end
  return x
end

Problem.__call = function(self, x)
  return self.f(coordinates(self, x))
end

local function new(name, dim, lo, hi, optimum, minimizers, f)
  local l, h = {}, {}
  for i = 1, dim do
    l[i] = type(lo) == "table" and lo[i] or lo
    h[i] = type(hi) == "table" and hi[i] or hi
  end
  return setmetatable({name = name, dim = dim, bounds = {l, h}, optimum = optimum,
                       minimizers = minimizers, f = f}, Problem)
end

local function constant_point(d, v)
  local x = {}
  for i = 1, d do x[i] = v end
  return x
end

local function check_dim(name, d, lo)
  if type(d) ~= "number" or d ~= math.floor(d) or d < lo then
    fail("%s: d must be an integer of at least %d, got %s", name, lo, tostring(d))
  end
end

--- Branin on [−5, 10] × [0, 15]; minimum 0.397887357729739 at (−π, 12.275),
-- (π, 2.275) and (9.42478, 2.475).
problems.branin = new("branin", 2, {-5, 0}, {10, 15}, 0.39788735772973816,
                      {{-pi, 12.275}, {pi, 2.275}, {3 * pi, 2.475}}, function(x)
  local b, c, t = 5.1 / (4 * pi ^ 2), 5 / pi, 1 / (8 * pi)
  return (x[2] - b * x[1] ^ 2 + c * x[1] - 6) ^ 2 + 10 * (1 - t) * cos(x[1]) + 10
end)

-- Hartmann's constants (3- and 6-dimensional).
local H_ALPHA = {1.0, 1.2, 3.0, 3.2}
local H6_A = {{10, 3, 17, 3.5, 1.7, 8}, {0.05, 10, 17, 0.1, 8, 14},
              {3, 3.5, 1.7, 10, 17, 8}, {17, 8, 0.05, 10, 0.1, 14}}
local H6_P = {{1312, 1696, 5569, 124, 8283, 5886}, {2329, 4135, 8307, 3736, 1004, 9991},
              {2348, 1451, 3522, 2883, 3047, 6650}, {4047, 8828, 8732, 5743, 1091, 381}}
local H3_A = {{3, 10, 30}, {0.1, 10, 35}, {3, 10, 30}, {0.1, 10, 35}}
local H3_P = {{3689, 1170, 2673}, {4699, 4387, 7470}, {1091, 8732, 5547}, {381, 5743, 8828}}

local function hartmann(A, P)
  return function(x)
    local s = 0
    for i = 1, 4 do
      local inner = 0
      for j = 1, #x do inner = inner + A[i][j] * (x[j] - 1e-4 * P[i][j]) ^ 2 end
      s = s + H_ALPHA[i] * exp(-inner)
    end
    return -s
  end
end

--- Hartmann-6 on [0, 1]⁶; minimum −3.32236801141551 at
-- (0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573).
problems.hartmann6 = new("hartmann6", 6, 0, 1, -3.3223680114155147,
  {{0.20168952, 0.15001069, 0.47687398, 0.27533243, 0.31165162, 0.65730054}},
  hartmann(H6_A, H6_P))

--- Hartmann-3 on [0, 1]³; minimum −3.86277978733 (the often-quoted
-- −3.86278 to its digits; a local search from the published minimiser
-- (0.114614, 0.555649, 0.852547) lands here).
problems.hartmann3 = new("hartmann3", 3, 0, 1, -3.86277978733264,
  {{0.11458903890053, 0.55564889932243, 0.85254698042359}}, hartmann(H3_A, H3_P))

--- Ackley in d dimensions on [−32.768, 32.768]^d (a = 20, b = 0.2, c = 2π);
-- minimum 0 at the origin.
function problems.ackley(d)
  check_dim("ackley", d, 1)
  return new("ackley" .. d, d, -32.768, 32.768, 0, {constant_point(d, 0)}, function(x)
    local sq, cs = 0, 0
    for i = 1, d do
      sq = sq + x[i] * x[i]
      cs = cs + cos(2 * pi * x[i])
    end
    return -20 * exp(-0.2 * sqrt(sq / d)) - exp(cs / d) + 20 + exp(1)
  end)
end

--- Levy in d dimensions on [−10, 10]^d; minimum 0 at (1, ..., 1).
function problems.levy(d)
  check_dim("levy", d, 1)
  return new("levy" .. d, d, -10, 10, 0, {constant_point(d, 1)}, function(x)
    local w = {}
    for i = 1, d do w[i] = 1 + (x[i] - 1) / 4 end
    local s = sin(pi * w[1]) ^ 2
    for i = 1, d - 1 do
      s = s + (w[i] - 1) ^ 2 * (1 + 10 * sin(pi * w[i] + 1) ^ 2)
    end
    return s + (w[d] - 1) ^ 2 * (1 + sin(2 * pi * w[d]) ^ 2)
  end)
end

--- Rosenbrock in d ≥ 2 dimensions on [−5, 10]^d; minimum 0 at (1, ..., 1).
function problems.rosenbrock(d)
  check_dim("rosenbrock", d, 2)
  return new("rosenbrock" .. d, d, -5, 10, 0, {constant_point(d, 1)}, function(x)
    local s = 0
    for i = 1, d - 1 do s = s + 100 * (x[i + 1] - x[i] ^ 2) ^ 2 + (x[i] - 1) ^ 2 end
    return s
  end)
end

--- A problem by name: "branin", "hartmann3", "hartmann6", or "ackley<d>",
-- "levy<d>", "rosenbrock<d>" (e.g. "levy4").
function problems.get(name)
  if type(name) ~= "string" then fail("get: name must be a string, got %s", type(name)) end
  local p = problems[name]
  if getmetatable(p) == Problem then return p end
  local kind, d = name:match("^(%a+)(%d+)$")
  if kind and (kind == "ackley" or kind == "levy" or kind == "rosenbrock") then
    return problems[kind](tonumber(d))
  end
  fail("get: unknown problem '%s' (branin, hartmann3, hartmann6, ackley<d>, levy<d>, "
       .. "rosenbrock<d>)", name)
end

return problems
