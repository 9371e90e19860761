/* A fake NVML (libnvidia-ml.so.1) with scripted values, for pytimings' telemetry tests on
 * machines without a GPU (pytimings/record/telemetry.py loads it through PYTIMINGS_NVML).
 * Only the functions the sampler calls exist. The script, read at nvmlInitWithFlags:
 *   FAKE_NVML_GPUS          devices (default 1)
 *   FAKE_NVML_POWER_MW      power draw of every device, mW (default 300000)
 *   FAKE_NVML_LIMIT_MW      enforced power limit, mW (default 700000)
 *   FAKE_NVML_NO_ENERGY     "1": the energy counter is not supported
 *   FAKE_NVML_THROTTLE_ODD  "1": every odd sample (per device, counted by the clock-event
 *                           reasons call) reports SW power cap and an SM clock of 1200 MHz
 *   FAKE_NVML_LOSE_GPU      index of a device that is lost after FAKE_NVML_LOSE_AFTER samples
 *   FAKE_NVML_FAIL_CODE     an NVML error (999 UNKNOWN, 10 TIMEOUT) every call of every device
 *                           returns after FAKE_NVML_FAIL_AFTER samples
 * The energy counter is power x CLOCK_MONOTONIC time since init, so it agrees with the power
 * integral; busy utilisation 100%, max SM clock 1980 MHz, memory clock 2619 MHz, 60 C. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXDEV 8
enum { OK = 0, NOT_SUPPORTED = 3, INVALID_ARGUMENT = 2, GPU_IS_LOST = 15 };

typedef struct { unsigned gpu, memory; } nvmlUtilization_t;
typedef struct { unsigned long long total, free, used; } nvmlMemory_t;
typedef struct { int index; } dev_t_;
typedef dev_t_ *nvmlDevice_t;

static dev_t_ devs[MAXDEV];
static int n_gpus = 1, no_energy = 0, throttle_odd = 0, lose_gpu = -1, lose_after = 0;
static int fail_code = 0, fail_after = 0;
static unsigned power_mw = 300000, limit_mw = 700000;
static long long t0_ns;
static int samples[MAXDEV];

static long long mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}
static int check(nvmlDevice_t d) {
  if (!d || d->index < 0 || d->index >= n_gpus) return INVALID_ARGUMENT;
  if (d->index == lose_gpu && samples[d->index] >= lose_after) return GPU_IS_LOST;
  if (fail_code && samples[d->index] >= fail_after) return fail_code;
  return OK;
}
static int throttled(nvmlDevice_t d) { return throttle_odd && samples[d->index] % 2 == 1; }

int nvmlInitWithFlags(unsigned flags) {
  (void)flags;
  n_gpus = env_int("FAKE_NVML_GPUS", 1);
  if (n_gpus > MAXDEV) n_gpus = MAXDEV;
  power_mw = (unsigned)env_int("FAKE_NVML_POWER_MW", 300000);
  limit_mw = (unsigned)env_int("FAKE_NVML_LIMIT_MW", 700000);
  no_energy = env_int("FAKE_NVML_NO_ENERGY", 0);
  throttle_odd = env_int("FAKE_NVML_THROTTLE_ODD", 0);
  lose_gpu = env_int("FAKE_NVML_LOSE_GPU", -1);
  lose_after = env_int("FAKE_NVML_LOSE_AFTER", 0);
  fail_code = env_int("FAKE_NVML_FAIL_CODE", 0);
  fail_after = env_int("FAKE_NVML_FAIL_AFTER", 0);
  memset(samples, 0, sizeof samples);
  for (int i = 0; i < MAXDEV; i++) devs[i].index = i;
  t0_ns = mono_ns();
  return OK;
}
int nvmlShutdown(void) { return OK; }
const char *nvmlErrorString(int r) {
  return r == NOT_SUPPORTED ? "Not Supported" : r == GPU_IS_LOST ? "GPU is lost"
         : r == 10 ? "Timeout" : "Error";
}
int nvmlDeviceGetCount_v2(unsigned *n) { *n = (unsigned)n_gpus; return OK; }
int nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d) {
  if ((int)i >= n_gpus) return INVALID_ARGUMENT;
  *d = &devs[i];
  return OK;
}
int nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned *mw) {
  int r = check(d);
  if (r == OK) *mw = power_mw;
  return r;
}
int nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned *mw) {
  int r = check(d);
  if (r == OK) *mw = limit_mw;
  return r;
}
int nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *mj) {
  int r = check(d);
  if (r != OK) return r;
  if (no_energy) return NOT_SUPPORTED;
  /* mW x ns = 1e-12 J = 1e-9 mJ; a base of 1e9 mJ as a real counter since boot would have */
  *mj = 1000000000ULL + (unsigned long long)((double)power_mw * (double)(mono_ns() - t0_ns) / 1e9);
  return OK;
}
int nvmlDeviceGetClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
  int r = check(d);
  if (r == OK) *mhz = type == 1 ? (throttled(d) ? 1200 : 1980) : 2619;
  return r;
}
int nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, int type, unsigned *mhz) {
  int r = check(d);
  if (r == OK) *mhz = type == 1 ? 1980 : 2619;
  return r;
}
int nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *c) {
  (void)sensor;
  int r = check(d);
  if (r == OK) *c = 60;
  return r;
}
int nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u) {
  int r = check(d);
  if (r == OK) { u->gpu = 100; u->memory = 40; }
  return r;
}
int nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
  int r = check(d);
  if (r == OK) { m->total = 80ULL << 30; m->used = 10ULL << 30; m->free = m->total - m->used; }
  return r;
}
int nvmlDeviceGetPcieThroughput(nvmlDevice_t d, int counter, unsigned *kbps) {
  (void)counter;
  (void)kbps;
  int r = check(d);
  return r == OK ? NOT_SUPPORTED : r;  /* as on many boards: not exposed */
}
/* called last in each sample by the sampler: the sample counter advances here */
int nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long *reasons) {
  int r = check(d);
  if (r != OK) return r;
  *reasons = throttled(d) ? 0x4ULL : 0ULL;
  samples[d->index]++;
  return OK;
}
