/*
 * test_registry.c — the registry's units (src/ops/units.def): every built-in
 * unit registers (and when one cannot, the reason is printed here, where
 * lt_context_new could only return NULL), rules of one key go by priority
 * whatever the order of registration, two built-in units at one priority on
 * one key are refused, rules registered once the context exists run
 * before every built-in one, and types keep state in a context
 * (lt_type_state) that goes with it.
 * Prints "N passed, M failed"; exits non-zero on any failure.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/core/internal.h"

#include "check.h"

static void *plain_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  (void)ud, (void)osize;
  if (nsize == 0) {
    free(ptr);
    return NULL;
  }
  return realloc(ptr, nsize);
}

/* lt_context_new's steps, one by one, so that a failure has a message. */
static void test_builtins_register(void) {
  lt_context *ctx = calloc(1, sizeof *ctx);
  if (ctx == NULL) return;
  ctx->alloc = plain_alloc;
  lt_settings_default(&ctx->settings);
  int rc = lt_registry_init(ctx);
  CHECK(rc == LT_OK, "registry_init: %s", lt_last_error(ctx));
  if (rc == LT_OK) {
    rc = lt_register_builtins(ctx);
    CHECK(rc == LT_OK, "the built-in units do not register: %s", lt_last_error(ctx));
    CHECK(ctx->rule_priority == LT_PRIORITY_USER && ctx->rule_unit == -1,
          "after the built-ins, rules are the user's (priority %d, unit %d)", ctx->rule_priority,
          ctx->rule_unit);
  }
  lt_registry_free(ctx);
  free(ctx);
}

static int rule_a(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)args, (void)ud;
  res->x[0] = 1;
  return LT_OK;
}

static int rule_b(lt_context *ctx, const lt_args *args, lt_result *res, void *ud) {
  (void)ctx, (void)args, (void)ud;
  res->x[0] = 2;
  return LT_OK;
}

/* The first line of lt_explain after the header: the rule that runs. */
static int first_rule_is(lt_context *ctx, int op, lt_tensor *a, lt_tensor *b, const char *name) {
  char *s = lt_explain(ctx, op, a, b);
  if (s == NULL) return 0;
  const char *line = strchr(s, '\n');
  int ok = line != NULL && strncmp(line + 1, "  1. ", 5) == 0 &&
           strncmp(line + 6, name, strlen(name)) == 0;
  lt_free(ctx, s, strlen(s) + 1);
  return ok;
}

static void test_priorities(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  CHECK(ctx != NULL, "lt_context_new");
  if (ctx == NULL) return;
  int op = lt_op_id(ctx, "registry_test_op", 1);
  lt_tensor *a = lt_dense_zeros(ctx, 2, (size_t[]){2, 2});
  CHECK(op >= 0 && a != NULL, "setup: %s", lt_last_error(ctx));

  /* Two units: the higher priority runs first though registered first. */
  ctx->rule_unit = 1000, ctx->rule_priority = LT_PRIORITY_SIZE;
  CHECK(lt_register_rule(ctx, op, LT_TYPE_ANY, LT_TYPE_ANY, "high", rule_a, NULL, NULL, 0) == LT_OK,
        "register high: %s", lt_last_error(ctx));
  ctx->rule_unit = 1001, ctx->rule_priority = LT_PRIORITY_FALLBACK;
  CHECK(lt_register_rule(ctx, op, LT_TYPE_ANY, LT_TYPE_ANY, "low", rule_b, NULL, NULL, 0) == LT_OK,
        "register low: %s", lt_last_error(ctx));
  CHECK(first_rule_is(ctx, op, a, NULL, "high"), "the higher priority runs first");

  /* A third unit at a priority already taken on that key: refused. */
  ctx->rule_unit = 1002, ctx->rule_priority = LT_PRIORITY_FALLBACK;
  CHECK(lt_register_rule(ctx, op, LT_TYPE_ANY, LT_TYPE_ANY, "clash", rule_a, NULL, NULL, 0) ==
                LT_ERR &&
            strstr(lt_last_error(ctx), "two built-in units") != NULL,
        "a clash of units is refused: %s", lt_last_error(ctx));
  /* The same unit may register the key again (later first, as always). */
  ctx->rule_unit = 1001;
  CHECK(lt_register_rule(ctx, op, LT_TYPE_ANY, LT_TYPE_ANY, "low again", rule_b, NULL, NULL, 0) ==
            LT_OK,
        "one unit, two rules: %s", lt_last_error(ctx));
  CHECK(first_rule_is(ctx, op, a, NULL, "high"), "still the higher priority first");

  /* Once built-ins are done, a user's rule runs first. */
  ctx->rule_unit = -1, ctx->rule_priority = LT_PRIORITY_USER;
  CHECK(lt_register_rule(ctx, op, LT_TYPE_ANY, LT_TYPE_ANY, "user", rule_b, NULL, NULL, 0) == LT_OK,
        "register user: %s", lt_last_error(ctx));
  CHECK(first_rule_is(ctx, op, a, NULL, "user"), "the user's rule runs first");
  lt_args args = {.op = op, .a = a};
  lt_result res;
  CHECK(lt_call(ctx, &args, &res) == LT_OK && res.x[0] == 2, "the user's rule answers");

  /* A user's rule also comes before the size rules of the built-ins. */
  CHECK(lt_register_rule(ctx, LT_OP_SOLVE, LT_TYPE_DENSE, LT_TYPE_ANY, "user solve", rule_a, NULL,
                         NULL, 0) == LT_OK,
        "register user solve");
  lt_tensor *b = lt_dense_zeros(ctx, 1, (size_t[]){2});
  CHECK(first_rule_is(ctx, LT_OP_SOLVE, a, b, "user solve"), "user solve runs first");
  lt_release(ctx, b);
  lt_release(ctx, a);
  lt_context_free(ctx);
}

/* ------------------------------------------------------- type states */

typedef struct counted {
  size_t current;
  long fail_after; /* < 0: never */
} counted;

static void *counted_alloc(void *ud, void *ptr, size_t osize, size_t nsize) {
  counted *c = ud;
  if (nsize == 0) {
    if (ptr) c->current -= osize;
    free(ptr);
    return NULL;
  }
  if (c->fail_after == 0) return NULL;
  if (c->fail_after > 0) c->fail_after--;
  void *p = realloc(ptr, nsize);
  if (p != NULL) c->current += nsize - (ptr ? osize : 0);
  return p;
}

typedef struct cache {
  double *held; /* something the state owns, released by its free function */
  int uses;
} cache;

static int freed_states;

static void cache_free(lt_context *ctx, void *state) {
  cache *c = state;
  lt_free(ctx, c->held, 8 * sizeof(double));
  freed_states++;
}

static void test_type_states(void) {
  counted cnt = {0, -1};
  lt_context *ctx = lt_context_new(counted_alloc, &cnt);
  CHECK(ctx != NULL, "lt_context_new");
  if (ctx == NULL) return;
  size_t base = cnt.current;
  cache *c = lt_type_state(ctx, LT_TYPE_DIAG, sizeof(cache), cache_free);
  CHECK(c != NULL && c->held == NULL && c->uses == 0, "a zeroed state on first use");
  if (c != NULL) {
    c->held = lt_malloc(ctx, 8 * sizeof(double));
    c->uses++;
  }
  cache *again = lt_type_state(ctx, LT_TYPE_DIAG, sizeof(cache), cache_free);
  CHECK(again == c && again->uses == 1, "the same state on later calls");
  CHECK(lt_type_state(ctx, LT_TYPE_KRON, sizeof(cache), cache_free) != c,
        "each type its own state");
  CHECK(cnt.current > base, "states are allocated through the context");
  CHECK(lt_type_state_bytes(ctx) == 2 * sizeof(cache), "the states' bytes: %zu",
        lt_type_state_bytes(ctx));
  CHECK(lt_type_state(ctx, 9999, 8, NULL) == NULL && strstr(lt_last_error(ctx), "unknown type"),
        "an unknown type id: %s", lt_last_error(ctx));
  /* Memory runs out: NULL with a message, nothing kept, a later call works. */
  cnt.fail_after = 0;
  void *none = lt_type_state(ctx, LT_TYPE_TOEPLITZ, 64, NULL);
  cnt.fail_after = -1;
  CHECK(none == NULL && lt_last_error(ctx)[0] != '\0', "out of memory: NULL and a message");
  CHECK(lt_type_state(ctx, LT_TYPE_TOEPLITZ, 64, NULL) != NULL, "made once memory is back");
  freed_states = 0;
  lt_context_free(ctx);
  CHECK(freed_states == 2, "free functions run with the context (%d)", freed_states);
  CHECK(cnt.current == 0, "%zu bytes left after lt_context_free", cnt.current);
}

/* ------------------------------------------------ types without an enum id */

static lt_tensor *copy_product(lt_context *ctx, lt_tensor *self, lt_tensor *X) {
  (void)self;
  return lt_dense_clone(ctx, X);
}

static void test_next_ids(void) {
  lt_context *ctx = lt_context_new(NULL, NULL);
  CHECK(ctx != NULL, "lt_context_new");
  if (ctx == NULL) return;
  /* Built-in types added after the enum (LT_TYPE_NEXT in units.def) take
   * ids from LT_TYPE_BUILTIN_COUNT on, findable by name and descriptor. */
  const char *names[] = {"permutation", "cat", "zeros_operator"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    int id = lt_type_id(ctx, names[i]);
    CHECK(id >= LT_TYPE_BUILTIN_COUNT, "%s has id %d", names[i], id);
    const lt_type *t = lt_type_descriptor(ctx, id);
    CHECK(t != NULL && lt_type_id_of(ctx, t) == id && t->constructor != NULL,
          "%s: descriptor, id and constructor", names[i]);
  }
  /* A host's type comes after every built-in one. */
  static const lt_type host_type = {.name = "host_type"};
  static const lt_type host_type_ok = {.name = "host_type_ok", .matmul = copy_product};
  CHECK(lt_register_type(ctx, &host_type) == LT_ERR, "a type without matmul is refused");
  int id = lt_register_type(ctx, &host_type_ok);
  CHECK(id == lt_type_count(ctx) - 1 && id > lt_type_id(ctx, "zeros_operator"),
        "the host's type is the last (%d)", id);
  CHECK(lt_type_id_of(ctx, &host_type) == LT_ERR, "an unregistered descriptor has no id");
  lt_context_free(ctx);
}

int main(void) {
  test_builtins_register();
  test_priorities();
  test_type_states();
  test_next_ids();
  return check_summary();
}
