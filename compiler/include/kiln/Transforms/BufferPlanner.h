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
/// overlap: first fit, in order of first use, each size rounded up to
/// `alignment`. Returns the offsets; `peak` is the arena size needed.
std::vector<int64_t> planBuffers(const std::vector<BufferRequest> &requests,
                                 int64_t alignment, int64_t &peak);

} // namespace kiln

#endif // KILN_TRANSFORMS_BUFFERPLANNER_H
