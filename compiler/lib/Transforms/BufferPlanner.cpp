//===- BufferPlanner.cpp - Liveness-based offsets in one arena ------------===//
//
// Three placements, and the smallest arena of the three (the first on a
// tie):
//
// - Largest first: the buffers by size, largest first (then by first use),
//   each at the lowest offset free over its whole lifetime. What one buffer
//   gets does not depend on where in the step the smaller ones fall, so a
//   step's arena stays close to the bytes live at its fullest step however
//   its ops are ordered (docs/perf-model.md measures the placements). The
//   placed buffers are kept by offset and scanned for those live at the
//   same time (Placed): quadratic, 0.06 s for the 14,600 buffers of one
//   405B probe of `kiln plan` on a 2-core machine.
// - Long-lived first: the same, with the buffers live over more than an
//   eighth of the steps before the others. Under pipeline parallel a
//   stage's saved activations live across its microbatches' temporaries,
//   some of them larger; placed after those, each goes above the highest
//   of them over its lifetime (an 8B pp 2 stage: largest first 1.242 times
//   the bytes live at the fullest step, long-lived first 1.076).
// - First fit in order of first use, which can leave holes where a saved
//   activation outlives the temporaries around it. On the transformer steps
//   measured it was never the smallest; on random lifetimes it sometimes
//   is, and taking it then keeps every arena at most what the first fit
//   alone gave.
//
// Where largest first needs no more than the bytes live at the fullest
// step, as in most steps without pipeline parallel, the others are not
// run.
//
// The first fit keeps the free gaps between live buffers in a treap ordered
// by offset, each node knowing the longest gap in its subtree, so the lowest
// gap that fits is found in O(log n); expired buffers leave through a heap
// ordered by their last step.
//
//===----------------------------------------------------------------------===//

#include "kiln/Transforms/BufferPlanner.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <numeric>
#include <queue>
#include <tuple>

using namespace kiln;

namespace {

/// The free gaps of the arena: disjoint, never adjacent, the last one (past
/// the highest live buffer) without end.
class Gaps {
public:
  Gaps() { insert(0, kEndless); }

  /// Takes `size` bytes from the lowest gap that has them; returns their
  /// offset.
  int64_t take(int64_t size) {
    int t = root;
    for (;;) {
      int left = nodes[t].left;
      if (left >= 0 && nodes[left].longest >= size)
        t = left;
      else if (nodes[t].length >= size)
        break;
      else
        t = nodes[t].right;
    }
    int64_t offset = nodes[t].offset, length = nodes[t].length;
    erase(offset);
    if (length != size)
      insert(offset + size, length == kEndless ? kEndless : length - size);
    return offset;
  }

  /// Returns [offset, offset + size) to the free gaps, joined with its
  /// neighbours.
  void give(int64_t offset, int64_t size) {
    int64_t start = offset, length = size;
    int before = below(offset);
    if (before >= 0 && nodes[before].offset + nodes[before].length == offset) {
      start = nodes[before].offset;
      length += nodes[before].length;
      erase(start);
    }
    int after = at(offset + size);
    if (after >= 0) {
      int64_t next = nodes[after].length;
      length = next == kEndless ? kEndless : length + next;
      erase(offset + size);
    }
    insert(start, length);
  }

private:
  static constexpr int64_t kEndless = std::numeric_limits<int64_t>::max();

  struct Node {
    int64_t offset, length, longest;
    uint32_t priority;
    int left = -1, right = -1;
  };

  void update(int t) {
    Node &n = nodes[t];
    n.longest = n.length;
    if (n.left >= 0)
      n.longest = std::max(n.longest, nodes[n.left].longest);
    if (n.right >= 0)
      n.longest = std::max(n.longest, nodes[n.right].longest);
  }

  /// Splits `t` into the gaps below `offset` and the others.
  void split(int t, int64_t offset, int &below, int &rest) {
    if (t < 0) {
      below = rest = -1;
      return;
    }
    if (nodes[t].offset < offset) {
      split(nodes[t].right, offset, nodes[t].right, rest);
      below = t;
    } else {
      split(nodes[t].left, offset, below, nodes[t].left);
      rest = t;
    }
    update(t);
  }

  /// Joins two treaps, every gap of `a` below every gap of `b`.
  int merge(int a, int b) {
    if (a < 0 || b < 0)
      return a < 0 ? b : a;
    if (nodes[a].priority > nodes[b].priority) {
      nodes[a].right = merge(nodes[a].right, b);
      update(a);
      return a;
    }
    nodes[b].left = merge(a, nodes[b].left);
    update(b);
    return b;
  }

  void insert(int64_t offset, int64_t length) {
    int t;
    if (!unused.empty()) {
      t = unused.back();
      unused.pop_back();
    } else {
      t = static_cast<int>(nodes.size());
      nodes.emplace_back();
    }
    // xorshift32: the tree's shape, never the offsets, depends on it.
    random ^= random << 13;
    random ^= random >> 17;
    random ^= random << 5;
    nodes[t] = Node{offset, length, length, random};
    int a, b;
    split(root, offset, a, b);
    root = merge(merge(a, t), b);
  }

  void erase(int64_t offset) {
    int a, b, c, m;
    split(root, offset, a, b);
    split(b, offset + 1, m, c);
    if (m >= 0)
      unused.push_back(m);
    root = merge(a, c);
  }

  /// The gap starting at `offset`, or -1.
  int at(int64_t offset) const {
    int t = root;
    while (t >= 0 && nodes[t].offset != offset)
      t = offset < nodes[t].offset ? nodes[t].left : nodes[t].right;
    return t;
  }

  /// The highest gap starting below `offset`, or -1.
  int below(int64_t offset) const {
    int t = root, found = -1;
    while (t >= 0) {
      if (nodes[t].offset < offset) {
        found = t;
        t = nodes[t].right;
      } else {
        t = nodes[t].left;
      }
    }
    return found;
  }

  std::vector<Node> nodes;
  std::vector<int> unused;
  int root = -1;
  uint32_t random = 2463534242u;
};

/// The buffers placed so far, by offset, in runs of at most 2 kRun so
/// that placing one moves at most a run. Each run keeps the steps each
/// buffer is live in arrays of their own: most placed buffers are not live
/// at the same time as a new one (more than nine in ten on a 405B probe),
/// so a scan tests 64 at a time for a step in common, without a branch
/// each, and reads the bytes only of those that have one.
class Placed {
public:
  /// The lowest offset whose `size` bytes no placed buffer live in steps
  /// [first, last] holds.
  int64_t lowestFree(int32_t first, int32_t last, int64_t size) const {
    int64_t offset = 0;
    for (const Run &run : runs) {
      for (size_t k = 0, e = run.extents.size(); k < e; k += 64) {
        size_t n = std::min<size_t>(64, e - k);
        uint8_t live[64] = {};
        for (size_t j = 0; j < n; ++j)
          live[j] = (run.lasts[k + j] >= first) & (run.firsts[k + j] <= last);
        for (size_t j = 0; j < n; j += 8) {
          uint64_t eight;
          std::memcpy(&eight, live + j, 8);
          for (; eight; eight &= eight - 1) {
            const Extent &x = run.extents[k + j + __builtin_ctzll(eight) / 8];
            if (x.start - offset >= size)
              return offset;
            offset = std::max(offset, x.end);
          }
        }
      }
    }
    return offset;
  }

  void insert(int32_t first, int32_t last, int64_t offset, int64_t size) {
    if (runs.empty())
      runs.emplace_back();
    // The last run starting at or below `offset`, or the first.
    auto r = std::upper_bound(runs.begin() + 1, runs.end(), offset,
                              [](int64_t o, const Run &run) {
                                return o < run.extents.front().start;
                              }) -
             1;
    auto at = std::upper_bound(
        r->extents.begin(), r->extents.end(), offset,
        [](int64_t o, const Extent &x) { return o < x.start; });
    size_t k = at - r->extents.begin();
    r->extents.insert(at, Extent{offset, offset + size});
    r->firsts.insert(r->firsts.begin() + k, first);
    r->lasts.insert(r->lasts.begin() + k, last);
    if (r->extents.size() < 2 * kRun)
      return;
    Run upper;
    upper.extents.assign(r->extents.begin() + kRun, r->extents.end());
    upper.firsts.assign(r->firsts.begin() + kRun, r->firsts.end());
    upper.lasts.assign(r->lasts.begin() + kRun, r->lasts.end());
    r->extents.resize(kRun);
    r->firsts.resize(kRun);
    r->lasts.resize(kRun);
    runs.insert(r + 1, std::move(upper));
  }

private:
  static constexpr size_t kRun = 512;
  struct Extent {
    int64_t start, end;
  };
  struct Run {
    std::vector<int32_t> firsts, lasts;
    std::vector<Extent> extents;
  };
  std::vector<Run> runs;
};

} // namespace

int64_t kiln::alignedBytes(int64_t bytes, int64_t alignment) {
  return (std::max<int64_t>(bytes, 1) + alignment - 1) / alignment * alignment;
}

std::vector<int64_t> kiln::alignedSizes(const std::vector<BufferRequest> &req,
                                        int64_t alignment) {
  std::vector<int64_t> sizes;
  sizes.reserve(req.size());
  for (const BufferRequest &r : req)
    sizes.push_back(alignedBytes(r.bytes, alignment));
  return sizes;
}

LiveBytes::LiveBytes(const std::vector<BufferRequest> &req,
                     const std::vector<int64_t> &sizes) {
  // Each buffer adds its bytes at its first step and takes them back after
  // its last; the changes summed in order of step are the runs.
  std::vector<std::pair<int64_t, int64_t>> changes;
  changes.reserve(2 * req.size());
  for (size_t i = 0; i < req.size(); ++i) {
    changes.push_back({req[i].first, sizes[i]});
    if (req[i].last < std::numeric_limits<int64_t>::max())
      changes.push_back({req[i].last + 1, -sizes[i]});
  }
  std::sort(changes.begin(), changes.end());
  int64_t live = 0;
  for (auto [step, bytes] : changes) {
    live += bytes;
    if (!runs.empty() && runs.back().first == step)
      runs.back().second = live;
    else
      runs.push_back({step, live});
  }
}

int64_t LiveBytes::at(int64_t step) const {
  auto after =
      std::upper_bound(runs.begin(), runs.end(), step,
                       [](int64_t s, const std::pair<int64_t, int64_t> &run) {
                         return s < run.first;
                       });
  return after == runs.begin() ? 0 : std::prev(after)->second;
}

std::pair<int64_t, int64_t> LiveBytes::most(int64_t from, int64_t to) const {
  std::pair<int64_t, int64_t> best = {at(from), from};
  for (const auto &[step, bytes] : runs)
    if (step > from && step < to && bytes > best.first)
      best = {bytes, step};
  return from < to ? best : std::pair<int64_t, int64_t>{0, from};
}

std::vector<int64_t>
kiln::firstFitBuffers(const std::vector<BufferRequest> &req,
                      const std::vector<int64_t> &sizes, int64_t &peak) {
  std::vector<size_t> order(req.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return req[a].first < req[b].first;
  });
  std::vector<int64_t> offsets(req.size(), 0);
  Gaps gaps;
  // Placed buffers by their last step, the earliest on top.
  using Live = std::pair<int64_t, size_t>;
  std::priority_queue<Live, std::vector<Live>, std::greater<Live>> live;
  peak = 0;
  for (size_t i : order) {
    while (!live.empty() && live.top().first < req[i].first) {
      size_t a = live.top().second;
      live.pop();
      gaps.give(offsets[a], sizes[a]);
    }
    offsets[i] = gaps.take(sizes[i]);
    peak = std::max(peak, offsets[i] + sizes[i]);
    live.push({req[i].last, i});
  }
  return offsets;
}

namespace {
/// The buffers placed in `order`, each at the lowest offset free over its
/// whole lifetime.
std::vector<int64_t> placeInOrder(const std::vector<BufferRequest> &req,
                                  const std::vector<int64_t> &sizes,
                                  const std::vector<size_t> &order,
                                  int64_t &peak) {
  std::vector<int64_t> offsets(req.size(), 0);
  Placed placed;
  peak = 0;
  for (size_t i : order) {
    int32_t first = static_cast<int32_t>(req[i].first),
            last = static_cast<int32_t>(req[i].last);
    offsets[i] = placed.lowestFree(first, last, sizes[i]);
    placed.insert(first, last, offsets[i], sizes[i]);
    peak = std::max(peak, offsets[i] + sizes[i]);
  }
  return offsets;
}

/// The requests sorted by `key`, lower first, then by size (largest first),
/// first use, last use and bytes: the order does not depend on the
/// requests' own.
template <typename Key>
std::vector<size_t> orderBy(const std::vector<BufferRequest> &req,
                            const std::vector<int64_t> &sizes, Key key) {
  std::vector<size_t> order(req.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_tuple(key(a), sizes[b], req[a].first, req[a].last,
                           req[a].bytes) <
           std::make_tuple(key(b), sizes[a], req[b].first, req[b].last,
                           req[b].bytes);
  });
  return order;
}
} // namespace

std::vector<int64_t>
kiln::largestFirstBuffers(const std::vector<BufferRequest> &req,
                          const std::vector<int64_t> &sizes, int64_t &peak) {
  return placeInOrder(req, sizes, orderBy(req, sizes, [](size_t) { return 0; }),
                      peak);
}

std::vector<int64_t>
kiln::longLivedFirstBuffers(const std::vector<BufferRequest> &req,
                            const std::vector<int64_t> &sizes, int64_t &peak) {
  int64_t begin = std::numeric_limits<int64_t>::max(), end = 0;
  for (const BufferRequest &r : req) {
    begin = std::min(begin, r.first);
    end = std::max(end, r.last + 1);
  }
  // Live over more than an eighth of the steps: long-lived.
  auto shortLived = [&](size_t i) {
    return 8 * (req[i].last - req[i].first + 1) <= end - begin;
  };
  return placeInOrder(req, sizes, orderBy(req, sizes, shortLived), peak);
}

std::vector<int64_t> kiln::planBuffers(const std::vector<BufferRequest> &req,
                                       const std::vector<int64_t> &sizes,
                                       const LiveBytes &live, int64_t &peak) {
  // Steps are op indices in one block: past 2^31 ops no module fits in
  // memory, but the largest-first placement keeps them in 32 bits.
  if (std::any_of(req.begin(), req.end(), [](const BufferRequest &r) {
        return r.first < 0 || r.last > std::numeric_limits<int32_t>::max();
      }))
    return firstFitBuffers(req, sizes, peak);
  std::vector<int64_t> best = largestFirstBuffers(req, sizes, peak);
  // No placement needs fewer bytes than are live at the fullest step.
  if (peak == live.most().first)
    return best;
  for (auto place : {longLivedFirstBuffers, firstFitBuffers}) {
    int64_t other = 0;
    std::vector<int64_t> offsets = place(req, sizes, other);
    if (other < peak) {
      peak = other;
      best = std::move(offsets);
    }
  }
  return best;
}
