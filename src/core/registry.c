/*
 * registry.c — types, operation names and the rule table.
 *
 * Rules live in an open-addressing hash keyed by (op, type a, type b), each
 * slot holding a list with the latest registration first. Dispatch probes at
 * most four keys — exact, (a, any), (any, b), (any, any) — with integer
 * hashing only: no string comparison on the hot path.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* Operations that take one operand: resolution uses type a only. */
static int op_is_unary(int op) {
  return op >= 0 && op < LT_OP_BUILTIN_COUNT && lt_op_table[op].info.operands == 1;
}

/* ---------------------------------------------------------------- types */

/* The types and their states grow together: both blocks are made before
 * either is replaced, so a failure leaves the two as they were. */
static int grow_types(lt_context *ctx, int need) {
  if (need <= ctx->types_cap) return LT_OK;
  int cap = ctx->types_cap ? ctx->types_cap : 8;
  while (cap < need) cap *= 2;
  size_t old = (size_t)ctx->types_cap;
  lt_type_state_slot *st = lt_calloc(ctx, (size_t)cap, sizeof *st);
  if (st == NULL) return LT_ERR;
  const lt_type **t = lt_realloc(ctx, (void *)ctx->types, sizeof *t * old, sizeof *t * (size_t)cap);
  if (t == NULL) {
    lt_free(ctx, st, sizeof *st * (size_t)cap);
    return LT_ERR;
  }
  for (int i = ctx->types_cap; i < cap; i++) t[i] = NULL;
  if (old > 0) memcpy(st, ctx->type_states, sizeof *st * old);
  lt_free(ctx, ctx->type_states, sizeof *st * old);
  ctx->types = t;
  ctx->type_states = st;
  ctx->types_cap = cap;
  return LT_OK;
}

void *lt_type_state(lt_context *ctx, int type_id, size_t size,
                    void (*free_state)(lt_context *ctx, void *state)) {
  if (type_id <= LT_TYPE_ANY || type_id >= ctx->ntypes) {
    lt_error(ctx, "type_state: unknown type id %d", type_id);
    return NULL;
  }
  lt_type_state_slot *slot = &ctx->type_states[type_id];
  if (slot->state == NULL) {
    slot->state = lt_calloc(ctx, 1, size);
    if (slot->state == NULL) return NULL;
    slot->size = size;
    slot->free = free_state;
  }
  return slot->state;
}

void *lt_type_state_made(const lt_context *ctx, int type_id) {
  if (type_id <= LT_TYPE_ANY || type_id >= ctx->ntypes || ctx->type_states == NULL) return NULL;
  return ctx->type_states[type_id].state;
}

size_t lt_type_state_bytes(const lt_context *ctx) {
  size_t bytes = 0;
  for (int i = 0; ctx->type_states && i < ctx->ntypes; i++)
    if (ctx->type_states[i].state != NULL) bytes += ctx->type_states[i].size;
  return bytes;
}

/* Before anything else goes: a state's free function may use the context. */
static void free_type_states(lt_context *ctx) {
  for (int i = 0; ctx->type_states && i < ctx->ntypes; i++) {
    lt_type_state_slot *slot = &ctx->type_states[i];
    if (slot->state == NULL) continue;
    if (slot->free) slot->free(ctx, slot->state);
    lt_free(ctx, slot->state, slot->size);
    slot->state = NULL;
  }
}

int lt_registry_init(lt_context *ctx) {
  if (grow_types(ctx, LT_TYPE_BUILTIN_COUNT + 8) != LT_OK) return LT_ERR;
  ctx->ntypes = LT_TYPE_BUILTIN_COUNT;
  ctx->rule_priority = LT_PRIORITY_USER;
  ctx->rule_unit = -1;
  ctx->nslots = 256;
  ctx->slots = lt_calloc(ctx, ctx->nslots, sizeof *ctx->slots);
  return ctx->slots ? LT_OK : LT_ERR;
}

/* Built-in types of the enum in lazytensor.h sit at their fixed ids; later
 * ones (LT_TYPE_NEXT) take the next free id, as lt_register_type gives. */
int lt_register_builtin_type(lt_context *ctx, int id, const lt_type *type) {
  if (id == LT_TYPE_NEXT) return lt_register_type(ctx, type) >= 0 ? LT_OK : LT_ERR;
  if (id <= LT_TYPE_ANY || id >= LT_TYPE_BUILTIN_COUNT)
    return lt_error(ctx, "register_type: bad built-in id %d", id);
  ctx->types[id] = type;
  return LT_OK;
}

int lt_type_id_of(lt_context *ctx, const lt_type *type) {
  for (int i = 1; i < ctx->ntypes; i++)
    if (ctx->types[i] == type) return i;
  return lt_error(ctx, "type '%s' is not registered", type->name);
}

int lt_register_type(lt_context *ctx, const lt_type *type) {
  if (type == NULL || type->name == NULL || type->matmul == NULL)
    return lt_error(ctx, "register_type: a type needs a name and a matmul");
  if (lt_type_id(ctx, type->name) != LT_ERR)
    return lt_error(ctx, "register_type: type '%s' already exists", type->name);
  lt_clear_error(ctx);
  if (grow_types(ctx, ctx->ntypes + 1) != LT_OK) return LT_ERR;
  ctx->types[ctx->ntypes] = type;
  return ctx->ntypes++;
}

int lt_type_id(lt_context *ctx, const char *name) {
  if (strcmp(name, "any") == 0) return LT_TYPE_ANY;
  for (int i = 1; i < ctx->ntypes; i++)
    if (ctx->types[i] != NULL && strcmp(ctx->types[i]->name, name) == 0) return i;
  return lt_error(ctx, "unknown type '%s'", name);
}

const char *lt_type_name(lt_context *ctx, int type_id) {
  if (type_id == LT_TYPE_ANY) return "any";
  if (type_id < 0 || type_id >= ctx->ntypes || ctx->types[type_id] == NULL) return "?";
  return ctx->types[type_id]->name;
}

int lt_type_count(const lt_context *ctx) { return ctx->ntypes; }

const lt_type *lt_type_descriptor(const lt_context *ctx, int type_id) {
  if (type_id <= 0 || type_id >= ctx->ntypes) return NULL;
  return ctx->types[type_id];
}

/* ----------------------------------------------------------- operations */

/* What an operation added at run time takes and gives: a and maybe b, and
 * one tensor or one number. */
static lt_op_info *new_custom_op(lt_context *ctx, const char *name) {
  lt_op_info *op = lt_malloc(ctx, sizeof *op);
  if (op == NULL) return NULL;
  char *copy = lt_strdup(ctx, name);
  if (copy == NULL) {
    lt_free(ctx, op, sizeof *op);
    return NULL;
  }
  *op = (lt_op_info){.name = copy,
                     .operands = 0,
                     .extra = LT_EXTRA_NONE,
                     .nresults = 1,
                     .result = {LT_RESULT_TENSOR_OR_NUMBER}};
  return op;
}

static void free_custom_op(lt_context *ctx, lt_op_info *op) {
  lt_free(ctx, (char *)op->name, strlen(op->name) + 1);
  lt_free(ctx, op, sizeof *op);
}

int lt_op_id(lt_context *ctx, const char *name, int create) {
  for (int i = 0; i < LT_OP_BUILTIN_COUNT; i++)
    if (strcmp(lt_op_table[i].info.name, name) == 0) return i;
  for (int i = 0; i < ctx->nops; i++)
    if (strcmp(ctx->custom_ops[i]->name, name) == 0) return LT_OP_BUILTIN_COUNT + i;
  if (!create) return lt_error(ctx, "unknown operation '%s'", name);
  if (name[0] == '\0') return lt_error(ctx, "op_id: an operation needs a non-empty name");
  if (ctx->nops == ctx->ops_cap) {
    int cap = ctx->ops_cap ? 2 * ctx->ops_cap : 8;
    lt_op_info **ops = lt_realloc(ctx, ctx->custom_ops, sizeof *ops * (size_t)ctx->ops_cap,
                                  sizeof *ops * (size_t)cap);
    if (ops == NULL) return LT_ERR;
    ctx->custom_ops = ops;
    ctx->ops_cap = cap;
  }
  lt_op_info *op = new_custom_op(ctx, name);
  if (op == NULL) return LT_ERR;
  ctx->custom_ops[ctx->nops] = op;
  return LT_OP_BUILTIN_COUNT + ctx->nops++;
}

const lt_op_info *lt_op_info_of(const lt_context *ctx, int op) {
  if (op >= 0 && op < LT_OP_BUILTIN_COUNT) return &lt_op_table[op].info;
  if (op >= LT_OP_BUILTIN_COUNT && op - LT_OP_BUILTIN_COUNT < ctx->nops)
    return ctx->custom_ops[op - LT_OP_BUILTIN_COUNT];
  return NULL;
}

const char *lt_op_name(const lt_context *ctx, int op) {
  const lt_op_info *info = lt_op_info_of(ctx, op);
  return info ? info->name : "?";
}

int lt_op_count(const lt_context *ctx) { return LT_OP_BUILTIN_COUNT + ctx->nops; }

/* ---------------------------------------------------------------- rules */

static uint64_t rule_key(int op, int ta, int tb) {
  return ((uint64_t)(op + 1) << 40) | ((uint64_t)(uint32_t)ta << 20) | (uint64_t)(uint32_t)tb;
}

static size_t key_hash(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return (size_t)key;
}

static lt_rule_slot *find_slot(const lt_context *ctx, uint64_t key) {
  size_t mask = ctx->nslots - 1;
  for (size_t i = key_hash(key) & mask;; i = (i + 1) & mask) {
    lt_rule_slot *s = &ctx->slots[i];
    if (s->key == key || s->key == 0) return s;
  }
}

static int grow_slots(lt_context *ctx) {
  size_t old_n = ctx->nslots;
  lt_rule_slot *old = ctx->slots;
  lt_rule_slot *slots = lt_calloc(ctx, old_n * 2, sizeof *slots);
  if (slots == NULL) return LT_ERR;
  ctx->slots = slots;
  ctx->nslots = old_n * 2;
  for (size_t i = 0; i < old_n; i++)
    if (old[i].key != 0) *find_slot(ctx, old[i].key) = old[i];
  lt_free(ctx, old, old_n * sizeof *old);
  return LT_OK;
}

static void free_rule(lt_context *ctx, lt_rule *r) {
  if (r->free_ud) r->free_ud(ctx, r->ud);
  lt_free(ctx, r->name, strlen(r->name) + 1);
  lt_free(ctx, r, sizeof *r);
}

void lt_registry_free(lt_context *ctx) {
  free_type_states(ctx);
  for (size_t i = 0; ctx->slots && i < ctx->nslots; i++) {
    lt_rule *r = ctx->slots[i].head;
    while (r) {
      lt_rule *next = r->next;
      free_rule(ctx, r);
      r = next;
    }
  }
  lt_free(ctx, ctx->slots, ctx->nslots * sizeof *ctx->slots);
  for (int i = 0; i < ctx->nops; i++) free_custom_op(ctx, ctx->custom_ops[i]);
  lt_free(ctx, ctx->custom_ops, sizeof *ctx->custom_ops * (size_t)ctx->ops_cap);
  lt_free(ctx, (void *)ctx->types, sizeof *ctx->types * (size_t)ctx->types_cap);
  lt_free(ctx, ctx->type_states, sizeof *ctx->type_states * (size_t)ctx->types_cap);
}

/* Room for `extra` more keys, so that the pushes after it cannot fail. */
static int reserve_slots(lt_context *ctx, size_t extra) {
  while ((ctx->nused + extra) * 4 > ctx->nslots * 3)
    if (grow_slots(ctx) != LT_OK) return LT_ERR;
  return LT_OK;
}

/* Cannot fail: the caller reserved the slot (reserve_slots). The rule goes
 * before the first one of its priority or lower: higher priorities first,
 * and within one the latest registration. */
static void push_rule(lt_context *ctx, uint64_t key, lt_rule *rule) {
  lt_rule_slot *s = find_slot(ctx, key);
  if (s->key == 0) {
    s->key = key;
    ctx->nused++;
  }
  lt_rule **at = &s->head;
  while (*at != NULL && (*at)->priority > rule->priority) at = &(*at)->next;
  rule->next = *at;
  *at = rule;
}

/* While the built-in units register: another unit's rule on the same key
 * at the same priority would leave their order to the list's (units.def). */
static int check_unit_order(lt_context *ctx, int op, int type_a, int type_b) {
  if (ctx->rule_unit < 0) return LT_OK;
  lt_rule_slot *s = find_slot(ctx, rule_key(op, type_a, type_b));
  for (lt_rule *r = s->key ? s->head : NULL; r != NULL; r = r->next)
    if (r->priority == ctx->rule_priority && r->unit != ctx->rule_unit)
      return lt_error(ctx,
                      "register: two built-in units give %s(%s, %s) rules at one priority "
                      "(\"%s\" and another): give one a priority (src/ops/units.def)",
                      lt_op_name(ctx, op), lt_type_name(ctx, type_a), lt_type_name(ctx, type_b),
                      r->name);
  return LT_OK;
}

static lt_rule *new_rule(lt_context *ctx, const char *name, lt_rule_fn fn, void *ud,
                         void (*free_ud)(lt_context *, void *), int swap) {
  lt_rule *r = lt_malloc(ctx, sizeof *r);
  if (r == NULL) return NULL;
  r->name = lt_strdup(ctx, name ? name : "(unnamed)");
  if (r->name == NULL) {
    lt_free(ctx, r, sizeof *r);
    return NULL;
  }
  r->fn = fn;
  r->ud = ud;
  r->free_ud = free_ud;
  r->swap = swap;
  r->priority = ctx->rule_priority;
  r->unit = ctx->rule_unit;
  r->next = NULL;
  return r;
}

static int check_type_id(lt_context *ctx, int id) {
  if (id < 0 || id >= ctx->ntypes) return lt_error(ctx, "implements: unknown type id %d", id);
  return LT_OK;
}

int lt_register_rule(lt_context *ctx, int op, int type_a, int type_b, const char *name,
                     lt_rule_fn fn, void *ud, void (*free_ud)(lt_context *, void *),
                     int symmetric) {
  if (fn == NULL) return lt_error(ctx, "implements: a rule needs a function");
  if (op < 0 || op >= LT_OP_BUILTIN_COUNT + ctx->nops)
    return lt_error(ctx, "implements: unknown operation id %d", op);
  if (check_type_id(ctx, type_a) != LT_OK || check_type_id(ctx, type_b) != LT_OK) return LT_ERR;
  if (op_is_unary(op)) type_b = LT_TYPE_ANY, symmetric = 0;
  int mirrored = symmetric && type_a != type_b;
  if (check_unit_order(ctx, op, type_a, type_b) != LT_OK ||
      (mirrored && check_unit_order(ctx, op, type_b, type_a) != LT_OK))
    return LT_ERR;
  /* The mirror shares ud; only the first registration owns (frees) it. */
  lt_rule *r = new_rule(ctx, name, fn, ud, free_ud, 0);
  lt_rule *m = mirrored ? new_rule(ctx, name, fn, ud, NULL, 1) : NULL;
  /* Everything that can fail happens before the first push: a failure
   * leaves the registry as it was and ud with the caller. */
  if (r == NULL || (mirrored && m == NULL) || reserve_slots(ctx, mirrored ? 2 : 1) != LT_OK)
    goto fail;
  push_rule(ctx, rule_key(op, type_a, type_b), r);
  if (mirrored) push_rule(ctx, rule_key(op, type_b, type_a), m);
  return LT_OK;
fail:
  if (r) {
    r->free_ud = NULL; /* on failure the caller keeps ownership of ud */
    free_rule(ctx, r);
  }
  if (m) free_rule(ctx, m);
  return LT_ERR;
}

int lt_register_rules(lt_context *ctx, const lt_rule_spec *specs, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (lt_register_rule(ctx, specs[i].op, specs[i].type_a, specs[i].type_b, specs[i].name,
                         specs[i].fn, specs[i].ud, NULL, specs[i].symmetric) != LT_OK)
      return LT_ERR;
  return LT_OK;
}

/* The keys probed for op(a, b), most specific first. */
static int candidate_keys(int op, int ta, int tb, int unary, uint64_t keys[4]) {
  if (unary) {
    keys[0] = rule_key(op, ta, LT_TYPE_ANY);
    keys[1] = rule_key(op, LT_TYPE_ANY, LT_TYPE_ANY);
    return 2;
  }
  keys[0] = rule_key(op, ta, tb);
  keys[1] = rule_key(op, ta, LT_TYPE_ANY);
  keys[2] = rule_key(op, LT_TYPE_ANY, tb);
  keys[3] = rule_key(op, LT_TYPE_ANY, LT_TYPE_ANY);
  return 4;
}

static int operand_types(lt_context *ctx, const lt_args *args, int *ta, int *tb, int *unary) {
  if (args->a == NULL) return lt_error(ctx, "%s: missing operand", lt_op_name(ctx, args->op));
  if (args->b == NULL && args->op < LT_OP_BUILTIN_COUNT && !op_is_unary(args->op))
    return lt_error(ctx, "%s: expected two operands", lt_op_name(ctx, args->op));
  *unary = op_is_unary(args->op) || args->b == NULL;
  *ta = args->a->type_id;
  *tb = *unary ? LT_TYPE_ANY : args->b->type_id;
  return LT_OK;
}

int lt_has_own_rule(const lt_context *ctx, int op, int type_a, int type_b) {
  if (type_a == LT_TYPE_ANY) return 0;
  uint64_t keys[2] = {rule_key(op, type_a, type_b), rule_key(op, type_a, LT_TYPE_ANY)};
  for (int k = 0; k < 2; k++) {
    lt_rule_slot *s = find_slot(ctx, keys[k]);
    if (s->key && s->head) return 1;
  }
  return 0;
}

int lt_dispatch(lt_context *ctx, const lt_args *args, lt_result *res) {
  int ta, tb, unary;
  if (operand_types(ctx, args, &ta, &tb, &unary) != LT_OK) return LT_ERR;
  /* Batched operands go to the batch rules or member by member (batch.c),
   * never to a 2-d rule. */
  if (lt_batch_wanted(args)) return lt_batch_run(ctx, args, res);
  lt_apply_num_threads(ctx);
  uint64_t keys[4];
  int nkeys = candidate_keys(args->op, ta, tb, unary, keys);
  memset(res, 0, sizeof *res);
  for (int k = 0; k < nkeys; k++) {
    if (k > 0 && keys[k] == keys[k - 1]) continue;
    lt_rule_slot *s = find_slot(ctx, keys[k]);
    for (lt_rule *r = s->key ? s->head : NULL; r != NULL; r = r->next) {
      int rc;
      if (r->swap) {
        lt_args swapped = *args;
        swapped.a = args->b;
        swapped.b = args->a;
        rc = r->fn(ctx, &swapped, res, r->ud);
      } else {
        rc = r->fn(ctx, args, res, r->ud);
      }
      if (rc != LT_NOT_IMPLEMENTED) return rc == LT_OK ? LT_OK : LT_ERR;
    }
  }
  if (unary)
    return lt_error(ctx, "%s: not implemented for %s", lt_op_name(ctx, args->op),
                    lt_type_name(ctx, ta));
  return lt_error(ctx, "%s: not implemented for (%s, %s)", lt_op_name(ctx, args->op),
                  lt_type_name(ctx, ta), lt_type_name(ctx, tb));
}

/* --------------------------------------------------------- batch rules */

/* Batch-aware rules live under keys of their own (this bit set), so that
 * the lists a 2-d call searches never hold one, and a batched call finds
 * only them. */
#define BATCH_KEY ((uint64_t)1 << 63)

int lt_register_batch_rule(lt_context *ctx, int op, int type_a, int type_b, const char *name,
                           lt_rule_fn fn, void *ud) {
  if (fn == NULL) return lt_error(ctx, "implements: a rule needs a function");
  if (op < 0 || op >= LT_OP_BUILTIN_COUNT + ctx->nops)
    return lt_error(ctx, "implements: unknown operation id %d", op);
  if (check_type_id(ctx, type_a) != LT_OK || check_type_id(ctx, type_b) != LT_OK) return LT_ERR;
  if (op_is_unary(op)) type_b = LT_TYPE_ANY;
  lt_rule *r = new_rule(ctx, name, fn, ud, NULL, 0);
  if (r == NULL) return LT_ERR;
  if (reserve_slots(ctx, 1) != LT_OK) {
    free_rule(ctx, r);
    return LT_ERR;
  }
  push_rule(ctx, rule_key(op, type_a, type_b) | BATCH_KEY, r);
  return LT_OK;
}

int lt_dispatch_batch_rules(lt_context *ctx, const lt_args *args, lt_result *res, int ta, int tb) {
  int unary = op_is_unary(args->op) || args->b == NULL;
  uint64_t keys[4];
  int nkeys = candidate_keys(args->op, ta, unary ? LT_TYPE_ANY : tb, unary, keys);
  for (int k = 0; k < nkeys; k++) {
    if (k > 0 && keys[k] == keys[k - 1]) continue;
    lt_rule_slot *s = find_slot(ctx, keys[k] | BATCH_KEY);
    for (lt_rule *r = s->key ? s->head : NULL; r != NULL; r = r->next) {
      memset(res, 0, sizeof *res);
      int rc = r->fn(ctx, args, res, r->ud);
      if (rc != LT_NOT_IMPLEMENTED) return rc == LT_OK ? LT_OK : LT_ERR;
    }
  }
  return LT_NOT_IMPLEMENTED;
}

/* ------------------------------------------------------------- explain */

typedef struct strbuf {
  lt_context *ctx;
  char *data;
  size_t len, cap;
  int failed;
} strbuf;

static void sb_add(strbuf *sb, const char *s) {
  size_t n = strlen(s);
  if (sb->failed) return;
  if (sb->len + n + 1 > sb->cap) {
    size_t cap = sb->cap ? sb->cap : 128;
    while (sb->len + n + 1 > cap) cap *= 2;
    char *d = lt_realloc(sb->ctx, sb->data, sb->cap, cap);
    if (d == NULL) {
      sb->failed = 1;
      return;
    }
    sb->data = d;
    sb->cap = cap;
  }
  memcpy(sb->data + sb->len, s, n + 1);
  sb->len += n;
}

static void key_types(uint64_t key, int *ta, int *tb) {
  *ta = (int)((key >> 20) & 0xFFFFF);
  *tb = (int)(key & 0xFFFFF);
}

char *lt_explain(lt_context *ctx, int op, const lt_tensor *a, const lt_tensor *b) {
  lt_args args = {.op = op, .a = (lt_tensor *)a, .b = (lt_tensor *)b};
  int ta, tb, unary;
  if (op < 0 || op >= LT_OP_BUILTIN_COUNT + ctx->nops) {
    lt_error(ctx, "explain: unknown operation id %d", op);
    return NULL;
  }
  if (operand_types(ctx, &args, &ta, &tb, &unary) != LT_OK) return NULL;
  /* A batched call: the batch rules of the members' types, then the
   * members' own calls (lt_batch_run). */
  int batched = lt_batch_wanted(&args);
  uint64_t bit = batched ? BATCH_KEY : 0;
  if (batched) {
    ta = lt_batch_member_type(a);
    tb = unary ? LT_TYPE_ANY : lt_batch_member_type(b);
  }
  uint64_t keys[4];
  int nkeys = candidate_keys(op, ta, tb, unary, keys);
  strbuf sb = {.ctx = ctx};
  char line[256];
  const char *what = batched ? ", batched" : "";
  if (unary)
    snprintf(line, sizeof line, "%s(%s%s):\n", lt_op_name(ctx, op), lt_type_name(ctx, ta), what);
  else
    snprintf(line, sizeof line, "%s(%s, %s%s):\n", lt_op_name(ctx, op), lt_type_name(ctx, ta),
             lt_type_name(ctx, tb), what);
  sb_add(&sb, line);
  int n = 0;
  for (int k = 0; k < nkeys; k++) {
    if (k > 0 && keys[k] == keys[k - 1]) continue;
    lt_rule_slot *s = find_slot(ctx, keys[k] | bit);
    for (lt_rule *r = s->key ? s->head : NULL; r != NULL; r = r->next) {
      int ka, kb;
      key_types(keys[k], &ka, &kb);
      n++;
      if (unary)
        snprintf(line, sizeof line, "  %d. %s [%s]%s\n", n, r->name, lt_type_name(ctx, ka),
                 n == 1 ? "  <- runs first" : "");
      else
        snprintf(line, sizeof line, "  %d. %s [%s, %s]%s%s\n", n, r->name, lt_type_name(ctx, ka),
                 lt_type_name(ctx, kb), r->swap ? " (operands swapped)" : "",
                 n == 1 ? "  <- runs first" : "");
      sb_add(&sb, line);
    }
  }
  if (batched)
    sb_add(&sb, n == 0 ? "  no batch rule: member by member, each member's call as explain shows "
                         "for the member (A[i])\n"
                       : "  then, when none answers: member by member, each member's call as "
                         "explain shows for the member (A[i])\n");
  else if (n == 0) sb_add(&sb, "  no rule: the call is an error\n");
  else if (n > 1) sb_add(&sb, "  (a rule answering NotImplemented hands the call to the next)\n");
  if (sb.failed) {
    lt_free(ctx, sb.data, sb.cap);
    return NULL;
  }
  /* Shrink to strlen + 1 so callers free with that size. */
  char *out = lt_strdup(ctx, sb.data);
  lt_free(ctx, sb.data, sb.cap);
  return out;
}
