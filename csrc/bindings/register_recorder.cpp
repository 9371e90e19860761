// The Recorder's cold side: lifecycle, draining into numpy columns, drops, threads, meta.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "regions.hpp"

namespace py = pybind11;
using pytimings::Record;
using pytimings::Recorder;

namespace {

struct RecorderBinding {
  std::shared_ptr<Recorder> core;
  py::object regions;  // RegionFactory bound to core
};

template <class T, class F>
py::array_t<T> column(const std::vector<Record>& recs, F get) {
  py::array_t<T> a(static_cast<py::ssize_t>(recs.size()));
  T* out = a.mutable_data();
  for (size_t i = 0; i < recs.size(); ++i) out[i] = get(recs[i]);
  return a;
}

py::dict columns(const std::vector<Record>& r) {
  py::dict d;
  d["name"] = column<uint32_t>(r, [](const Record& x) { return x.name; });
  d["kind"] = column<uint32_t>(r, [](const Record& x) { return x.kind; });
  d["thread"] = column<uint32_t>(r, [](const Record& x) { return x.thread; });
  d["depth"] = column<uint16_t>(r, [](const Record& x) { return x.depth; });
  d["flags"] = column<uint16_t>(r, [](const Record& x) { return x.flags; });
  d["start_ns"] = column<int64_t>(r, [](const Record& x) { return x.start_ns; });
  d["end_ns"] = column<int64_t>(r, [](const Record& x) { return x.end_ns; });
  d["gpu_start_ns"] = column<int64_t>(r, [](const Record& x) { return x.gpu_start_ns; });
  d["gpu_end_ns"] = column<int64_t>(r, [](const Record& x) { return x.gpu_end_ns; });
  d["stream"] = column<uint64_t>(r, [](const Record& x) { return x.stream; });
  d["nbytes"] = column<int64_t>(r, [](const Record& x) { return x.nbytes; });
  d["payload"] = column<int64_t>(r, [](const Record& x) { return x.payload; });
  return d;
}

py::dict by_name_id(const std::vector<std::pair<uint32_t, uint64_t>>& counts) {
  py::dict d;
  for (auto& [name, n] : counts) d[py::int_(name)] = py::int_(n);
  return d;
}

}  // namespace

void register_recorder(py::module_& m) {
  m.def(
      "names_over_limit", [] { return pytimings::names_over_limit(); },
      "Uses of region names and kinds recorded as '<names beyond the limit>': the "
      "process-wide name table holds at most 65,536 distinct strings and 64 MiB of text.");
  m.def("_fail_allocation_after", &pytimings::fail_allocation_after, py::arg("n"),
        "Testing only: the n-th allocation point of a drain from now (0 = the next) fails "
        "as out of memory would; n < 0 turns it off.");
  m.def(
      "strings", [] { return pytimings::interned_strings(); },
      "Every interned region name and kind (process-wide); record name/kind ids index it.");
  // The plain `type` metaclass (not pybind11's) keeps the class an ordinary type for stubtest.
  py::class_<RecorderBinding>(m, "Recorder", py::metaclass(reinterpret_cast<PyObject*>(&PyType_Type)),
                              "Native recorder: per-thread buffers, CUDA events, NVTX. Use "
                              "pytimings.Recorder, which wraps this.")
      .def(py::init([](std::optional<int64_t> max_records, int64_t reanchor_interval_ns) {
             if (max_records && *max_records < 0)
               throw py::value_error("max_records must be >= 0 or None, got " +
                                     std::to_string(*max_records));
             if (reanchor_interval_ns < 0)
               throw py::value_error("reanchor_interval_ns must be >= 0");
             auto core = std::make_shared<Recorder>(max_records ? *max_records : -1,
                                                    reanchor_interval_ns);
             auto* b = new RecorderBinding{core, pytimings::bindings::make_region_factory(core)};
             return b;
           }),
           py::arg("max_records") = py::none(), py::arg("reanchor_interval_ns") = 1000000000)
      .def_property_readonly(
          "regions", [](const RecorderBinding& b) { return b.regions; },
          "The RegionFactory: calling it opens nothing, entering the result does.")
      .def("start", [](RecorderBinding& b) { b.core->start(); },
           "Begin (or resume) recording; samples the wall-clock offset.")
      .def("stop", [](RecorderBinding& b) { b.core->stop(); }, "Stop recording new regions.")
      .def("enable", [](RecorderBinding& b) { b.core->set_enabled(true); })
      .def("disable", [](RecorderBinding& b) { b.core->set_enabled(false); })
      .def_property_readonly("enabled", [](const RecorderBinding& b) { return b.core->enabled(); })
      .def_property_readonly("started", [](const RecorderBinding& b) { return b.core->started(); })
      .def_property_readonly("active", [](const RecorderBinding& b) { return b.core->active(); })
      .def(
          "drain",
          [](RecorderBinding& b, bool sync) {
            std::vector<Record> recs;
            {
              py::gil_scoped_release nogil;  // may wait on the GPU; writers keep recording
              recs = b.core->drain(sync);
            }
            try {
              pytimings::allocation_point();
              return columns(recs);
            } catch (...) {  // MemoryError building the columns: the records go back
              b.core->restore(recs);
              throw;
            }
          },
          py::arg("sync") = true,
          "Move every finished record out, as numpy columns of RECORD_SCHEMA. sync=True waits "
          "for outstanding GPU events (flush); otherwise records whose GPU work is still "
          "running stay inside for a later drain.")
      .def(
          "dropped",
          [](const RecorderBinding& b) {
            return by_name_id(b.core->dropped());
          },
          "Records not kept because of max_records, by name id, since the last clear().")
      .def(
          "open_regions",
          [](const RecorderBinding& b) {
            return by_name_id(b.core->open_regions());
          },
          "Regions entered and never closed, by name id: open now, open when their thread "
          "exited, or exited from another thread; since the last clear().")
      .def(
          "clear",
          [](RecorderBinding& b) {
            py::gil_scoped_release nogil;
            b.core->clear();
          },
          "Discard every record and drop count; frees the memory budget.")
      .def(
          "threads",
          [](const RecorderBinding& b) {
            py::list out;
            for (auto& [tid, name] : b.core->threads()) {
              py::dict t;
              t["tid"] = tid;
              t["name"] = name;
              out.append(t);
            }
            return out;
          },
          "One dict per recording thread, in the order of the records' thread ids.")
      .def(
          "meta",
          [](const RecorderBinding& b) {
            const pytimings::RecorderMeta m = b.core->meta();
            py::dict d;
            d["clock"] = "CLOCK_MONOTONIC";
            d["wall_offset_ns"] = m.wall.offset_ns;
            d["wall_offset_uncertainty_ns"] = m.wall.uncertainty_ns;
            d["started_ns"] = m.started_ns;
            d["max_records"] = m.max_records < 0 ? py::object(py::none()) : py::int_(m.max_records);
            d["capture_fallbacks"] = m.capture_fallbacks;
            d["gpu_pending"] = m.gpu_pending;
            d["buffer_bytes"] = m.buffer_bytes;
            d["lost_out_of_memory"] = m.lost_out_of_memory;
            py::list anchors;
            for (const auto& a : m.anchors) {
              py::dict x;
              x["device"] = a.device;
              x["host_ns"] = a.host_ns;
              x["uncertainty_ns"] = a.uncertainty_ns;
              x["residual_ns"] = a.has_residual ? py::object(py::int_(a.residual_ns)) : py::none();
              anchors.append(x);
            }
            d["gpu_anchors"] = anchors;
            return d;
          },
          "Clock, wall-clock offset, GPU anchors with their residuals, capture fallbacks.");
}
