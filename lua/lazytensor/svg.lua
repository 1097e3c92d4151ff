--- A small SVG writer for the demos: documents, primitives, charts, heatmaps.
--
--   local svg = require "lazytensor.svg"
--   local doc = svg.document{width = 400, height = 300}
--   doc:rect(10, 10, 100, 50, {fill = "#eee", stroke = "black"})
--   local g = doc:group{transform = {translate = {200, 150}, rotate = 30}}
--   g:text(0, 0, "a < b", {font_size = 14, text_anchor = "middle"})
--   doc:write("out.svg")          -- or doc:tostring()
--
-- Style tables map attribute names to strings or numbers; underscores in
-- names become hyphens (stroke_width -> stroke-width). Every number written
-- must be finite, and every text and attribute value is XML-escaped.
--
-- svg.chart{...} builds line/scatter charts with a 95% band, axes with nice
-- ticks, labels and a legend; svg.heatmap(grid, {...}) draws a grid of values
-- with the viridis colormap and a colour bar. Both give documents.

local options = require "lazytensor.options"

local svg = {}

-------------------------------------------------------------------------------
-- Formatting and escaping

local function is_finite(v)
  return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge
end

-- A number as SVG text: six significant digits, no "-0".
local function num(v, what)
  if not is_finite(v) then
    error(string.format("lazytensor: svg: %s must be a finite number, got %s",
      what or "value", tostring(v)), 0)
  end
  -- Integers print as such; Lua 5.1/5.2 have only floats: integral values.
  if math.type then
    if math.type(v) == "integer" then return tostring(v) end
  elseif v % 1 == 0 and math.abs(v) < 2 ^ 53 then
    return string.format("%d", v)
  end
  local s = string.format("%.6g", v)
  if s == "-0" then s = "0" end
  return s
end

local XML_ESCAPES = { ["&"] = "&amp;", ["<"] = "&lt;", [">"] = "&gt;", ['"'] = "&quot;",
  ["'"] = "&apos;" }

--- Escape text for XML content or a quoted attribute value. Control
-- characters that XML 1.0 forbids are dropped so the output stays well-formed.
function svg.escape(s)
  s = tostring(s):gsub("[%z\1-\8\11\12\14-\31]", "")
  return (s:gsub("[&<>\"']", XML_ESCAPES))
end

-------------------------------------------------------------------------------
-- Elements: { tag = , attrs = { {name, text}, ... }, children = {...}, content = }

local function check_name(name)
  if type(name) ~= "string" or not name:match("^[%a_][%w_%-:]*$") then
    error("lazytensor: svg: bad attribute name " .. tostring(name), 0)
  end
  return (name:gsub("_", "-"))
end

-- Turn an attribute value into escaped text.
local function attr_text(name, v)
  if type(v) == "number" then return num(v, "attribute " .. name) end
  if type(v) == "string" then return svg.escape(v) end
  if type(v) == "boolean" then return tostring(v) end
  error(string.format("lazytensor: svg: attribute %s has a %s value", name, type(v)), 0)
end

-- Build the ordered attribute list: fixed geometry first, then the style
-- table's entries sorted by name so the output is reproducible.
local function make_attrs(geometry, style)
  local attrs = {}
  for i = 1, #geometry, 2 do
    local name = geometry[i]
    attrs[#attrs + 1] = { name, attr_text(name, geometry[i + 1]) }
  end
  if style then
    local names = {}
    for k in pairs(style) do names[#names + 1] = k end
    table.sort(names, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(names) do
      local name = check_name(k)
      attrs[#attrs + 1] = { name, attr_text(name, style[k]) }
    end
  end
  return attrs
end

-- Serialise an element and its children, two spaces per level.
local function render(el, out, depth)
  local pad = string.rep("  ", depth)
  local parts = { pad, "<", el.tag }
  for _, a in ipairs(el.attrs) do
    parts[#parts + 1] = string.format(' %s="%s"', a[1], a[2])
  end
  if el.content then
    parts[#parts + 1] = ">" .. svg.escape(el.content) .. "</" .. el.tag .. ">"
    out[#out + 1] = table.concat(parts)
  elseif el.children and #el.children > 0 then
    parts[#parts + 1] = ">"
    out[#out + 1] = table.concat(parts)
    for _, child in ipairs(el.children) do render(child, out, depth + 1) end
    out[#out + 1] = pad .. "</" .. el.tag .. ">"
  else
    parts[#parts + 1] = "/>"
    out[#out + 1] = table.concat(parts)
  end
end

-- A point list { {x, y}, ... } as the "x,y x,y" text of a points attribute.
local function points_text(points, what)
  if type(points) ~= "table" then
    error("lazytensor: svg: " .. what .. " points must be a table of {x, y} pairs", 0)
  end
  local parts = {}
  for i, p in ipairs(points) do
    parts[i] = num(p[1], what .. " point x") .. "," .. num(p[2], what .. " point y")
  end
  return table.concat(parts, " ")
end

-- A transform given as text, or as {translate = {x, y}, rotate = deg or
-- {deg, cx, cy}, scale = s or {sx, sy}}, applied in that order.
local function transform_text(t)
  if type(t) == "string" then return t end
  local parts = {}
  local function list(v)
    if type(v) ~= "table" then v = { v } end
    local items = {}
    for i, x in ipairs(v) do items[i] = num(x, "transform value") end
    return table.concat(items, ",")
  end
  if t.translate then parts[#parts + 1] = "translate(" .. list(t.translate) .. ")" end
  if t.rotate then parts[#parts + 1] = "rotate(" .. list(t.rotate) .. ")" end
  if t.scale then parts[#parts + 1] = "scale(" .. list(t.scale) .. ")" end
  return table.concat(parts, " ")
end

-------------------------------------------------------------------------------
-- Containers: documents and groups share the primitive methods

local Container = {}
Container.__index = Container

local function new_container(tag, attrs, doc)
  local c = setmetatable({ tag = tag, attrs = attrs, children = {} }, Container)
  c.doc = doc or c
  return c
end

function Container:add(tag, geometry, style, content)
  local el = { tag = tag, attrs = make_attrs(geometry, style), content = content }
  self.children[#self.children + 1] = el
  return el
end

function Container:line(x1, y1, x2, y2, style)
  return self:add("line", { "x1", x1, "y1", y1, "x2", x2, "y2", y2 }, style)
end

function Container:polyline(points, style)
  local st = { fill = "none" }
  for k, v in pairs(style or {}) do st[k] = v end
  return self:add("polyline", { "points", points_text(points, "polyline") }, st)
end

function Container:polygon(points, style)
  return self:add("polygon", { "points", points_text(points, "polygon") }, style)
end

function Container:rect(x, y, width, height, style)
  if is_finite(width) and is_finite(height) and (width < 0 or height < 0) then
    error("lazytensor: svg: rect width and height must be non-negative", 0)
  end
  return self:add("rect", { "x", x, "y", y, "width", width, "height", height }, style)
end

function Container:circle(cx, cy, r, style)
  if is_finite(r) and r < 0 then error("lazytensor: svg: circle radius must be non-negative", 0) end
  return self:add("circle", { "cx", cx, "cy", cy, "r", r }, style)
end

function Container:text(x, y, s, style)
  return self:add("text", { "x", x, "y", y }, style, tostring(s))
end

--- A group (<g>): attrs.transform is text or a table (see transform_text);
-- other attrs are styles inherited by its children. Returns the group, which
-- has the same drawing methods.
function Container:group(attrs)
  local style, geometry = {}, {}
  for k, v in pairs(attrs or {}) do
    if k == "transform" then
      geometry = { "transform", transform_text(v) }
    else
      style[k] = v
    end
  end
  local g = new_container("g", make_attrs(geometry, style), self.doc)
  self.children[#self.children + 1] = g
  return g
end

--- Define a rectangular clip path and return the value for a group's
-- clip_path attribute: doc:group{clip_path = doc:clip_rect(x, y, w, h)}.
function Container:clip_rect(x, y, width, height)
  local doc = self.doc
  doc.nclips = (doc.nclips or 0) + 1
  local id = "clip" .. doc.nclips
  local clip = { tag = "clipPath", attrs = make_attrs({ "id", id }), children = {} }
  clip.children[1] = { tag = "rect",
    attrs = make_attrs({ "x", x, "y", y, "width", width, "height", height }) }
  doc.defs[#doc.defs + 1] = clip
  return "url(#" .. id .. ")"
end

--- The document as an SVG string (with XML declaration).
function Container:tostring()
  local doc = self.doc
  local out = { '<?xml version="1.0" encoding="UTF-8"?>' }
  local root = { tag = "svg", attrs = doc.attrs, children = {} }
  if #doc.defs > 0 then root.children[1] = { tag = "defs", attrs = {}, children = doc.defs } end
  for _, child in ipairs(doc.children) do root.children[#root.children + 1] = child end
  render(root, out, 0)
  return table.concat(out, "\n") .. "\n"
end

--- Write the document to a file; raises a lazytensor error if it cannot.
function Container:write(path)
  local f, err = io.open(path, "wb")
  if not f then
    error("lazytensor: svg: write: cannot open " .. tostring(path) .. " (" .. err .. ")", 0)
  end
  f:write(self:tostring())
  f:close()
  return path
end

--- A new document: opts.width, opts.height (required, positive), opts.viewBox
-- ({min_x, min_y, w, h}; default {0, 0, width, height}), opts.background.
function svg.document(opts)
  opts = options.check("svg.document", opts,
    {width = "number", height = "number", viewBox = "table", background = "string"})
  local w, h = opts.width, opts.height
  if not (is_finite(w) and is_finite(h) and w > 0 and h > 0) then
    error("lazytensor: svg.document: width and height must be positive numbers", 0)
  end
  local vb = opts.viewBox or { 0, 0, w, h }
  local vbtext = {}
  for i = 1, 4 do vbtext[i] = num(vb[i], "viewBox entry") end
  local attrs = make_attrs({ "xmlns", "http://www.w3.org/2000/svg", "width", w, "height", h,
    "viewBox", table.concat(vbtext, " ") })
  local doc = new_container("svg", attrs)
  doc.defs = {}
  if opts.background then
    doc:rect(vb[1], vb[2], vb[3], vb[4], { fill = opts.background })
  end
  return doc
end

-------------------------------------------------------------------------------
-- Nice ticks (after Heckbert, "Nice numbers for graph labels", Graphics Gems,
-- 1990, but rounding the step from the data's own range for a tighter fit)

-- The "nice" number (1, 2 or 5 times a power of ten) nearest to x.
-- log10 on every version: Lua 5.1 has math.log10 and ignores math.log's base.
local log10 = math.log10 or function(x) return math.log(x, 10) end

local function nice_number(x)
  local expo = math.floor(log10(x))
  local f = x / 10 ^ expo
  local nf = (f < 1.5 and 1) or (f < 3 and 2) or (f < 7 and 5) or 10
  return nf * 10 ^ expo
end

--- Round tick values covering [lo, hi], about n of them (default 6): returns
-- the list of ticks (first <= lo, last >= hi) and the step between them.
function svg.nice_ticks(lo, hi, n)
  n = n or 6
  if not (is_finite(lo) and is_finite(hi)) then
    error("lazytensor: svg.nice_ticks: limits must be finite numbers", 0)
  end
  if lo > hi then lo, hi = hi, lo end
  if lo == hi then -- widen a degenerate range so there is something to show
    local pad = (lo == 0) and 1 or math.abs(lo) * 0.1
    lo, hi = lo - pad, hi + pad
  end
  local step = nice_number((hi - lo) / math.max(n - 1, 1))
  local first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
  local ticks = {}
  for k = first, last do
    local v = k * step -- multiply, never accumulate, to keep ticks round
    if math.abs(v) < step * 1e-9 then v = 0 end
    ticks[#ticks + 1] = v
  end
  return ticks, step
end

--- Text for a tick value: as many decimals as the step needs.
function svg.format_tick(v, step)
  local decimals = math.max(0, -math.floor(log10(step) + 1e-9))
  local s = string.format(string.format("%%.%df", decimals), v) -- %d: never "-0"
  if s:match("^%-0%.?0*$") then s = s:sub(2) end
  return s
end

-------------------------------------------------------------------------------
-- Colormaps

-- Viridis (matplotlib's perceptually uniform map, public domain) sampled at
-- ten evenly spaced points; colours in between are interpolated linearly.
local VIRIDIS = { "440154", "482878", "3e4a89", "31688e", "26828e", "1f9e89", "35b779",
  "6dcd59", "b4de2c", "fde725" }

local function hex_rgb(h)
  return tonumber(h:sub(1, 2), 16), tonumber(h:sub(3, 4), 16), tonumber(h:sub(5, 6), 16)
end

local function rgb_hex(r, g, b)
  local function c(v) return math.max(0, math.min(255, math.floor(v + 0.5))) end
  return string.format("#%02x%02x%02x", c(r), c(g), c(b))
end

-- A colormap from evenly spaced hex stops.
local function stops_colormap(name, stops)
  return function(t)
    if type(t) ~= "number" or t ~= t then
      error("lazytensor: svg." .. name .. ": t must be a number in [0, 1]", 0)
    end
    t = math.max(0, math.min(1, t))
    local pos = t * (#stops - 1)
    local k = math.min(math.floor(pos), #stops - 2)
    local f = pos - k
    local r1, g1, b1 = hex_rgb(stops[k + 1])
    local r2, g2, b2 = hex_rgb(stops[k + 2])
    return rgb_hex(r1 + f * (r2 - r1), g1 + f * (g2 - g1), b1 + f * (b2 - b1))
  end
end

local COLORMAPS = {
  viridis = stops_colormap("viridis", VIRIDIS),
  gray = stops_colormap("gray", { "000000", "ffffff" }),
}

--- viridis(t) for t in [0, 1] (clamped) as "#rrggbb".
svg.viridis = COLORMAPS.viridis

--- The colormap function of a name ("viridis", "gray"), or a function passed through.
function svg.colormap(name)
  if type(name) == "function" then return name end
  local cm = COLORMAPS[name or "viridis"]
  if not cm then error("lazytensor: svg.colormap: unknown colormap " .. tostring(name), 0) end
  return cm
end

-------------------------------------------------------------------------------
-- Charts

local PALETTE = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b" }
local FONT = "sans-serif"

local Chart = {}
Chart.__index = Chart

--- A line/scatter chart. opts: width (640), height (400), title, xlabel,
-- ylabel, xlim / ylim ({lo, hi}: exact limits; default: nice ticks around the
-- data), xticks / yticks (about how many, 6), grid (true), legend
-- ("top-left" default, "top-right", "bottom-left", "bottom-right", or false),
-- font_size (12).
local CHART_OPTIONS = {width = "number", height = "number", title = "string", xlabel = "string",
  ylabel = "string", xlim = "table", ylim = "table", xticks = "number", yticks = "number",
  grid = "boolean", legend = "string|boolean", font_size = "number", background = "string"}

function svg.chart(opts)
  opts = options.check("svg.chart", opts, CHART_OPTIONS)
  return setmetatable({ opts = opts, series = {}, ncolors = 0 }, Chart)
end

-- Check that xs and the value arrays are Lua arrays of the same length.
local function check_series(what, xs, ...)
  if type(xs) ~= "table" then error("lazytensor: chart:" .. what .. ": xs must be an array", 0) end
  for i = 1, select("#", ...) do
    local ys = select(i, ...)
    if type(ys) ~= "table" or #ys ~= #xs then
      error(string.format("lazytensor: chart:%s: value arrays must have %d entries like xs",
        what, #xs), 0)
    end
  end
end

function Chart:next_color()
  self.ncolors = self.ncolors + 1
  return PALETTE[(self.ncolors - 1) % #PALETTE + 1]
end

function Chart:add(kind, xs, a, b, style)
  style = style or {}
  local s = { kind = kind, xs = xs, a = a, b = b, style = style,
    color = style.color or self:next_color() }
  self.series[#self.series + 1] = s
  return self
end

--- A line through (xs[i], ys[i]); breaks at non-finite values.
-- style: color, width (1.5), dash ("4 2"), opacity, label.
function Chart:line(xs, ys, style)
  check_series("line", xs, ys)
  return self:add("line", xs, ys, nil, style)
end

--- Markers at (xs[i], ys[i]); non-finite points are skipped.
-- style: color, r (2.5), opacity, label.
function Chart:scatter(xs, ys, style)
  check_series("scatter", xs, ys)
  return self:add("scatter", xs, ys, nil, style)
end

--- A filled band between lo[i] and hi[i] (e.g. a 95% interval); breaks at
-- non-finite values. style: color, opacity (0.25), label.
function Chart:band(xs, lo, hi, style)
  check_series("band", xs, lo, hi)
  return self:add("band", xs, lo, hi, style)
end

-- Smallest and largest finite values in the given arrays.
local function finite_range(arrays)
  local lo, hi = math.huge, -math.huge
  for _, arr in ipairs(arrays) do
    for i = 1, #arr do
      local v = arr[i]
      if is_finite(v) then lo, hi = math.min(lo, v), math.max(hi, v) end
    end
  end
  if lo > hi then return 0, 1 end -- no data: an arbitrary unit range
  return lo, hi
end

-- An axis: its limits, the ticks to draw within them and their step.
local function make_axis(name, lim, arrays, n)
  if lim then
    local ok = type(lim) == "table" and is_finite(lim[1]) and is_finite(lim[2])
    if not ok or lim[1] >= lim[2] then
      error("lazytensor: chart: " .. name .. " must be {lo, hi} with finite lo < hi", 0)
    end
    local ticks, step = svg.nice_ticks(lim[1], lim[2], n)
    local inside = {}
    for _, t in ipairs(ticks) do
      if t >= lim[1] - 1e-9 * step and t <= lim[2] + 1e-9 * step then inside[#inside + 1] = t end
    end
    return { lo = lim[1], hi = lim[2], ticks = inside, step = step }
  end
  local lo, hi = finite_range(arrays)
  local ticks, step = svg.nice_ticks(lo, hi, n)
  return { lo = ticks[1], hi = ticks[#ticks], ticks = ticks, step = step }
end

-- Width in pixels of the widest tick label of an axis (a rough estimate).
local function label_width(axis, fs)
  local longest = 0
  for _, t in ipairs(axis.ticks) do longest = math.max(longest, #svg.format_tick(t, axis.step)) end
  return 0.6 * fs * longest
end

-- Split the indices where all given arrays are finite into runs.
local function finite_runs(xs, a, b)
  local runs, run = {}, nil
  for i = 1, #xs do
    local ok = is_finite(xs[i]) and is_finite(a[i]) and (b == nil or is_finite(b[i]))
    if ok then
      if not run then run = {}; runs[#runs + 1] = run end
      run[#run + 1] = i
    else
      run = nil
    end
  end
  return runs
end

-- Geometry of the plot area: room on the left for the y tick labels (and
-- the y label), at the bottom for the x tick labels (and the x label).
function Chart:layout(Y)
  local o = self.opts
  local w, h, fs = o.width or 640, o.height or 400, o.font_size or 12
  local top = o.title and (2.5 * fs + 8) or 12
  local left = label_width(Y, fs) + 14 + (o.ylabel and 2 * fs or 0)
  local bottom = o.xlabel and (3.5 * fs + 8) or (2 * fs + 8)
  local L = { w = w, h = h, fs = fs, x0 = left, x1 = w - 16, y0 = top, y1 = h - bottom }
  if L.x1 - L.x0 < 10 or L.y1 - L.y0 < 10 then
    error("lazytensor: chart: width and height leave no room for the plot", 0)
  end
  return L
end

-- Collect the x arrays and the value arrays of every series.
function Chart:data_arrays()
  local xs, ys = {}, {}
  for _, s in ipairs(self.series) do
    xs[#xs + 1] = s.xs
    ys[#ys + 1] = s.a
    if s.b then ys[#ys + 1] = s.b end
  end
  return xs, ys
end

function Chart:draw_axes(doc, L, X, Y)
  local o, fs = self.opts, L.fs
  local grid = o.grid ~= false
  local axes = doc:group{ font_family = FONT, font_size = fs, fill = "#333" }
  for _, t in ipairs(X.ticks) do
    local px = L.mapx(t)
    if grid then doc:line(px, L.y0, px, L.y1, { stroke = "#e5e5e5", stroke_width = 1 }) end
    axes:line(px, L.y1, px, L.y1 + 5, { stroke = "#333" })
    axes:text(px, L.y1 + 6 + fs, svg.format_tick(t, X.step), { text_anchor = "middle" })
  end
  for _, t in ipairs(Y.ticks) do
    local py = L.mapy(t)
    if grid then doc:line(L.x0, py, L.x1, py, { stroke = "#e5e5e5", stroke_width = 1 }) end
    axes:line(L.x0 - 5, py, L.x0, py, { stroke = "#333" })
    axes:text(L.x0 - 8, py + 0.35 * fs, svg.format_tick(t, Y.step), { text_anchor = "end" })
  end
  axes:rect(L.x0, L.y0, L.x1 - L.x0, L.y1 - L.y0, { fill = "none", stroke = "#333" })
  if o.xlabel then
    axes:text((L.x0 + L.x1) / 2, L.h - fs, o.xlabel, { text_anchor = "middle" })
  end
  if o.ylabel then
    local x, y = fs, (L.y0 + L.y1) / 2
    axes:text(x, y, o.ylabel, { text_anchor = "middle",
      transform = string.format("rotate(-90 %s %s)", num(x), num(y)) })
  end
  if o.title then
    axes:text(L.w / 2, 1.5 * fs + 4, o.title,
      { text_anchor = "middle", font_size = fs * 1.25, font_weight = "bold" })
  end
end

local function draw_series(g, s, L)
  local st = s.style
  for _, run in ipairs(finite_runs(s.xs, s.a, s.b)) do
    if s.kind == "band" then
      local pts = {}
      for _, i in ipairs(run) do pts[#pts + 1] = { L.mapx(s.xs[i]), L.mapy(s.b[i]) } end
      for k = #run, 1, -1 do
        local i = run[k]
        pts[#pts + 1] = { L.mapx(s.xs[i]), L.mapy(s.a[i]) }
      end
      g:polygon(pts, { fill = s.color, fill_opacity = st.opacity or 0.25, stroke = "none" })
    elseif s.kind == "line" then
      local pts = {}
      for _, i in ipairs(run) do pts[#pts + 1] = { L.mapx(s.xs[i]), L.mapy(s.a[i]) } end
      g:polyline(pts, { stroke = s.color, stroke_width = st.width or 1.5,
        stroke_dasharray = st.dash, stroke_opacity = st.opacity, stroke_linejoin = "round" })
    else
      for _, i in ipairs(run) do
        g:circle(L.mapx(s.xs[i]), L.mapy(s.a[i]), st.r or 2.5,
          { fill = s.color, fill_opacity = st.opacity })
      end
    end
  end
end

function Chart:draw_legend(doc, L)
  local where = self.opts.legend
  if where == false then return end
  local items = {}
  for _, s in ipairs(self.series) do
    if s.style.label then items[#items + 1] = s end
  end
  if #items == 0 then return end
  local fs, longest = L.fs, 0
  for _, s in ipairs(items) do
    longest = math.max(longest, utf8 and utf8.len(s.style.label) or #s.style.label) -- utf8: 5.3+
  end
  local bw, bh = 34 + 0.6 * fs * longest, (#items * 1.5 + 0.5) * fs
  where = where or "top-left"
  local bx = where:find("right") and (L.x1 - bw - 8) or (L.x0 + 8)
  local by = where:find("bottom") and (L.y1 - bh - 8) or (L.y0 + 8)
  local g = doc:group{ font_family = FONT, font_size = fs }
  g:rect(bx, by, bw, bh, { fill = "white", fill_opacity = 0.85, stroke = "#999" })
  for k, s in ipairs(items) do
    local cy = by + (k * 1.5 - 0.5) * fs
    local sx = bx + 6
    if s.kind == "band" then
      g:rect(sx, cy - 0.4 * fs, 20, 0.8 * fs,
        { fill = s.color, fill_opacity = s.style.opacity or 0.25 })
    elseif s.kind == "line" then
      g:line(sx, cy, sx + 20, cy, { stroke = s.color, stroke_width = s.style.width or 1.5,
        stroke_dasharray = s.style.dash })
    else
      g:circle(sx + 10, cy, s.style.r or 2.5, { fill = s.color })
    end
    g:text(sx + 26, cy + 0.35 * fs, s.style.label, { fill = "#333" })
  end
end

--- Draw the chart into a document or group, within (0, 0)-(width, height)
-- of its coordinates (place it with a group transform for a panel).
function Chart:draw(parent)
  local o = self.opts
  local xarrays, yarrays = self:data_arrays()
  local X = make_axis("xlim", o.xlim, xarrays, o.xticks)
  local Y = make_axis("ylim", o.ylim, yarrays, o.yticks)
  local L = self:layout(Y)
  L.mapx = function(x) return L.x0 + (x - X.lo) / (X.hi - X.lo) * (L.x1 - L.x0) end
  L.mapy = function(y) return L.y1 - (y - Y.lo) / (Y.hi - Y.lo) * (L.y1 - L.y0) end

  self:draw_axes(parent, L, X, Y)
  local clip = parent:clip_rect(L.x0, L.y0, L.x1 - L.x0, L.y1 - L.y0)
  local plot = parent:group{ clip_path = clip }
  for _, s in ipairs(self.series) do draw_series(plot, s, L) end
  self:draw_legend(parent, L)
  return parent
end

--- The chart as a document of its own (background: opts.background or white).
function Chart:document()
  local o = self.opts
  local doc = svg.document{ width = o.width or 640, height = o.height or 400,
    background = o.background or "white" }
  return self:draw(doc)
end

function Chart:tostring() return self:document():tostring() end
function Chart:write(path) return self:document():write(path) end

-------------------------------------------------------------------------------
-- Heatmaps

-- Smallest and largest finite values of a grid.
local function grid_range(grid, nrows, ncols)
  local lo, hi = math.huge, -math.huge
  for i = 1, nrows do
    for j = 1, ncols do
      local v = grid[i][j]
      if is_finite(v) then lo, hi = math.min(lo, v), math.max(hi, v) end
    end
  end
  return lo, hi
end

-- Draw a vertical colour bar for [vmin, vmax] at (x, y, w, h) with ticks.
local function draw_colorbar(doc, cmap, vmin, vmax, x, y, w, h, fs, label)
  local bands = 64
  local bar = doc:group{ shape_rendering = "crispEdges" }
  for k = 0, bands - 1 do
    -- band k covers the top-down fraction [k, k+1] / bands: high values on top
    local t = 1 - (k + 0.5) / bands
    bar:rect(x, y + k * h / bands, w, h / bands + 0.5, { fill = cmap(t) })
  end
  local axis = doc:group{ font_family = FONT, font_size = fs, fill = "#333" }
  axis:rect(x, y, w, h, { fill = "none", stroke = "#333" })
  local ticks, step = svg.nice_ticks(vmin, vmax, 6)
  for _, t in ipairs(ticks) do
    if t >= vmin - 1e-9 * step and t <= vmax + 1e-9 * step then
      local py = y + h - (t - vmin) / (vmax - vmin) * h
      axis:line(x + w, py, x + w + 4, py, { stroke = "#333" })
      axis:text(x + w + 6, py + 0.35 * fs, svg.format_tick(t, step))
    end
  end
  if label then
    local lx, ly = x + w + 4.5 * fs, y + h / 2
    axis:text(lx, ly, label, { text_anchor = "middle",
      transform = string.format("rotate(90 %s %s)", num(lx), num(ly)) })
  end
end

-- Check a heatmap's grid and options; returns its size and colour scale.
local function heatmap_scale(grid, opts)
  if type(grid) ~= "table" or type(grid[1]) ~= "table" then
    error("lazytensor: svg.heatmap: grid must be a table of rows", 0)
  end
  local nrows, ncols = #grid, opts.ncols or #grid[1]
  local dlo, dhi = grid_range(grid, nrows, ncols)
  local vmin, vmax = opts.vmin or dlo, opts.vmax or dhi
  if not (is_finite(vmin) and is_finite(vmax)) then
    error("lazytensor: svg.heatmap: grid has no finite value", 0)
  end
  if vmin == vmax then vmin, vmax = vmin - 0.5, vmax + 0.5 end
  return nrows, ncols, vmin, vmax
end

--- Draw a heatmap of grid[i][j] (row 1 at the top) into a document or group,
-- within (0, 0)-(width, height) of its coordinates; place it with a group
-- transform to put several side by side (share vmin / vmax between them).
-- opts: width (640), height (480), colormap ("viridis", "gray" or a
-- function t -> colour), vmin / vmax (default: the data's range), title,
-- colorbar (true), colorbar_label, missing_color ("#cccccc", for nil/NaN),
-- ncols (default #grid[1]), square (true: square cells), font_size (12).
local HEATMAP_OPTIONS = {width = "number", height = "number", colormap = "string|function",
  vmin = "number", vmax = "number", title = "string", colorbar = "boolean",
  colorbar_label = "string", missing_color = "string", ncols = "number", square = "boolean",
  font_size = "number", background = "string"} -- background: svg.heatmap's document

function svg.draw_heatmap(parent, grid, opts)
  opts = options.check("svg.draw_heatmap", opts, HEATMAP_OPTIONS)
  local nrows, ncols, vmin, vmax = heatmap_scale(grid, opts)
  local cmap = svg.colormap(opts.colormap)
  local w, h, fs = opts.width or 640, opts.height or 480, opts.font_size or 12
  local top = opts.title and (2.5 * fs + 8) or 10
  local right = (opts.colorbar == false) and 10 or (opts.colorbar_label and 10 * fs or 7 * fs)
  local pw, ph = w - 10 - right, h - top - 10
  if pw <= 0 or ph <= 0 then error("lazytensor: svg.heatmap: width and height too small", 0) end
  local cw, ch = pw / ncols, ph / nrows
  local ox = 10 -- left edge of the cells
  if opts.square ~= false then -- square cells: a grid of a surface keeps its shape
    cw = math.min(cw, ch)
    ch = cw
    ox = ox + (pw - cw * ncols) / 2
    pw, ph = cw * ncols, ch * nrows
  end

  if opts.title then
    parent:text(ox + pw / 2, 1.5 * fs + 4, opts.title, { text_anchor = "middle",
      font_family = FONT, font_size = fs * 1.25, font_weight = "bold", fill = "#333" })
  end
  -- Cells overlap by a hair so that no background seams show between them.
  local cells = parent:group{ shape_rendering = "crispEdges" }
  for i = 1, nrows do
    for j = 1, ncols do
      local v = grid[i][j]
      local color = opts.missing_color or "#cccccc"
      if is_finite(v) then color = cmap((v - vmin) / (vmax - vmin)) end
      cells:rect(ox + (j - 1) * cw, top + (i - 1) * ch, cw + 0.05, ch + 0.05, { fill = color })
    end
  end
  if opts.colorbar ~= false then
    draw_colorbar(parent, cmap, vmin, vmax, ox + pw + fs, top, fs * 1.2, ph, fs,
      opts.colorbar_label)
  end
  return parent
end

--- A heatmap as a document of its own; opts as for svg.draw_heatmap, plus
-- background ("white").
function svg.heatmap(grid, opts)
  opts = options.check("svg.heatmap", opts, HEATMAP_OPTIONS)
  heatmap_scale(grid, opts) -- check before creating anything
  local doc = svg.document{ width = opts.width or 640, height = opts.height or 480,
    background = opts.background or "white" }
  return svg.draw_heatmap(doc, grid, opts)
end

return svg
