// Shared between register_regions.cpp (the hot-path types) and register_recorder.cpp.
#pragma once
#include <pybind11/pybind11.h>

#include <memory>

#include "pytimings/recorder.hpp"

namespace pytimings::bindings {

// The RegionFactory bound to `core`: `factory(name, kind=..., ...)` is what pytimings.region
// and Recorder.region are.
pybind11::object make_region_factory(std::shared_ptr<Recorder> core);

}  // namespace pytimings::bindings
