// pytimings._core: the native recorder. One concern per register_*.cpp file.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_clock(py::module_& m);
void register_cuda(py::module_& m);
void register_regions(py::module_& m);
void register_recorder(py::module_& m);

PYBIND11_MODULE(_core, m) {
  m.doc() = "pytimings native core: clock, recorder buffers, CUDA events, NVTX";
  register_clock(m);
  register_cuda(m);
  register_regions(m);
  register_recorder(m);
}
