/*
 * fuzz_dense.c — libFuzzer harness for the C entry points that take outside
 * input: dense tensors from shapes and data, views (reshape, narrow, select,
 * transpose) with arbitrary sizes and indices, element access, broadcasting,
 * reductions, products, printing, and the structured constructors that take
 * tensors and specs (kernel, toeplitz, ... — linked weakly, so the harness
 * builds before they exist and fuzzes them once they do).
 *
 * The input is a little program: a header picks an allocation budget (the
 * allocator refuses requests beyond it, or fails at the k-th allocation), then
 * each instruction byte names an operation and the bytes after it give sizes,
 * indices and values. Every call must either succeed or fail with an error
 * message; at the end every tensor is released and the context must hold 0
 * bytes (anything else is a leak and aborts).
 *
 *   make fuzz-c                     (clang; LT_FUZZ_SECONDS, default 60)
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/core/internal.h" /* lt_type_state_bytes */
#include "budget_alloc.h"
#include "lazytensor.h"

#pragma weak lt_kernel_new
#pragma weak lt_toeplitz_new
#pragma weak lt_lowrank_new
#pragma weak lt_kron_new
#pragma weak lt_blockdiag_new
#pragma weak lt_chol_new
#pragma weak lt_triangular_new

typedef struct input {
  const uint8_t *p;
  size_t n;
} input;

static unsigned u8(input *in) {
  if (in->n == 0) return 0;
  in->n--;
  return *in->p++;
}

/* A size or index: mostly small, sometimes huge or at the edges. */
static size_t size_arg(input *in) {
  unsigned k = u8(in);
  switch (k >> 5) {
    case 0:
    case 1:
    case 2:
    case 3: return k & 7;
    case 4: return k & 31;
    case 5: return (size_t)1 << (k & 63);
    case 6: return SIZE_MAX - (k & 7);
    default: {
      size_t v = 0;
      for (int i = 0; i < 8; i++) v = (v << 8) | u8(in);
      return v;
    }
  }
}

static double value_arg(input *in) {
  unsigned k = u8(in);
  switch (k & 7) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return -INFINITY;
    case 3: return 0.0;
    default: return ((double)k - 128.0) / 16.0;
  }
}

#define SLOTS 8

typedef struct machine {
  lt_context *ctx;
  lt_tensor *t[SLOTS];
} machine;

static lt_tensor *slot(machine *m, input *in) { return m->t[u8(in) % SLOTS]; }

static void put(machine *m, input *in, lt_tensor *t) {
  unsigned i = u8(in) % SLOTS;
  if (t == NULL) {
    /* a failure must say why */
    if (lt_last_error(m->ctx)[0] == '\0') abort();
    lt_clear_error(m->ctx);
    return;
  }
  lt_release(m->ctx, m->t[i]);
  m->t[i] = t;
}

static void check_status(machine *m, int rc) {
  if (rc != LT_OK) {
    if (rc != LT_ERR || lt_last_error(m->ctx)[0] == '\0') abort();
    lt_clear_error(m->ctx);
  }
}

static int shape_arg(input *in, size_t *shape) {
  int nd = (int)(u8(in) % (LT_MAX_DIM + 2)); /* LT_MAX_DIM + 1: invalid */
  for (int d = 0; d < nd && d < LT_MAX_DIM; d++) shape[d] = size_arg(in);
  return nd;
}

static void step(machine *m, input *in) {
  lt_context *ctx = m->ctx;
  size_t shape[LT_MAX_DIM + 1] = {0};
  unsigned op = u8(in) % 24;
  switch (op) {
    case 0: { /* dense from shape and data */
      int nd = shape_arg(in, shape);
      double data[64];
      for (int i = 0; i < 64; i++) data[i] = value_arg(in);
      size_t numel = 1;
      int small = nd <= LT_MAX_DIM;
      for (int d = 0; small && d < nd; d++) {
        if (shape[d] != 0 && numel > 64 / shape[d]) small = 0;
        else numel *= shape[d];
      }
      /* lt_dense_from reads numel values: only hand it shapes that fit */
      put(m, in, small ? lt_dense_from(ctx, nd, shape, data) : lt_dense_zeros(ctx, nd, shape));
      break;
    }
    case 1: {
      int nd = shape_arg(in, shape);
      put(m, in, lt_dense_full(ctx, nd, shape, value_arg(in)));
      break;
    }
    case 2: {
      int nd = shape_arg(in, shape);
      put(m, in, lt_dense_rand(ctx, nd, shape));
      break;
    }
    case 3: put(m, in, lt_dense_eye(ctx, size_arg(in))); break;
    case 4: {
      double a = value_arg(in), b = value_arg(in), s = value_arg(in);
      put(m, in, lt_dense_arange(ctx, a, b, s));
      break;
    }
    case 5: {
      double a = value_arg(in), b = value_arg(in);
      put(m, in, lt_dense_linspace(ctx, a, b, size_arg(in)));
      break;
    }
    case 6: { /* reshape to arbitrary sizes */
      lt_tensor *t = slot(m, in);
      int nd = shape_arg(in, shape);
      if (t && lt_is_dense(t)) put(m, in, lt_dense_reshape(ctx, t, nd, shape));
      break;
    }
    case 7: { /* narrow with arbitrary dim, start, length */
      lt_tensor *t = slot(m, in);
      int dim = (int)(u8(in) % 12) - 2;
      size_t start = size_arg(in), len = size_arg(in);
      if (t && lt_is_dense(t)) put(m, in, lt_dense_narrow(ctx, t, dim, start, len));
      break;
    }
    case 8: { /* select with arbitrary dim and index */
      lt_tensor *t = slot(m, in);
      int dim = (int)(u8(in) % 12) - 2;
      size_t index = size_arg(in);
      if (t && lt_is_dense(t)) put(m, in, lt_dense_select(ctx, t, dim, index));
      break;
    }
    case 9: {
      lt_tensor *t = slot(m, in);
      if (t && lt_is_dense(t)) put(m, in, lt_dense_transpose(ctx, t));
      break;
    }
    case 10: {
      lt_tensor *t = slot(m, in);
      if (t && lt_is_dense(t))
        put(m, in, u8(in) & 1 ? lt_dense_clone(ctx, t) : lt_dense_contiguous(ctx, t));
      break;
    }
    case 11: { /* checked element access with arbitrary indices */
      lt_tensor *t = slot(m, in);
      size_t idx[LT_MAX_DIM];
      int n = (int)(u8(in) % (LT_MAX_DIM + 1));
      for (int i = 0; i < n; i++) idx[i] = size_arg(in);
      double v = value_arg(in), out;
      if (t && lt_is_dense(t)) {
        check_status(m, lt_dense_get(ctx, t, n, idx, &out));
        check_status(m, lt_dense_set(ctx, t, n, idx, v));
      }
      break;
    }
    case 12: { /* broadcasting binary ops */
      lt_tensor *a = slot(m, in), *b = slot(m, in);
      lt_binary_op o = (lt_binary_op)(u8(in) % 5);
      if (a && b && lt_is_dense(a) && lt_is_dense(b)) put(m, in, lt_dense_binary(ctx, o, a, b));
      break;
    }
    case 13: {
      lt_tensor *a = slot(m, in);
      lt_unary_op o = (lt_unary_op)(u8(in) % 5);
      if (a && lt_is_dense(a)) put(m, in, lt_dense_unary(ctx, o, a));
      break;
    }
    case 14: {
      lt_tensor *a = slot(m, in);
      int dim = (int)(u8(in) % 12) - 2;
      lt_reduce_op o = (lt_reduce_op)(u8(in) % 4);
      double out;
      if (a && lt_is_dense(a)) {
        check_status(m, lt_dense_reduce_all(ctx, o, a, &out));
        put(m, in, lt_dense_reduce_dim(ctx, o, a, dim));
      }
      break;
    }
    case 15: { /* copy with broadcasting into a view */
      lt_tensor *a = slot(m, in), *b = slot(m, in);
      if (a && b && lt_is_dense(a) && lt_is_dense(b))
        check_status(m, lt_dense_copy_into(ctx, a, b));
      break;
    }
    case 16: { /* products through the registry (any operand types) */
      lt_tensor *a = slot(m, in), *b = slot(m, in);
      if (a && b) put(m, in, u8(in) & 1 ? lt_matmul(ctx, a, b) : lt_add(ctx, a, b));
      break;
    }
    case 17: {
      lt_tensor *a = slot(m, in);
      if (a && lt_is_dense(a) && lt_numel(a) <= 4096) {
        char *s = lt_dense_format(ctx, a);
        if (s) lt_free(ctx, s, strlen(s) + 1);
        else check_status(m, LT_ERR);
      }
      break;
    }
    case 18: { /* diag and identity from outside sizes */
      lt_tensor *a = slot(m, in);
      if (u8(in) & 1) put(m, in, lt_identity_new(ctx, size_arg(in), value_arg(in)));
      else if (a) put(m, in, lt_diag_new(ctx, a));
      break;
    }
    case 19: { /* kernel specs, once the kernel type exists */
      lt_tensor *x1 = slot(m, in), *x2 = slot(m, in);
      lt_kernel_spec spec = {.kind = (lt_kernel_kind)(u8(in) % 7)};
      spec.lengthscale = value_arg(in);
      spec.variance = value_arg(in);
      spec.period = value_arg(in);
      spec.derivative = (lt_kernel_derivative)(u8(in) % 5);
      if (lt_kernel_new && x1) put(m, in, lt_kernel_new(ctx, x1, u8(in) & 1 ? x2 : NULL, &spec));
      break;
    }
    case 20: {
      lt_tensor *c = slot(m, in), *r = slot(m, in);
      if (lt_toeplitz_new && c) put(m, in, lt_toeplitz_new(ctx, c, u8(in) & 1 ? r : NULL));
      break;
    }
    case 21: {
      lt_tensor *u = slot(m, in), *v = slot(m, in);
      if (lt_lowrank_new && u) put(m, in, lt_lowrank_new(ctx, u, u8(in) & 1 ? v : NULL));
      break;
    }
    case 22: {
      lt_tensor *f[3] = {slot(m, in), slot(m, in), slot(m, in)};
      int n = (int)(u8(in) % 4);
      int ok = 1;
      for (int i = 0; i < n; i++) ok = ok && f[i] != NULL;
      unsigned which = u8(in) % 4;
      if (!ok) break;
      if (which == 0 && lt_kron_new) put(m, in, lt_kron_new(ctx, f, n));
      else if (which == 1 && lt_blockdiag_new) put(m, in, lt_blockdiag_new(ctx, f, n));
      else if (which == 2 && lt_chol_new && f[0]) put(m, in, lt_chol_new(ctx, f[0]));
      else if (which == 3 && lt_triangular_new && f[0])
        put(m, in, lt_triangular_new(ctx, f[0], u8(in) & 1));
      break;
    }
    default: { /* materialise, transpose and read through the registry */
      lt_tensor *a = slot(m, in);
      double out;
      if (a == NULL) break;
      if (lt_ndim(a) == 2) {
        size_t i = size_arg(in), j = size_arg(in);
        if (i < lt_size(a, 0) && j < lt_size(a, 1)) check_status(m, lt_get(ctx, a, i, j, &out));
        put(m, in, u8(in) & 1 ? lt_transpose(ctx, a) : lt_to_dense(ctx, a));
      }
      break;
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  input in = {data, size};
  budget b = {0};
  unsigned mode = u8(&in);
  b.limit = (size_t)1 << (16 + (mode & 7)); /* 64 KiB .. 8 MiB: big enough, never slow */
  b.fail_at = (mode & 16) ? (long)u8(&in) + 1 : 0;
  machine m = {0};
  m.ctx = lt_context_new(budget_alloc, &b);
  if (m.ctx == NULL) {
    if (b.live != 0) abort();
    return 0;
  }
  size_t baseline = lt_memory(m.ctx); /* the registry's own tables */
  for (int steps = 0; steps < 64 && in.n > 0; steps++) step(&m, &in);
  for (int i = 0; i < SLOTS; i++) lt_release(m.ctx, m.t[i]);
  /* the types' states (FFT plans, the kernel store's list) are made on
   * first use and live as long as the context */
  size_t held = lt_memory(m.ctx) - lt_type_state_bytes(m.ctx);
  if (held != baseline) {
    fprintf(stderr, "fuzz_dense: %zu bytes held after releasing every tensor, %zu before\n", held,
            baseline);
    abort();
  }
  lt_context_free(m.ctx);
  if (b.live != 0) {
    fprintf(stderr, "fuzz_dense: %zu bytes leaked after lt_context_free\n", b.live);
    abort();
  }
  return 0;
}
