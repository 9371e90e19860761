// The one clock pytimings records with: CLOCK_MONOTONIC in integer nanoseconds.
#pragma once
#include <cstdint>
#include <ctime>

namespace pytimings {

inline int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

}  // namespace pytimings
