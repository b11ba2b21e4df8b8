// survey(): a compiled graph's arguments checked in one pass before each replay (survey.cpp).
#pragma once

#include <Python.h>

namespace oclf::device {

// A METH_VARARGS function of the module _C: survey(args: list, cpu_scalars: bool).
PyObject* survey(PyObject* module, PyObject* args);

}  // namespace oclf::device
