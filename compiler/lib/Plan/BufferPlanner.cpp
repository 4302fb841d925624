//===- BufferPlanner.cpp - Liveness-based offsets in one arena ------------===//

#include "kiln/Plan/BufferPlanner.h"

#include <algorithm>
#include <numeric>

using namespace kiln;

std::vector<int64_t> kiln::planBuffers(const std::vector<BufferRequest> &req,
                                       int64_t alignment, int64_t &peak) {
  std::vector<size_t> order(req.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return req[a].first < req[b].first;
  });
  std::vector<int64_t> sizes;
  for (const BufferRequest &r : req)
    sizes.push_back((std::max<int64_t>(r.bytes, 1) + alignment - 1) /
                    alignment * alignment);

  std::vector<int64_t> offsets(req.size(), 0);
  // Buffers placed and still live, kept sorted by offset.
  std::vector<size_t> active;
  peak = 0;
  for (size_t i : order) {
    active.erase(std::remove_if(active.begin(), active.end(),
                                [&](size_t a) { return req[a].last < req[i].first; }),
                 active.end());
    int64_t size = sizes[i];
    int64_t offset = 0;
    for (size_t a : active) {
      if (offsets[a] - offset >= size)
        break;
      offset = std::max(offset, offsets[a] + sizes[a]);
    }
    offsets[i] = offset;
    peak = std::max(peak, offset + size);
    active.insert(std::upper_bound(active.begin(), active.end(), i,
                                   [&](size_t x, size_t y) {
                                     return offsets[x] < offsets[y];
                                   }),
                  i);
  }
  return offsets;
}
