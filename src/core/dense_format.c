/*
 * dense_format.c — printing dense tensors the way Torch7 does: aligned
 * columns, slices of higher-rank tensors labelled "(i,.,.) =", and a footer
 * with the type and size.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"

typedef struct outbuf {
  lt_context *ctx;
  char *data;
  size_t len, cap;
  int failed;
} outbuf;

static void out_add(outbuf *o, const char *s) {
  size_t n = strlen(s);
  if (o->failed) return;
  if (o->len + n + 1 > o->cap) {
    size_t cap = o->cap ? o->cap : 256;
    while (o->len + n + 1 > cap) cap *= 2;
    char *d = lt_realloc(o->ctx, o->data, o->cap, cap);
    if (d == NULL) {
      o->failed = 1;
      return;
    }
    o->data = d;
    o->cap = cap;
  }
  memcpy(o->data + o->len, s, n + 1);
  o->len += n;
}

/* One number format for the whole tensor, so columns line up. */
typedef struct numfmt {
  int integers; /* all finite values are integers of moderate size */
  int scientific;
  int width;
} numfmt;

static numfmt choose_format(const lt_tensor *t) {
  numfmt f = {1, 0, 1};
  double maxabs = 0, minabs = INFINITY;
  size_t n = lt_numel(t);
  size_t idx[LT_MAX_DIM] = {0};
  for (size_t k = 0; k < n; k++) {
    double v = *lt_dense_ptr(t, idx);
    if (isfinite(v)) {
      double a = fabs(v);
      if (a > maxabs) maxabs = a;
      if (a > 0 && a < minabs) minabs = a;
      if (v != floor(v) || a >= 1e15) f.integers = 0;
    }
    for (int d = t->ndim - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
  if (!f.integers && (maxabs >= 1e5 || (minabs < 1e-4 && maxabs < 1e-3) ||
                      (maxabs > 0 && minabs < INFINITY && maxabs / minabs > 1e8)))
    f.scientific = 1;
  char buf[64];
  f.width = f.integers     ? snprintf(buf, sizeof buf, "%.0f", maxabs) + 1
            : f.scientific ? 12
                           : snprintf(buf, sizeof buf, "%.4f", maxabs) + 1;
  if (f.width < 3) f.width = 3; /* room for nan/inf */
  return f;
}

static void format_number(char *buf, size_t size, const numfmt *f, double v) {
  if (f->integers && isfinite(v)) snprintf(buf, size, " %*.0f", f->width, v);
  else if (f->scientific) snprintf(buf, size, " %*.4e", f->width, v);
  else snprintf(buf, size, " %*.4f", f->width, v);
}

static void format_matrix(outbuf *o, const lt_tensor *t, const double *base, const numfmt *f,
                          int dim) {
  /* dim is the index of the row dimension within t (the last two dims). */
  size_t rows = t->shape[dim], cols = t->shape[dim + 1];
  char buf[64];
  for (size_t i = 0; i < rows; i++) {
    for (size_t j = 0; j < cols; j++) {
      double v = base[(ptrdiff_t)i * t->strides[dim] + (ptrdiff_t)j * t->strides[dim + 1]];
      format_number(buf, sizeof buf, f, v);
      out_add(o, buf);
    }
    out_add(o, "\n");
  }
}

/* Higher ranks: one labelled matrix per index of the leading dimensions. */
static void format_slices(outbuf *o, const lt_tensor *t, const numfmt *f) {
  int lead = t->ndim - 2;
  size_t idx[LT_MAX_DIM] = {0};
  size_t count = 1;
  for (int d = 0; d < lead; d++) count *= t->shape[d];
  char buf[64];
  for (size_t s = 0; s < count; s++) {
    out_add(o, "(");
    for (int d = 0; d < lead; d++) {
      snprintf(buf, sizeof buf, "%s%zu", d ? "," : "", idx[d] + 1);
      out_add(o, buf);
    }
    out_add(o, ",.,.) = \n");
    const double *base = lt_dense_data(t);
    for (int d = 0; d < lead; d++) base += (ptrdiff_t)idx[d] * t->strides[d];
    format_matrix(o, t, base, f, lead);
    out_add(o, "\n");
    for (int d = lead - 1; d >= 0; d--) {
      if (++idx[d] < t->shape[d]) break;
      idx[d] = 0;
    }
  }
}

char *lt_dense_format(lt_context *ctx, const lt_tensor *t) {
  outbuf o = {.ctx = ctx};
  numfmt f = choose_format(t);
  char buf[128];
  if (lt_numel(t) == 0) {
    out_add(&o, "[lazytensor.dense with no elements]\n");
  } else if (t->ndim == 0) {
    format_number(buf, sizeof buf, &f, *lt_dense_data(t));
    out_add(&o, buf + 1);
    out_add(&o, "\n[lazytensor.dense of size 0-d (a scalar)]\n");
  } else {
    if (t->ndim == 1) {
      for (size_t i = 0; i < t->shape[0]; i++) {
        format_number(buf, sizeof buf, &f, lt_dense_data(t)[(ptrdiff_t)i * t->strides[0]]);
        out_add(&o, buf);
        out_add(&o, "\n");
      }
    } else if (t->ndim == 2) {
      format_matrix(&o, t, lt_dense_data(t), &f, 0);
    } else {
      format_slices(&o, t, &f);
    }
    out_add(&o, "[lazytensor.dense of size ");
    out_add(&o, lt_shape_string(t, buf, sizeof buf));
    out_add(&o, "]");
  }
  if (o.failed) {
    lt_free(ctx, o.data, o.cap);
    return NULL;
  }
  char *s = lt_strdup(ctx, o.data);
  lt_free(ctx, o.data, o.cap);
  return s;
}
