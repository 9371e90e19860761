#include "pytimings/exceptions.hpp"

#include <cxxabi.h>
#include <link.h>

#include <cstdint>
#include <cstdlib>
#include <exception>

namespace pytimings {
namespace {

// The size of the thread-local block of the library that holds __cxa_get_globals (what glibc
// mallocs for each thread on first use); 0 when it has none (then nothing is allocated).
size_t exception_tls_bytes() noexcept {
  struct Find {
    uintptr_t fn;
    size_t bytes;
  } find{reinterpret_cast<uintptr_t>(&abi::__cxa_get_globals), 0};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) -> int {
        auto* f = static_cast<Find*>(data);
        bool mine = false;
        size_t tls = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          const uintptr_t start = info->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && f->fn >= start && f->fn < start + ph.p_memsz) mine = true;
          if (ph.p_type == PT_TLS) tls = ph.p_memsz;
        }
        if (mine) f->bytes = tls;
        return mine ? 1 : 0;
      },
      &find);
  return find.bytes;
}

thread_local bool tls_ready __attribute__((tls_model("initial-exec"))) = false;

}  // namespace

bool exceptions_ready() noexcept {
  if (tls_ready) return true;
  static const size_t bytes = exception_tls_bytes();
  if (bytes > 0) {
    // A block of the size glibc is about to ask for, freed right before it asks: it waits in
    // this thread's malloc cache (glibc's tcache), which no other thread takes from.
    void* probe = std::malloc(bytes);
    if (probe == nullptr) return false;
    std::free(probe);
  }
  (void)std::uncaught_exceptions();  // makes this thread's exception globals
  tls_ready = true;
  return true;
}

}  // namespace pytimings
