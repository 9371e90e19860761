#include <pybind11/pybind11.h>

#include "pytimings/clock.hpp"

namespace py = pybind11;

void register_clock(py::module_& m) {
  m.def("now_ns", &pytimings::now_ns, "CLOCK_MONOTONIC now, in integer nanoseconds.");
}
