#include "pytimings/cuda_runtime.hpp"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "pytimings/clock.hpp"

namespace pytimings::cuda {
namespace {

const char* const kStandardNames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                      "libcudart.so"};

int find_loaded_cudart(dl_phdr_info* info, size_t, void* out) {
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const char* base = std::strrchr(name, '/');
  base = base ? base + 1 : name;
  if (std::strncmp(base, "libcudart", 9) == 0) {
    *static_cast<std::string*>(out) = name;
    return 1;
  }
  return 0;
}

std::string loaded_path(void* handle, const char* fallback) {
  link_map* lm = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && *lm->l_name)
    return lm->l_name;
  return fallback;
}

template <class F>
bool bind(void* h, const char* sym, F& fn) {
  fn = reinterpret_cast<F>(dlsym(h, sym));
  return fn != nullptr;
}

Runtime load() {
  Runtime rt;
  void* h = nullptr;
  // 1. a copy already in the process (torch's, cupy's): same runtime, same streams.
  for (const char* name : kStandardNames) {
    if ((h = dlopen(name, RTLD_NOW | RTLD_NOLOAD)) != nullptr) {
      rt.path = loaded_path(h, name);
      rt.how = "already loaded";
      break;
    }
  }
  if (h == nullptr) {
    std::string found;
    dl_iterate_phdr(find_loaded_cudart, &found);
    if (!found.empty() && (h = dlopen(found.c_str(), RTLD_NOW | RTLD_NOLOAD)) != nullptr) {
      rt.path = found;
      rt.how = "already loaded";
    }
  }
  // 2. the user's choice.
  const char* env = std::getenv("PYTIMINGS_CUDART");
  if (h == nullptr && env != nullptr && *env != '\0') {
    if ((h = dlopen(env, RTLD_NOW | RTLD_LOCAL)) != nullptr) {
      rt.path = loaded_path(h, env);
      rt.how = "PYTIMINGS_CUDART";
    } else {
      const char* err = dlerror();
      rt.problem = std::string("PYTIMINGS_CUDART=") + env + " could not be loaded: " +
                   (err ? err : "unknown error");
      return rt;
    }
  }
  // 3. standard names on the loader's search path.
  for (size_t i = 0; h == nullptr && i < sizeof(kStandardNames) / sizeof(*kStandardNames); ++i) {
    if ((h = dlopen(kStandardNames[i], RTLD_NOW | RTLD_LOCAL)) != nullptr) {
      rt.path = loaded_path(h, kStandardNames[i]);
      rt.how = "standard name";
    }
  }
  if (h == nullptr) {
    rt.problem = "no CUDA runtime library found (none loaded, PYTIMINGS_CUDART unset, "
                 "libcudart.so.13/.12/.11.0 not on the loader path)";
    return rt;
  }
  Api& a = rt.api;
  const bool ok =
      bind(h, "cudaEventCreateWithFlags", a.eventCreateWithFlags) &&
      bind(h, "cudaEventDestroy", a.eventDestroy) && bind(h, "cudaEventRecord", a.eventRecord) &&
      bind(h, "cudaEventQuery", a.eventQuery) &&
      bind(h, "cudaEventSynchronize", a.eventSynchronize) &&
      bind(h, "cudaEventElapsedTime", a.eventElapsedTime) &&
      bind(h, "cudaStreamIsCapturing", a.streamIsCapturing) &&
      bind(h, "cudaGetDeviceCount", a.getDeviceCount) && bind(h, "cudaGetDevice", a.getDevice) &&
      bind(h, "cudaSetDevice", a.setDevice) &&
      bind(h, "cudaGetErrorString", a.getErrorString) &&
      bind(h, "cudaDriverGetVersion", a.driverGetVersion) &&
      bind(h, "cudaRuntimeGetVersion", a.runtimeGetVersion);
  if (!ok) {
    rt.problem = "CUDA runtime at " + rt.path + " lacks a required function";
    rt.api = Api{};
    return rt;
  }
  a.runtimeGetVersion(&rt.runtime_version);
  a.driverGetVersion(&rt.driver_version);
  rt.loaded = true;
  return rt;
}

std::once_flag g_once;
Runtime* g_runtime = nullptr;  // leaked on purpose: used until process exit

}  // namespace

const Runtime& runtime() noexcept {
  std::call_once(g_once, [] { g_runtime = new Runtime(load()); });
  return *g_runtime;
}

std::string error_string(Error e) {
  const Runtime& rt = runtime();
  const char* s = rt.loaded ? rt.api.getErrorString(e) : nullptr;
  return s ? std::string(s) : "CUDA error " + std::to_string(e);
}

bool available() noexcept {
  const Runtime& rt = runtime();
  int n = 0;
  return rt.loaded && rt.api.getDeviceCount(&n) == kSuccess && n > 0;
}

std::string status() {
  const Runtime& rt = runtime();
  if (!rt.loaded) return rt.problem;
  int n = 0;
  const Error e = rt.api.getDeviceCount(&n);
  if (e == kErrorInsufficientDriver)
    return "no usable NVIDIA driver (cudaErrorInsufficientDriver) for the runtime at " + rt.path;
  if (e == kErrorNoDevice || (e == kSuccess && n == 0))
    return "no CUDA device (cudaErrorNoDevice); runtime at " + rt.path;
  if (e != kSuccess) return "cudaGetDeviceCount failed: " + error_string(e);
  const int v = rt.runtime_version;
  return "CUDA " + std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10) +
         " runtime from " + rt.path + " (" + rt.how + "), " + std::to_string(n) +
         (n == 1 ? " device" : " devices");
}

double event_record_floor_ns(uint64_t stream, int64_t iterations) {
  if (iterations <= 0) throw std::invalid_argument("iterations must be positive");
  if (!available()) throw std::runtime_error("CUDA is not available: " + status());
  const Api& a = runtime().api;
  Event ev[2] = {nullptr, nullptr};
  for (Event& e : ev) {
    const Error err = a.eventCreateWithFlags(&e, kEventDefault);
    if (err != kSuccess) throw std::runtime_error("cudaEventCreateWithFlags: " + error_string(err));
  }
  auto* s = reinterpret_cast<Stream>(stream);
  for (int i = 0; i < 64; ++i) {  // warm-up
    a.eventRecord(ev[0], s);
    a.eventRecord(ev[1], s);
  }
  const int64_t t0 = now_ns();
  Error err = kSuccess;
  for (int64_t i = 0; i < iterations; ++i) {
    err |= a.eventRecord(ev[0], s);
    err |= a.eventRecord(ev[1], s);
  }
  const int64_t t1 = now_ns();
  a.eventSynchronize(ev[1]);
  a.eventDestroy(ev[0]);
  a.eventDestroy(ev[1]);
  if (err != kSuccess) throw std::runtime_error("cudaEventRecord failed on this stream");
  return static_cast<double>(t1 - t0) / static_cast<double>(iterations);
}

}  // namespace pytimings::cuda
