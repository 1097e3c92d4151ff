-- spec/mpi/support.lua — what the distributed specs share (make test-mpi).
--
-- tools/test-mpi.sh runs spec/mpi/*_mpispec.lua under mpirun three times:
-- with one rank and LT_MPI_RECORD=file, where support.bits writes each named
-- result's exact bits (hexadecimal floats), then with two and three ranks
-- and LT_MPI_COMPARE=file, where every rank checks that its result has
-- exactly the bits of the one-rank run. Without either variable (a spec run
-- by hand) bits() checks nothing more than the spec's own assertions.
local lt = require "lazytensor"
local mpi = require "lazytensor.mpi"

local support = {mpi = mpi, lt = lt}

local record_path = os.getenv("LT_MPI_RECORD")
local compare_path = os.getenv("LT_MPI_COMPARE")
local recorded -- name -> bits, read from compare_path once

local function as_numbers(v)
  if type(v) == "number" then return {v} end
  if lt.is_tensor(v) then v = v:contiguous():reshape(v:numel()):totable() end
  local out = {}
  for _, x in ipairs(v) do
    if lt.is_tensor(x) then
      for _, y in ipairs(as_numbers(x)) do out[#out + 1] = y end
    else
      out[#out + 1] = x
    end
  end
  return out
end

-- The bits of every number (%a is exact for doubles).
local function bits_of(v)
  local parts = {}
  for i, x in ipairs(as_numbers(v)) do parts[i] = string.format("%a", x) end
  return table.concat(parts, " ")
end

local function load_recorded()
  recorded = {}
  local f = assert(io.open(compare_path, "r"))
  for line in f:lines() do
    local name, bits = line:match("^(.-)\t(.*)$")
    recorded[name] = bits
  end
  f:close()
end

--- Records (one rank) or checks (several ranks) the exact bits of a result:
-- a number, a tensor or an array of them.
function support.bits(name, value)
  local bits = bits_of(value)
  if record_path then
    assert(mpi.size() == 1, "LT_MPI_RECORD is for the one-rank run")
    local f = assert(io.open(record_path, "a"))
    f:write(name, "\t", bits, "\n")
    f:close()
  elseif compare_path then
    if not recorded then load_recorded() end
    local want = recorded[name]
    if want == nil then error("no one-rank result recorded for " .. name, 2) end
    if want ~= bits then
      -- the first number that differs, not two pages of them
      local i, a, b = 0, nil, nil
      local got_iter = bits:gmatch("%S+")
      for w in want:gmatch("%S+") do
        i = i + 1
        local g = got_iter()
        if g ~= w then a, b = w, g break end
      end
      error(string.format("%s: rank %d of %d differs from the one-rank run at number %d: %s, "
                          .. "one rank: %s", name, mpi.rank(), mpi.size(), i, tostring(b),
                          tostring(a)), 2)
    end
  end
end

--- Largest |a − b| over the largest |b|.
function support.relative_error(a, b)
  return (a - b):abs():max() / b:abs():max()
end

--- The same random points on every rank (the context's generator starts
-- from one seed everywhere; the specs reseed to be independent of order).
function support.points(seed, n, d)
  lt.manual_seed(seed)
  return lt.randn(n, d)
end

--- The error message of a call that must fail (nil if it did not).
function support.error_of(f, ...)
  local ok, err = pcall(f, ...)
  if ok then return nil end
  return tostring(err)
end

return support
