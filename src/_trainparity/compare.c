/* compare part of the native core (being written). */
#include "tp.h"

PyMethodDef tp_compare_methods[] = {
    {NULL, NULL, 0, NULL},
};

int tp_compare_init(PyObject *module)
{
    (void)module;
    return 0;
}
