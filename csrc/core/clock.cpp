#include "pytimings/clock.hpp"

#include <limits>

namespace pytimings {

WallOffset sample_wall_offset(int samples) noexcept {
  WallOffset best;
  int64_t best_width = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < samples; ++i) {
    const int64_t m0 = now_ns();
    const int64_t r = realtime_ns();
    const int64_t m1 = now_ns();
    if (m1 - m0 < best_width) {
      best_width = m1 - m0;
      best.offset_ns = r - (m0 + (m1 - m0) / 2);
      best.uncertainty_ns = (m1 - m0 + 1) / 2;
    }
  }
  return best;
}

}  // namespace pytimings
