#include <pybind11/pybind11.h>

#include "pytimings/clock.hpp"

namespace py = pybind11;

void register_clock(py::module_& m) {
  m.def("now_ns", &pytimings::now_ns, "CLOCK_MONOTONIC now, in integer nanoseconds.");
  m.def(
      "wall_offset_ns",
      [] {
        const pytimings::WallOffset w = pytimings::sample_wall_offset();
        return py::make_tuple(w.offset_ns, w.uncertainty_ns);
      },
      "(CLOCK_REALTIME - CLOCK_MONOTONIC, uncertainty) in ns, from the tightest of 9 "
      "bracketed samples.");
}
