#include <pybind11/pybind11.h>

#include <string>

#include "pytimings/cuda_runtime.hpp"

namespace py = pybind11;

void register_cuda(py::module_& m) {
  m.def("cuda_available", &pytimings::cuda::available,
        "True when a CUDA runtime was loaded and reports at least one device.");
  m.def("cuda_status", &pytimings::cuda::status, "One line: which CUDA runtime and devices, or why none.");
  m.def(
      "event_record_floor_ns",
      [](uint64_t stream, int64_t iterations) {
        py::gil_scoped_release nogil;
        return pytimings::cuda::event_record_floor_ns(stream, iterations);
      },
      py::arg("stream"), py::arg("iterations"),
      "Mean host ns per pair of raw timing cudaEventRecord calls on `stream` (a raw "
      "cudaStream_t int), through the same runtime the recorder uses: the floor under a "
      "GPU-timed region. Raises RuntimeError without CUDA.");
}
