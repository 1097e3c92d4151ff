--- Reading small numeric data files (CSV) into plain Lua arrays.
--
-- `data.read_csv(path [, opts])` returns `columns, header`: `header` is the list
-- of column names in file order, and `columns` maps each name (and each column
-- position 1..n) to a Lua array of that column's values.
--
-- `data.read_matrix(path [, opts])` reads a header-less numeric CSV into a
-- 2-d Lua array `m[i][j]` and returns `m, nrows, ncols`.
--
-- The CSV dialect is RFC 4180 without multi-line fields: fields separated by
-- `opts.sep` (","), optionally in double quotes with `""` for a literal quote;
-- spaces around unquoted fields are ignored; CRLF line ends, a UTF-8 byte order
-- mark and blank lines are accepted. Numbers are decimal (`12`, `-1.5e3`, `.5`)
-- or `Inf`, `-Inf`, `NaN` (any case); hexadecimal is rejected.
--
-- Options for read_csv:
--   sep      field separator, one character (",")
--   header   true: the first row names the columns; false: it is data and the
--            columns are named "1", "2", ...; nil (default): detect, i.e. the
--            first row is a header when any of its fields is not a number.
--   missing  value used for empty fields and "NA"; without it they are errors.
--   strings  true: keep fields that are not numbers as strings instead of
--            raising an error.
--   comment  a prefix (e.g. "#") marking lines to skip.
-- read_matrix accepts sep, missing and comment.
--
-- Every error starts with "lazytensor: read_csv: " (or read_matrix) and names
-- the file and line, e.g. "lazytensor: read_csv: co2.csv:12: expected 2 fields, got 3".

local options = require "lazytensor.options"

local data = {}

local CSV_OPTIONS = {sep = "string", header = "boolean", missing = "any", strings = "boolean",
  comment = "string"}
local MATRIX_OPTIONS = {sep = "string", missing = "any", comment = "string"}

-- Raise a read error that says which function, file and line.
local function fail(fname, path, lineno, fmt, ...)
  local where = lineno and (path .. ":" .. lineno) or path
  error(string.format("lazytensor: %s: %s: " .. fmt, fname, where, ...), 0)
end

-- Parse one field as a decimal number, Inf or NaN; nil when it is not a number.
local function parse_number(s)
  local lower = s:lower()
  if lower == "inf" or lower == "+inf" or lower == "infinity" or lower == "+infinity" then
    return math.huge
  elseif lower == "-inf" or lower == "-infinity" then
    return -math.huge
  elseif lower == "nan" then
    return 0 / 0
  end
  -- Only plain decimal notation: tonumber alone would also accept "0x1A".
  local mantissa, exponent = s:match("^([+-]?[%d%.]+)([eE]?[+-]?%d*)$")
  if not mantissa or not mantissa:find("%d") or select(2, mantissa:gsub("%.", "")) > 1 then
    return nil
  end
  if exponent ~= "" and not exponent:match("^[eE][+-]?%d+$") then
    return nil
  end
  return tonumber(s)
end

-- Split one line into fields. Returns the list of fields and a parallel list of
-- booleans telling which were quoted, or nil and a message on a malformed line.
local function split_fields(line, sep)
  local fields, quoted = {}, {}
  local pos, len = 1, #line
  while true do
    -- Skip leading blanks (but never the separator itself, which may be a tab).
    while pos <= len do
      local c = line:sub(pos, pos)
      if c ~= sep and (c == " " or c == "\t") then pos = pos + 1 else break end
    end
    local field, was_quoted
    if line:sub(pos, pos) == '"' then
      -- Quoted field: collect up to the closing quote, turning "" into ".
      local parts, i = {}, pos + 1
      while true do
        local q = line:find('"', i, true)
        if not q then return nil, "unterminated quoted field" end
        parts[#parts + 1] = line:sub(i, q - 1)
        if line:sub(q + 1, q + 1) == '"' then
          parts[#parts + 1] = '"'
          i = q + 2
        else
          pos = q + 1
          break
        end
      end
      field, was_quoted = table.concat(parts), true
      -- Only blanks may follow the closing quote before the separator.
      local after = line:match("^[ \t]*", pos)
      pos = pos + #after
      if pos <= len and line:sub(pos, pos) ~= sep then
        return nil, "unexpected text after closing quote in field " .. (#fields + 1)
      end
    else
      local stop = line:find(sep, pos, true) or (len + 1)
      field = line:sub(pos, stop - 1):match("^(.-)[ \t]*$")
      if field:find('"', 1, true) then
        return nil, "stray quote in unquoted field " .. (#fields + 1)
      end
      was_quoted = false
      pos = stop
    end
    fields[#fields + 1], quoted[#quoted + 1] = field, was_quoted
    if pos > len then break end
    pos = pos + 1 -- step over the separator
    if pos > len then -- a trailing separator ends with an empty field
      fields[#fields + 1], quoted[#quoted + 1] = "", false
      break
    end
  end
  return fields, quoted
end

-- Read the whole file, raising a lazytensor error if it cannot be opened.
local function slurp(fname, path)
  if type(path) ~= "string" then
    error(string.format("lazytensor: %s: path must be a string, got %s", fname, type(path)), 0)
  end
  local f, err = io.open(path, "rb")
  if not f then fail(fname, path, nil, "cannot open file (%s)", err) end
  local text = f:read("*a") -- "*a": Lua 5.1 and LuaJIT need the star
  f:close()
  return text
end

-- Iterate over the non-blank, non-comment lines of a text as (lineno, line),
-- with CR line ends and a leading byte order mark removed.
local function data_lines(text, comment)
  if text:sub(1, 3) == "\239\187\191" then text = text:sub(4) end
  local pos, lineno = 1, 0
  return function()
    while pos <= #text do
      local nl = text:find("\n", pos, true) or (#text + 1)
      local line = text:sub(pos, nl - 1):gsub("\r$", "")
      pos, lineno = nl + 1, lineno + 1
      local blank = line:match("^%s*$") ~= nil
      local commented = comment and line:sub(1, #comment) == comment
      if not blank and not commented then return lineno, line end
    end
    return nil
  end
end

-- Check the options table shared by both readers and return the separator.
local function check_sep(fname, opts)
  local sep = opts.sep or ","
  if type(sep) ~= "string" or #sep ~= 1 or sep == '"' then
    error(string.format("lazytensor: %s: opts.sep must be one character other than '\"'", fname), 0)
  end
  return sep
end

-- Convert one field to a value according to the options, or raise.
local function convert(fname, path, lineno, col, field, opts)
  if field == "" or field == "NA" then
    if opts.missing ~= nil then return opts.missing end
    fail(fname, path, lineno, "missing value in column %d (pass opts.missing to accept)", col)
  end
  local x = parse_number(field)
  if x ~= nil then return x end
  if opts.strings then return field end
  fail(fname, path, lineno, "column %d: %q is not a number", col, field)
end

-- True when a parsed first row looks like a header: some field is not a number.
local function looks_like_header(fields)
  for _, f in ipairs(fields) do
    if parse_number(f) == nil then return true end
  end
  return false
end

-- Name the columns from the first row: its fields when it is a header, else
-- "1", "2", ...; returns the header list and whether the row was a header.
local function name_columns(fname, path, lineno, fields, opts)
  local is_header = opts.header
  if is_header == nil then is_header = looks_like_header(fields) end
  local header, seen = {}, {}
  for j = 1, #fields do
    local name = is_header and fields[j] or tostring(j)
    if seen[name] then fail(fname, path, lineno, "duplicate column name %q", name) end
    seen[name] = true
    header[j] = name
  end
  return header, is_header
end

--- Read a CSV file into columns. See the module comment for the options.
-- @return columns (name -> array, and position -> array), header (list of names)
function data.read_csv(path, opts)
  local fname = "read_csv"
  opts = options.check(fname, opts, CSV_OPTIONS)
  local sep = check_sep(fname, opts)
  local text = slurp(fname, path)

  local header, columns = nil, {}
  for lineno, line in data_lines(text, opts.comment) do
    local fields, err = split_fields(line, sep)
    if not fields then fail(fname, path, lineno, "%s", err) end
    local is_header = false
    if not header then
      header, is_header = name_columns(fname, path, lineno, fields, opts)
      for j, name in ipairs(header) do
        columns[j] = {}
        columns[name] = columns[j]
      end
    end
    if not is_header then
      if #fields ~= #header then
        fail(fname, path, lineno, "expected %d fields, got %d", #header, #fields)
      end
      for j = 1, #header do
        local col = columns[j]
        col[#col + 1] = convert(fname, path, lineno, j, fields[j], opts)
      end
    end
  end
  if not header then fail(fname, path, nil, "file has no data") end
  return columns, header
end

--- Read a header-less numeric CSV into a 2-d Lua array.
-- @return m (m[i][j] is row i, column j), number of rows, number of columns
function data.read_matrix(path, opts)
  local fname = "read_matrix"
  opts = options.check(fname, opts, MATRIX_OPTIONS)
  local sep = check_sep(fname, opts)
  local text = slurp(fname, path)

  local m, ncols = {}, nil
  local strict = { missing = opts.missing } -- never keep strings in a matrix
  for lineno, line in data_lines(text, opts.comment) do
    local fields, err = split_fields(line, sep)
    if not fields then fail(fname, path, lineno, "%s", err) end
    ncols = ncols or #fields
    if #fields ~= ncols then
      fail(fname, path, lineno, "expected %d fields, got %d", ncols, #fields)
    end
    local row = {}
    for j = 1, ncols do
      row[j] = convert(fname, path, lineno, j, fields[j], strict)
    end
    m[#m + 1] = row
  end
  if #m == 0 then fail(fname, path, nil, "file has no data") end
  return m, #m, ncols
end

-- Exposed for the specs and for callers that parse single lines themselves.
data._split_fields = split_fields
data._parse_number = parse_number

return data
