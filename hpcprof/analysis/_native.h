/* Functions of the extension hpcprof.analysis._native defined outside _native.c. */
#ifndef HPCPROF_NATIVE_H
#define HPCPROF_NATIVE_H
#include <Python.h>

/* _native_walk.c: ranks/operators.py's operator walk */
PyObject *native_walk(PyObject *self, PyObject *args);

/* _native_text.c: outputs/timeline_render.py's event and launch-flow text */
PyObject *native_events_json(PyObject *self, PyObject *args);
PyObject *native_flows_json(PyObject *self, PyObject *args);

#endif
