-- Specs for lazytensor.svg: output is well-formed XML (checked by a small
-- checker here and, where installed, by xmllint), text is escaped, numbers
-- are finite, ticks are round, and the colormap matches published viridis.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path
local svg = require "lazytensor.svg"

-------------------------------------------------------------------------------
-- A minimal XML well-formedness checker for the subset we write.

local NUMERIC = { x = true, y = true, width = true, height = true, x1 = true, y1 = true,
  x2 = true, y2 = true, cx = true, cy = true, r = true, ["font-size"] = true,
  ["stroke-width"] = true, ["fill-opacity"] = true, ["stroke-opacity"] = true }

local function check_entities(s, where)
  for amp in s:gmatch("&[^;]*;?") do
    local ok = amp == "&amp;" or amp == "&lt;" or amp == "&gt;" or amp == "&quot;"
      or amp == "&apos;" or amp:match("^&#%d+;$") or amp:match("^&#x%x+;$")
    assert(ok, "bad entity " .. amp .. " in " .. where)
  end
end

local function check_number(v, what)
  local n = tonumber(v)
  assert(n and n == n and n ~= math.huge and n ~= -math.huge,
    "attribute " .. what .. " is not a finite number: " .. v)
end

local function check_attrs(tag, attrtext)
  local attrs = {}
  local rest = attrtext:gsub('%s+([%a_][%w_%-:]*)="([^"<]*)"', function(name, value)
    assert(attrs[name] == nil, "duplicate attribute " .. name .. " on " .. tag)
    check_entities(value, tag .. "@" .. name)
    attrs[name] = value
    return ""
  end)
  assert(rest:match("^%s*$"), "unparsed attribute text on " .. tag .. ": " .. rest)
  for name, value in pairs(attrs) do
    if NUMERIC[name] then check_number(value, tag .. "@" .. name) end
  end
  for _, list in ipairs({ attrs.points, attrs.viewBox }) do
    for v in list and list:gmatch("[^%s,]+") or function() end do check_number(v, tag) end
  end
  return attrs
end

-- Parse a document; returns the list of elements {tag, attrs, text} in order.
local function check_xml(doc)
  local body = doc:gsub("^<%?xml[^>]*%?>%s*", "")
  local stack, elements, pos = {}, {}, 1
  while pos <= #body do
    local lt = body:find("<", pos, true)
    local text = body:sub(pos, (lt or #body + 1) - 1)
    assert(not text:find(">", 1, true), "raw '>' in text: " .. text)
    check_entities(text, "text")
    if #stack == 0 then assert(text:match("^%s*$"), "text outside the root: " .. text) end
    if #elements > 0 and not elements[#elements].closed_text then
      elements[#elements].text = (elements[#elements].text or "") .. text
    end
    if not lt then break end
    local gt = body:find(">", lt, true)
    assert(gt, "unterminated tag")
    local tag = body:sub(lt + 1, gt - 1)
    if tag:sub(1, 1) == "/" then
      local name = tag:sub(2)
      assert(stack[#stack] == name,
        "closing " .. name .. " but open is " .. tostring(stack[#stack]))
      stack[#stack] = nil
      if #elements > 0 then elements[#elements].closed_text = true end
    else
      local self_closing = tag:sub(-1) == "/"
      if self_closing then tag = tag:sub(1, -2) end
      local name, attrtext = tag:match("^([%a_][%w_%-:]*)(.*)$")
      assert(name, "bad tag <" .. tag .. ">")
      assert(#stack > 0 or #elements == 0, "second root element " .. name)
      elements[#elements + 1] = { tag = name, attrs = check_attrs(name, attrtext),
        closed_text = self_closing }
      if not self_closing then stack[#stack + 1] = name end
    end
    pos = gt + 1
  end
  assert(#stack == 0, "unclosed tags: " .. table.concat(stack, ","))
  assert(elements[1] and elements[1].tag == "svg", "root is not svg")
  return elements
end

local function count(elements, tag)
  local n = 0
  for _, e in ipairs(elements) do if e.tag == tag then n = n + 1 end end
  return n
end

local function texts(elements)
  local t = {}
  for _, e in ipairs(elements) do if e.tag == "text" then t[#t + 1] = e.text end end
  return t
end

local function contains(list, v)
  for _, x in ipairs(list) do if x == v then return true end end
  return false
end

-- xmllint, where installed, as an independent well-formedness check.
local function xmllint_ok(s)
  local path = os.tmpname()
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
  local ok = os.execute("xmllint --noout " .. path .. " 2>/dev/null")
  os.remove(path)
  return ok
end
local has_xmllint = os.execute("command -v xmllint >/dev/null 2>&1")

local function rgb(hex)
  return tonumber(hex:sub(2, 3), 16), tonumber(hex:sub(4, 5), 16), tonumber(hex:sub(6, 7), 16)
end

local function assert_color_near(expected, actual, tol)
  local r1, g1, b1 = rgb(expected)
  local r2, g2, b2 = rgb(actual)
  assert(math.abs(r1 - r2) <= tol and math.abs(g1 - g2) <= tol and math.abs(b1 - b2) <= tol,
    "expected " .. expected .. " got " .. actual)
end

local function err_of(fn)
  local ok, e = pcall(fn)
  assert.is_false(ok)
  return e
end

-------------------------------------------------------------------------------

describe("svg documents", function()
  it("write well-formed primitives with the given attributes", function()
    local doc = svg.document{ width = 200, height = 100, background = "white" }
    doc:line(0, 0, 10.5, 20, { stroke = "black", stroke_width = 2 })
    doc:polyline({ { 0, 0 }, { 1, 2 }, { 3, 4 } }, { stroke = "red" })
    doc:polygon({ { 0, 0 }, { 1, 0 }, { 0, 1 } }, { fill = "blue" })
    doc:rect(1, 2, 3, 4)
    doc:circle(5, 6, 7)
    doc:text(8, 9, "hello", { font_size = 12 })
    local s = doc:tostring()
    assert.matches('^<%?xml version="1.0" encoding="UTF%-8"%?>\n<svg ', s)
    local els = check_xml(s)
    assert.equal("200", els[1].attrs.width)
    assert.equal("0 0 200 100", els[1].attrs.viewBox)
    assert.equal("http://www.w3.org/2000/svg", els[1].attrs.xmlns)
    assert.equal(2, count(els, "rect")) -- background and ours
    local line = els[3]
    assert.equal("line", line.tag)
    assert.same({ x1 = "0", y1 = "0", x2 = "10.5", y2 = "20", stroke = "black",
      ["stroke-width"] = "2" }, line.attrs)
    assert.equal("0,0 1,2 3,4", els[4].attrs.points)
    assert.equal("none", els[4].attrs.fill) -- polylines are not filled by default
    assert.equal("hello", texts(els)[1])
    if has_xmllint then assert.truthy(xmllint_ok(s)) end
  end)

  it("escapes text and attribute values and drops control characters", function()
    local doc = svg.document{ width = 10, height = 10 }
    doc:text(0, 0, "a < b & c > \"d\" 'e'\1")
    doc:rect(0, 0, 1, 1, { class = 'x" onload="alert(1)' })
    local s = doc:tostring()
    assert.truthy(s:find("a &lt; b &amp; c &gt; &quot;d&quot; &apos;e&apos;</text>", 1, true))
    assert.truthy(s:find('class="x&quot; onload=&quot;alert(1)"', 1, true))
    assert.falsy(s:find("\1", 1, true))
    local els = check_xml(s)
    assert.equal(1, count(els, "text"))
    if has_xmllint then assert.truthy(xmllint_ok(s)) end
    assert.equal("&amp;&lt;&gt;&quot;&apos;", svg.escape("&<>\"'"))
  end)

  it("nests groups and writes transforms", function()
    local doc = svg.document{ width = 10, height = 10, viewBox = { -1, -1, 2, 2 } }
    local g = doc:group{ transform = { translate = { 10, 20 }, rotate = 30, scale = { 2, 0.5 } },
      fill = "red" }
    local inner = g:group{ transform = "skewX(10)" }
    inner:circle(0, 0, 1)
    g:rect(0, 0, 1, 1)
    local s = doc:tostring()
    local els = check_xml(s)
    assert.equal("-1 -1 2 2", els[1].attrs.viewBox)
    assert.equal("translate(10,20) rotate(30) scale(2,0.5)", els[2].attrs.transform)
    assert.equal("red", els[2].attrs.fill)
    assert.equal("skewX(10)", els[3].attrs.transform)
    assert.equal(2, count(els, "g"))
    assert.matches("<g [^\n]*>\n    <g [^\n]*>\n      <circle", s)
  end)

  it("writes the same text to a file as tostring", function()
    local doc = svg.document{ width = 10, height = 10 }
    doc:circle(1, 1, 1)
    local path = os.tmpname()
    assert.equal(path, doc:write(path))
    local f = assert(io.open(path, "rb"))
    local written = f:read("*a")
    f:close()
    os.remove(path)
    assert.equal(doc:tostring(), written)
    assert.matches("^lazytensor: svg: write: cannot open",
      err_of(function() doc:write("/nonexistent/dir/x.svg") end))
  end)

  it("refuses non-finite numbers and bad sizes with lazytensor errors", function()
    local doc = svg.document{ width = 10, height = 10 }
    assert.matches("^lazytensor: svg: attribute x must be a finite number",
      err_of(function() doc:rect(0 / 0, 0, 1, 1) end))
    assert.matches("^lazytensor: svg: attribute r must be a finite number",
      err_of(function() doc:circle(0, 0, math.huge) end))
    assert.matches("^lazytensor: svg: polyline point y must be a finite number",
      err_of(function() doc:polyline({ { 0, 0 }, { 1, 0 / 0 } }) end))
    assert.matches("^lazytensor: svg: rect width and height must be non%-negative",
      err_of(function() doc:rect(0, 0, -1, 1) end))
    assert.matches("^lazytensor: svg.document: width and height",
      err_of(function() svg.document{ width = 0, height = 10 } end))
    assert.matches("^lazytensor: svg: bad attribute name",
      err_of(function() doc:rect(0, 0, 1, 1, { ["a b"] = 1 }) end))
  end)
end)

describe("svg.nice_ticks", function()
  it("gives 0, 20, ..., 100 for [0, 97]", function()
    local ticks, step = svg.nice_ticks(0, 97, 6)
    assert.equal(20, step)
    assert.same({ 0, 20, 40, 60, 80, 100 }, ticks)
  end)

  it("covers the co2 range with steps of 10", function()
    local ticks, step = svg.nice_ticks(315.42, 366.84)
    assert.equal(10, step)
    assert.same({ 310, 320, 330, 340, 350, 360, 370 }, ticks)
  end)

  it("handles fractions, negative ranges, reversed and degenerate limits", function()
    local ticks, step = svg.nice_ticks(-0.3, 0.7)
    assert.near(0.2, step, 1e-15)
    assert.equal(7, #ticks)
    assert.near(-0.4, ticks[1], 1e-12)
    assert.near(0.8, ticks[7], 1e-12)
    assert.equal(0, ticks[3]) -- exactly zero, never -0 or 1e-17
    local r = svg.nice_ticks(97, 0, 6)
    assert.same({ 0, 20, 40, 60, 80, 100 }, r)
    local d = svg.nice_ticks(5, 5)
    assert.is_true(d[1] < 5 and d[#d] > 5)
    local z = svg.nice_ticks(0, 0)
    assert.is_true(z[1] <= -1 and z[#z] >= 1)
    assert.matches("^lazytensor: svg.nice_ticks:", err_of(function() svg.nice_ticks(0, 0 / 0) end))
  end)

  it("always covers the range with a 1-2-5 step and a sensible count", function()
    local rng = 12345
    local function rand() -- a small LCG so the spec is reproducible anywhere
      rng = (rng * 1103515245 + 12345) % 2147483648
      return rng / 2147483648
    end
    for _ = 1, 500 do
      local scale = 10 ^ math.floor(rand() * 12 - 6)
      local lo = (rand() - 0.5) * 100 * scale
      local hi = lo + rand() * 100 * scale + scale * 1e-3
      local ticks, step = svg.nice_ticks(lo, hi, 6)
      assert.is_true(ticks[1] <= lo and ticks[#ticks] >= hi)
      assert.is_true(#ticks >= 4 and #ticks <= 10, #ticks .. " ticks")
      local log10 = math.log10 or function(x) return math.log(x, 10) end -- 5.1 ignores the base
      local mant = step / 10 ^ math.floor(log10(step) + 1e-9)
      assert.is_true(math.abs(mant - 1) < 1e-9 or math.abs(mant - 2) < 1e-9
        or math.abs(mant - 5) < 1e-9, "step " .. step)
      for _, t in ipairs(ticks) do
        local k = t / step
        assert.near(math.floor(k + 0.5), k, 1e-6)
      end
    end
  end)

  it("formats ticks with the decimals the step needs", function()
    assert.equal("0.3", svg.format_tick(0.1 * 3, 0.1))
    assert.equal("0.0", svg.format_tick(-1e-17, 0.2)) -- never "-0.0"
    assert.equal("1500", svg.format_tick(1500, 500))
    assert.equal("0.25", svg.format_tick(0.25, 0.05))
    assert.equal("-40", svg.format_tick(-40, 20))
  end)
end)

describe("svg colormaps", function()
  it("have the published viridis endpoints and clamp outside [0, 1]", function()
    assert.equal("#440154", svg.viridis(0))
    assert.equal("#fde725", svg.viridis(1))
    assert.equal("#440154", svg.viridis(-3))
    assert.equal("#fde725", svg.viridis(7))
    assert.matches("^lazytensor: svg.viridis:", err_of(function() svg.viridis(0 / 0) end))
  end)

  it("match the published quarter points of viridis within 2 levels", function()
    -- matplotlib's viridis at 0.25, 0.5 and 0.75 (its 5-colour sampling).
    assert_color_near("#3b528b", svg.viridis(0.25), 2)
    assert_color_near("#21918c", svg.viridis(0.5), 2)
    assert_color_near("#5ec962", svg.viridis(0.75), 2)
  end)

  it("increase in luminance, as a perceptual sequential map must", function()
    local function luminance(hex)
      local r, g, b = rgb(hex)
      return 0.2126 * r + 0.7152 * g + 0.0722 * b
    end
    local prev = -1
    for k = 0, 100 do
      local l = luminance(svg.viridis(k / 100))
      assert.is_true(l > prev, "at " .. k)
      prev = l
    end
  end)

  it("offers gray and rejects unknown names", function()
    local gray = svg.colormap("gray")
    assert.equal("#000000", gray(0))
    assert.equal("#808080", gray(0.5))
    assert.equal("#ffffff", gray(1))
    assert.equal(svg.viridis, svg.colormap())
    assert.matches("^lazytensor: svg.colormap: unknown colormap",
      err_of(function() svg.colormap("jet") end))
  end)
end)

describe("svg.chart", function()
  local function co2_like()
    local xs, ys, lo, hi = {}, {}, {}, {}
    for i = 1, 120 do
      xs[i] = 1959 + (i - 1) / 12
      ys[i] = 315 + 0.1 * i + 3 * math.sin(i / 12 * 2 * math.pi)
      lo[i], hi[i] = ys[i] - 1, ys[i] + 1
    end
    return xs, ys, lo, hi
  end

  it("draws band, line and points inside a frame with round tick labels", function()
    local xs, ys, lo, hi = co2_like()
    local chart = svg.chart{ width = 600, height = 300, title = "CO2 <ppm>", xlabel = "year",
      ylabel = "ppm" }
    chart:band(xs, lo, hi, { label = "95% interval" })
    chart:line(xs, ys, { label = "mean & trend" })
    chart:scatter({ 1960, 1965 }, { 320, 322 }, { label = "data", r = 3 })
    local s = chart:tostring()
    local els = check_xml(s)
    if has_xmllint then assert.truthy(xmllint_ok(s)) end
    assert.equal(1, count(els, "polygon"))
    assert.equal(1, count(els, "polyline"))
    assert.equal(2 + 1, count(els, "circle")) -- two points and a legend marker
    assert.equal(1, count(els, "clipPath"))
    assert.truthy(s:find('clip-path="url(#clip1)"', 1, true))
    local t = texts(els)
    for _, label in ipairs({ "CO2 &lt;ppm&gt;", "year", "ppm", "95% interval",
      "mean &amp; trend", "data", "1960", "1964", "1968", "310", "315", "335" }) do
      assert.is_true(contains(t, label), "missing text " .. label)
    end
    -- every line point lies within the plot frame (the first rect after the
    -- background with fill none)
    local frame
    for _, e in ipairs(els) do
      if e.tag == "rect" and e.attrs.fill == "none" then frame = e.attrs break end
    end
    local fx, fy = tonumber(frame.x), tonumber(frame.y)
    local fw, fh = tonumber(frame.width), tonumber(frame.height)
    for _, e in ipairs(els) do
      if e.tag == "polyline" then
        for px, py in e.attrs.points:gmatch("([^%s,]+),([^%s,]+)") do
          px, py = tonumber(px), tonumber(py)
          assert.is_true(px >= fx - 1e-6 and px <= fx + fw + 1e-6)
          assert.is_true(py >= fy - 1e-6 and py <= fy + fh + 1e-6)
        end
      end
    end
  end)

  it("breaks lines and bands at non-finite values and skips such points", function()
    local xs = { 1, 2, 3, 4, 5, 6 }
    local ys = { 1, 2, 0 / 0, 4, 5, 6 }
    local chart = svg.chart{}
    chart:line(xs, ys)
    chart:band(xs, { 0, 1, 2, 3, math.huge, 5 }, { 2, 3, 4, 5, 6, 7 })
    chart:scatter(xs, ys)
    local els = check_xml(chart:tostring())
    assert.equal(2, count(els, "polyline"))
    assert.equal(2, count(els, "polygon"))
    assert.equal(5, count(els, "circle"))
  end)

  it("uses exact limits when given, with only the ticks inside", function()
    local chart = svg.chart{ xlim = { 0, 9 }, ylim = { -1, 1 }, legend = false }
    chart:line({ 0, 9 }, { -1, 1 }, { label = "hidden legend" })
    local t = texts(check_xml(chart:tostring()))
    assert.is_true(contains(t, "0") and contains(t, "8"))
    assert.is_false(contains(t, "10"))
    assert.is_true(contains(t, "-1.0") and contains(t, "1.0"))
    assert.is_false(contains(t, "hidden legend"))
  end)

  it("checks its arguments", function()
    local chart = svg.chart{}
    assert.matches("^lazytensor: chart:line: value arrays must have 2 entries",
      err_of(function() chart:line({ 1, 2 }, { 1 }) end))
    assert.matches("^lazytensor: chart:band:",
      err_of(function() chart:band({ 1, 2 }, { 1, 2 }, nil) end))
    local bad = svg.chart{ xlim = { 1, 1 } }
    assert.matches("^lazytensor: chart: xlim must be {lo, hi} with finite lo < hi",
      err_of(function() bad:tostring() end))
  end)
end)

describe("svg panels", function()
  it("compose charts and heatmaps into one document with distinct clip paths", function()
    local doc = svg.document{ width = 1200, height = 400 }
    for k = 0, 1 do
      local chart = svg.chart{ width = 400, height = 400, title = "panel " .. k }
      chart:line({ 1, 2, 3 }, { 1, 4, 9 }, { label = "squares" })
      chart:draw(doc:group{ transform = { translate = { 400 * k, 0 } } })
    end
    svg.draw_heatmap(doc:group{ transform = { translate = { 800, 0 } } },
      { { 1, 2 }, { 3, 4 } }, { width = 400, height = 400, vmin = 0, vmax = 5 })
    local s = doc:tostring()
    local els = check_xml(s)
    if has_xmllint then assert.truthy(xmllint_ok(s)) end
    assert.equal(2, count(els, "clipPath"))
    assert.truthy(s:find('clip-path="url(#clip1)"', 1, true))
    assert.truthy(s:find('clip-path="url(#clip2)"', 1, true))
    assert.truthy(s:find('transform="translate(800,0)"', 1, true))
    assert.is_true(contains(texts(els), "panel 1"))
  end)
end)

describe("svg.heatmap", function()
  it("draws one cell per value, colour-mapped, with a colour bar", function()
    local grid = { { 1, 2, 3 }, { 4, 0 / 0, 6 } }
    local s = svg.heatmap(grid, { title = "t & t", colorbar_label = "height (m)" }):tostring()
    local els = check_xml(s)
    if has_xmllint then assert.truthy(xmllint_ok(s)) end
    local fills = {}
    for _, e in ipairs(els) do
      if e.tag == "rect" and e.attrs.fill then fills[#fills + 1] = e.attrs.fill end
    end
    -- background, 6 cells, 64 colour bar bands, the colour bar frame
    assert.equal(1 + 6 + 64 + 1, count(els, "rect"))
    assert.equal("#440154", fills[2]) -- value 1 is vmin
    assert.equal("#fde725", fills[7]) -- value 6 is vmax
    assert.equal("#cccccc", fills[6]) -- NaN cell
    assert.equal(svg.viridis(0.4), fills[4]) -- value 3 is 2/5 of the way
    assert.is_true(contains(texts(els), "t &amp; t"))
    assert.is_true(contains(texts(els), "height (m)"))
  end)

  it("honours vmin, vmax, a colormap and square cells", function()
    local els = check_xml(svg.heatmap({ { 0, 10 } },
      { vmin = -10, vmax = 10, colormap = "gray", colorbar = false, width = 300, height = 200 })
      :tostring())
    local cells = {}
    for _, e in ipairs(els) do
      if e.tag == "rect" and e.attrs.fill ~= "white" then cells[#cells + 1] = e.attrs end
    end
    assert.equal(2, #cells)
    assert.equal("#808080", cells[1].fill)
    assert.equal("#ffffff", cells[2].fill)
    assert.near(tonumber(cells[1].width), tonumber(cells[1].height), 1e-9)
  end)

  it("rejects grids without values", function()
    assert.matches("^lazytensor: svg.heatmap: grid must be",
      err_of(function() svg.heatmap({}) end))
    assert.matches("^lazytensor: svg.heatmap: grid has no finite value",
      err_of(function() svg.heatmap({ { 0 / 0 } }) end))
  end)
end)
