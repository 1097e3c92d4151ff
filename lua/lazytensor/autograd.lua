--- lt.grad and lt.gradcheck: differentiate a whole computation.
--
-- While df(params, ...) runs f, every function and metamethod of the
-- library is replaced by a recording wrapper: each call whose arguments
-- include a followed value (a parameter, or a result computed from one) is
-- kept as a record {name, args, outs}. Afterwards the originals are back
-- and the records are walked backwards, each through the vector-Jacobian
-- product of its operation (autograd/vjp.lua) — whichever rule computed
-- it — or, for a constructor (lt.diag, lt.kernel, lt.kron, ...), through
-- the new operator's own bilinear_derivative, which turns the operator's
-- cotangent into the gradients of the tensors it was built from. Outside
-- lt.grad nothing is replaced, so nothing costs more.
--
-- Values are followed by their C tensor (lt._address), in versions: a call
-- that returns a tensor it was given (A:t() of a symmetric A, a write
-- t[i] = v) makes a new version, so the records stay a sequence.

local cot = require "lazytensor.autograd.cotangent"
local vjp = require "lazytensor.autograd.vjp"

local autograd = {}
local unpack = table.unpack or unpack -- Lua 5.1 and LuaJIT: the global

local lt -- the library, looked up on first use (it may load this file)
local address, is_lazy, dim_of, shape_of -- the library's own, bound by lib()
local COMPACT_SLOTS, COMPACT_CHUNK -- how compact records sit in their chunks (the tape)

local function lib()
  if lt == nil then
    lt = require "lazytensor"
    cot.bind(lt)
    vjp.bind(lt)
    address, is_lazy, dim_of, shape_of = lt._address, lt.is_lazy, lt.dim, lt.shape
    COMPACT_SLOTS, COMPACT_CHUNK = lt._compact_layout()
  end
  return lt
end

local function fail(fmt, ...) error("lazytensor: grad: " .. string.format(fmt, ...), 0) end

local function pack(...) return {n = select("#", ...), ...} end

local GENERATIONAL = _VERSION == "Lua 5.4" -- collectgarbage("generational") returns the old mode
-- A tape switches to the generational collector when it reaches this many
-- records (see Tape:grown): entering that mode runs a full collection (0.1
-- ms and more on a loaded heap), more than a small tape's whole cost.
local GENERATIONAL_RECORDS = 1000

-- ----------------------------------------------------------- what is followed

-- Functions that compute no values (queries, settings, registry, memory)
-- run as they are; so do the forms that return the old gradient tables.
local PLAIN = {
  type = true, is_tensor = true, is_lazy = true, is_psd = true, is_symmetric = true,
  with_settings = true, manual_seed = true, memory = true, free = true, shape = true,
  batch_shape = true, size = true, dim = true, numel = true, explain = true,
  implements = true, types = true, params = true, bilinear_derivative = true,
  with_params = true, totable = true, equal = true, item = true, NotImplemented = true,
}

-- Constructors: their records go through the new operator's
-- bilinear_derivative. Each maps a parameter name of the new operator to
-- the argument it came from: a position, or {position, key} in a table.
local function kernel_argument(r, name)
  local spec = r.nargs
  while spec > 1 and (type(r.args[spec]) ~= "table" or lib().is_tensor(r.args[spec])) do
    spec = spec - 1
  end
  if name == "x1" then return 1 end
  if name == "x2" then return spec == 3 and 2 or nil end
  return spec, name
end

local CONSTRUCTORS = {
  diag = {diag = 1},
  identity = {scale = 2},
  triangular = {L = 1},
  lowrank = {U = 1, V = 2},
  toeplitz = {column = 1, row = 2},
  chol = {L = 1},
  kernel = kernel_argument,
  operator = function(_, name) return 1, name, "params" end,
  constant = {scale = 3}, batch = {}, interp = {}, permutation = {}, zeros_operator = {},
}

-- Metamethods and the operation their records name.
local METAMETHODS = {
  __add = "add", __sub = "sub", __mul = "mul_meta", __div = "div", __unm = "neg",
  __index = "index", __newindex = "newindex", __pow = "pow",
}

-- Writes: the written tensor gets a new version; a value of it that some
-- record's backward reads must not change under it.
local WRITES = {newindex = true, set = true, fill = true, copy = true}

-- Records whose backward needs shapes only, no values: they leave their
-- operands' storage free to be written afterwards (every other record
-- marks it read, and a later write into it is refused).
local VIEWS = {
  index = true, narrow = true, reshape = true, transpose = true, t = true, contiguous = true,
  add = true, sub = true, neg = true, dense = true, diagonal = true, trace = true, sum = true,
  mean = true, get = true, row = true, add_diag = true, add_jitter = true, clone = true,
  full = true, psd = true,
}

-- Of the others, records whose backward reads their operands' values but
-- not their results' (a product's): a later write into the result is
-- sound, and marking a new storage at every product is one hash key more
-- on the hot path of tiny operations.
local RESULT_UNREAD = {matmul = true, mul_meta = true, scale = true}

-- Calls whose forward changes inside lt.grad: a root by a method without a
-- derivative (the lazy [√D | U] of a low-rank plus diagonal, Lanczos) is
-- replaced by the Cholesky factor, which is also a root.
local DIFFERENTIABLE_ROOTS = {cholesky = true, eigh = true, ["closed form"] = true}

local originals = {} -- name → the library's own function, while installed

-- Rank of the control variate of the stochastic logdet backward (as
-- gp.exact's default).
local CONTROL_VARIATE = 64

-- Each returns the call's results (packed) and what its backward keeps.
local FORWARD = {
  root = function(orig, A, ...)
    local R, info = orig(A, ...)
    if type(info) == "table" and DIFFERENTIABLE_ROOTS[info.method] then return pack(R, info) end
    local L, cinfo = originals.cholesky(A)
    cinfo = type(cinfo) == "table" and cinfo or {}
    cinfo.method = "cholesky"
    return pack(L, cinfo)
  end,
  -- A positive definite A's log det and inverse quadratic form share one
  -- factorisation (or one block CG run) with their backward: the forward
  -- keeps A⁻¹b and the log det's cotangent A⁻¹ (lt_inv_quad_logdet_parts).
  inv_quad_logdet = function(orig, A, b, ...)
    if select("#", ...) > 0 or b == nil or not lt.is_tensor(b) or dim_of(A) > 2
      or lt.is_psd(A) ~= true then
      return pack(orig(A, b, ...))
    end
    local q, ld, X, parts, info = lt._iql_parts(A, b, CONTROL_VARIATE)
    return pack(q, ld, info), {solved = X, logdet = parts}
  end,
  logdet = function(orig, A, ...)
    if select("#", ...) > 0 or dim_of(A) > 2 or lt.is_psd(A) ~= true then
      return pack(orig(A, ...))
    end
    local _, ld, _, parts, info = lt._iql_parts(A, originals.zeros(A:size(1), 0), CONTROL_VARIATE)
    return pack(ld, info), {logdet = parts}
  end,
}

-- --------------------------------------------------------------- the tape

local Tape = {}
Tape.__index = Tape

local active -- the tape of the df call running now, or nil

-- The tape's tables that the metamethods' recorders (C, bind_grad.c) use
-- sit at these indices too; its count of records only there.
local TAPE_CURRENT, TAPE_READ, TAPE_CHUNKS, TAPE_NREC = 1, 2, 3, 4

-- A metamethod's record is compact: no table of its own, but COMPACT_SLOTS
-- entries (name, a, b, out, na, nb: the operation, its operands, its
-- result and the operands' nodes) in a chunk of COMPACT_CHUNK records
-- (bind_grad.c writes them). Its result's node is the record's index k
-- (current[addr] = k) until a node table is needed (Tape:node_at): a tiny
-- operation recorded costs no table, and the collector traces no growing
-- table (an old chunk is not written again).
-- (COMPACT_SLOTS, COMPACT_CHUNK: bound by lib(), lt._compact_layout())

local function new_tape()
  local tape = setmetatable({
    records = {},  -- k → the record, for the records not compact
    compact_nodes = {}, -- k → the node table of compact record k's result, once needed
    current = {},  -- address → the latest node of that value (or its compact record's k)
    versions = {}, -- address → its nodes, oldest first
    read = {},     -- storage → true once a record's backward reads it
    leaf = {},     -- address → the node a parameter started as
    copy_of = {},  -- address of a composite's copy of a dense operand → its node
    copies = {},   -- those copies' addresses (the chain rule stops at them)
  }, Tape)
  tape[TAPE_CURRENT], tape[TAPE_READ], tape[TAPE_CHUNKS] = tape.current, tape.read, {}
  tape[TAPE_NREC] = 0
  return tape
end

local function kind_of(v)
  if is_lazy(v) then return dim_of(v) > 2 and "batch" or "lazy" end
  if dim_of(v) == 0 then return "scalar" end
  return "dense"
end

-- A large tape keeps many results alive until the backward: Lua 5.4's
-- generational collector does not trace those old objects again at each
-- step (other Luas keep their collector as it is). The mode f ran under is
-- restored after it (recorded_run).
function Tape:grown()
  if GENERATIONAL and self.gc_mode == nil then self.gc_mode = collectgarbage("generational") end
end

-- The entries of compact record k: its chunk and the slot before them.
local function compact_slots(tape, k)
  return tape[TAPE_CHUNKS][math.floor((k - 1) / COMPACT_CHUNK) + 1],
    (k - 1) % COMPACT_CHUNK * COMPACT_SLOTS
end

-- The node table of x, a node or a compact record's k (made once).
function Tape:node_at(x)
  if type(x) ~= "number" then return x end
  local node = self.compact_nodes[x]
  if node == nil then
    local chunk, o = compact_slots(self, x)
    -- the fields the backward sets, named so the table is made at its
    -- final size (no rehash as they arrive)
    node = {id = x, value = chunk[o + 4], kind = nil, shape = nil, cot = nil, cot_spent = nil}
    self.compact_nodes[x] = node
  end
  return node
end

-- node, a call's result at address addr, is the next version of the value
-- previous was (the call returned a value it was given): both listed.
local function add_version(tape, addr, previous, node)
  previous, node = tape:node_at(previous), tape:node_at(node)
  local list = tape.versions[addr]
  if list == nil then
    list = {previous}
    tape.versions[addr] = list
  end
  list[#list + 1] = node
end

-- Makes node ({id, value, addr}) the latest version of its value.
local function track(tape, node)
  local addr, current = node.addr, tape.current
  local previous = current[addr]
  current[addr] = node
  if previous then add_version(tape, addr, previous, node) end
  return node
end

-- A new node for v (at address addr): the value's latest version. Its id
-- (the order of a value's versions) is the index of the record that made
-- it, the one about to be kept; a parameter's is 0.
function Tape:new_node(v, addr, id)
  id = id or self[TAPE_NREC] + 1
  return track(self, {id = id, value = v, addr = addr or address(v)}) -- its kind: node_kind
end

-- A node's kind ("scalar", "dense", "lazy": the form of its cotangent)
-- and shape, looked up when a cotangent first needs them.
local function node_kind(node)
  local kind = node.kind
  if kind == nil then
    kind = kind_of(node.value)
    node.kind = kind
  end
  return kind
end

local function node_shape(node)
  local shape = node.shape
  if shape == nil and node_kind(node) ~= "scalar" then
    shape = shape_of(node.value)
    node.shape = shape
  end
  return shape
end

function Tape:node_of(v)
  if type(v) ~= "userdata" then return nil end
  local addr = address(v)
  return addr and self:node_at(self.current[addr])
end

-- The nodes of the tensors directly inside a table argument ({A, B} of
-- blockdiag, a kernel's spec, an lt.operator's params).
function Tape:table_nodes(t)
  if type(t) ~= "table" or lt.is_tensor(t) then return nil end
  local found
  for k, v in pairs(t) do
    local node = self:node_of(v)
    if node == nil and k == "params" and type(v) == "table" then
      local inner = self:table_nodes(v)
      if inner then
        found = found or {}
        found.params = inner
      end
    elseif node then
      found = found or {}
      found[k] = node
    end
  end
  return found
end

local Record = {}
Record.__index = Record

function Record:wants(i) return self.nodes[i] ~= nil or self.tnodes[i] ~= nil end

function Record:give(i, c)
  local node = self.nodes[i]
  if node and c ~= nil then self.tape:accumulate(node, c) end
end

-- An entry of a table argument (sub: a nested table, as lt.operator's params).
function Record:give_key(i, key, c, sub)
  local t = self.tnodes[i]
  if t and sub then t = t[sub] end
  local node = t and t[key]
  if node and c ~= nil then self.tape:accumulate(node, c) end
end

function Tape:mark_read(v)
  if type(v) == "userdata" then
    local _, storage = lt._address(v)
    if storage then self.read[storage] = true end
  end
end

-- A write into v (with a followed value, or into a followed v) is followed
-- only where it is sound: into a whole tensor (not a view: the tensor it
-- views would change unrecorded) whose values no backward reads.
function Tape:check_write(name, v)
  local _, storage, view = lt._address(v)
  if storage == nil then return end
  if view then
    fail("%s: a write into a view of another tensor is not followed; write into the tensor "
      .. "itself (t:set(i, j, v)) or into a clone", name)
  end
  if self.read[storage] then
    fail("%s: this tensor's values were used by an earlier followed call and the write would "
      .. "change its derivative; write into a clone", name)
  end
end

-- Keeps the call as a record; its numbers come back as 0-d tensors, so
-- that arithmetic on them stays followed.
local NO_TABLES = {} -- a record's tnodes when it has no table arguments (never written)
local READS = {}      -- name → its record's backward reads values (filled by install)
local READS_RESULT = {} -- name → ... and its results' values

function Tape:record(name, args, n, outs, kept)
  local reads, current, read = READS[name], self.current, self.read
  local reads_result = READS_RESULT[name]
  local nodes, tnodes, out_nodes = {}, nil, {}
  for i = 1, n do
    local a = args[i]
    local ta = type(a)
    if ta == "userdata" then
      local addr, storage = address(a)
      if addr then
        nodes[i] = self:node_at(current[addr])
        if reads and storage then read[storage] = true end
      end
    elseif ta == "table" then
      local t = self:table_nodes(a)
      if t then
        tnodes = tnodes or {}
        tnodes[i] = t
      end
    end
  end
  for j = 1, outs.n do
    local v = outs[j]
    if type(v) == "number" then
      v = originals.tensor(v)
      outs[j] = v
    end
    if type(v) == "userdata" then
      local addr, storage = address(v)
      if addr then
        if storage == nil and dim_of(v) > 3 then
          fail("lt.%s: operators of more than one batch dimension are not followed by lt.grad "
            .. "yet (a %s of shape %s)", name, lt.type(v), table.concat(shape_of(v), "x"))
        end
        out_nodes[j] = self:new_node(v, addr)
        if reads_result and storage then read[storage] = true end
      end
    end
  end
  local r = setmetatable({tape = self, name = name, args = args, nargs = n, outs = outs,
    nodes = nodes, tnodes = tnodes or NO_TABLES, out_nodes = out_nodes, kept = kept}, Record)
  if CONSTRUCTORS[name] and is_lazy(outs[1]) and dim_of(outs[1]) == 2 then self:find_copies(r) end
  local k = self[TAPE_NREC] + 1
  self[TAPE_NREC] = k
  self.records[k] = r
  if k == GENERATIONAL_RECORDS then self:grown() end
  return unpack(outs, 1, outs.n)
end

-- What the metamethods' recorders (lt._metamethod_recorder, C) share with
-- the tape: [1] the tape recording now (nil between calls), [2] the
-- record count at which the tape grows (Tape:grown), and the helpers for
-- their rare cases. Its records are compact (COMPACT_SLOTS), made Records
-- when the backward pass reaches them.
local live = {nil, GENERATIONAL_RECORDS}
live.add_version = add_version
live.grown = function(tape) tape:grown() end
live.tensor = function(x) return originals.tensor(x) end
function live.refuse_batches(name, out)
  fail("%s: operators of more than one batch dimension are not followed by lt.grad yet "
    .. "(a %s of shape %s)", name, lt.type(out), table.concat(shape_of(out), "x"))
end

-- Compact record k as a Record; out_node: its result's node.
function Tape:expand(k, out_node)
  local chunk, o = compact_slots(self, k)
  return setmetatable({tape = self, name = chunk[o + 1], args = {chunk[o + 2], chunk[o + 3]},
    nargs = 2, outs = {chunk[o + 4], n = 1},
    nodes = {self:node_at(chunk[o + 5]), self:node_at(chunk[o + 6])}, tnodes = NO_TABLES,
    out_nodes = {out_node}}, Record)
end

-- A composite (lt.kron(A, B), lt.blockdiag{A, B}) keeps copies of its dense
-- operands, not the operands: the k-th new dense child is a copy of the
-- k-th dense operand, so its cotangent goes to that operand.
function Tape:find_copies(r)
  local dense_args, followed = {}, false
  local function collect(v)
    if type(v) == "userdata" and lt.is_tensor(v) and not lt.is_lazy(v) then
      dense_args[#dense_args + 1] = v
      followed = followed or self:node_of(v) ~= nil
    end
  end
  for i = 1, r.nargs do
    local a = r.args[i]
    if type(a) == "table" and not lt.is_tensor(a) then
      for _, v in ipairs(a) do collect(v) end
    else
      collect(a)
    end
  end
  if not followed then return end
  local next_arg = 1
  local children = lt._dense_children(r.outs[1])
  for k = 1, #children, 2 do
    local addr, shape = children[k], children[k + 1]
    if self.current[addr] == nil and self.copy_of[addr] == nil then
      local source = dense_args[next_arg]
      next_arg = next_arg + 1
      local node = source and self:node_of(source)
      if node and table.concat(source:shape(), "x") == shape then
        self.copy_of[addr] = node
        self.copies[#self.copies + 1] = addr -- alive in the composite, which the record holds
      end
    end
  end
end

function Tape.accumulate(_, node, c)
  if node_kind(node) == "batch" then
    fail("internal: a batched operator's cotangent must come member by member")
  end
  local shape = node_shape(node)
  c = cot.as_kind(c, node_kind(node), shape)
  if node.kind == "dense" and c:dim() ~= #shape then c = c:reshape(shape) end
  node.cot = cot.add(node.cot, c)
end

-- ------------------------------------------------------------- wrappers

-- Whether the call's arguments include a followed value.
local function is_followed(tape, n, ...)
  local current = tape.current
  for i = 1, n do
    local a = select(i, ...)
    local ta = type(a)
    if ta == "userdata" then
      local addr = address(a)
      if addr and current[addr] then return true end
    elseif ta == "table" and tape:table_nodes(a) then
      return true
    end
  end
  return false
end

-- A write (t[i] = v, t:set(..., v), t:fill(v), t:copy(u)) into a followed
-- tensor or of a followed value: the tensor's next version.
local function followed_write(tape, name, orig, n, ...)
  local args = {...}
  tape:check_write(name, args[1])
  local call = {...}
  local v = call[n]
  if n > 1 and lt.is_tensor(v) and not is_lazy(v) and dim_of(v) == 0 then
    call[n] = v:totable() -- a followed 0-d value is written as its number
  end
  orig(unpack(call, 1, n))
  tape:record(name, args, n, pack(args[1]))
end

-- lt.tensor{...} of a (nested, two levels at most) table holding followed
-- 0-d tensors: the numbers stacked into a dense tensor, each entry's
-- cotangent handed back to its tensor. Returns nil when nothing is followed.
local function followed_stack(tape, orig, t, ...)
  local entries = {}
  local function scan(v, i, j)
    if type(v) == "userdata" then
      local node = tape:node_of(v)
      if node then entries[#entries + 1] = {node = node, i = i, j = j} end
    end
  end
  for i, v in ipairs(t) do
    if type(v) == "table" and not lt.is_tensor(v) then
      for j, w in ipairs(v) do scan(w, i, j) end
    else
      scan(v, i)
    end
  end
  if #entries == 0 then return nil end
  local numbers = {}
  local function number(v)
    if type(v) == "userdata" and lt.is_tensor(v) and not is_lazy(v) and dim_of(v) == 0 then
      return v:totable()
    end
    return v
  end
  for i, v in ipairs(t) do
    if type(v) == "table" and not lt.is_tensor(v) then
      local row = {}
      for j, w in ipairs(v) do row[j] = number(w) end
      numbers[i] = row
    else
      numbers[i] = number(v)
    end
  end
  return tape:record("tensor", {t, ...}, 1 + select("#", ...), pack(orig(numbers, ...)),
    {entries = entries})
end

local function wrapper(name, orig)
  local writes, forward, known = WRITES[name], FORWARD[name], vjp[name] or CONSTRUCTORS[name]
  return function(...)
    local tape = active
    if tape == nil then return orig(...) end
    local n = select("#", ...)
    if name == "tensor" and type((...)) == "table" and not lt.is_tensor((...)) then
      local r = pack(followed_stack(tape, orig, ...))
      if r.n > 0 and r[1] ~= nil then return unpack(r, 1, r.n) end
    end
    if not is_followed(tape, n, ...) then return orig(...) end
    if writes then return followed_write(tape, name, orig, n, ...) end
    if name == "call" then
      return tape:record((...), {select(2, ...)}, n - 1, pack(orig(...)))
    end
    if not known then
      fail("lt.%s is not followed by lt.grad: its result would have no gradient", name)
    end
    if forward then
      local outs, kept = forward(orig, ...)
      return tape:record(name, {...}, n, outs, kept)
    end
    return tape:record(name, {...}, n, pack(orig(...)))
  end
end

-- The metamethods' wrappers: two operands, one result (Lua calls __unm
-- with the operand twice), recorded in C (bind_grad.c).
local function binary_wrapper(name, orig)
  local reads = not VIEWS[name] and not WRITES[name]
  return lt._metamethod_recorder(orig, name, reads, reads and not RESULT_UNREAD[name], live)
end

-- __index: t[i] of a number i (a method's name goes straight through).
local function index_wrapper(orig)
  return function(t, k)
    if type(k) ~= "number" then return orig(t, k) end
    local tape = active
    if tape == nil then return orig(t, k) end
    local addr = address(t)
    if not (addr and tape.current[addr]) then return orig(t, k) end
    return tape:record("index", {t, k}, 2, {orig(t, k), n = 1})
  end
end

-- What install puts at t[key] over value v, made once per (t, key, v):
-- install runs at every df call (bo.optimize's L-BFGS makes one per
-- evaluation), and walking the library with a closure made for each of its
-- 160 functions was half of a small call's cost; so were the two type()
-- calls per entry, now made once. {v, wrapper}, the wrapper false where v
-- runs as it is (not a function, PLAIN, _private, grad itself). Weak keys
-- (the tables are the library's own).
local wrappers = setmetatable({}, {__mode = "k"}) -- t → key → {v, wrapper or false}

local UNDERSCORE = string.byte("_")

local function make_wrapper(t, key, name, f)
  local w = false
  if type(f) ~= "function" or type(key) ~= "string" then return {f, false} end
  if t == lt._meta then
    w = name == "index" and index_wrapper(f) or name == "newindex" and wrapper(name, f)
        or binary_wrapper(name, f)
  elseif not PLAIN[key] and key:byte(1) ~= UNDERSCORE and key ~= "grad" and key ~= "gradcheck" then
    w = wrapper(name, f)
  end
  if w then
    READS[name] = not VIEWS[name] and not WRITES[name]
    READS_RESULT[name] = READS[name] and not RESULT_UNREAD[name]
  end
  if t == lt then originals[key] = f end
  return {f, w}
end

-- What install replaced, as flat triples t, key, f (reused: df calls do
-- not nest, and restore runs before the next install).
local saved, nsaved = {}, 0

-- Puts the wrappers of one table's followed functions in place.
local function install_table(t)
  local per = wrappers[t]
  if per == nil then
    per = {}
    wrappers[t] = per
  end
  local n = nsaved
  for k, v in next, t do
    local made = per[k]
    if made == nil or made[1] ~= v then
      made = make_wrapper(t, k, k, v)
      per[k] = made
    end
    local w = made[2]
    if w then
      saved[n + 1], saved[n + 2], saved[n + 3] = t, k, v
      n = n + 3
      t[k] = w -- an existing key: safe inside the walk
    end
  end
  nsaved = n
end

local function restore()
  for i = nsaved - 2, 1, -3 do saved[i][saved[i + 1]] = saved[i + 2] end -- existing keys
  nsaved = 0
end

-- Replaces every followed function of the library, its methods and its
-- metamethods by a wrapper; restore puts them back. (The library's tables
-- are walked at every call, so a function added or replaced since the
-- last one is followed too.)
local function install()
  install_table(lt)
  install_table(lt._methods)
  local meta = lt._meta
  local per = wrappers[meta] or {}
  wrappers[meta] = per
  local n = nsaved
  for mm, name in pairs(METAMETHODS) do
    local f = rawget(meta, mm)
    if type(f) == "function" then
      local made = per[mm]
      if made == nil or made[1] ~= f then
        made = make_wrapper(meta, mm, name, f)
        per[mm] = made
      end
      saved[n + 1], saved[n + 2], saved[n + 3] = meta, mm, f
      n = n + 3
      meta[mm] = made[2]
    end
  end
  nsaved = n
end

-- ------------------------------------------------------------- backward

-- The node a stop's cotangent belongs to: the version of that value the
-- record's result was built from (the latest one before the result).
function Tape:version_before(addr, id)
  local list = self.versions[addr]
  if list == nil then
    local node = self:node_at(self.current[addr])
    return node and node.id < id and node or nil
  end
  local best
  for _, node in ipairs(list) do
    if node.id < id then best = node end
  end
  return best
end

-- A followed argument of a constructor that no gradient reached (no
-- parameter of the new operator came from it, no cotangent reached it
-- under the operator): an error, never a silent zero (lt.interp's points).
local function check_reached(r, reached)
  for i = 1, r.nargs do
    local node = r.nodes[i]
    if node and not reached[node] then
      fail("lt.%s: its result's derivative with respect to argument %d (a %s) is not "
        .. "followed", r.name, i, lt.type(node.value))
    end
    for key, entry in pairs(r.tnodes[i] or {}) do
      local entries = key == "params" and type(entry) == "table" and not entry.id and entry
        or {[key] = entry}
      for k, n in pairs(entries) do
        if not reached[n] then
          fail("lt.%s: its result's derivative with respect to %s of argument %d is not "
            .. "followed", r.name, tostring(k), i)
        end
      end
    end
  end
end

local function constructor_backward(tape, r, g)
  local map = CONSTRUCTORS[r.name]
  local out, node = r.outs[1], r.out_nodes[1]
  if not lt.is_lazy(out) then -- a constructor that returned a dense tensor: itself
    return r:give(1, g[1])
  end
  local reached = {}
  local own, captured = lt._leaf_vjp(out, cot.compact(cot.parts_of(g[1])), tape:stops())
  for name, value in pairs(own) do
    local i, key, sub
    if type(map) == "function" then i, key, sub = map(r, name) else i = map[name] end
    if i and key then
      local t = r.tnodes[i]
      if t and sub then t = t[sub] end
      if t and t[key] then reached[t[key]] = true end
      r:give_key(i, key, value, sub)
    elseif i then
      if r.nodes[i] then reached[r.nodes[i]] = true end
      r:give(i, value)
    end
  end
  for _, c in ipairs(captured) do
    local target = tape.copy_of[c.node] or tape:version_before(c.node, node.id)
    if target then
      c.node = nil
      reached[target] = true
      tape:accumulate(target, {c})
    end
  end
  check_reached(r, reached)
end

-- ------------------------------------------------------------- batches
-- A record on batched operators ({b, m, n}: one batch dimension) runs its
-- operation's VJP member by member: member i's arguments are the members
-- (A[i]) of the batched ones and the others as they are (broadcast), its
-- results the results' members, its cotangents theirs. A batched
-- operator's cotangent is kept per member ({batch = b, [i] = parts}); a
-- dense argument's share goes to its slice when it has the member's shape
-- and whole (summed over members) when it has its own.

-- Operations whose dense operands of more than two dimensions are batches
-- of matrices (element-wise ones broadcast them as they are).
local MATRIX_OPS = {
  matmul = true, mul_meta = true, transpose = true, t = true, solve = true, inv_quad = true,
  logdet = true, inv_quad_logdet = true, slogdet = true, cholesky = true, root = true,
  eigh = true, svd = true, inverse = true, diagonal = true, trace = true, add_diag = true,
  add_jitter = true, row = true, dense = true,
}
-- Operations whose second operand of two dimensions is a batch of vectors.
local RHS_OPS = {solve = true, inv_quad = true, inv_quad_logdet = true}

-- The batch size of a record (nil: no batched operand or result).
local function batch_size_of(r, v)
  if type(v) ~= "userdata" or not lt.is_tensor(v) then return nil end
  local d = dim_of(v)
  if d > 2 and (is_lazy(v) or MATRIX_OPS[r.name]) then return v:size(1) end
end

local function batch_of(r)
  for k = 1, r.nargs do
    local a = r.args[k]
    local b = batch_size_of(r, a)
    if b then return b end
    if type(a) == "table" and not lt.is_tensor(a) then
      for _, v in pairs(a) do
        b = batch_size_of(r, v)
        if b then return b end
      end
    end
  end
  for j = 1, r.outs.n do
    local b = batch_size_of(r, r.outs[j])
    if b then return b end
  end
end

-- Member i of a value of a batched record, or the value (broadcast).
local function member_of(r, k, v, i, b)
  if type(v) ~= "userdata" or not lt.is_tensor(v) then return v end
  local d = dim_of(v)
  if d == 0 or v:size(1) ~= b then return v end
  if is_lazy(v) then return d > 2 and v[i] or v end
  if d > 2 or (d == 2 and (CONSTRUCTORS[r.name] or (RHS_OPS[r.name] and k == 2))) then
    return v[i]
  end
  return v
end

local MemberRecord = setmetatable({}, {__index = Record})
MemberRecord.__index = MemberRecord

-- Whether the share c for a dense node of full value `full` is a member's.
local function member_shaped(c, full, b)
  local fd = dim_of(full)
  if fd == 0 or full:size(1) ~= b then return false end
  local cd = type(c) == "number" and 0 or cot.is_parts(c) and 2 or c:dim()
  return cd == fd - 1
end

function MemberRecord:give(k, c)
  local node = self.nodes[k]
  if node == nil or c == nil then return end
  local kind, full, i = node_kind(node), node.value, self.member
  if kind == "batch" then
    node.cot = node.cot or {batch = self.batch}
    node.cot[i] = cot.add(node.cot[i], cot.parts_of(c))
  elseif kind == "dense" and member_shaped(c, full, self.batch) then
    local G = node.cot or lt.full(node_shape(node), 0)
    if cot.is_parts(c) then c = cot.dense_of(c, full:size(2), full:size(3)) end
    if dim_of(full) == 1 then
      G[i] = G[i] + (type(c) == "number" and c or c:item())
    else
      G[i] = G[i] + c
    end
    node.cot = G
  else
    self.tape:accumulate(node, c)
  end
end

-- lt.batch{A1, ..., Ak}: member i's cotangent is Ai's.
local function batch_constructor_backward(r, g)
  for i, entry in pairs(g[1] or {}) do
    if type(i) == "number" then
      local operand = r.args[1][i]
      local node = r.tnodes[1] and r.tnodes[1][i]
      if node then
        r.tape:accumulate(node, lt.is_lazy(operand) and entry or
          cot.dense_of(entry, operand:size(1), operand:size(2)))
      end
    end
  end
end

local function batched_backward(tape, r, g, b)
  if r.name == "batch" then return batch_constructor_backward(r, g) end
  if r.name == "index" then -- A[i] of a batched operator: member i's share
    local node, i = r.nodes[1], r.args[2]
    if node and g[1] ~= nil then
      node.cot = node.cot or {batch = b}
      node.cot[i] = cot.add(node.cot[i], cot.parts_of(g[1]))
    end
    return
  end
  for i = 1, b do
    local args, outs, gi, any = {}, {n = r.outs.n}, {}, false
    for k = 1, r.nargs do args[k] = member_of(r, k, r.args[k], i, b) end
    for j = 1, r.outs.n do
      local o = r.outs[j]
      if type(o) == "userdata" and lt.is_tensor(o) and dim_of(o) > 0 and o:size(1) == b then
        o = o[i]
        if type(o) == "number" then o = lt.tensor(o) end
      end
      outs[j] = o
    end
    for j, node in pairs(r.out_nodes) do
      local c = node.cot_spent
      if c ~= nil then
        if type(c) == "table" and c.batch then c = c[i]
        elseif type(c) == "userdata" then
          c = c[i]
        end
        gi[j] = c
        if c ~= nil then any = true end
      end
    end
    if any then
      local m = setmetatable({tape = tape, name = r.name, args = args, nargs = r.nargs,
        outs = outs, nodes = r.nodes, tnodes = r.tnodes, out_nodes = r.out_nodes,
        member = i, batch = b}, MemberRecord)
      if CONSTRUCTORS[r.name] then constructor_backward(tape, m, gi)
      else vjp[r.name](m, gi) end
    end
  end
end

-- The operators the chain rule stops at under a constructor's result
-- (every value the tape follows), sorted once, when the backward first
-- reaches a constructor.
function Tape:stops()
  local stops = self.stop_set
  if stops == nil then
    local all = {}
    for _, node in pairs(self.current) do all[#all + 1] = self:node_at(node).value end
    for _, copy in ipairs(self.copies) do all[#all + 1] = copy end
    stops = lt._stops(all)
    self.stop_set = stops
  end
  return stops
end

-- One record's backward: its results' cotangents handed to its arguments.
local function backward_record(tape, r)
  local g, any = {}, false
  for j, node in pairs(r.out_nodes) do
    g[j] = node.cot
    if node.cot ~= nil then any = true end
    node.cot_spent, node.cot = node.cot, nil -- spent: its record hands it on once
  end
  if any then
    local b = batch_of(r)
    if b then batched_backward(tape, r, g, b)
    elseif CONSTRUCTORS[r.name] then constructor_backward(tape, r, g)
    else vjp[r.name](r, g) end
  end
end

function Tape:backward(root)
  local kind = node_kind(root)
  if kind == "scalar" then root.cot = 1
  elseif kind == "dense" then root.cot = lt.full(node_shape(root), 1)
  else root.cot = {{W = lt.ones(1, 1)}} end
  local records, compact_nodes = self.records, self.compact_nodes
  for k = self[TAPE_NREC], 1, -1 do
    local r = records[k]
    if r then
      backward_record(self, r)
    else -- compact: followed only if a cotangent reached its result's node
      local node = compact_nodes[k]
      if node and node.cot ~= nil then backward_record(self, self:expand(k, node)) end
    end
  end
end

-- --------------------------------------------------------- params in, out

local function prepare(tape, p, path)
  if type(p) == "number" then
    local t = lt.tensor(p)
    tape.leaf[lt._address(t)] = tape:new_node(t, nil, 0)
    return t
  end
  if lt.is_tensor(p) then
    if lt.is_lazy(p) then
      fail("params%s is a %s operator; params hold numbers and dense tensors (differentiate "
        .. "with respect to the tensors it is built from)", path, lt.type(p))
    end
    local addr = lt._address(p)
    if tape.leaf[addr] == nil then tape.leaf[addr] = tape:new_node(p, addr, 0) end
    return p
  end
  if type(p) == "table" and getmetatable(p) == nil then
    local out = {}
    for k, v in pairs(p) do
      local where = type(k) == "string" and "." .. k or "[" .. tostring(k) .. "]"
      out[k] = prepare(tape, v, path .. where)
    end
    return out
  end
  fail("params%s is a %s; params hold numbers, dense tensors and tables of them",
    path, lt.is_tensor(p) and lt.type(p) or type(p))
end

local function gradient_of(tape, p, prepared)
  if type(p) == "number" then
    local node = tape.leaf[lt._address(prepared)]
    return node.grad or 0
  end
  if lt.is_tensor(p) then
    local node = tape.leaf[lt._address(p)]
    local g = node.grad
    if g == nil then return lt.full(p:shape(), 0) end
    if type(g) == "number" then return lt.tensor(g) end
    return g
  end
  local out = {}
  for k, v in pairs(p) do out[k] = gradient_of(tape, v, prepared[k]) end
  return out
end

-- The one number f's first result stands for, and its node (nil: a constant).
local function scalar_result(tape, v)
  if type(v) == "number" then return v, nil end
  if not lt.is_tensor(v) then
    fail("f must return a number or a one-element tensor first, got %s",
      v == nil and "nothing" or type(v))
  end
  if lt.is_lazy(v) or v:numel() ~= 1 then
    fail("f must return a number or a one-element tensor first, got a %s of shape %s",
      lt.type(v), table.concat(v:shape(), "x"))
  end
  return v:sum(), tape:node_of(v)
end

-- Runs f on a coroutine of its own, so that a yield inside it (which would
-- leave the library wrapped while other code runs) is caught.
local function run(f, args, n)
  local co = coroutine.create(function() return pack(f(unpack(args, 1, n))) end)
  local ok, res = coroutine.resume(co)
  if not ok then error(res, 0) end
  if coroutine.status(co) ~= "dead" then
    fail("f yielded; a differentiated function must run to its end")
  end
  return res
end

-- Runs f(params, ...) with every call recorded: the tape, the parameters
-- as f got them, f's results, the number its first result stands for and
-- that result's node (nil: f's value does not depend on params).
local function recorded_run(f, params, ...)
  if active ~= nil then
    fail("lt.grad inside lt.grad is not supported (differentiate one function at a time)")
  end
  local tape = new_tape()
  local prepared = prepare(tape, params, "")
  local args = pack(prepared, ...)
  install()
  active, live[1] = tape, tape
  local ok, res = pcall(run, f, args, args.n)
  active, live[1] = nil, nil
  if tape.gc_mode == "incremental" then collectgarbage("incremental") end
  restore()
  if not ok then error(res, 0) end
  local value, root = scalar_result(tape, res[1])
  return tape, prepared, res, value, root
end

--- The value of f(params, ...) as lt.grad sees it (numbers as 0-d
-- tensors, the calls recorded), without the backward pass: what
-- lt.gradcheck and the fuzzer difference.
function autograd.evaluate(f, params, ...)
  lib()
  local _, _, _, value = recorded_run(f, params, ...)
  return value
end

--- lt.grad(f) → df; df(params, ...) → grads, value, f's other results.
function autograd.grad(f)
  lib()
  local mt = type(f) == "table" and getmetatable(f)
  if type(f) ~= "function" and not (mt and mt.__call) then
    fail("expected a function, got %s", type(f))
  end
  return function(params, ...)
    local tape, prepared, res, value, root = recorded_run(f, params, ...)
    -- the parameters' first versions collect their gradients (a parameter
    -- returned as it is, f = function(p) return p end, is its own root)
    if root ~= nil then tape:backward(root) end
    for _, node in pairs(tape.leaf) do node.grad = node.cot end
    local grads = gradient_of(tape, params, prepared)
    return grads, value, unpack(res, 2, res.n)
  end
end

-- Every number of params (a structure of numbers and dense tensors) as a
-- slot {get, set, grad}, walking params and grads (the same structure)
-- together. A number is kept in its table, so the top one sits in a box.
local function slots_of(p, g, out, holder, key)
  if type(p) == "number" then
    out[#out + 1] = {
      get = function() return holder[key] end,
      set = function(v) holder[key] = v end,
      grad = g,
    }
  elseif lt.is_tensor(p) then
    local flat = p:reshape(p:numel())
    local gflat = g:contiguous():reshape(g:numel())
    for i = 1, p:numel() do
      out[#out + 1] = {
        get = function() return flat[i] end,
        set = function(v) flat[i] = v end,
        grad = gflat[i],
      }
    end
  else
    for k, v in pairs(p) do slots_of(v, g[k], out, p, k) end
  end
  return out
end

-- A private copy of params (tensors cloned, contiguous, so slots can write).
local function deep_copy(p)
  if type(p) == "number" then return p end
  if lt.is_tensor(p) then return p:clone():contiguous() end
  local out = {}
  for k, v in pairs(p) do out[k] = deep_copy(v) end
  return out
end

--- lt.gradcheck(f, params [, {eps, rtol, atol}]) → ok, max_error: lt.grad(f)
-- against central differences, entry by entry.
function autograd.gradcheck(f, params, opts)
  lib()
  opts = opts or {}
  if type(opts) ~= "table" then fail("gradcheck: options must be a table, got %s", type(opts)) end
  local eps, rtol, atol = opts.eps or 1e-6, opts.rtol or 1e-5, opts.atol or 1e-7
  local box = {p = deep_copy(params)}
  local grads = autograd.grad(f)(deep_copy(params))
  local slots = slots_of(box.p, grads, {}, box, "p")
  local ok, worst = true, 0
  for _, slot in ipairs(slots) do
    local x = slot.get()
    local h = eps * math.max(1, math.abs(x))
    -- f runs as it does inside lt.grad (numbers as 0-d tensors), recorded
    slot.set(x + h)
    local fp = autograd.evaluate(f, box.p)
    slot.set(x - h)
    local fm = autograd.evaluate(f, box.p)
    slot.set(x)
    local fd = (fp - fm) / (2 * h)
    local err = math.abs(slot.grad - fd)
    if err ~= err or err > atol + rtol * math.abs(fd) then ok = false end -- NaN fails too
    if err > worst or err ~= err then worst = err end
  end
  return ok, worst
end

return autograd
