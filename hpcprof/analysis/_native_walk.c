/* The operator walk of ranks/operators.py, part of the extension hpcprof.analysis._native (its
 * module is defined in _native.c). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_native.h"

/* ranks/operators.operator_table's walk of each thread's operators and runtime calls (see there):
 * walk(tid, t0, op, g, op_end, op_dur, host_self, dev_total, dev_self), arrays of the walk order
 * (int64 tid codes, double starts, int64 operator index or -1 for a runtime call, double GPU time
 * it launched) and per operator (double end, duration; host_self, dev_total, dev_self updated in
 * place). The same operations in the same order as the Python loop: the same doubles. */
static int get_buf(PyObject *o, Py_buffer *b, Py_ssize_t itemsize, int writable) {
    if (PyObject_GetBuffer(o, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0) return -1;
    if (b->itemsize != itemsize) { PyBuffer_Release(b); PyErr_SetString(PyExc_TypeError, "walk: arrays of 8-byte items"); return -1; }
    return 0;
}

PyObject *native_walk(PyObject *self, PyObject *args) {
    PyObject *o[9];
    if (!PyArg_ParseTuple(args, "OOOOOOOOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8])) return NULL;
    Py_buffer b[9];
    int got = 0;
    PyObject *ret = NULL;
    for (; got < 9; got++)
        if (get_buf(o[got], &b[got], 8, got >= 6) < 0) goto done;
    Py_ssize_t n = b[0].len / 8, nops = b[4].len / 8;
    if (b[1].len / 8 != n || b[2].len / 8 != n || b[3].len / 8 != n || b[5].len / 8 != nops || b[6].len / 8 != nops ||
        b[7].len / 8 != nops || b[8].len / 8 != nops) {
        PyErr_SetString(PyExc_ValueError, "walk: arrays of different lengths");
        goto done;
    }
    const int64_t *tid = b[0].buf, *op = b[2].buf;
    const double *t0 = b[1].buf, *g = b[3].buf, *op_end = b[4].buf, *op_dur = b[5].buf;
    double *host_self = b[6].buf, *dev_total = b[7].buf, *dev_self = b[8].buf;
    int64_t *stack = PyMem_Malloc((nops + 1) * sizeof(int64_t));
    if (!stack) { PyErr_NoMemory(); goto done; }
    Py_ssize_t depth = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i == 0 || tid[i] != tid[i - 1]) depth = 0;
        while (depth && op_end[stack[depth - 1]] <= t0[i]) depth--;
        int64_t k = op[i];
        if (k >= 0) {
            if (k >= nops || depth > nops) { PyMem_Free(stack); PyErr_SetString(PyExc_IndexError, "walk: operator index"); goto done; }
            if (depth) host_self[stack[depth - 1]] -= op_dur[k];
            stack[depth++] = k;
        } else if (g[i] != 0.0 && depth) {
            dev_self[stack[depth - 1]] += g[i];
            for (Py_ssize_t j = 0; j < depth; j++) dev_total[stack[j]] += g[i];
        }
    }
    PyMem_Free(stack);
    ret = Py_None;
    Py_INCREF(ret);
done:
    for (int i = 0; i < got; i++) PyBuffer_Release(&b[i]);
    return ret;
}
