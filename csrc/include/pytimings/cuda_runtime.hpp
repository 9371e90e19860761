// The CUDA runtime, loaded at run time (dlopen/dlsym): no CUDA headers or libraries at build
// time, and a process without CUDA still records host time.
//
// Search order: a libcudart already loaded in the process (so our events live in the same
// runtime, and so on the same streams, as torch's), then $PYTIMINGS_CUDART (a path), then the
// standard sonames. Only the handful of functions below are used; their C prototypes are
// declared here (they are stable across CUDA 11-13).
#pragma once
#include <cstdint>
#include <string>

namespace pytimings::cuda {

using Error = int;  // cudaError_t
using Event = void*;  // cudaEvent_t
using Stream = void*;  // cudaStream_t

constexpr Error kSuccess = 0;
constexpr Error kErrorInsufficientDriver = 35;
constexpr Error kErrorNoDevice = 100;
constexpr Error kErrorNotReady = 600;
constexpr unsigned kEventDefault = 0;  // timing enabled, spin on synchronize
constexpr int kCaptureStatusNone = 0;

struct Api {
  Error (*eventCreateWithFlags)(Event*, unsigned) = nullptr;
  Error (*eventDestroy)(Event) = nullptr;
  Error (*eventRecord)(Event, Stream) = nullptr;
  Error (*eventQuery)(Event) = nullptr;
  Error (*eventSynchronize)(Event) = nullptr;  // flush/anchor only, never on the hot path
  Error (*eventElapsedTime)(float*, Event, Event) = nullptr;
  Error (*streamIsCapturing)(Stream, int*) = nullptr;
  Error (*getDeviceCount)(int*) = nullptr;
  Error (*getDevice)(int*) = nullptr;
  Error (*setDevice)(int) = nullptr;
  const char* (*getErrorString)(Error) = nullptr;
  Error (*driverGetVersion)(int*) = nullptr;
  Error (*runtimeGetVersion)(int*) = nullptr;
};

struct Runtime {
  Api api;
  bool loaded = false;  // library found and every symbol resolved
  std::string path;     // where it was loaded from
  std::string how;      // "already loaded", "PYTIMINGS_CUDART", "standard name"
  std::string problem;  // why not loaded
  int runtime_version = 0;
  int driver_version = 0;
};

// Loaded once per process, on first use (thread-safe); never throws.
const Runtime& runtime() noexcept;

// True when the runtime is loaded and reports at least one device.
bool available() noexcept;

// One line: "CUDA 12.4 runtime from /path (already loaded), 2 devices", or why not.
std::string status();

std::string error_string(Error e);

// Mean host ns per pair of raw timing cudaEventRecord calls on `stream`: the physical floor
// of GPU-timed regions. Throws std::runtime_error without CUDA.
double event_record_floor_ns(uint64_t stream, int64_t iterations);

}  // namespace pytimings::cuda
