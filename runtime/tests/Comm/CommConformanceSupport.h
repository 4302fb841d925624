//===- CommConformanceSupport.h - Reference and fixture -------*- C++ -*-===//
//
// What the conformance suite's test files (CommConformance.cpp,
// CommConformanceProgress.cpp) share: the reference results, written from
// docs/communicator.md (CommConformanceSupport.cpp), buffers in the
// target's memory, and the test fixture.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_COMM_COMMCONFORMANCESUPPORT_H
#define KILN_RUNTIME_TESTS_COMM_COMMCONFORMANCESUPPORT_H

#include "CommConformance.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#define EXPECT_OK(expr)                                                        \
  do {                                                                         \
    kiln::runtime::Error error_ = (expr);                                      \
    EXPECT_FALSE(error_) << error_.message();                                  \
  } while (0)

namespace kiln::runtime::comm::conformance {

/// The harness checks' settings (setInjection).
const Injection &injection();

// --- The reference, from the specification ----------------------------------

uint32_t bitsOf(float x);
float floatOf(uint32_t u);
/// Round to nearest, ties to even, on the halves of the f32 pattern; NaN
/// keeps its upper half with the quiet bit set.
uint16_t refBf16(float x);
/// The bf16 nearest to a double (ties to even).
uint16_t refBf16FromDouble(double d);
float widenBf16(uint16_t b);
/// The fold over contributions c[0..n) to chunk `chunk` in ring order
/// (c[chunk + 1], c[chunk + 2], ... mod n, ending with c[chunk]), in f32.
float refFold(ReduceOp op, const float *c, int n, int chunk);
/// The chunk element i of a `count`-element all-reduce over n ranks is
/// reduced in (docs/communicator.md: the first count % n chunks one longer).
int allReduceChunk(int64_t i, int64_t count, int n);

// --- Buffers of either element type, as bytes -------------------------------

using Bytes = std::vector<unsigned char>;

inline size_t bytesOf(ElementType type) {
  return type == ElementType::BF16 ? 2 : 4;
}
/// Element i := x, which must be exact in `type` for contributions; for
/// results it is the f32 fold, rounded here once for bf16.
void put(Bytes &b, ElementType type, int64_t i, float x);
uint32_t bitsAt(const Bytes &b, ElementType type, int64_t i);
bool isNanBits(uint32_t bits, ElementType type);
/// "" when `got` and `want` hold the same bits (any NaN matching any NaN
/// when `nanMatches`), else how many elements differ and the first one.
std::string compareBits(const Bytes &got, const Bytes &want, ElementType type,
                        bool nanMatches = false);

// --- Contributions ----------------------------------------------------------

/// What rank `rank` contributes to element `index` (exact in `type`).
float contribution(ElementType type, uint32_t salt, int rank, int64_t index);
/// A rank's `n` contributions starting at element `first`.
Bytes contributions(ElementType type, uint32_t salt, int rank, int64_t n,
                    int64_t first = 0);
/// The reduction of elements first..first+n-1 over `size` ranks: a
/// reduce-scatter's chunk `chunk` (its rank), or with chunk -1 an
/// all-reduce of n elements (first 0), each folded in its chunk's order.
Bytes reference(ElementType type, ReduceOp op, uint32_t salt, int size,
                int64_t n, int64_t first = 0, int chunk = -1);
/// Whether the target reduces in ring order (exactRingOrderReduction).
bool exactOrder();

// --- Mesh axes (splitMesh) --------------------------------------------------

/// The axes of the mesh [pp, dp_shard, tp] (pp outermost, tp innermost).
enum class MeshAxis { Pp, DpShard, Tp };
struct Mesh {
  int pp = 1, dp = 1, tp = 1;
  /// World rank `rank`'s coordinate on `axis`: its position there.
  int coordinate(int rank, MeshAxis axis) const;
  /// The world ranks on world rank `rank`'s line along `axis` (those that
  /// share its other two coordinates), in their order on it.
  std::vector<int> line(int rank, MeshAxis axis) const;
  /// "pp 2 x dp_shard 2 x tp 1".
  std::string name() const;
};
/// Calls `check(mesh, axes)` for every mesh [pp, dp_shard, tp] of `world`'s
/// ranks, inside a SCOPED_TRACE naming it. Only a real split (an axis
/// neither 1 nor the world) may fail, alike on every rank, and only for MPI
/// without MPI_THREAD_MULTIPLE (the funneled ctest): that is checked, and
/// the mesh skipped.
void forEachMesh(Communicator &world,
                 const std::function<void(const Mesh &mesh,
                                          AxisCommunicators &axes)> &check);
/// For a max in another order: "" when `got` equals `want` in value (+0 and
/// -0 alike) wherever `want` is not NaN.
std::string compareMaxValues(const Bytes &got, const Bytes &want,
                             ElementType type);
/// "" when `got` is the reduction of elements first..first+n-1 over `size`
/// ranks: bit for bit the reference, or within the bound of
/// CommConformance.cpp's comment for a backend without
/// exactRingOrderReduction().
std::string checkReduced(const Bytes &got, ElementType type, ReduceOp op,
                         uint32_t salt, int size, int64_t n, int64_t first = 0,
                         int chunk = -1);

std::string caseName(ElementType type, int64_t count);
std::string caseName(ElementType type, ReduceOp op, int64_t count);

// --- Buffers in the backend's memory ----------------------------------------

class Buffer {
public:
  explicit Buffer(size_t bytes) : bytes_(bytes) {
    if (bytes_)
      data_ = target().memory.allocate(bytes_);
  }
  explicit Buffer(const Bytes &contents) : Buffer(contents.size()) {
    if (bytes_)
      target().memory.upload(data_, contents.data(), bytes_);
  }
  ~Buffer() {
    if (data_)
      target().memory.release(data_);
  }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;

  void *get() const { return data_; }
  Bytes read() const {
    Bytes b(bytes_);
    if (bytes_)
      target().memory.download(b.data(), data_, bytes_);
    return b;
  }

private:
  size_t bytes_ = 0;
  void *data_ = nullptr;
};

inline const ElementType kTypes[] = {ElementType::F32, ElementType::BF16};
inline const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max};
// Empty, one element, odd and not a multiple of 2, 3 or 4, large.
inline const int64_t kCounts[] = {0, 1, 1237, int64_t(1) << 20};

class CommConformance : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_NE(target().comm, nullptr) << "no communicator was set";
  }
  Communicator &comm() { return *target().comm; }
  int rank() { return comm().rank(); }
  int size() { return comm().size(); }

  /// Runs an all-reduce of this rank's contributions and returns the
  /// result, checked against the reference.
  Bytes allReduceChecked(ElementType type, ReduceOp op, int64_t count,
                         uint32_t salt) {
    Buffer send(contributions(type, salt, rank(), count));
    Buffer recv(count * bytesOf(type));
    EXPECT_OK(comm().wait(
        comm().startAllReduce(send.get(), recv.get(), count, type, op)));
    Bytes got = recv.read();
    EXPECT_EQ(checkReduced(got, type, op, salt, size(), count), "");
    return got;
  }
};

} // namespace kiln::runtime::comm::conformance

#endif // KILN_RUNTIME_TESTS_COMM_COMMCONFORMANCESUPPORT_H
