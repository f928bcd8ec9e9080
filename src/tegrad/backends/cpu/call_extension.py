"""A kernel's call as a CPython extension: the arrays' data pointers read in C.

A compiled kernel is ``void k(void **args, long *err, int nthreads)``. Through ctypes a call
costs about 3 µs on this project's VM: a pointer array built from each array's address,
then ctypes' own argument conversion. An eager op on small arrays (``x + y`` on four
floats) is little else. ``run`` makes the same call from C::

    run(fn, err, threads, layout, *arrays) -> None (it ran) | False (nothing ran)

with ``fn`` and ``err`` addresses and ``layout`` the bytes of C longs: the count of
leading arrays that are the kernel's own outputs (allocated by the caller: only checked to
be ndarrays), then per read its NumPy type number, its ndim and its strides in bytes. A
read that is not an ndarray of that type in native byte order with exactly those strides
(or an output that is not an ndarray) makes ``run`` return False before the kernel runs,
and the caller converts it (``kernel_call.py``). The kernel runs with the GIL released,
as a ctypes call does.

It is built once per Python, NumPy and processor, like the kernels (``compiler.load``:
the disk cache), with Python's and NumPy's include folders. Where it cannot be built
(no ``Python.h``: a Python without its headers) ``extension()`` is None and the kernels
are called through ctypes.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sysconfig
from functools import cache
from pathlib import Path

import numpy as np

MAX_ARRAYS = 64  # the C side's slots: a kernel with more arguments is called through ctypes

_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

typedef void (*tg_kernel)(void **, long *, int);

static PyObject *tg_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
  void *slots[MAX_ARRAYS];
  if (nargs < 4 || nargs - 4 > MAX_ARRAYS || !PyBytes_CheckExact(args[3])) {
    PyErr_SetString(PyExc_TypeError, "run(fn, err, threads, layout, *arrays)");
    return NULL;
  }
  tg_kernel fn = (tg_kernel)PyLong_AsVoidPtr(args[0]);
  long *err = (long *)PyLong_AsVoidPtr(args[1]);
  int threads = (int)PyLong_AsLong(args[2]);
  if (PyErr_Occurred()) return NULL;
  const long *layout = (const long *)PyBytes_AS_STRING(args[3]);
  const long *end = layout + PyBytes_GET_SIZE(args[3]) / (Py_ssize_t)sizeof(long);
  long outputs = *layout++;
  for (Py_ssize_t k = 4; k < nargs; k++) {
    PyObject *o = args[k];
    if (!PyArray_CheckExact(o)) Py_RETURN_FALSE;
    PyArrayObject *a = (PyArrayObject *)o;
    if (k - 4 >= outputs) {
      if (layout + 2 > end || PyArray_TYPE(a) != layout[0] || PyArray_NDIM(a) != layout[1]
          || PyArray_ISBYTESWAPPED(a) || layout + 2 + layout[1] > end)
        Py_RETURN_FALSE;
      const npy_intp *strides = PyArray_STRIDES(a);
      for (long d = 0; d < layout[1]; d++)
        if (strides[d] != layout[2 + d]) Py_RETURN_FALSE;
      layout += 2 + layout[1];
    }
    slots[k - 4] = PyArray_DATA(a);
  }
  Py_BEGIN_ALLOW_THREADS
  fn(slots, err, threads);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

static PyMethodDef tg_methods[] = {
  {"run", (PyCFunction)(void (*)(void))tg_run, METH_FASTCALL, NULL},
  {NULL, NULL, 0, NULL}};
static struct PyModuleDef tg_module = {PyModuleDef_HEAD_INIT, "tg_call", NULL, -1, tg_methods};
PyMODINIT_FUNC PyInit_tg_call(void) {
  import_array();
  return PyModule_Create(&tg_module);
}
""".replace("MAX_ARRAYS", str(MAX_ARRAYS))


@cache
def extension():
    """The ``tg_call`` module (``run``), built or loaded from the disk cache; None where
    it cannot be built here."""
    from .compiler import load
    from .errors import CompileError, CompilerMissing

    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").exists():
        return None
    flags = (f"-I{include}", f"-I{np.get_include()}")
    try:
        path = load(_SOURCE, flags=flags)._name  # (ctypes keeps the path it opened)
        loader = importlib.machinery.ExtensionFileLoader("tg_call", path)
        spec = importlib.util.spec_from_file_location("tg_call", path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except (CompileError, CompilerMissing, ImportError, OSError):
        return None
    return module


def layout(outputs: int, reads: list[tuple[np.dtype, tuple[int, ...]]]) -> bytes:
    """``run``'s layout bytes: ``outputs`` unchecked arrays first, then each read's
    dtype and C-order strides."""
    longs = [outputs]
    for dtype, strides in reads:
        longs += [dtype.num, len(strides), *strides]
    return np.array(longs, np.dtype("long")).tobytes()
