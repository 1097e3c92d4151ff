--- bo.thompson: Thompson sampling from joint posterior draws.
--
-- bo.thompson(model, bounds_or_candidates [, opts]) → x, values
--   bounds_or_candidates: bounds (a {2, d} tensor or {{lo...}, {hi...}}:
--   opts.n_candidates points are drawn uniformly inside them), or
--   candidates (an {n, d} tensor or array with n ~= 2 rows; with
--   opts.candidates = true any n, 2 included).
--   opts: samples (1), n_candidates (1000), seed (drawn from lt's
--   generator when absent), maximize (false), candidates.
--   x: {samples, d}, the candidate where each joint draw of f over the
--   candidates is lowest (highest with maximize); values: {samples}, the
--   draws' values there.
-- The draws are μ + L·z with L a Cholesky factor of the joint posterior
-- covariance over the candidates (lt's, with jitter where it is singular
-- to rounding) and z from the seed's own stream.
local lt = require "lazytensor"
local acquisition = require "lazytensor.bo.acquisition"
local optimize = require "lazytensor.bo.optimize"

local thompson = {}

local h = acquisition.helpers
local fail = h.fail

local function count_option(what, opts, name, default)
  local v = opts[name]
  if v == nil then return default end
  if type(v) ~= "number" or v ~= math.floor(v) or v < 1 then
    fail("%s: opts.%s must be a positive integer, got %s", what, name, h.show(v))
  end
  return v
end

local function rows_of(v)
  if lt.is_tensor(v) then return v:dim() >= 1 and v:size(1) or 0 end
  return type(v) == "table" and #v or 0
end

-- The candidates as a {n, d} tensor: drawn inside bounds, or given.
local function candidates_of(what, where, opts, d, stream)
  if rows_of(where) == 2 and not opts.candidates then
    local lo, hi = optimize.parse_bounds(what, where)
    if d and #lo ~= d then
      fail("%s: bounds have %d coordinates, the model's inputs %d", what, #lo, d)
    end
    local n = count_option(what, opts, "n_candidates", 1000)
    return lt.tensor(optimize.uniform_points(stream, n, lo, hi))
  end
  return h.candidates(what, where, d)
end

-- Each row's arg min (arg max with highest) of a {S, n} table of rows.
local function arg_extremes(rows, highest)
  local idx = {}
  for s, row in ipairs(rows) do
    local best = 1
    for j = 2, #row do
      if (highest and row[j] > row[best]) or (not highest and row[j] < row[best]) then best = j end
    end
    idx[s] = best
  end
  return idx
end

--- Thompson samples: see the header.
function thompson.thompson(model, where, opts)
  local what = "thompson"
  local kind = type(model)
  if (kind ~= "table" and kind ~= "userdata") or type(model.posterior) ~= "function" then
    fail("%s: the model must have a posterior(X) method, got %s", what, type(model))
  end
  opts = h.check_options(what, opts, {"samples", "n_candidates", "seed", "maximize", "candidates"})
  if opts.candidates ~= nil and type(opts.candidates) ~= "boolean" then
    fail("%s: opts.candidates must be a boolean, got %s", what, type(opts.candidates))
  end
  local samples = count_option(what, opts, "samples", 1)
  local stream = h.stream(h.seed(what, opts.seed))
  local C = candidates_of(what, where, opts, h.input_dim(model), stream)
  local post = model:posterior(C)
  local L = post:covariance():dense():cholesky():dense()
  local n = C:size(1)
  local draws = (stream:normals(samples, n) * L:t() + post:mean()):totable()
  local idx = arg_extremes(draws, opts.maximize)
  local points, rows, values = C:totable(), {}, {}
  for s, j in ipairs(idx) do rows[s], values[s] = points[j], draws[s][j] end
  return lt.tensor(rows), lt.tensor(values)
end

return thompson
