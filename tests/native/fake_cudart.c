/* A test double of the CUDA runtime functions pytimings loads (see
 * csrc/include/pytimings/cuda_runtime.hpp), for CPU-only CI.
 *
 * Model: every stream has a GPU cursor. Recording an event at host time t on stream s stamps
 * it at max(cursor(s), t + LAUNCH) on the GPU clock, gpu(t) = t * (1 + DRIFT_PPM/1e6);
 * fake_cuda_launch(s, d) queues d ns of work the same way. An event is complete once the host
 * clock has passed its stamp. Environment:
 *   FAKE_CUDA_LAUNCH_NS (default 20000)   launch latency
 *   FAKE_CUDA_DRIFT_PPM (default 0)       GPU clock rate error
 *   FAKE_CUDA_DEVICES   (default 1)       0 makes cudaGetDeviceCount fail with NoDevice
 * Counters (fake_cuda_counter(name)) include every synchronising call, so tests can prove the
 * hot path makes none; fake_cuda_set_capturing() puts a stream into "graph capture". */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

typedef int cudaError_t;
enum { kSuccess = 0, kInvalidValue = 1, kNoDevice = 100, kInvalidHandle = 400,
       kNotReady = 600 };

typedef struct {
  uint32_t magic;
  int recorded;
  int device;
  int64_t stamp_ns; /* host-clock time at which the GPU reaches it */
} fake_event;

#define MAX_STREAMS 64
typedef struct {
  uintptr_t handle;
  int used;
  int capturing;
  int64_t cursor_ns;
} fake_stream;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static fake_stream streams[MAX_STREAMS];
static __thread int current_device = 0;

static struct {
  long long created, destroyed, records, records_while_capturing, queries, elapsed,
      is_capturing, event_syncs, stream_syncs, device_syncs, get_device;
} counters;

static int64_t host_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t env_i64(const char* name, int64_t dflt) {
  const char* v = getenv(name);
  return v && *v ? strtoll(v, NULL, 10) : dflt;
}

static double gpu_clock(int64_t host) {
  return (double)host * (1.0 + (double)env_i64("FAKE_CUDA_DRIFT_PPM", 0) * 1e-6);
}

static fake_stream* stream_of(void* handle) { /* mu held */
  uintptr_t h = (uintptr_t)handle;
  for (int i = 0; i < MAX_STREAMS; ++i)
    if (streams[i].used && streams[i].handle == h) return &streams[i];
  for (int i = 0; i < MAX_STREAMS; ++i)
    if (!streams[i].used) {
      streams[i].used = 1;
      streams[i].handle = h;
      return &streams[i];
    }
  return &streams[0];
}

static int64_t enqueue(void* stream, int64_t duration_ns) { /* mu held; returns the stamp */
  fake_stream* s = stream_of(stream);
  int64_t t = host_ns() + env_i64("FAKE_CUDA_LAUNCH_NS", 20000);
  if (s->cursor_ns > t) t = s->cursor_ns;
  s->cursor_ns = t + duration_ns;
  return s->cursor_ns;
}

cudaError_t cudaEventCreateWithFlags(void** ev, unsigned flags) {
  (void)flags;
  fake_event* e = calloc(1, sizeof *e);
  if (!e) return kInvalidValue;
  e->magic = 0xC0DAu;
  e->device = current_device;
  *ev = e;
  __atomic_add_fetch(&counters.created, 1, __ATOMIC_RELAXED);
  return kSuccess;
}

cudaError_t cudaEventDestroy(void* ev) {
  fake_event* e = ev;
  if (!e || e->magic != 0xC0DAu) return kInvalidHandle;
  e->magic = 0;
  free(e);
  __atomic_add_fetch(&counters.destroyed, 1, __ATOMIC_RELAXED);
  return kSuccess;
}

cudaError_t cudaEventRecord(void* ev, void* stream) {
  fake_event* e = ev;
  if (!e || e->magic != 0xC0DAu) return kInvalidHandle;
  pthread_mutex_lock(&mu);
  if (stream_of(stream)->capturing) counters.records_while_capturing++;
  e->stamp_ns = enqueue(stream, 0);
  e->recorded = 1;
  counters.records++;
  pthread_mutex_unlock(&mu);
  return kSuccess;
}

cudaError_t cudaEventQuery(void* ev) {
  fake_event* e = ev;
  __atomic_add_fetch(&counters.queries, 1, __ATOMIC_RELAXED);
  if (!e || e->magic != 0xC0DAu) return kInvalidHandle;
  return !e->recorded || host_ns() >= e->stamp_ns ? kSuccess : kNotReady;
}

cudaError_t cudaEventSynchronize(void* ev) {
  fake_event* e = ev;
  __atomic_add_fetch(&counters.event_syncs, 1, __ATOMIC_RELAXED);
  if (!e || e->magic != 0xC0DAu) return kInvalidHandle;
  while (e->recorded && host_ns() < e->stamp_ns) {
  }
  return kSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, void* a, void* b) {
  fake_event *s = a, *e = b;
  __atomic_add_fetch(&counters.elapsed, 1, __ATOMIC_RELAXED);
  if (!s || !e || s->magic != 0xC0DAu || e->magic != 0xC0DAu) return kInvalidHandle;
  if (!s->recorded || !e->recorded) return kInvalidHandle;
  int64_t now = host_ns();
  if (now < s->stamp_ns || now < e->stamp_ns) return kNotReady;
  *ms = (float)((gpu_clock(e->stamp_ns) - gpu_clock(s->stamp_ns)) / 1e6);
  return kSuccess;
}

cudaError_t cudaStreamIsCapturing(void* stream, int* status) {
  __atomic_add_fetch(&counters.is_capturing, 1, __ATOMIC_RELAXED);
  pthread_mutex_lock(&mu);
  *status = stream_of(stream)->capturing;
  pthread_mutex_unlock(&mu);
  return kSuccess;
}

cudaError_t cudaStreamSynchronize(void* stream) {
  (void)stream;
  __atomic_add_fetch(&counters.stream_syncs, 1, __ATOMIC_RELAXED);
  return kSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  __atomic_add_fetch(&counters.device_syncs, 1, __ATOMIC_RELAXED);
  return kSuccess;
}

cudaError_t cudaGetDeviceCount(int* n) {
  *n = (int)env_i64("FAKE_CUDA_DEVICES", 1);
  return *n > 0 ? kSuccess : kNoDevice;
}

cudaError_t cudaGetDevice(int* d) {
  __atomic_add_fetch(&counters.get_device, 1, __ATOMIC_RELAXED);
  if (env_i64("FAKE_CUDA_DEVICES", 1) <= 0) return kNoDevice;
  *d = current_device;
  return kSuccess;
}

cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= env_i64("FAKE_CUDA_DEVICES", 1)) return kInvalidValue;
  current_device = d;
  return kSuccess;
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case kSuccess: return "no error";
    case kNoDevice: return "no CUDA-capable device is detected";
    case kNotReady: return "device not ready";
    case kInvalidHandle: return "invalid resource handle";
    default: return "fake CUDA error";
  }
}

cudaError_t cudaDriverGetVersion(int* v) { *v = 13000; return kSuccess; }
cudaError_t cudaRuntimeGetVersion(int* v) { *v = 12040; return kSuccess; }

/* ---- control, for the tests (ctypes) */
void fake_cuda_launch(uintptr_t stream, long long duration_ns) {
  pthread_mutex_lock(&mu);
  enqueue((void*)stream, duration_ns);
  pthread_mutex_unlock(&mu);
}

void fake_cuda_set_capturing(uintptr_t stream, int on) {
  pthread_mutex_lock(&mu);
  stream_of((void*)stream)->capturing = on;
  pthread_mutex_unlock(&mu);
}

long long fake_cuda_counter(const char* name) {
#define C(x) if (strcmp(name, #x) == 0) return __atomic_load_n(&counters.x, __ATOMIC_RELAXED);
  C(created) C(destroyed) C(records) C(records_while_capturing) C(queries) C(elapsed)
  C(is_capturing) C(event_syncs) C(stream_syncs) C(device_syncs) C(get_device)
#undef C
  return -1;
}
