/* spawn part of the native core (being written). */
#include "tp.h"

PyMethodDef tp_spawn_methods[] = {
    {NULL, NULL, 0, NULL},
};

int tp_spawn_init(PyObject *module)
{
    (void)module;
    return 0;
}
