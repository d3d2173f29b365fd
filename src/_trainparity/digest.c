/* digest part of the native core (being written). */
#include "tp.h"

PyMethodDef tp_digest_methods[] = {
    {NULL, NULL, 0, NULL},
};

int tp_digest_init(PyObject *module)
{
    (void)module;
    return 0;
}
