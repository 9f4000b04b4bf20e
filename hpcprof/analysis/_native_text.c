/* The merged timeline's event text (outputs/timeline_render.py), part of the extension
 * hpcprof.analysis._native (its module is defined in _native.c).
 *
 * `events_json(...)` and `flows_json(...)` write what timeline_render._events_json and _flows_json
 * build with Arrow's string kernels: the same JSON objects, keys in the same order, each followed
 * by a comma, and numbers that parse to the same values:
 *
 * - "ts" of an event is np.round(ts - shift, 3), which numpy computes as rint((ts - shift) * 1000.0)
 *   / 1000.0. With k = rint((ts - shift) * 1000.0) (an integer-valued double; exactly an integer
 *   when |k| <= 2^53), the text of the integer k with a decimal point three digits from its end
 *   ("1234.567", "-0.005", "12") is exactly the rational k/1000, and a correctly rounded parser
 *   (Python's float(), JSON.parse) reads it as the double nearest to k/1000, which is what IEEE
 *   division k / 1000.0 gives: the same double as numpy's, for every value. Beyond 2^53, the value
 *   k / 1000.0 is written as Python's repr writes it (shortest text that parses back to it).
 * - "dur" and the flows' "ts" are written unrounded: as k/1000 in decimal when k = rint(x * 1000.0)
 *   gives k / 1000.0 == x (the same argument: the text parses to k / 1000.0, that is to x), else as
 *   Python's repr of x. Either way it parses to x exactly.
 * - Not finite (no piece holds one: ranks/timeline_piece.py keeps events with a finite ts and dur;
 *   Arrow would write "nan" or "inf", which is not JSON): NaN as null, infinities as 1e999 and
 *   -1e999 (valid JSON, which parsers read as infinities).
 * - Integers (pid, tid, correlation id, flow id) in decimal.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_native.h"

#define EXACT_LIMIT 9007199254740992.0 /* 2^53 */

static char *put(char *o, const char *s, size_t n) { memcpy(o, s, n); return o + n; }
#define PUT(o, lit) put((o), (lit), sizeof(lit) - 1)

static char *put_u64(char *o, uint64_t v) {
    char tmp[24];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *o++ = tmp[--n];
    return o;
}

static char *put_i64(char *o, int64_t v) {
    if (v < 0) { *o++ = '-'; return put_u64(o, (uint64_t)0 - (uint64_t)v); }
    return put_u64(o, (uint64_t)v);
}

/* k/1000 in decimal, k an integer-valued double with |k| <= 2^53 ("-0" for -0.0, as Arrow writes it) */
static char *put_milli(char *o, double k) {
    if (signbit(k)) { *o++ = '-'; k = -k; }
    uint64_t u = (uint64_t)k, whole = u / 1000;
    unsigned frac = (unsigned)(u % 1000);
    o = put_u64(o, whole);
    if (frac) {
        *o++ = '.';
        *o++ = (char)('0' + frac / 100);
        if (frac % 100) {
            *o++ = (char)('0' + frac / 10 % 10);
            if (frac % 10) *o++ = (char)('0' + frac % 10);
        }
    }
    return o;
}

/* at most 32 bytes: repr of a finite double is at most 24 */
static char *put_repr(char *o, double x) {
    if (isnan(x)) return PUT(o, "null");
    if (isinf(x)) return x > 0 ? PUT(o, "1e999") : PUT(o, "-1e999");
    char *s = PyOS_double_to_string(x, 'r', 0, 0, NULL);
    if (!s) return NULL;
    size_t n = strlen(s);
    if (n > 32) n = 32; /* cannot happen */
    o = put(o, s, n);
    PyMem_Free(s);
    return o;
}

/* np.round(x, 3), as text that parses to it */
static char *put_round3(char *o, double x) {
    double k = rint(x * 1000.0);
    if (fabs(k) <= EXACT_LIMIT) return put_milli(o, k);
    return put_repr(o, k / 1000.0);
}

/* x, as text that parses to it */
static char *put_exact(char *o, double x) {
    double k = rint(x * 1000.0);
    if (fabs(k) <= EXACT_LIMIT && k / 1000.0 == x) return put_milli(o, k);
    return put_repr(o, x);
}

#define NUM_MAX 32 /* the longest number text written above */

typedef struct {
    Py_buffer b;
    int held;
} Buf;

/* kind: 'd' float64, 'q' int64, '?' bool (one byte), 0 bytes of any kind */
static int get(PyObject *o, Buf *x, char kind, const char *what) {
    if (PyObject_GetBuffer(o, &x->b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) return -1;
    x->held = 1;
    const char *f = x->b.format ? x->b.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int ok = kind == 0 || (kind == 'd' && x->b.itemsize == 8 && !strcmp(f, "d")) ||
             (kind == 'q' && x->b.itemsize == 8 && (!strcmp(f, "q") || !strcmp(f, "l"))) ||
             (kind == '?' && x->b.itemsize == 1 && (!strcmp(f, "?") || !strcmp(f, "b") || !strcmp(f, "B")));
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "timeline text: %s: not an array of %s", what,
                     kind == 'd' ? "float64" : kind == 'q' ? "int64" : "bool");
        return -1;
    }
    return 0;
}

static void release(Buf *x, int n) {
    for (int i = 0; i < n; i++)
        if (x[i].held) PyBuffer_Release(&x[i].b);
}

/* A dictionary of JSON texts: offsets (int64, n + 1, rising, within data) into data (bytes). */
static int check_dict(const Buf *off, const Buf *data, Py_ssize_t *n, const char *what) {
    const int64_t *o = off->b.buf;
    Py_ssize_t m = off->b.len / 8;
    if (m < 1 || o[0] < 0 || o[m - 1] > data->b.len) goto bad;
    for (Py_ssize_t i = 1; i < m; i++)
        if (o[i] < o[i - 1]) goto bad;
    *n = m - 1;
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "timeline text: %s: offsets out of order or beyond the data", what);
    return -1;
}

static int check_codes(const Buf *c, Py_ssize_t n, Py_ssize_t ndict, const char *what) {
    const int64_t *v = c->b.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (v[i] < 0 || v[i] >= ndict) {
            PyErr_Format(PyExc_IndexError, "timeline text: %s: code %lld of a dictionary of %zd", what, (long long)v[i], ndict);
            return -1;
        }
    return 0;
}

static PyObject *finish(PyObject *out, char *start, char *o) {
    if (!o) { Py_DECREF(out); return NULL; }
    if (_PyBytes_Resize(&out, o - start) < 0) return NULL;
    return out;
}

/* events_json(is_x, cat_codes, cat_offsets, cat_data, name_codes, name_offsets, name_data, ts,
 * dur, tid, corr, has_args, pid, shift[, out]) -> bytes, or with `out` the number of bytes written:
 * is_x and has_args bool arrays, codes, offsets, tid and corr int64 arrays, ts and dur float64
 * arrays, all of one length but the offsets and data. `out`: a writable buffer the text is written
 * into, from its start, where it holds the bound on the text's length computed first; where it does
 * not, nothing is written and minus that bound is returned (the caller grows its buffer and calls
 * again). Why: a buffer the caller keeps from batch to batch is faulted in once, where a fresh bytes
 * object of megabytes is faulted in at every batch (138 MB of text at 16 ranks: 34,000 page faults). */
PyObject *native_events_json(PyObject *self, PyObject *args) {
    PyObject *o[12], *dest = Py_None;
    long long pid;
    double shift;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOLd|O", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9], &o[10],
                          &o[11], &pid, &shift, &dest))
        return NULL;
    static const char kind[12] = {'?', 'q', 'q', 0, 'q', 'q', 0, 'd', 'd', 'q', 'q', '?'};
    static const Py_ssize_t size[12] = {1, 8, 8, 1, 8, 8, 1, 8, 8, 8, 8, 1};
    static const char *what[12] = {"is_x", "cat codes", "cat offsets", "cat data", "name codes", "name offsets", "name data",
                                   "ts", "dur", "tid", "corr", "has_args"};
    Buf b[12];
    memset(b, 0, sizeof b);
    Py_buffer ob;
    int have_out = 0;
    PyObject *ret = NULL;
    for (int i = 0; i < 12; i++)
        if (get(o[i], &b[i], kind[i], what[i]) < 0) goto done;
    Py_ssize_t n = b[0].b.len, ncat, nname;
    for (int i = 0; i < 12; i++)
        if (i != 2 && i != 3 && i != 5 && i != 6 && b[i].b.len / size[i] != n) {
            PyErr_Format(PyExc_ValueError, "timeline text: %s: %zd items, not %zd", what[i], b[i].b.len / size[i], n);
            goto done;
        }
    if (check_dict(&b[2], &b[3], &ncat, "cat") < 0 || check_dict(&b[5], &b[6], &nname, "name") < 0 ||
        check_codes(&b[1], n, ncat, "cat") < 0 || check_codes(&b[4], n, nname, "name") < 0)
        goto done;
    const uint8_t *is_x = b[0].b.buf, *has_args = b[11].b.buf;
    const int64_t *cc = b[1].b.buf, *coff = b[2].b.buf, *nc = b[4].b.buf, *noff = b[5].b.buf, *tid = b[9].b.buf, *corr = b[10].b.buf;
    const char *cdata = b[3].b.buf, *ndata = b[6].b.buf;
    const double *ts = b[7].b.buf, *dur = b[8].b.buf;
    /* the fixed text of an event is under 100 bytes, its five numbers at most NUM_MAX each */
    Py_ssize_t cap = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        cap += 100 + 5 * NUM_MAX + (coff[cc[i] + 1] - coff[cc[i]]) + (noff[nc[i] + 1] - noff[nc[i]]);
    PyObject *out = NULL;
    char *start;
    if (dest != Py_None) {
        if (PyObject_GetBuffer(dest, &ob, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto done;
        have_out = 1;
        if (ob.len < cap) {
            ret = PyLong_FromSsize_t(-cap);
            goto done;
        }
        start = ob.buf;
    } else {
        if (!(out = PyBytes_FromStringAndSize(NULL, cap))) goto done;
        start = PyBytes_AS_STRING(out);
    }
    char *p = start;
    for (Py_ssize_t i = 0; i < n && p; i++) {
        p = is_x[i] ? PUT(p, "{\"ph\":\"X\",\"cat\":") : PUT(p, "{\"ph\":\"i\",\"cat\":");
        p = put(p, cdata + coff[cc[i]], (size_t)(coff[cc[i] + 1] - coff[cc[i]]));
        p = PUT(p, ",\"name\":");
        p = put(p, ndata + noff[nc[i]], (size_t)(noff[nc[i] + 1] - noff[nc[i]]));
        p = PUT(p, ",\"pid\":");
        p = put_i64(p, pid);
        p = PUT(p, ",\"tid\":");
        p = put_i64(p, tid[i]);
        p = PUT(p, ",\"ts\":");
        if (!(p = put_round3(p, ts[i] - shift))) break;
        if (is_x[i]) {
            p = PUT(p, ",\"dur\":");
            if (!(p = put_exact(p, dur[i]))) break;
        } else {
            p = PUT(p, ",\"s\":\"t\"");
        }
        if (has_args[i]) {
            p = PUT(p, ",\"args\":{\"correlation\":");
            p = put_i64(p, corr[i]);
            p = PUT(p, "}");
        }
        p = PUT(p, "},");
    }
    if (out)
        ret = finish(out, start, p);
    else if (p)
        ret = PyLong_FromSsize_t(p - start);
done:
    if (have_out) PyBuffer_Release(&ob);
    release(b, 12);
    return ret;
}

/* one end of a launch flow: `head` ('s' or 'f' and its binding), then its id, pid, tid and ts, and a
 * comma; NULL where the time could not be written */
static char *put_flow_end(char *p, const char *head, size_t n, int64_t fid, long long pid, int64_t tid, double ts) {
    p = put(p, head, n);
    p = PUT(p, "\"cat\":\"launch\",\"name\":\"launch\",\"id\":");
    p = put_i64(p, fid);
    p = PUT(p, ",\"pid\":");
    p = put_i64(p, pid);
    p = PUT(p, ",\"tid\":");
    p = put_i64(p, tid);
    p = PUT(p, ",\"ts\":");
    if (!(p = put_exact(p, ts))) return NULL;
    return PUT(p, "},");
}
#define FLOW_END(p, lit, ...) put_flow_end((p), (lit), sizeof(lit) - 1, __VA_ARGS__)

/* flows_json(fid, s_tid, s_ts, f_tid, f_ts, pid, shift) -> bytes: per launch flow, its 's' event
 * (on the runtime call's thread, at its start) and its 'f' event (on the device event's), with
 * ts - shift unrounded; fid, s_tid, f_tid int64 arrays, s_ts, f_ts float64 arrays of one length. */
PyObject *native_flows_json(PyObject *self, PyObject *args) {
    PyObject *o[5];
    long long pid;
    double shift;
    if (!PyArg_ParseTuple(args, "OOOOOLd", &o[0], &o[1], &o[2], &o[3], &o[4], &pid, &shift)) return NULL;
    static const char *what[5] = {"fid", "s_tid", "s_ts", "f_tid", "f_ts"};
    static const char kind[5] = {'q', 'q', 'd', 'q', 'd'};
    Buf b[5];
    memset(b, 0, sizeof b);
    PyObject *ret = NULL;
    for (int i = 0; i < 5; i++)
        if (get(o[i], &b[i], kind[i], what[i]) < 0) goto done;
    Py_ssize_t n = b[0].b.len / 8;
    for (int i = 1; i < 5; i++)
        if (b[i].b.len / 8 != n) {
            PyErr_Format(PyExc_ValueError, "timeline text: %s: %zd items, not %zd", what[i], b[i].b.len / 8, n);
            goto done;
        }
    const int64_t *fid = b[0].b.buf, *stid = b[1].b.buf, *ftid = b[3].b.buf;
    const double *sts = b[2].b.buf, *fts = b[4].b.buf;
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (200 + 6 * NUM_MAX));
    if (!out) goto done;
    char *start = PyBytes_AS_STRING(out), *p = start;
    for (Py_ssize_t i = 0; i < n && p; i++) {
        p = FLOW_END(p, "{\"ph\":\"s\",", fid[i], pid, stid[i], sts[i] - shift);
        if (p) p = FLOW_END(p, "{\"ph\":\"f\",\"bp\":\"e\",", fid[i], pid, ftid[i], fts[i] - shift);
    }
    ret = finish(out, start, p);
done:
    release(b, 5);
    return ret;
}
