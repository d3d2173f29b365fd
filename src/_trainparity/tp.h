/* Shared declarations of the native core: one method table and one init hook per part. */
#ifndef TRAINPARITY_TP_H
#define TRAINPARITY_TP_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Each part (compare.c, digest.c, spawn.c, coverage.c, summary.c, distance.c,
 * trace.c) defines its functions
 * in a NULL-terminated table and an init hook that may add types or constants
 * to the module; the hook returns 0 on success and -1 with an exception set. */
extern PyMethodDef tp_compare_methods[];
extern PyMethodDef tp_digest_methods[];
extern PyMethodDef tp_spawn_methods[];
extern PyMethodDef tp_coverage_methods[];
extern PyMethodDef tp_summary_methods[];
extern PyMethodDef tp_distance_methods[];
extern PyMethodDef tp_trace_methods[];

int tp_compare_init(PyObject *module);
int tp_digest_init(PyObject *module);
int tp_spawn_init(PyObject *module);
int tp_coverage_init(PyObject *module);
int tp_summary_init(PyObject *module);
int tp_distance_init(PyObject *module);
int tp_trace_init(PyObject *module);

#endif
