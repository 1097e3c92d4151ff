/*
 * builtin.c — puts every built-in type and rule into a new context: the
 * units of src/ops/units.def, types first (so that rules may name any of
 * them), then each unit's rules at the unit's priority. The order of the
 * list does not matter: within one key, rules go by priority (registry.c),
 * and two units at one priority on one key are refused.
 */
#include "../ops/ops.h"
#include "internal.h"

typedef struct unit {
  const lt_type *type; /* NULL for rules without a type */
  int id;              /* fixed id, or LT_TYPE_NEXT */
  int (*rules)(lt_context *ctx);
  int priority;
} unit;

static const unit UNITS[] = {
#define TYPE(descriptor, id, rules, priority) {&descriptor, id, rules, priority},
#define RULES(rules, priority) {NULL, 0, rules, priority},
#include "../ops/units.def"
#undef TYPE
#undef RULES
};

#define NUNITS (sizeof UNITS / sizeof UNITS[0])

/* For types without rules of their own. */
int lt_register_no_rules(lt_context *ctx) {
  (void)ctx;
  return LT_OK;
}

int lt_register_builtins(lt_context *ctx) {
  for (size_t i = 0; i < NUNITS; i++)
    if (UNITS[i].type != NULL && lt_register_builtin_type(ctx, UNITS[i].id, UNITS[i].type) != LT_OK)
      return LT_ERR;
  for (size_t i = 0; i < NUNITS; i++) {
    ctx->rule_priority = UNITS[i].priority;
    ctx->rule_unit = (int)i;
    if (UNITS[i].rules(ctx) != LT_OK) return LT_ERR;
  }
  ctx->rule_priority = LT_PRIORITY_USER;
  ctx->rule_unit = -1;
  return LT_OK;
}
