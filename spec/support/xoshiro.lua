-- xoshiro256** seeded by splitmix64 in plain Lua 5.3+ integers: an
-- independent reference for the library's generator (src/core/random.c).
local xoshiro = {}

local function splitmix(state)
  state = state + 0x9E3779B97F4A7C15
  local z = state
  z = (z ~ (z >> 30)) * 0xBF58476D1CE4E5B9
  z = (z ~ (z >> 27)) * 0x94D049BB133111EB
  return state, z ~ (z >> 31)
end

local function rotl(x, k) return (x << k) | (x >> (64 - k)) end

--- The first uniform number in [0, 1) drawn after seeding with `seed`.
function xoshiro.first_uniform(seed)
  local s, st = {}, seed
  for i = 1, 4 do st, s[i] = splitmix(st) end
  local result = rotl(s[2] * 5, 7) * 9
  return (result >> 11) * 2.0 ^ -53
end

return xoshiro
