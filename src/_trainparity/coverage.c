/* coverage part of the native core (being written). */
#include "tp.h"

PyMethodDef tp_coverage_methods[] = {
    {NULL, NULL, 0, NULL},
};

int tp_coverage_init(PyObject *module)
{
    (void)module;
    return 0;
}
