//===- BufferPlanner.h - Liveness-based offsets in one arena ----*- C++ -*-===//

#ifndef KILN_TRANSFORMS_BUFFERPLANNER_H
#define KILN_TRANSFORMS_BUFFERPLANNER_H

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace kiln {

/// A buffer live from step `first` to step `last` (inclusive).
struct BufferRequest {
  int64_t bytes;
  int64_t first, last;
};

/// `bytes` rounded up to a multiple of `alignment`, and at least one byte:
/// what a buffer takes in the arena.
int64_t alignedBytes(int64_t bytes, int64_t alignment);

/// alignedBytes of each request.
std::vector<int64_t> alignedSizes(const std::vector<BufferRequest> &requests,
                                  int64_t alignment);

/// The bytes live at each step, every buffer taking its `sizes` entry from
/// its first step to its last: no placement needs fewer than the most.
class LiveBytes {
public:
  LiveBytes(const std::vector<BufferRequest> &requests,
            const std::vector<int64_t> &sizes);

  /// The bytes live at `step`.
  int64_t at(int64_t step) const;

  /// The most bytes live at one step of [from, to), and the first step
  /// where they are ({0, from} where no step of the range has any).
  std::pair<int64_t, int64_t>
  most(int64_t from = std::numeric_limits<int64_t>::min(),
       int64_t to = std::numeric_limits<int64_t>::max()) const;

private:
  /// (step, bytes live from it until the next run's step), by step.
  std::vector<std::pair<int64_t, int64_t>> runs;
};

/// Offsets in one arena such that buffers live at the same time never
/// overlap, each taking its `sizes` entry (alignedSizes): the smallest
/// arena of the three placements below (the first of them on a tie); the
/// other two are not run where the first needs no more than the most bytes
/// `live` (the requests' LiveBytes) at one step. Returns the offsets;
/// `peak` is the arena size needed.
std::vector<int64_t> planBuffers(const std::vector<BufferRequest> &requests,
                                 const std::vector<int64_t> &sizes,
                                 const LiveBytes &live, int64_t &peak);

/// The placements planBuffers chooses from (`sizes` already aligned). The
/// first two place each buffer at the lowest offset free over its whole
/// lifetime (steps from 0 to 2^31 - 1):
/// - largest first: by size;
/// - long-lived first: those live over more than an eighth of the steps,
///   by size, then the others by size. A long-lived buffer must avoid
///   every buffer of its lifetime: placed after the short-lived ones it
///   goes above the highest of them, and its bytes below stay unused
///   outside their steps (a pipeline stage's saved activations among its
///   microbatches' temporaries);
/// - first fit: in order of first use, each at the lowest offset free then.
std::vector<int64_t>
largestFirstBuffers(const std::vector<BufferRequest> &requests,
                    const std::vector<int64_t> &sizes, int64_t &peak);
std::vector<int64_t>
longLivedFirstBuffers(const std::vector<BufferRequest> &requests,
                      const std::vector<int64_t> &sizes, int64_t &peak);
std::vector<int64_t> firstFitBuffers(const std::vector<BufferRequest> &requests,
                                     const std::vector<int64_t> &sizes,
                                     int64_t &peak);

} // namespace kiln

#endif // KILN_TRANSFORMS_BUFFERPLANNER_H
