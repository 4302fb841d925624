//===- BufferPlanner.h - Liveness-based offsets in one arena ----*- C++ -*-===//

#ifndef KILN_TRANSFORMS_BUFFERPLANNER_H
#define KILN_TRANSFORMS_BUFFERPLANNER_H

#include <cstdint>
#include <vector>

namespace kiln {

/// A buffer live from step `first` to step `last` (inclusive).
struct BufferRequest {
  int64_t bytes;
  int64_t first, last;
};

/// Offsets in one arena such that buffers live at the same time never
/// overlap, each size rounded up to `alignment`: the largest buffers placed
/// first, each at the lowest offset free over its lifetime, unless a first
/// fit in order of first use needs a smaller arena. Returns the offsets;
/// `peak` is the arena size needed.
std::vector<int64_t> planBuffers(const std::vector<BufferRequest> &requests,
                                 int64_t alignment, int64_t &peak);

/// The two placements planBuffers chooses from (`sizes` already aligned):
/// in order of first use, each at the lowest offset free then; and by size,
/// largest first, each at the lowest offset free over its lifetime (steps
/// from 0 to 2^31 - 1).
std::vector<int64_t> firstFitBuffers(const std::vector<BufferRequest> &requests,
                                     const std::vector<int64_t> &sizes,
                                     int64_t &peak);
std::vector<int64_t>
largestFirstBuffers(const std::vector<BufferRequest> &requests,
                    const std::vector<int64_t> &sizes, int64_t &peak);

} // namespace kiln

#endif // KILN_TRANSFORMS_BUFFERPLANNER_H
