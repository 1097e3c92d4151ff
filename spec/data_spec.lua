-- Specs for lazytensor.data, checked against the real example files. The
-- reference numbers were read off the files by hand and with awk.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
local data = require "lazytensor.data"

local CO2 = "examples/data/co2.csv"
local VOLCANO = "examples/data/volcano.csv"

-- Write a temporary file with the given contents and return its path; the
-- files are removed when the spec file finishes.
local tmpfiles = {}
local function tmpfile(contents)
  local path = os.tmpname()
  tmpfiles[#tmpfiles + 1] = path
  local f = assert(io.open(path, "wb"))
  f:write(contents)
  f:close()
  return path
end

-- Assert that fn raises an error whose message contains every given fragment.
local function assert_error_with(fn, ...)
  local ok, err = pcall(fn)
  assert.is_false(ok)
  assert.is_string(err)
  for _, frag in ipairs({ ... }) do
    assert.is_truthy(err:find(frag, 1, true), "expected '" .. frag .. "' in: " .. err)
  end
end

describe("data.read_csv on co2.csv", function()
  local cols, header = data.read_csv(CO2)

  it("detects the quoted header", function()
    assert.same({ "time", "ppm" }, header)
  end)

  it("reads all 468 rows into both columns", function()
    assert.equal(468, #cols.time)
    assert.equal(468, #cols.ppm)
    assert.equal(cols.time, cols[1])
    assert.equal(cols.ppm, cols[2])
  end)

  it("parses first, 12th and last rows", function()
    assert.equal(1959, cols.time[1])
    assert.equal(315.42, cols.ppm[1])
    assert.equal(1959.9167, cols.time[12])
    assert.equal(315.43, cols.ppm[12])
    assert.equal(1997.9167, cols.time[468])
    assert.equal(364.34, cols.ppm[468])
  end)

  it("agrees with awk on the sum and maximum of ppm", function()
    local s, mx = 0, -math.huge
    for _, v in ipairs(cols.ppm) do
      s = s + v
      mx = math.max(mx, v)
    end
    assert.near(157741.05, s, 1e-6)
    assert.equal(366.84, mx)
  end)

  it("has monthly, increasing time stamps", function()
    for i = 2, #cols.time do
      assert.near(1 / 12, cols.time[i] - cols.time[i - 1], 1e-3)
    end
  end)
end)

describe("data.read_matrix on volcano.csv", function()
  local m, nr, nc = data.read_matrix(VOLCANO)

  it("is 87 by 61", function()
    assert.equal(87, nr)
    assert.equal(61, nc)
    assert.equal(87, #m)
    for i = 1, nr do assert.equal(61, #m[i]) end
  end)

  it("has the hand-checked corner and interior values", function()
    assert.equal(100, m[1][1])
    assert.equal(103, m[1][61])
    assert.equal(97, m[87][1])
    assert.equal(94, m[87][61])
    assert.equal(163, m[44][30])
  end)

  it("agrees with awk on the sum and the peak (195 at row 20, column 31)", function()
    local s, mx, mi, mj = 0, -math.huge, nil, nil
    for i = 1, nr do
      for j = 1, nc do
        s = s + m[i][j]
        if m[i][j] > mx then mx, mi, mj = m[i][j], i, j end
      end
    end
    assert.equal(690907, s)
    assert.equal(195, mx)
    assert.same({ 20, 31 }, { mi, mj })
  end)
end)

describe("data.read_csv dialect", function()
  it("reads a header-less file with columns named by position", function()
    local cols, header = data.read_csv(tmpfile("1,2\n3,4\n"))
    assert.same({ "1", "2" }, header)
    assert.same({ 1, 3 }, cols[1])
    assert.same({ 2, 4 }, cols["2"])
  end)

  it("forces or refuses a header when asked", function()
    local cols, header = data.read_csv(tmpfile("1,2\n3,4\n"), { header = true })
    assert.same({ "1", "2" }, header)
    assert.same({ 3 }, cols["1"])
    local p = tmpfile("a,b\n1,2\n")
    assert_error_with(function() data.read_csv(p, { header = false }) end,
      "lazytensor: read_csv: ", p .. ":1:", '"a" is not a number')
  end)

  it("handles quotes, escaped quotes, separators in quotes, CRLF, BOM and blanks", function()
    local text = '\239\187\191"x, y","say ""hi"""\r\n\r\n 1 , "2"\r\n  \r\n-3.5e2,.5\r\n'
    local cols, header = data.read_csv(tmpfile(text))
    assert.same({ "x, y", 'say "hi"' }, header)
    assert.same({ 1, -350 }, cols["x, y"])
    assert.same({ 2, 0.5 }, cols['say "hi"'])
  end)

  it("parses Inf and NaN but not hexadecimal", function()
    assert.equal(math.huge, data._parse_number("Inf"))
    assert.equal(-math.huge, data._parse_number("-inf"))
    local nan = data._parse_number("NaN")
    assert.is_true(nan ~= nan)
    assert.is_nil(data._parse_number("0x10"))
    assert.is_nil(data._parse_number("1.2.3"))
    assert.is_nil(data._parse_number("1e"))
    assert.is_nil(data._parse_number("."))
    assert.equal(1e-3, data._parse_number("1E-3"))
  end)

  it("uses another separator and skips comments", function()
    local cols = data.read_csv(tmpfile("# note\na;b\n1;2\n"), { sep = ";", comment = "#" })
    assert.same({ 1 }, cols.a)
    assert.same({ 2 }, cols.b)
  end)

  it("keeps strings only when asked", function()
    local p = tmpfile("name,v\nfoo,1\n")
    assert_error_with(function() data.read_csv(p) end, p .. ":2:", "column 1", '"foo"')
    local cols = data.read_csv(p, { strings = true })
    assert.same({ "foo" }, cols.name)
  end)

  it("treats empty and NA fields as missing only with opts.missing", function()
    local p = tmpfile("a,b\n1,\nNA,2\n")
    assert_error_with(function() data.read_csv(p) end, p .. ":2:", "missing value in column 2")
    local cols = data.read_csv(p, { missing = -1 })
    assert.same({ 1, -1 }, cols.a)
    assert.same({ -1, 2 }, cols.b)
  end)

  it("names file and line on ragged rows and bad quoting", function()
    local p = tmpfile("a,b\n1,2\n\n3,4,5\n")
    assert_error_with(function() data.read_csv(p) end,
      "lazytensor: read_csv: " .. p .. ":4: expected 2 fields, got 3")
    local q = tmpfile('a,b\n"1,2\n')
    assert_error_with(function() data.read_csv(q) end, q .. ":2:", "unterminated")
    local r = tmpfile('a,b\n"1"x,2\n')
    assert_error_with(function() data.read_csv(r) end, r .. ":2:", "after closing quote")
  end)

  it("reports missing files, empty files and duplicate names", function()
    assert_error_with(function() data.read_csv("/nonexistent/x.csv") end,
      "lazytensor: read_csv: /nonexistent/x.csv: cannot open file")
    local e = tmpfile("\n\n")
    assert_error_with(function() data.read_csv(e) end, "lazytensor: read_csv: ", "no data")
    local d = tmpfile("a,a\n1,2\n")
    assert_error_with(function() data.read_csv(d) end, "duplicate column name")
    assert_error_with(function() data.read_csv(42) end,
      "lazytensor: read_csv: path must be a string")
  end)
end)

describe("data.read_matrix errors", function()
  it("rejects ragged rows and text, naming the line", function()
    local p = tmpfile("1,2\n3\n")
    assert_error_with(function() data.read_matrix(p) end,
      "lazytensor: read_matrix: " .. p .. ":2: expected 2 fields, got 1")
    local q = tmpfile("1,2\n3,x\n")
    assert_error_with(function() data.read_matrix(q) end, q .. ":2:", '"x" is not a number')
  end)
end)

teardown(function()
  for _, path in ipairs(tmpfiles) do os.remove(path) end
end)
