// The hot path: region objects and the factory that makes them, written against the CPython
// API directly. A pybind11 call costs ~150-250 ns of argument dispatch, more than the whole
// budget of a host-only region (2x a `with nullcontext()`), so these types use vectorcall,
// METH_FASTCALL, pointer-compared keyword names, a per-recorder cache of shared regions
// and one process-wide name -> id dict. Everything else in the module is pybind11.
#include <Python.h>
#include <structmember.h>

#include <cstring>
#include <string>

#include "pytimings/buffer.hpp"
#include "pytimings/exceptions.hpp"
#include "regions.hpp"

namespace py = pybind11;

// Static type objects are filled in field by field in ready_types().
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace pytimings::bindings {
namespace {

// ---------------------------------------------------------------- module-level state
PyObject* g_name_ids = nullptr;  // str -> int (interned as a region name)
PyObject* g_kind_ids = nullptr;  // str -> int (interned as a kind: also an NVTX category)
PyObject* g_current_thread = nullptr;  // threading.current_thread
PyObject* s_host = nullptr;
PyObject* s_cuda_stream = nullptr;
constexpr int kNArgs = 6;
const char* const kArgNames[kNArgs] = {"name", "kind", "stream", "nbytes", "payload",
                                       "sample_every"};
PyObject* s_args[kNArgs] = {};
constexpr Py_ssize_t kCacheMax = 4096;  // argument-free regions cached per recorder

// Keeps the C++ recorder alive for the regions that point at it (no reference cycle through
// the factory's cache).
struct CoreHandle {
  PyObject_HEAD
  std::shared_ptr<Recorder> core;
};

PyTypeObject CoreHandleType = {PyVarObject_HEAD_INIT(nullptr, 0)};

void core_handle_dealloc(PyObject* self) {
  reinterpret_cast<CoreHandle*>(self)->core.~shared_ptr<Recorder>();
  Py_TYPE(self)->tp_free(self);
}

// ---------------------------------------------------------------- Region
struct RegionObject {
  PyObject_HEAD
  PyObject* handle;  // CoreHandle
  Recorder* core;
  PyObject* name;
  PyObject* kind;
  RegionSpec spec;
  Py_ssize_t disabled_entries;  // entered while the recorder was inactive: exits owed
};

PyTypeObject RegionType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyTypeObject NullRegionType = {PyVarObject_HEAD_INIT(nullptr, 0)};
PyObject* g_null_region = nullptr;

void region_dealloc(PyObject* o) {
  auto* self = reinterpret_cast<RegionObject*>(o);
  Py_DECREF(self->handle);
  Py_DECREF(self->name);
  Py_DECREF(self->kind);
  PyObject_Free(o);
}

// This thread's state in `core`, made on its first record. nullptr when no memory is left to
// make it: the record the caller was about to make is counted as dropped, and the caller goes
// on unrecorded (never an error in the user's code).
ThreadState* thread_state(Recorder* core) {
  if (ThreadState* ts = core->local()) return ts;
  const char* name = "thread";  // a thread name is a nicety; never fail a region over it
  PyObject* t = PyObject_CallNoArgs(g_current_thread);
  PyObject* n = t != nullptr ? PyObject_GetAttrString(t, "name") : nullptr;
  if (n != nullptr)
    if (const char* c = PyUnicode_AsUTF8(n)) name = c;
  ThreadState* ts = core->register_thread(name);
  Py_XDECREF(n);
  Py_XDECREF(t);
  PyErr_Clear();
  if (ts == nullptr) core->count_stateless_drop();
  return ts;
}

PyObject* region_enter(PyObject* o, PyObject*) {
  auto* self = reinterpret_cast<RegionObject*>(o);
  Recorder* core = self->core;
  if (!core->active()) {
    ++self->disabled_entries;
  } else {
    ThreadState* ts = thread_state(core);
    const uint16_t flags = ts != nullptr ? core->enter(*ts, self->spec, self) : kNotEntered;
    if (flags == kNotEntered) {  // no memory for its frame or its thread state: runs
                                 // unrecorded, counted dropped
      ++self->disabled_entries;
      Py_INCREF(o);
      return o;
    }
    Py_INCREF(o);  // the open frame's reference: its identity cannot be reused while open
    if ((flags & kGraphCapture) && core->take_capture_notice()) {
      if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                           "pytimings: region %R entered during CUDA graph capture; regions "
                           "inside a capture are timed on the host and marked with NVTX only "
                           "(flag GRAPH_CAPTURE). This notice is shown once.",
                           self->name) < 0) {
        core->abort_enter(*ts);
        Py_DECREF(o);
        return nullptr;
      }
    }
  }
  Py_INCREF(o);
  return o;
}

PyObject* region_exit(PyObject* o, PyObject* const* args, Py_ssize_t nargs) {
  auto* self = reinterpret_cast<RegionObject*>(o);
  const bool error = nargs > 0 && args[0] != Py_None;
  ThreadState* ts = self->core->local();
  const ExitResult closed =
      ts != nullptr ? self->core->exit(*ts, self, error) : ExitResult::kNotInnermost;
  if (closed != ExitResult::kNotInnermost) {
    if (closed == ExitResult::kClosed) Py_DECREF(o);  // the frame's reference (the caller
    Py_RETURN_FALSE;                                   // still holds its own)
  }
  if (self->disabled_entries > 0) {
    --self->disabled_entries;
    Py_RETURN_FALSE;
  }
  // Open on another thread: refused, but that thread drops the frame at its next region call
  // (counted as an open region) instead of keeping it under all its later regions.
  try {
    if (self->core->abandon_elsewhere(ts, self)) Py_DECREF(o);  // the frame's reference
  } catch (const std::exception&) {  // a lock that cannot be taken: refuse all the same
  }
  PyErr_Format(PyExc_RuntimeError,
               "pytimings region %R: exit without a matching enter on this thread (exited "
               "twice, or out of nesting order)",
               self->name);
  return nullptr;
}

PyObject* region_repr(PyObject* o) {
  auto* self = reinterpret_cast<RegionObject*>(o);
  return PyUnicode_FromFormat("<pytimings region %R kind=%R>", self->name, self->kind);
}

PyObject* region_get_stream(PyObject* o, void*) {
  auto* self = reinterpret_cast<RegionObject*>(o);
  if (!(self->spec.flags & kHasStream)) Py_RETURN_NONE;
  return PyLong_FromUnsignedLongLong(self->spec.stream);
}
PyObject* region_get_nbytes(PyObject* o, void*) {
  auto* self = reinterpret_cast<RegionObject*>(o);
  if (self->spec.nbytes < 0) Py_RETURN_NONE;
  return PyLong_FromLongLong(self->spec.nbytes);
}
PyObject* region_get_payload(PyObject* o, void*) {
  auto* self = reinterpret_cast<RegionObject*>(o);
  if (!(self->spec.flags & kHasPayload)) Py_RETURN_NONE;
  return PyLong_FromLongLong(self->spec.payload);
}
PyObject* region_get_sample_every(PyObject* o, void*) {
  return PyLong_FromUnsignedLong(reinterpret_cast<RegionObject*>(o)->spec.sample_every);
}

PyMethodDef region_methods[] = {
    {"__enter__", region_enter, METH_NOARGS, "Open the region (host stamp, GPU event, NVTX push)."},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(region_exit)),
     METH_FASTCALL, "Close the innermost region on this thread; never swallows exceptions."},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef region_members[] = {
    {"name", T_OBJECT_EX, offsetof(RegionObject, name), READONLY, "region name"},
    {"kind", T_OBJECT_EX, offsetof(RegionObject, kind), READONLY, "region kind"},
    {nullptr, 0, 0, 0, nullptr}};

PyGetSetDef region_getset[] = {
    {"stream", region_get_stream, nullptr, "raw cudaStream_t, or None (host only)", nullptr},
    {"nbytes", region_get_nbytes, nullptr, "bytes moved, or None", nullptr},
    {"payload", region_get_payload, nullptr, "user integer, or None", nullptr},
    {"sample_every", region_get_sample_every, nullptr, "GPU-time every N-th instance", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

// ---------------------------------------------------------------- NullRegion
PyObject* null_enter(PyObject* o, PyObject*) {
  Py_INCREF(o);
  return o;
}
PyObject* null_exit(PyObject*, PyObject* const*, Py_ssize_t) { Py_RETURN_FALSE; }

PyMethodDef null_methods[] = {
    {"__enter__", null_enter, METH_NOARGS, "Nothing: the recorder is disabled."},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(null_exit)),
     METH_FASTCALL, "Nothing: the recorder is disabled."},
    {nullptr, nullptr, 0, nullptr}};

// ---------------------------------------------------------------- argument parsing
// Positional then keyword arguments into out[kNArgs] (borrowed; nullptr = not given).
bool parse_args(const char* fn, PyObject* const* args, size_t nargsf, PyObject* kwnames,
                PyObject** out, int max_args) {
  const Py_ssize_t npos = PyVectorcall_NARGS(nargsf);
  if (npos > max_args) {
    PyErr_Format(PyExc_TypeError, "%s() takes at most %d positional arguments (%zd given)", fn,
                 max_args, npos);
    return false;
  }
  for (Py_ssize_t i = 0; i < npos; ++i) out[i] = args[i];
  if (kwnames == nullptr) return true;
  const Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
  for (Py_ssize_t k = 0; k < nkw; ++k) {
    PyObject* key = PyTuple_GET_ITEM(kwnames, k);
    int slot = -1;
    for (int j = 0; j < max_args && slot < 0; ++j)
      if (key == s_args[j]) slot = j;
    for (int j = 0; j < max_args && slot < 0; ++j)
      if (PyUnicode_Compare(key, s_args[j]) == 0) slot = j;
    if (slot < 0 || slot >= max_args) {
      PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", fn, key);
      return false;
    }
    if (out[slot] != nullptr) {
      PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn,
                   kArgNames[slot]);
      return false;
    }
    out[slot] = args[npos + k];
  }
  return true;
}

// id of `s` in `ids`, interning it on first sight; -1 with an exception set on failure. A
// name beyond the table's limit is not kept in `ids` (which would grow without bound): it
// is interned, and counted, at each use.
int64_t string_id(PyObject* ids, PyObject* s, bool is_kind) {
  PyObject* v = PyDict_GetItemWithError(ids, s);
  if (v != nullptr) return PyLong_AsLongLong(v);
  if (PyErr_Occurred()) return -1;
  Py_ssize_t len = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(s, &len);
  if (utf8 == nullptr) return -1;
  uint32_t id;
  bool over_limit = false;
  if (!exceptions_ready()) {  // this thread's first bad_alloc could not be caught
    PyErr_NoMemory();
    return -1;
  }
  try {
    id = intern(std::string(utf8, static_cast<size_t>(len)), is_kind, &over_limit);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_MemoryError, e.what());
    return -1;
  }
  if (over_limit) {
    static bool warned = false;  // GIL held
    if (!warned) {
      warned = true;
      if (PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                           "pytimings: more than %zu distinct region names and kinds in this "
                           "process; %R and every new name after it are recorded as '%s' and "
                           "counted (meta['names_over_limit']). A name that changes per call "
                           "(f\"decode {request_id}\") belongs in payload=, not in the name. "
                           "This notice is shown once.",
                           kMaxNames, s, kOverLimitName) < 0)
        return -1;
    }
    return id;
  }
  PyObject* idobj = PyLong_FromUnsignedLong(id);
  if (idobj == nullptr || PyDict_SetItem(ids, s, idobj) < 0) {
    Py_XDECREF(idobj);
    return -1;
  }
  Py_DECREF(idobj);
  return id;
}

bool check_name(const char* fn, PyObject* name) {
  if (name == nullptr) {
    PyErr_Format(PyExc_TypeError, "%s() missing required argument 'name'", fn);
    return false;
  }
  if (!PyUnicode_Check(name)) {
    PyErr_Format(PyExc_TypeError, "%s(): name must be a str, not %.100s", fn,
                 Py_TYPE(name)->tp_name);
    return false;
  }
  return true;
}

bool check_kind(const char* fn, PyObject* kind) {
  if (!PyUnicode_Check(kind)) {
    PyErr_Format(PyExc_TypeError, "%s(): kind must be a str, not %.100s", fn,
                 Py_TYPE(kind)->tp_name);
    return false;
  }
  if (PyUnicode_GET_LENGTH(kind) == 0) {
    PyErr_Format(PyExc_ValueError, "%s(): kind must not be empty", fn);
    return false;
  }
  return true;
}

// int argument (anything with __index__, not bool) into *out; false with an error set.
bool int_arg(const char* fn, const char* arg, PyObject* o, long long* out) {
  if (PyBool_Check(o) || !PyIndex_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s(): %s must be an int or None, not %.100s", fn, arg,
                 Py_TYPE(o)->tp_name);
    return false;
  }
  PyObject* i = PyNumber_Index(o);
  if (i == nullptr) return false;
  *out = PyLong_AsLongLong(i);
  Py_DECREF(i);
  if (*out == -1 && PyErr_Occurred()) {
    PyErr_Format(PyExc_OverflowError, "%s(): %s does not fit in 64 bits", fn, arg);
    return false;
  }
  return true;
}

bool stream_arg(PyObject* o, uint64_t* out) {
  PyObject* handle = nullptr;
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    handle = o;
    Py_INCREF(handle);
  } else if (!PyBool_Check(o) && PyIndex_Check(o)) {  // numpy integers
    if ((handle = PyNumber_Index(o)) == nullptr) return false;
  } else {
    handle = PyObject_GetAttr(o, s_cuda_stream);  // torch.cuda.Stream, ExternalStream, ...
    if (handle == nullptr || !PyLong_Check(handle)) {
      PyErr_Clear();
      Py_XDECREF(handle);
      PyErr_Format(PyExc_TypeError,
                   "region(): stream must be a torch.cuda.Stream (anything with an int "
                   ".cuda_stream), a raw cudaStream_t int, or None; not %.100s",
                   Py_TYPE(o)->tp_name);
      return false;
    }
  }
  const unsigned long long v = PyLong_AsUnsignedLongLong(handle);
  Py_DECREF(handle);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_SetString(PyExc_ValueError,
                    "region(): stream handle must be a non-negative 64-bit integer");
    return false;
  }
  *out = v;
  return true;
}

// ---------------------------------------------------------------- RegionFactory
struct FactoryObject {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* handle;  // CoreHandle
  Recorder* core;
  // Regions without stream/nbytes/payload/sample_every, shared by every caller: kind -> name
  // -> Region. `host` is the default kind's inner dict, looked up without the outer one.
  PyObject* kinds;
  PyObject* host;
  Py_ssize_t cached;
};

PyTypeObject FactoryType = {PyVarObject_HEAD_INIT(nullptr, 0)};

inline bool given(PyObject* a) { return a != nullptr && a != Py_None; }

// The stream and sample_every arguments into `spec` (flags, stream, sample_every).
bool parse_sampling(PyObject* const* a, RegionSpec& spec) {
  if (given(a[2])) {
    if (!stream_arg(a[2], &spec.stream)) return false;
    spec.flags |= kHasStream;
  }
  if (given(a[5])) {
    long long v = 0;
    if (!int_arg("region", "sample_every", a[5], &v)) return false;
    if (v < 1 || v > UINT32_MAX) {
      PyErr_Format(PyExc_ValueError, "region(): sample_every must be in [1, 2**32), got %lld",
                   v);
      return false;
    }
    spec.sample_every = static_cast<uint32_t>(v);
  }
  return true;
}

// A new Region from arguments whose stream/sample_every are already in `spec`; cached (for
// later calls with the same name, kind, stream and sample_every) when `cacheable`.
PyObject* new_region(FactoryObject* f, PyObject* const* a, RegionSpec spec, bool cacheable) {
  const char* fn = "region";
  PyObject* name = a[0];
  PyObject* kind = a[1] ? a[1] : s_host;
  if (!check_name(fn, name) || !check_kind(fn, kind)) return nullptr;
  const int64_t name_id = string_id(g_name_ids, name, false);
  if (name_id < 0) return nullptr;
  const int64_t kind_id = string_id(g_kind_ids, kind, true);
  if (kind_id < 0) return nullptr;
  spec.name = static_cast<uint32_t>(name_id);
  spec.kind = static_cast<uint32_t>(kind_id);
  long long v = 0;
  if (given(a[3])) {
    if (!int_arg(fn, "nbytes", a[3], &v)) return nullptr;
    if (v < 0) {
      PyErr_Format(PyExc_ValueError, "region(): nbytes must be >= 0, got %lld", v);
      return nullptr;
    }
    spec.nbytes = v;
  }
  if (given(a[4])) {
    if (!int_arg(fn, "payload", a[4], &v)) return nullptr;
    spec.payload = v;
    spec.flags |= kHasPayload;
  }
  auto* r = PyObject_New(RegionObject, &RegionType);
  if (r == nullptr) return nullptr;
  Py_INCREF(f->handle);
  Py_INCREF(name);
  Py_INCREF(kind);
  r->handle = f->handle;
  r->core = f->core;
  r->name = name;
  r->kind = kind;
  r->spec = spec;
  r->disabled_entries = 0;
  if (cacheable && f->cached < kCacheMax) {
    PyObject* by_name = kind == s_host ? f->host : PyDict_GetItemWithError(f->kinds, kind);
    if (by_name == nullptr && !PyErr_Occurred()) {
      by_name = PyDict_New();
      if (by_name != nullptr && PyDict_SetItem(f->kinds, kind, by_name) < 0) Py_CLEAR(by_name);
      Py_XDECREF(by_name);  // the outer dict holds it
    }
    if (by_name == nullptr ||
        PyDict_SetDefault(by_name, name, reinterpret_cast<PyObject*>(r)) == nullptr) {
      Py_DECREF(r);
      return nullptr;
    }
    ++f->cached;
  }
  return reinterpret_cast<PyObject*>(r);
}

PyObject* factory_call(PyObject* o, PyObject* const* args, size_t nargsf, PyObject* kwnames) {
  auto* f = reinterpret_cast<FactoryObject*>(o);
  PyObject* a[kNArgs] = {};
  if (!parse_args("region", args, nargsf, kwnames, a, kNArgs)) return nullptr;
  if (!f->core->active()) {  // disabled: one shared object whose enter/exit do nothing
    if (!check_name("region", a[0])) return nullptr;
    Py_INCREF(g_null_region);
    return g_null_region;
  }
  RegionSpec spec;
  if (!parse_sampling(a, spec)) return nullptr;
  // Regions without per-call values (nbytes, payload) are shared: one object per kind, name,
  // stream and sample_every, found with one or two dict lookups.
  const bool cacheable = !given(a[3]) && !given(a[4]) && a[0] != nullptr &&
                         PyUnicode_CheckExact(a[0]) && (a[1] == nullptr || PyUnicode_CheckExact(a[1]));
  if (cacheable) {
    PyObject* by_name = a[1] == nullptr || a[1] == s_host ? f->host
                                                          : PyDict_GetItemWithError(f->kinds, a[1]);
    PyObject* hit = by_name ? PyDict_GetItemWithError(by_name, a[0]) : nullptr;
    if (hit != nullptr) {
      const RegionSpec& c = reinterpret_cast<RegionObject*>(hit)->spec;
      if (c.flags == spec.flags && c.stream == spec.stream && c.sample_every == spec.sample_every) {
        Py_INCREF(hit);
        return hit;
      }
    } else if (PyErr_Occurred()) {
      return nullptr;
    }
  }
  return new_region(f, a, spec, cacheable);
}

PyObject* factory_make(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  auto* f = reinterpret_cast<FactoryObject*>(o);
  PyObject* a[kNArgs] = {};
  if (!parse_args("region", args, static_cast<size_t>(nargs), kwnames, a, kNArgs)) return nullptr;
  RegionSpec spec;
  if (!parse_sampling(a, spec)) return nullptr;
  return new_region(f, a, spec, false);
}

PyObject* factory_mark(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  auto* f = reinterpret_cast<FactoryObject*>(o);
  // mark(name, kind="host", payload=None)
  PyObject* pos[3] = {};
  if (nargs > 3) {
    PyErr_Format(PyExc_TypeError, "mark() takes at most 3 positional arguments (%zd given)",
                 nargs);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < nargs; ++i) pos[i] = args[i];
  if (kwnames != nullptr) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(kwnames); ++k) {
      PyObject* key = PyTuple_GET_ITEM(kwnames, k);
      const char* names[3] = {"name", "kind", "payload"};
      int slot = -1;
      for (int j = 0; j < 3; ++j)
        if (PyUnicode_CompareWithASCIIString(key, names[j]) == 0) slot = j;
      if (slot < 0) {
        PyErr_Format(PyExc_TypeError, "mark() got an unexpected keyword argument %R", key);
        return nullptr;
      }
      if (pos[slot] != nullptr) {
        PyErr_Format(PyExc_TypeError, "mark() got multiple values for argument '%s'",
                     names[slot]);
        return nullptr;
      }
      pos[slot] = args[nargs + k];
    }
  }
  if (!check_name("mark", pos[0])) return nullptr;
  if (!f->core->active()) Py_RETURN_NONE;
  PyObject* kind = pos[1] ? pos[1] : s_host;
  if (!check_kind("mark", kind)) return nullptr;
  long long payload = 0;
  const bool has_payload = pos[2] != nullptr && pos[2] != Py_None;
  if (has_payload && !int_arg("mark", "payload", pos[2], &payload)) return nullptr;
  const int64_t name_id = string_id(g_name_ids, pos[0], false);
  if (name_id < 0) return nullptr;
  const int64_t kind_id = string_id(g_kind_ids, kind, true);
  if (kind_id < 0) return nullptr;
  ThreadState* ts = thread_state(f->core);
  if (ts == nullptr) Py_RETURN_NONE;  // counted dropped
  f->core->mark(*ts, static_cast<uint32_t>(name_id), static_cast<uint32_t>(kind_id), has_payload,
                payload);
  Py_RETURN_NONE;
}

void factory_dealloc(PyObject* o) {
  auto* f = reinterpret_cast<FactoryObject*>(o);
  Py_DECREF(f->handle);
  Py_DECREF(f->kinds);
  Py_DECREF(f->host);
  PyObject_Free(o);
}

PyMethodDef factory_methods[] = {
    {"make", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(factory_make)),
     METH_FASTCALL | METH_KEYWORDS,
     "A new region object, even while the recorder is disabled (for decorators)."},
    {"mark", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(factory_mark)),
     METH_FASTCALL | METH_KEYWORDS, "mark(name, kind='host', payload=None): an instant."},
    {nullptr, nullptr, 0, nullptr}};

bool ready_types() {
  CoreHandleType.tp_name = "pytimings._core._CoreHandle";
  CoreHandleType.tp_basicsize = sizeof(CoreHandle);
  CoreHandleType.tp_dealloc = core_handle_dealloc;
  CoreHandleType.tp_flags = Py_TPFLAGS_DEFAULT;

  RegionType.tp_name = "pytimings._core.Region";
  RegionType.tp_doc = "An open-able timed region: use with `with`. Re-entrant and nestable.";
  RegionType.tp_basicsize = sizeof(RegionObject);
  RegionType.tp_dealloc = region_dealloc;
  RegionType.tp_repr = region_repr;
  RegionType.tp_flags = Py_TPFLAGS_DEFAULT;
  RegionType.tp_methods = region_methods;
  RegionType.tp_members = region_members;
  RegionType.tp_getset = region_getset;

  NullRegionType.tp_name = "pytimings._core.NullRegion";
  NullRegionType.tp_doc = "What region() returns while the recorder is disabled: does nothing.";
  NullRegionType.tp_basicsize = sizeof(PyObject);
  NullRegionType.tp_flags = Py_TPFLAGS_DEFAULT;
  NullRegionType.tp_methods = null_methods;

  FactoryType.tp_name = "pytimings._core.RegionFactory";
  FactoryType.tp_doc =
      "region(name, kind='host', stream=None, nbytes=None, payload=None, sample_every=None)";
  FactoryType.tp_basicsize = sizeof(FactoryObject);
  FactoryType.tp_dealloc = factory_dealloc;
  FactoryType.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL;
  FactoryType.tp_vectorcall_offset = offsetof(FactoryObject, vectorcall);
  FactoryType.tp_call = PyVectorcall_Call;
  FactoryType.tp_methods = factory_methods;

  for (PyTypeObject* t : {&CoreHandleType, &RegionType, &NullRegionType, &FactoryType})
    if (PyType_Ready(t) < 0) return false;
  g_null_region = PyObject_New(PyObject, &NullRegionType);
  return g_null_region != nullptr;
}

}  // namespace

py::object make_region_factory(std::shared_ptr<Recorder> core) {
  auto* h = PyObject_New(CoreHandle, &CoreHandleType);
  if (h == nullptr) throw py::error_already_set();
  new (&h->core) std::shared_ptr<Recorder>(core);
  auto* f = PyObject_New(FactoryObject, &FactoryType);
  PyObject* kinds = PyDict_New();
  PyObject* host = PyDict_New();
  if (f == nullptr || kinds == nullptr || host == nullptr ||
      PyDict_SetItem(kinds, s_host, host) < 0) {
    Py_DECREF(h);
    Py_XDECREF(kinds);
    Py_XDECREF(host);
    if (f) PyObject_Free(f);
    throw py::error_already_set();
  }
  f->vectorcall = factory_call;
  f->handle = reinterpret_cast<PyObject*>(h);
  f->core = core.get();
  f->kinds = kinds;
  f->host = host;
  f->cached = 0;
  return py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(f));
}

}  // namespace pytimings::bindings

void register_regions(py::module_& m) {
  using namespace pytimings::bindings;
  if (!ready_types()) throw py::error_already_set();
  g_name_ids = PyDict_New();
  g_kind_ids = PyDict_New();
  s_host = PyUnicode_InternFromString("host");
  s_cuda_stream = PyUnicode_InternFromString("cuda_stream");
  for (int i = 0; i < kNArgs; ++i) s_args[i] = PyUnicode_InternFromString(kArgNames[i]);
  g_current_thread = py::object(py::module_::import("threading").attr("current_thread")).release().ptr();
  m.add_object("Region", reinterpret_cast<PyObject*>(&RegionType));
  m.add_object("NullRegion", reinterpret_cast<PyObject*>(&NullRegionType));
  m.add_object("RegionFactory", reinterpret_cast<PyObject*>(&FactoryType));
}
