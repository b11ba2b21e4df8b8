// survey(): what a compiled graph's replay checks before every call (compile/replay.py,
// Replayed), in one pass over the arguments without a Python call per tensor. A decode step
// of GPT-2 hands its graph ~150 arguments; read attribute by attribute from Python they took
// ~0.3 ms a call (2-core Zen 3), before any of the step's work reached the device.
#include "survey.h"

#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace oclf::device {

namespace {

// Tags of the signature's words: each argument adds its tag, then its own words.
enum Tag : int64_t { kDeviceTensor = 1, kCpuScalar = 2, kInt = 3, kBool = 4, kFloat = 5, kNone = 6 };

struct Owned {  // a new reference, released unless handed on
  PyObject* p;
  explicit Owned(PyObject* o) : p(o) {}
  ~Owned() { Py_XDECREF(p); }
  PyObject* release() {
    PyObject* o = p;
    p = nullptr;
    return o;
  }
};

PyObject* int_or_none(bool have, int64_t value) {
  if (!have) Py_RETURN_NONE;
  return PyLong_FromLongLong(value);
}

}  // namespace

// survey(args: list, cpu_scalars: bool) -> (signature: bytes, ptrs: list, versions: list) | None
//                                         | NotImplemented
// signature: the tensors' dtypes, devices, shapes and strides and the other arguments' types
// and values, packed (equal bytes: the same signature); ptrs: where each opencl tensor's
// elements start (None for the rest); versions: each tensor's version counter (None for
// inference tensors and other arguments). None when a tensor is on another device, except
// 0-dim CPU tensors where cpu_scalars; NotImplemented for an argument of another kind (the
// caller surveys in Python).
PyObject* survey(PyObject* /*module*/, PyObject* call_args) {
  PyObject* args = nullptr;
  int cpu_scalars = 0;
  if (!PyArg_ParseTuple(call_args, "O!p", &PyList_Type, &args, &cpu_scalars)) return nullptr;
  const Py_ssize_t n = PyList_GET_SIZE(args);
  std::vector<int64_t> words;
  words.reserve(size_t(n) * 8);
  Owned ptrs(PyList_New(n)), versions(PyList_New(n));
  if (ptrs.p == nullptr || versions.p == nullptr) return nullptr;
  try {
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* a = PyList_GET_ITEM(args, i);
    bool have_ptr = false, have_version = false;
    int64_t ptr = 0, version = 0;
    if (THPVariable_Check(a)) {
      const at::Tensor& t = THPVariable_Unpack(a);
      const c10::Device device = t.device();
      if (device.type() == c10::DeviceType::PrivateUse1) {
        words.push_back(kDeviceTensor);
        words.push_back(int64_t(t.scalar_type()));
        words.push_back(device.index());
        words.push_back(t.dim());
        for (int64_t s : t.sizes()) words.push_back(s);
        for (int64_t s : t.strides()) words.push_back(s);
        have_ptr = true;
        ptr = int64_t(reinterpret_cast<uintptr_t>(t.data_ptr()));
      } else if (cpu_scalars && device.type() == c10::DeviceType::CPU && t.dim() == 0) {
        words.push_back(kCpuScalar);
        words.push_back(int64_t(t.scalar_type()));
      } else {
        Py_RETURN_NONE;
      }
      if (!t.is_inference()) {
        have_version = true;
        version = int64_t(t._version());
      }
    } else if (a == Py_None) {
      words.push_back(kNone);
    } else if (PyBool_Check(a)) {
      words.push_back(kBool);
      words.push_back(a == Py_True);
    } else if (PyLong_CheckExact(a)) {
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(a, &overflow);
      if (overflow != 0) Py_RETURN_NOTIMPLEMENTED;
      words.push_back(kInt);
      words.push_back(v);
    } else if (PyFloat_CheckExact(a)) {
      const double v = PyFloat_AS_DOUBLE(a);
      int64_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      words.push_back(kFloat);
      words.push_back(bits);
    } else {
      Py_RETURN_NOTIMPLEMENTED;
    }
    PyObject* p = int_or_none(have_ptr, ptr);
    PyObject* v = int_or_none(have_version, version);
    if (p == nullptr || v == nullptr) {
      Py_XDECREF(p);
      Py_XDECREF(v);
      return nullptr;
    }
    PyList_SET_ITEM(ptrs.p, i, p);  // steals the references
    PyList_SET_ITEM(versions.p, i, v);
  }
  } catch (const std::exception&) {  // a tensor without plain storage, say: surveyed in Python
    Py_RETURN_NOTIMPLEMENTED;
  }
  Owned signature(PyBytes_FromStringAndSize(reinterpret_cast<const char*>(words.data()),
                                            Py_ssize_t(words.size() * sizeof(int64_t))));
  if (signature.p == nullptr) return nullptr;
  return PyTuple_Pack(3, signature.p, ptrs.p, versions.p);
}

}  // namespace oclf::device
