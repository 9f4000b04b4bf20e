/* The analysis' native helpers (an optional C extension: setup.py builds it where a C compiler is
 * found; without it the same results come from Python, slower).
 *
 * This file: the module, and native columns of a run of trace events (decode/native.py is its
 * Python side). _native_walk.c: the operator walk of ranks/operators.py. _native_text.c: the merged
 * timeline's event text (outputs/timeline_render.py).
 *
 * `columns(buf, start, end, fields, decode)` parses buf[start:end], a run of JSON objects separated
 * by commas (elements of a Kineto trace's traceEvents array), and returns, for each wanted field
 * (a top-level key of the events, or a key of their "args" object), one type code per event and one
 * 8-byte value per event: the int64 or the double of a number, or, for a text or any other JSON value
 * (array, object), the index of its Python object in a list of distinct values (one object per
 * distinct JSON text, built once: no Python object per value), and how many events have each type
 * code (numpy's bincount of the codes took 7 ms of a 20 MB rank). Plus, per event, whether it has
 * an "args" object.
 *
 * It is strict JSON and never guesses: anything it does not handle exactly as the typed msgspec
 * decoder of decode/events.py would (an element that is not an object, a non-object "args", a key
 * given twice, a key with escapes, an integer beyond int64, a number that overflows a double, bad
 * UTF-8, invalid JSON) makes it return None, and the caller decodes that run with msgspec instead.
 * So a wrong guess of where a block of elements ends (decode/stream.py) is refused here too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_native.h"

enum { C_INT = 0, C_FLOAT = 1, C_OBJ = 2, C_NULL = 3, C_TRUE = 4, C_FALSE = 5 };
#define MAX_FIELDS 64
#define MAX_DEPTH 256

typedef struct {
    const char *key;
    Py_ssize_t klen;
    int is_arg;
    uint8_t dcode; /* the value of an event that lacks the key */
    uint64_t dval;
} Field;

typedef struct {
    const char *p, *end;
    int nf, ntop, narg;
    Field f[MAX_FIELDS];
    int top_idx[MAX_FIELDS], arg_idx[MAX_FIELDS];
    Py_ssize_t n, cap;
    /* the columns are bytes objects from the start (codes_b, vals_b, has_b; codes, vals and has_args
     * point into them), grown by realloc and returned without a copy */
    PyObject *codes_b[MAX_FIELDS], *vals_b[MAX_FIELDS], *has_b;
    uint8_t *codes[MAX_FIELDS];
    uint64_t *vals[MAX_FIELDS];
    uint8_t *has_args;
    /* distinct JSON texts of text and container values -> index in `uniq` */
    PyObject *uniq, *decode;
    const char **ht_ptr;
    Py_ssize_t *ht_len, *ht_idx;
    Py_ssize_t ht_cap, ht_n;
    int failed; /* 1: give up (return None); 2: a Python error is set */
} P;

static inline void ws(P *s) {
    const char *p = s->p, *e = s->end;
    while (p < e && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    s->p = p;
}

static int fail(P *s) { if (!s->failed) s->failed = 1; return -1; }
static int pyfail(P *s) { s->failed = 2; return -1; }

/* A string at s->p (on its '"'): moves past it; *esc: it holds escapes; *hi: bytes >= 0x80.
 * Eight bytes at a time while none is '"', '\\', a control character or >= 0x80. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL
static inline uint64_t has_zero(uint64_t w) { return (w - ONES) & ~w & HIGHS; }

static int scan_string(P *s, int *esc, int *hi) {
    const unsigned char *p = (const unsigned char *)s->p + 1, *e = (const unsigned char *)s->end;
    *esc = 0; *hi = 0;
    while (p < e) {
        while (e - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            uint64_t stop = has_zero(w ^ (ONES * '"')) | has_zero(w ^ (ONES * '\\')) | ((w - ONES * 0x20) & ~w & HIGHS) | (w & HIGHS);
            if (stop) break;
            p += 8;
        }
        if (p >= e) break;
        unsigned char c = *p;
        if (c == '"') { s->p = (const char *)p + 1; return 0; }
        if (c == '\\') {
            *esc = 1;
            if (p + 1 >= e) return fail(s);
            c = p[1];
            if (c == 'u') {
                if (p + 5 >= e) return fail(s);
                for (int k = 2; k < 6; k++) {
                    unsigned char h = p[k];
                    if (!((h >= '0' && h <= '9') || (h >= 'a' && h <= 'f') || (h >= 'A' && h <= 'F'))) return fail(s);
                }
                p += 6;
                continue;
            }
            if (!strchr("\"\\/bfnrt", c) || c == 0) return fail(s);
            p += 2;
            continue;
        }
        if (c < 0x20) return fail(s);
        if (c >= 0x80) *hi = 1;
        p++;
    }
    return fail(s);
}

static int check_utf8(P *s, const char *a, Py_ssize_t n) {
    PyObject *u = PyUnicode_DecodeUTF8(a, n, "strict");
    if (!u) { PyErr_Clear(); return fail(s); }
    Py_DECREF(u);
    return 0;
}

/* A number at s->p: C_INT with *iv, or C_FLOAT with *dv; -1 when not a JSON number we take. */
static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static int scan_number(P *s, int64_t *iv, double *dv) {
    const char *p = s->p, *e = s->end, *a = p;
    int neg = 0, isf = 0, over = 0, digits = 0;
    uint64_t acc = 0, mant = 0;
    int e10 = 0; /* value = mant x 10^e10 while digits <= 19 */
    if (p < e && *p == '-') { neg = 1; p++; }
    if (p >= e) return fail(s);
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < e && *p >= '0' && *p <= '9') {
            unsigned d = (unsigned)(*p - '0');
            if (acc > (UINT64_MAX - d) / 10) over = 1; else acc = acc * 10 + d;
            digits++;
            p++;
        }
    } else {
        return fail(s);
    }
    mant = acc;
    if (p < e && *p == '.') {
        isf = 1; p++;
        if (p >= e || !(*p >= '0' && *p <= '9')) return fail(s);
        while (p < e && *p >= '0' && *p <= '9') {
            if (digits < 19) { mant = mant * 10 + (unsigned)(*p - '0'); e10--; if (mant) digits++; }
            else digits = 99;
            p++;
        }
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        isf = 1; p++;
        int eneg = 0, ev = 0;
        if (p < e && (*p == '+' || *p == '-')) { eneg = *p == '-'; p++; }
        if (p >= e || !(*p >= '0' && *p <= '9')) return fail(s);
        while (p < e && *p >= '0' && *p <= '9') { if (ev < 10000) ev = ev * 10 + (*p - '0'); p++; }
        e10 += eneg ? -ev : ev;
    }
    if (over) digits = 99;
    s->p = p;
    if (!isf) {
        if (over) return fail(s);
        if (neg) {
            if (acc > (uint64_t)INT64_MAX + 1) return fail(s);
            *iv = (int64_t)(0 - acc);
        } else {
            if (acc > (uint64_t)INT64_MAX) return fail(s);
            *iv = (int64_t)acc;
        }
        return C_INT;
    }
    if (digits <= 19 && mant <= (1ULL << 53) && e10 >= -22 && e10 <= 22) {
        /* exact operands, one correctly rounded operation: the value strtod gives (Clinger) */
        double d = (double)mant;
        d = e10 < 0 ? d / POW10[-e10] : d * POW10[e10];
        *dv = neg ? -d : d;
        return C_FLOAT;
    }
    char tmp[128];
    Py_ssize_t n = p - a;
    if (n >= (Py_ssize_t)sizeof(tmp)) return fail(s);
    memcpy(tmp, a, n);
    tmp[n] = 0;
    char *stop = NULL;
    double d = PyOS_string_to_double(tmp, &stop, NULL);
    if (d == -1.0 && PyErr_Occurred()) { PyErr_Clear(); return fail(s); }
    if (stop != tmp + n || d == Py_HUGE_VAL || d == -Py_HUGE_VAL) return fail(s);
    *dv = d;
    return C_FLOAT;
}

static int skip_value(P *s, int depth);

static int skip_container(P *s, int depth) {
    char open = *s->p, close = open == '{' ? '}' : ']';
    if (depth > MAX_DEPTH) return fail(s);
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == close) { s->p++; return 0; }
    for (;;) {
        if (open == '{') {
            int esc, hi;
            if (s->p >= s->end || *s->p != '"') return fail(s);
            const char *a = s->p;
            if (scan_string(s, &esc, &hi) < 0) return -1;
            if (hi && check_utf8(s, a + 1, s->p - a - 2) < 0) return -1;
            ws(s);
            if (s->p >= s->end || *s->p != ':') return fail(s);
            s->p++;
            ws(s);
        }
        if (skip_value(s, depth + 1) < 0) return -1;
        ws(s);
        if (s->p >= s->end) return fail(s);
        if (*s->p == ',') { s->p++; ws(s); continue; }
        if (*s->p == close) { s->p++; return 0; }
        return fail(s);
    }
}

static int literal(P *s, const char *lit, Py_ssize_t n) {
    if (s->end - s->p < n || memcmp(s->p, lit, n) != 0) return fail(s);
    s->p += n;
    return 0;
}

/* Any JSON value, checked and skipped (no object made). */
static int skip_value(P *s, int depth) {
    if (s->p >= s->end) return fail(s);
    char c = *s->p;
    if (c == '"') {
        int esc, hi;
        const char *a = s->p;
        if (scan_string(s, &esc, &hi) < 0) return -1;
        if (hi) return check_utf8(s, a + 1, s->p - a - 2);
        return 0;
    }
    if (c == '{' || c == '[') return skip_container(s, depth);
    if (c == 't') return literal(s, "true", 4);
    if (c == 'f') return literal(s, "false", 5);
    if (c == 'n') return literal(s, "null", 4);
    int64_t iv; double dv;
    return scan_number(s, &iv, &dv) < 0 ? -1 : 0;
}

static uint64_t hash_bytes(const char *a, Py_ssize_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, a, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 29;
        a += 8; n -= 8;
    }
    uint64_t t = 0;
    memcpy(&t, a, (size_t)n);
    h = (h ^ t) * 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 32);
}

static int ht_grow(P *s) {
    Py_ssize_t cap = s->ht_cap ? s->ht_cap * 2 : 1024;
    const char **np_ = PyMem_Calloc(cap, sizeof(char *));
    Py_ssize_t *nl = PyMem_Calloc(cap, sizeof(Py_ssize_t)), *ni = PyMem_Calloc(cap, sizeof(Py_ssize_t));
    if (!np_ || !nl || !ni) { PyMem_Free(np_); PyMem_Free(nl); PyMem_Free(ni); PyErr_NoMemory(); return pyfail(s); }
    for (Py_ssize_t i = 0; i < s->ht_cap; i++) {
        if (!s->ht_ptr[i]) continue;
        uint64_t h = hash_bytes(s->ht_ptr[i], s->ht_len[i]);
        Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(cap - 1));
        while (np_[j]) j = (j + 1) & (cap - 1);
        np_[j] = s->ht_ptr[i]; nl[j] = s->ht_len[i]; ni[j] = s->ht_idx[i];
    }
    PyMem_Free(s->ht_ptr); PyMem_Free(s->ht_len); PyMem_Free(s->ht_idx);
    s->ht_ptr = np_; s->ht_len = nl; s->ht_idx = ni; s->ht_cap = cap;
    return 0;
}

/* The index in `uniq` of the value whose JSON text is a[0:n] (a text or a container). */
static Py_ssize_t intern_text(P *s, const char *a, Py_ssize_t n, int plain) {
    if ((s->ht_n + 1) * 2 > s->ht_cap && ht_grow(s) < 0) return -1;
    uint64_t h = hash_bytes(a, n);
    Py_ssize_t j = (Py_ssize_t)(h & (uint64_t)(s->ht_cap - 1));
    while (s->ht_ptr[j]) {
        if (s->ht_len[j] == n && memcmp(s->ht_ptr[j], a, n) == 0) return s->ht_idx[j];
        j = (j + 1) & (s->ht_cap - 1);
    }
    PyObject *o;
    if (plain) {
        o = PyUnicode_DecodeUTF8(a + 1, n - 2, "strict");
        if (!o) { PyErr_Clear(); return fail(s); }
    } else {
        PyObject *b = PyBytes_FromStringAndSize(a, n);
        if (!b) return pyfail(s);
        o = PyObject_CallOneArg(s->decode, b);
        Py_DECREF(b);
        if (!o) { PyErr_Clear(); return fail(s); }
    }
    Py_ssize_t idx = PyList_GET_SIZE(s->uniq);
    int r = PyList_Append(s->uniq, o);
    Py_DECREF(o);
    if (r < 0) return pyfail(s);
    s->ht_ptr[j] = a; s->ht_len[j] = n; s->ht_idx[j] = idx;
    s->ht_n++;
    return idx;
}

/* The value at s->p, stored as field fi of event s->n. */
static int store_value(P *s, int fi) {
    uint8_t *code = &s->codes[fi][s->n];
    uint64_t *val = &s->vals[fi][s->n];
    if (s->p >= s->end) return fail(s);
    char c = *s->p;
    const char *a = s->p;
    if (c == '"') {
        int esc, hi;
        if (scan_string(s, &esc, &hi) < 0) return -1;
        Py_ssize_t idx = intern_text(s, a, s->p - a, !esc);
        if (idx < 0) return -1;
        *code = C_OBJ; *val = (uint64_t)idx;
        return 0;
    }
    if (c == '{' || c == '[') {
        if (skip_container(s, 0) < 0) return -1;
        Py_ssize_t idx = intern_text(s, a, s->p - a, 0);
        if (idx < 0) return -1;
        *code = C_OBJ; *val = (uint64_t)idx;
        return 0;
    }
    if (c == 't') { *code = C_TRUE; *val = 0; return literal(s, "true", 4); }
    if (c == 'f') { *code = C_FALSE; *val = 0; return literal(s, "false", 5); }
    if (c == 'n') { *code = C_NULL; *val = 0; return literal(s, "null", 4); }
    int64_t iv; double dv;
    int k = scan_number(s, &iv, &dv);
    if (k < 0) return -1;
    *code = (uint8_t)k;
    if (k == C_INT) memcpy(val, &iv, 8); else memcpy(val, &dv, 8);
    return 0;
}

static int find_key(P *s, const char *k, Py_ssize_t n, int is_arg) {
    int m = is_arg ? s->narg : s->ntop;
    const int *idx = is_arg ? s->arg_idx : s->top_idx;
    for (int i = 0; i < m; i++) {
        const Field *f = &s->f[idx[i]];
        if (f->klen == n && memcmp(f->key, k, n) == 0) return idx[i];
    }
    return -1;
}

/* One object's members (at s->p, on '{'); is_arg: the "args" object. */
static int parse_object(P *s, int is_arg, uint64_t *seen, int *has_args) {
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}') { s->p++; return 0; }
    for (;;) {
        int esc, hi;
        if (s->p >= s->end || *s->p != '"') return fail(s);
        const char *a = s->p;
        if (scan_string(s, &esc, &hi) < 0) return -1;
        if (esc) return fail(s); /* a key with escapes: left to msgspec */
        if (hi && check_utf8(s, a + 1, s->p - a - 2) < 0) return -1;
        const char *k = a + 1;
        Py_ssize_t kn = s->p - a - 2;
        ws(s);
        if (s->p >= s->end || *s->p != ':') return fail(s);
        s->p++;
        ws(s);
        if (!is_arg && kn == 4 && memcmp(k, "args", 4) == 0) {
            if (*has_args >= 0) return fail(s); /* given twice */
            if (s->p < s->end && *s->p == '{') {
                *has_args = 1;
                if (parse_object(s, 1, seen, has_args) < 0) return -1;
            } else if (s->p < s->end && *s->p == 'n') {
                *has_args = 0;
                if (literal(s, "null", 4) < 0) return -1;
            } else {
                return fail(s); /* args that is not an object: the loose decode's business */
            }
        } else {
            int fi = find_key(s, k, kn, is_arg);
            if (fi >= 0) {
                if (*seen & ((uint64_t)1 << fi)) return fail(s);
                *seen |= (uint64_t)1 << fi;
                if (store_value(s, fi) < 0) return -1;
            } else if (skip_value(s, 0) < 0) {
                return -1;
            }
        }
        ws(s);
        if (s->p >= s->end) return fail(s);
        if (*s->p == ',') { s->p++; ws(s); continue; }
        if (*s->p == '}') { s->p++; return 0; }
        return fail(s);
    }
}

static int resize(P *s, PyObject **b, Py_ssize_t size) {
    if (!*b) {
        *b = PyBytes_FromStringAndSize(NULL, size);
        return *b ? 0 : pyfail(s);
    }
    return _PyBytes_Resize(b, size) < 0 ? pyfail(s) : 0;
}

/* Room for `cap` events in every column (the first call: a guess from the text's size, one event per
 * 128 bytes, so that a block rarely grows; realloc moves large blocks without copying them). */
static int grow(P *s, Py_ssize_t cap) {
    for (int i = 0; i < s->nf; i++) {
        if (resize(s, &s->codes_b[i], cap) < 0 || resize(s, &s->vals_b[i], cap * 8) < 0) return -1;
        s->codes[i] = (uint8_t *)PyBytes_AS_STRING(s->codes_b[i]);
        s->vals[i] = (uint64_t *)PyBytes_AS_STRING(s->vals_b[i]);
    }
    if (resize(s, &s->has_b, cap) < 0) return -1;
    s->has_args = (uint8_t *)PyBytes_AS_STRING(s->has_b);
    s->cap = cap;
    return 0;
}

static int parse_events(P *s) {
    ws(s);
    if (s->p >= s->end) return 0;
    for (;;) {
        if (*s->p != '{') return fail(s); /* not an object: the loose decode counts it as skipped */
        if (s->n == s->cap && grow(s, s->cap * 2) < 0) return -1;
        uint64_t seen = 0;
        int has_args = -1;
        if (parse_object(s, 0, &seen, &has_args) < 0) return -1;
        for (int i = 0; i < s->nf; i++) {
            if (!(seen & ((uint64_t)1 << i))) {
                s->codes[i][s->n] = s->f[i].dcode;
                s->vals[i][s->n] = s->f[i].dval;
            }
        }
        s->has_args[s->n] = has_args == 1;
        s->n++;
        ws(s);
        if (s->p >= s->end) return 0;
        if (*s->p != ',') return fail(s);
        s->p++;
        ws(s);
        if (s->p >= s->end) return fail(s); /* a trailing comma */
    }
}

static void release(P *s) {
    for (int i = 0; i < s->nf; i++) { Py_XDECREF(s->codes_b[i]); Py_XDECREF(s->vals_b[i]); }
    Py_XDECREF(s->has_b);
    PyMem_Free(s->ht_ptr); PyMem_Free(s->ht_len); PyMem_Free(s->ht_idx);
    Py_XDECREF(s->uniq);
}

/* the code and 8-byte value of a field's default (a Python int, float, text or None) */
static int set_default(P *s, Field *f, PyObject *d) {
    if (d == Py_None) { f->dcode = C_NULL; f->dval = 0; return 0; }
    if (PyFloat_CheckExact(d)) { double v = PyFloat_AS_DOUBLE(d); f->dcode = C_FLOAT; memcpy(&f->dval, &v, 8); return 0; }
    if (PyLong_CheckExact(d)) {
        int64_t v = PyLong_AsLongLong(d);
        if (v == -1 && PyErr_Occurred()) return -1;
        f->dcode = C_INT; memcpy(&f->dval, &v, 8);
        return 0;
    }
    if (PyUnicode_CheckExact(d)) {
        Py_ssize_t idx = PyList_GET_SIZE(s->uniq);
        if (PyList_Append(s->uniq, d) < 0) return -1;
        f->dcode = C_OBJ; f->dval = (uint64_t)idx;
        return 0;
    }
    PyErr_SetString(PyExc_TypeError, "a field's default must be None, an int, a float or a str");
    return -1;
}

static PyObject *columns(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Py_ssize_t start, end;
    PyObject *fields, *decode;
    if (!PyArg_ParseTuple(args, "y*nnOO", &buf, &start, &end, &fields, &decode)) return NULL;
    P s;
    memset(&s, 0, sizeof(s));
    PyObject *ret = NULL;
    if (start < 0 || end > buf.len || start > end) { PyErr_SetString(PyExc_ValueError, "start/end outside the buffer"); goto done; }
    if (!PyList_Check(fields) || PyList_GET_SIZE(fields) > MAX_FIELDS) { PyErr_SetString(PyExc_TypeError, "fields: a list of at most 64 (key, is_arg, default)"); goto done; }
    s.uniq = PyList_New(0);
    if (!s.uniq) goto done;
    s.decode = decode;
    s.nf = (int)PyList_GET_SIZE(fields);
    for (int i = 0; i < s.nf; i++) {
        PyObject *t = PyList_GET_ITEM(fields, i);
        const char *k; Py_ssize_t kn; int is_arg; PyObject *d;
        if (!PyArg_ParseTuple(t, "y#pO", &k, &kn, &is_arg, &d)) goto done;
        s.f[i].key = k; s.f[i].klen = kn; s.f[i].is_arg = is_arg;
        if (set_default(&s, &s.f[i], d) < 0) goto done;
        if (is_arg) s.arg_idx[s.narg++] = i; else s.top_idx[s.ntop++] = i;
    }
    s.p = (const char *)buf.buf + start;
    s.end = (const char *)buf.buf + end;
    if (grow(&s, (end - start) / 128 + 16) < 0) goto done;
    int r = parse_events(&s);
    if (r < 0 || s.failed) {
        if (s.failed == 2) goto done;
        ret = Py_None;
        Py_INCREF(ret);
        goto done;
    }
    Py_ssize_t count[MAX_FIELDS][6];
    memset(count, 0, sizeof(count));
    for (int i = 0; i < s.nf; i++)
        for (Py_ssize_t j = 0; j < s.n; j++) count[i][s.codes[i][j]]++;
    /* shrunk to the events parsed (then codes, vals and has_args may point to freed memory) */
    for (int i = 0; i < s.nf; i++)
        if (resize(&s, &s.codes_b[i], s.n) < 0 || resize(&s, &s.vals_b[i], s.n * 8) < 0) goto done;
    if (resize(&s, &s.has_b, s.n) < 0) goto done;
    PyObject *cols = PyList_New(s.nf);
    if (!cols) goto done;
    for (int i = 0; i < s.nf; i++) {
        Py_ssize_t *c = count[i];
        PyObject *t = Py_BuildValue("(OO(nnnnnn))", s.codes_b[i], s.vals_b[i], c[0], c[1], c[2], c[3], c[4], c[5]);
        if (!t) { Py_DECREF(cols); goto done; }
        PyList_SET_ITEM(cols, i, t);
    }
    ret = Py_BuildValue("(nNOO)", s.n, cols, s.has_b, s.uniq);
done:
    release(&s);
    PyBuffer_Release(&buf);
    return ret;
}

static PyMethodDef methods[] = {
    {"walk", native_walk, METH_VARARGS, "walk(tid, t0, op, g, op_end, op_dur, host_self, dev_total, dev_self): ranks/operators.py's walk."},
    {"columns", columns, METH_VARARGS,
     "columns(buf, start, end, fields, decode) -> (n, [(codes, values, counts)], has_args, uniq) or None: the typed "
     "columns of the trace events in buf[start:end] (see decode/native.py)."},
    {"events_json", native_events_json, METH_VARARGS,
     "events_json(is_x, cat_codes, cat_offsets, cat_data, name_codes, name_offsets, name_data, ts, dur, tid, corr, has_args, pid, shift[, out]) "
     "-> bytes (with out: the number of bytes written into it): the merged timeline's events as JSON objects each followed by a comma (see outputs/_native_text.c)."},
    {"flows_json", native_flows_json, METH_VARARGS,
     "flows_json(fid, s_tid, s_ts, f_tid, f_ts, pid, shift) -> bytes: the merged timeline's launch flows (see outputs/timeline_render.py)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "Native helpers of the analysis: decode/native.py, ranks/operators.py, outputs/timeline_render.py.", -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
