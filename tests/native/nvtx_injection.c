/* An NVTX injection library for the tests: NVTX clients load it from NVTX_INJECTION64_PATH at
 * their first NVTX call and hand it their function tables; it fills in the domain (CORE2)
 * entries it cares about and writes one line per call to $NVTX_TEST_LOG:
 *   domain <handle> <name>
 *   string <domain> <handle> <text>
 *   category <domain> <id> <name>
 *   push <domain> <tid> <category> <message-handle> <payload|->
 *   pop <domain> <tid>
 *   mark <domain> <tid> <category> <message-handle> <payload|->
 * Handles are printed as pointers; strings are the registered ones. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <nvtx3/nvToolsExt.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static FILE* out;

static void logf_(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  pthread_mutex_lock(&mu);
  if (out) {
    vfprintf(out, fmt, ap);
    fflush(out);
  }
  pthread_mutex_unlock(&mu);
  va_end(ap);
}

static long tid(void) { return (long)syscall(SYS_gettid); }

static nvtxDomainHandle_t domain_create(const char* name) {
  char* copy = strdup(name);
  logf_("domain %p %s\n", (void*)copy, name);
  return (nvtxDomainHandle_t)copy;
}

static nvtxStringHandle_t register_string(nvtxDomainHandle_t d, const char* s) {
  char* copy = strdup(s);
  logf_("string %p %p %s\n", (void*)d, (void*)copy, s);
  return (nvtxStringHandle_t)copy;
}

static void name_category(nvtxDomainHandle_t d, uint32_t id, const char* name) {
  logf_("category %p %u %s\n", (void*)d, id, name);
}

static void describe(const nvtxEventAttributes_t* a, char* buf, size_t n) {
  const void* msg = a->messageType == NVTX_MESSAGE_TYPE_REGISTERED ? (const void*)a->message.registered
                                                                     : NULL;
  if (a->payloadType == NVTX_PAYLOAD_TYPE_INT64)
    snprintf(buf, n, "%u %p %lld", a->category, msg, (long long)a->payload.llValue);
  else
    snprintf(buf, n, "%u %p -", a->category, msg);
}

static int push(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  char buf[128];
  describe(a, buf, sizeof buf);
  logf_("push %p %ld %s\n", (void*)d, tid(), buf);
  return 0;
}

static int pop(nvtxDomainHandle_t d) {
  logf_("pop %p %ld\n", (void*)d, tid());
  return 0;
}

static void mark(nvtxDomainHandle_t d, const nvtxEventAttributes_t* a) {
  char buf[128];
  describe(a, buf, sizeof buf);
  logf_("mark %p %ld %s\n", (void*)d, tid(), buf);
}

__attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get) {
  const char* path = getenv("NVTX_TEST_LOG");
  out = fopen(path ? path : "/dev/null", "a");
  const NvtxExportTableCallbacks* cb = (const NvtxExportTableCallbacks*)get(NVTX_ETID_CALLBACKS);
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  if (!cb || !cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
  if (size <= NVTX_CBID_CORE2_DomainCreateA) return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)domain_create;
  *table[NVTX_CBID_CORE2_DomainRegisterStringA] = (NvtxFunctionPointer)register_string;
  *table[NVTX_CBID_CORE2_DomainNameCategoryA] = (NvtxFunctionPointer)name_category;
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)push;
  *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)pop;
  *table[NVTX_CBID_CORE2_DomainMarkEx] = (NvtxFunctionPointer)mark;
  return 1;
}
