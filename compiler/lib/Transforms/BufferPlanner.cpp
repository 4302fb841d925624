//===- BufferPlanner.cpp - Liveness-based offsets in one arena ------------===//
//
// First fit over the free gaps between live buffers. A step keeps every
// saved activation of the forward live until its backward, so the number
// of live buffers grows with the layers: scanning them for each new buffer
// is quadratic. The gaps are kept instead in a treap ordered by offset,
// each node knowing the longest gap in its subtree, so the lowest gap that
// fits is found in O(log n); expired buffers leave through a heap ordered by
// their last step. The offsets are those of the scan: the lowest gap that
// fits, the one past the highest live buffer when none does.
//
//===----------------------------------------------------------------------===//

#include "kiln/Transforms/BufferPlanner.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <queue>

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

} // namespace

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
