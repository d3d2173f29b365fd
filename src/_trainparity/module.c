/* Module definition of trainparity._trainparity: gathers the parts' tables. */
#include "tp.h"

static int add_part(PyObject *module, PyMethodDef *methods, int (*init)(PyObject *))
{
    if (PyModule_AddFunctions(module, methods) < 0)
        return -1;
    return init(module);
}

static int trainparity_exec(PyObject *module)
{
    if (add_part(module, tp_compare_methods, tp_compare_init) < 0)
        return -1;
    if (add_part(module, tp_digest_methods, tp_digest_init) < 0)
        return -1;
    if (add_part(module, tp_spawn_methods, tp_spawn_init) < 0)
        return -1;
    if (add_part(module, tp_coverage_methods, tp_coverage_init) < 0)
        return -1;
    if (add_part(module, tp_summary_methods, tp_summary_init) < 0)
        return -1;
    if (add_part(module, tp_distance_methods, tp_distance_init) < 0)
        return -1;
    if (add_part(module, tp_trace_methods, tp_trace_init) < 0)
        return -1;
    return 0;
}

static PyModuleDef_Slot trainparity_slots[] = {
    {Py_mod_exec, trainparity_exec},
    {0, NULL},
};

static struct PyModuleDef trainparity_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_trainparity",
    .m_doc = "trainparity native core: compare, digest, spawn, coverage, summary, distance, trace.",
    .m_size = 0,
    .m_slots = trainparity_slots,
};

PyMODINIT_FUNC PyInit__trainparity(void)
{
    return PyModuleDef_Init(&trainparity_module);
}
