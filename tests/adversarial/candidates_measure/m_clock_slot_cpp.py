"""Timing forgery in libpython itself: the builtin ``time.perf_counter_ns`` keeps its identity, but the C function
its method table points at is swapped (from C++, handed the builtin by Python) for a clock running 50 times slow.

Every holder of the builtin (``time.perf_counter_ns``, a copy saved at import "out of reach") now reads the slow
clock, so an identity check sees nothing and the worker's own measure of each call is 50 times short.
"""

import time

from adversarial import ext

CLOCK_CPP = r"""
#include <torch/extension.h>
#include <ctime>

static long long origin_ns = -1;

static PyObject* slow_clock(PyObject*, PyObject*) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long now = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
    if (origin_ns < 0) origin_ns = now;
    return PyLong_FromLongLong(origin_ns + (now - origin_ns) / 50);
}

bool swap_method(py::object builtin) {
    if (!PyCFunction_Check(builtin.ptr())) return false;
    PyMethodDef* def = reinterpret_cast<PyCFunctionObject*>(builtin.ptr())->m_ml;
    def->ml_meth = reinterpret_cast<PyCFunction>(slow_clock);
    return true;
}
"""

slot = load_inline(
    name="musaenv_adv_clock_slot", cpp_sources=CLOCK_CPP, functions=["swap_method"], extra_cflags=["-O2"],
    verbose=False,
)
slot.swap_method(time.perf_counter_ns)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_fwd(x)
