//===- CommConformanceSupport.cpp - The suite's reference and target -----===//
//
// The reference the conformance suite checks results against, written from
// docs/communicator.md independently of any backend (see
// CommConformance.cpp), and the target the test program sets.
//
//===----------------------------------------------------------------------===//

#include "CommConformanceSupport.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace kiln::runtime::comm::conformance {

namespace {
Target currentTarget;
Injection currentInjection;
} // namespace

Memory hostMemory() {
  Memory m;
  m.allocate = [](size_t bytes) { return std::malloc(bytes); };
  m.release = [](void *p) { std::free(p); };
  m.upload = [](void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
  };
  m.download = [](void *dst, const void *src, size_t bytes) {
    std::memcpy(dst, src, bytes);
  };
  return m;
}

void setTarget(Target target) { currentTarget = std::move(target); }
const Target &target() { return currentTarget; }
void setInjection(Injection injection) { currentInjection = injection; }
const Injection &injection() { return currentInjection; }

// --- The reference, from the specification ----------------------------------

uint32_t bitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float floatOf(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

/// Round to nearest, ties to even, on the halves of the f32 pattern; NaN
/// keeps its upper half with the quiet bit set.
uint16_t refBf16(float x) {
  uint32_t u = bitsOf(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  uint32_t upper = u >> 16, lower = u & 0xffffu;
  if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u)))
    ++upper;
  return static_cast<uint16_t>(upper);
}

/// The bf16 nearest to a double (ties to even): rounding to float by
/// round-to-odd first keeps the information RNE to bf16 needs.
uint16_t refBf16FromDouble(double d) {
  float x = static_cast<float>(d);
  if (static_cast<double>(x) != d) {
    if (std::fabs(static_cast<double>(x)) > std::fabs(d))
      x = std::nextafter(x, 0.0f);
    x = floatOf(bitsOf(x) | 1u);
  }
  return refBf16(x);
}

float widenBf16(uint16_t b) { return floatOf(static_cast<uint32_t>(b) << 16); }

namespace {
float refMax(float acc, float x) {
  if (std::isnan(acc))
    return acc;
  if (std::isnan(x))
    return x;
  if (x > acc)
    return x;
  if (x == acc && std::signbit(acc) && !std::signbit(x))
    return x;
  return acc;
}
} // namespace

float refFold(ReduceOp op, const float *c, int n, int chunk) {
  float acc = c[(chunk + 1) % n];
  for (int i = 1; i < n; ++i) {
    float x = c[(chunk + 1 + i) % n];
    acc = op == ReduceOp::Sum ? acc + x : refMax(acc, x);
  }
  return acc;
}

int allReduceChunk(int64_t i, int64_t count, int n) {
  // count % n chunks of count / n + 1 elements, then chunks of count / n.
  int64_t small = count / n, big = small + 1, longOnes = count % n;
  if (i < longOnes * big)
    return static_cast<int>(i / big);
  return static_cast<int>(longOnes + (i - longOnes * big) / small);
}

// --- Buffers of either element type, as bytes -------------------------------

/// Element i := x, which must be exact in `type` for contributions; for
/// results it is the f32 fold, rounded here once for bf16.
void put(Bytes &b, ElementType type, int64_t i, float x) {
  if (type == ElementType::F32) {
    uint32_t u = bitsOf(x);
    std::memcpy(b.data() + 4 * i, &u, 4);
  } else {
    uint16_t h = refBf16(x);
    std::memcpy(b.data() + 2 * i, &h, 2);
  }
}

uint32_t bitsAt(const Bytes &b, ElementType type, int64_t i) {
  if (type == ElementType::F32) {
    uint32_t u;
    std::memcpy(&u, b.data() + 4 * i, 4);
    return u;
  }
  uint16_t h;
  std::memcpy(&h, b.data() + 2 * i, 2);
  return h;
}

bool isNanBits(uint32_t bits, ElementType type) {
  return type == ElementType::F32 ? (bits & 0x7fffffffu) > 0x7f800000u
                                  : (bits & 0x7fffu) > 0x7f80u;
}

/// "" when `got` and `want` hold the same bits (any NaN matching any NaN
/// when `nanMatches`), else how many elements differ and the first one.
std::string compareBits(const Bytes &got, const Bytes &want, ElementType type,
                        bool nanMatches) {
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + " bytes, expected " +
           std::to_string(want.size());
  int64_t n = static_cast<int64_t>(got.size() / bytesOf(type));
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t g = bitsAt(got, type, i), w = bitsAt(want, type, i);
    if (g == w || (nanMatches && isNanBits(g, type) && isNanBits(w, type)))
      continue;
    if (bad++ == 0)
      first = i;
  }
  if (bad == 0)
    return "";
  char line[160];
  std::snprintf(line, sizeof line,
                "%lld of %lld elements differ; first: element %lld is 0x%x, "
                "expected 0x%x",
                static_cast<long long>(bad), static_cast<long long>(n),
                static_cast<long long>(first), bitsAt(got, type, first),
                bitsAt(want, type, first));
  return line;
}

// --- Contributions ----------------------------------------------------------

namespace {
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
} // namespace

/// What rank `rank` contributes to element `index` (exact in `type`): a
/// signed 24-bit (f32) or 8-bit (bf16) significand times 2^-10..2^10.
float contribution(ElementType type, uint32_t salt, int rank, int64_t index) {
  uint64_t h =
      mix((static_cast<uint64_t>(salt) << 48) ^
          (static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(index));
  int bits = type == ElementType::F32 ? 24 : 8;
  float significand = static_cast<float>(h & ((1u << bits) - 1));
  int exponent = static_cast<int>((h >> 32) % 21) - 10 - bits;
  float x = std::ldexp(significand, exponent);
  return (h >> 31) & 1 ? -x : x;
}

/// A rank's `n` contributions starting at element `first`.
Bytes contributions(ElementType type, uint32_t salt, int rank, int64_t n,
                    int64_t first) {
  Bytes b(n * bytesOf(type));
  for (int64_t i = 0; i < n; ++i)
    put(b, type, i, contribution(type, salt, rank, first + i));
  return b;
}

/// The reduction of elements first..first+n-1 over `size` ranks.
Bytes reference(ElementType type, ReduceOp op, uint32_t salt, int size,
                int64_t n, int64_t first, int chunk) {
  Bytes b(n * bytesOf(type));
  std::vector<float> c(size);
  for (int64_t i = 0; i < n; ++i) {
    for (int r = 0; r < size; ++r)
      c[r] = contribution(type, salt, r, first + i);
    int j = chunk >= 0 ? chunk : allReduceChunk(i, n, size);
    put(b, type, i, refFold(op, c.data(), size, j));
  }
  return b;
}

bool exactOrder() { return target().comm->exactRingOrderReduction(); }

/// For a max in another order: "" when `got` equals `want` in value (+0 and
/// -0 alike) wherever `want` is not NaN.
std::string compareMaxValues(const Bytes &got, const Bytes &want,
                             ElementType type) {
  int64_t n = static_cast<int64_t>(want.size() / bytesOf(type));
  if (got.size() != want.size())
    return "size " + std::to_string(got.size()) + " bytes, expected " +
           std::to_string(want.size());
  auto valueAt = [&](const Bytes &b, int64_t i) {
    uint32_t bits = bitsAt(b, type, i);
    return type == ElementType::F32 ? floatOf(bits)
                                    : widenBf16(static_cast<uint16_t>(bits));
  };
  for (int64_t i = 0; i < n; ++i) {
    float w = valueAt(want, i), g = valueAt(got, i);
    if (!std::isnan(w) && g != w)
      return "element " + std::to_string(i) + " is " + std::to_string(g) +
             ", expected " + std::to_string(w);
  }
  return "";
}

/// "" when `got` is the reduction of elements first..first+n-1 over `size`
/// ranks: bit for bit the reference, or within the bound of the file
/// comment for a backend without exactRingOrderReduction().
std::string checkReduced(const Bytes &got, ElementType type, ReduceOp op,
                         uint32_t salt, int size, int64_t n, int64_t first,
                         int chunk) {
  if (exactOrder())
    return compareBits(got, reference(type, op, salt, size, n, first, chunk),
                       type);
  if (got.size() != n * bytesOf(type))
    return "size " + std::to_string(got.size()) + " bytes, expected " +
           std::to_string(n * bytesOf(type));
  // Sums of the contributions in f64 are exact: 24-bit significands over
  // 2^-34..2^10 need at most 44 + log2(N) bits.
  const double u = std::ldexp(1.0, type == ElementType::F32 ? -24 : -8);
  int64_t bad = 0, firstBad = -1;
  double gotFirst = 0, wantFirst = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits = bitsAt(got, type, i);
    double value = type == ElementType::F32
                       ? floatOf(bits)
                       : widenBf16(static_cast<uint16_t>(bits));
    double want =
        op == ReduceOp::Max ? -std::numeric_limits<double>::infinity() : 0.0;
    double magnitude = 0;
    for (int r = 0; r < size; ++r) {
      double c = contribution(type, salt, r, first + i);
      want = op == ReduceOp::Max ? std::max(want, c) : want + c;
      magnitude += std::fabs(c);
    }
    bool ok = op == ReduceOp::Max
                  ? value == want
                  : std::fabs(value - want) <= size * u * magnitude;
    if (!ok && bad++ == 0) {
      firstBad = i;
      gotFirst = value;
      wantFirst = want;
    }
  }
  if (bad == 0)
    return "";
  char line[200];
  std::snprintf(line, sizeof line,
                "%lld of %lld elements outside the bound of a reduction in "
                "another order; first: element %lld is %.9g, expected %.9g",
                static_cast<long long>(bad), static_cast<long long>(n),
                static_cast<long long>(firstBad), gotFirst, wantFirst);
  return line;
}

std::string caseName(ElementType type, int64_t count) {
  return std::string(elementTypeName(type)) + ", count " +
         std::to_string(count);
}

std::string caseName(ElementType type, ReduceOp op, int64_t count) {
  return caseName(type, count) + ", " + reduceOpName(op);
}

// --- Mesh axes --------------------------------------------------------------

int Mesh::coordinate(int rank, MeshAxis axis) const {
  switch (axis) {
  case MeshAxis::Pp:
    return rank / (dp * tp);
  case MeshAxis::DpShard:
    return (rank / tp) % dp;
  case MeshAxis::Tp:
    return rank % tp;
  }
  return -1;
}

std::vector<int> Mesh::line(int rank, MeshAxis axis) const {
  // Rank = (pp coordinate * dp + dp coordinate) * tp + tp coordinate.
  int c[3] = {coordinate(rank, MeshAxis::Pp),
              coordinate(rank, MeshAxis::DpShard),
              coordinate(rank, MeshAxis::Tp)};
  int length = axis == MeshAxis::Pp ? pp : axis == MeshAxis::DpShard ? dp : tp;
  std::vector<int> out;
  for (int k = 0; k < length; ++k) {
    c[static_cast<int>(axis)] = k;
    out.push_back((c[0] * dp + c[1]) * tp + c[2]);
  }
  return out;
}

std::string Mesh::name() const {
  return "pp " + std::to_string(pp) + " x dp_shard " + std::to_string(dp) +
         " x tp " + std::to_string(tp);
}

void forEachMesh(Communicator &world,
                 const std::function<void(const Mesh &mesh,
                                          AxisCommunicators &axes)> &check) {
  int n = world.size();
  for (int pp = 1; pp <= n; ++pp)
    for (int tp = 1; tp <= n; ++tp) {
      if (n % (pp * tp) != 0)
        continue;
      Mesh mesh{pp, n / (pp * tp), tp};
      SCOPED_TRACE("mesh " + mesh.name());
      Expected<AxisCommunicators> axes =
          splitMesh(world, mesh.pp, mesh.dp, mesh.tp);
      if (!axes) {
        std::string why = axes.error().message();
        auto real = [n](int size) { return size > 1 && size < n; };
        EXPECT_TRUE((real(mesh.pp) || real(mesh.dp) || real(mesh.tp)) &&
                    why.find("MPI_THREAD_MULTIPLE") != std::string::npos)
            << why;
        continue;
      }
      check(mesh, *axes);
    }
}

} // namespace kiln::runtime::comm::conformance
