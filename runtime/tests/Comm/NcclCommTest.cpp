//===- NcclCommTest.cpp - What only the NCCL backend has ------------------===//
//
// Run by kiln-comm-nccl-tests next to the conformance suite, on the same
// communicator (CommConformance.h's target): u8 all-gathers, the producer
// stream join, streamWait() without wait(), and collectives captured into
// a CUDA graph and launched twice. Contributions are small integers, so
// sums are exact in any order and the checks hold whatever NCCL's
// algorithm. Every rank issues the same collectives and launches the same
// graphs whatever its checks find; graph launches are agreed over the host
// communicator first, since a capture that failed on one rank only would
// leave the others waiting in the graph.
//
//===----------------------------------------------------------------------===//

#include "CommConformanceSupport.h"

#include "kiln/Runtime/Comm/NcclCommunicator.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace kiln::runtime::comm;
using namespace kiln::runtime::comm::conformance;

namespace {

#define EXPECT_CUDA(expr)                                                      \
  do {                                                                         \
    cudaError_t err_ = (expr);                                                 \
    EXPECT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

#define EXPECT_OK(expr)                                                        \
  do {                                                                         \
    kiln::runtime::Error error_ = (expr);                                      \
    EXPECT_FALSE(error_) << error_.message();                                  \
  } while (0)

/// Pinned host and device buffers of `count` floats, released at the end.
struct Buffers {
  explicit Buffers(int64_t count, int64_t recvCount) : count(count) {
    EXPECT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&hostIn),
                               count * sizeof(float)));
    EXPECT_CUDA(cudaMallocHost(reinterpret_cast<void **>(&hostOut),
                               recvCount * sizeof(float)));
    EXPECT_CUDA(cudaMalloc(&send, count * sizeof(float)));
    EXPECT_CUDA(cudaMalloc(&recv, recvCount * sizeof(float)));
    EXPECT_CUDA(cudaMemset(send, 0, count * sizeof(float)));
    EXPECT_CUDA(cudaMemset(recv, 0, recvCount * sizeof(float)));
    EXPECT_CUDA(cudaDeviceSynchronize());
  }
  ~Buffers() {
    cudaFreeHost(hostIn);
    cudaFreeHost(hostOut);
    cudaFree(send);
    cudaFree(recv);
  }
  int64_t count;
  float *hostIn = nullptr, *hostOut = nullptr;
  void *send = nullptr, *recv = nullptr;
};

/// Rank r's element i in round k: exact small integers.
float value(int rank, int64_t i, int round = 0) {
  return static_cast<float>((rank + 1) * (i % 7 + 1) + round);
}

/// The sum over `size` ranks of value(r, i, round).
float sum(int size, int64_t i, int round = 0) {
  return static_cast<float>((i % 7 + 1) * size * (size + 1) / 2 + round * size);
}

/// How many of hostOut's `count` elements differ from sum(size, i, round).
int64_t wrongSums(const float *out, int64_t count, int size, int round = 0) {
  int64_t bad = 0;
  for (int64_t i = 0; i < count; ++i)
    bad += out[i] != sum(size, i, round);
  return bad;
}

class NcclCommunicatorTest : public ::testing::Test {
protected:
  void SetUp() override {
    nccl_ = dynamic_cast<NcclCommunicator *>(target().comm);
    ASSERT_NE(nccl_, nullptr) << "the target is not an NCCL communicator";
  }
  NcclCommunicator &nccl() { return *nccl_; }
  int rank() { return nccl_->rank(); }
  int size() { return nccl_->size(); }

private:
  NcclCommunicator *nccl_ = nullptr;
};

} // namespace

TEST_F(NcclCommunicatorTest, NotRingOrderExact) {
  EXPECT_FALSE(nccl().exactRingOrderReduction());
  EXPECT_STREQ(nccl().backendName(), "nccl");
  EXPECT_EQ(nccl().rank(), nccl().host().rank());
  EXPECT_EQ(nccl().size(), nccl().host().size());
  int device = -1;
  EXPECT_CUDA(cudaGetDevice(&device));
  EXPECT_EQ(device, nccl().device());
}

// ncclCommSplit: ranks of one parity form a communicator (numbered by
// rank), whose all-reduce sums only their contributions; its host
// communicator holds the same ranks. At world size 1 the one rank splits
// into a communicator of itself.
TEST_F(NcclCommunicatorTest, SplitMakesTheCommunicatorOfAColor) {
  const int color = rank() % 2;
  std::vector<int> members;
  for (int r = color; r < size(); r += 2)
    members.push_back(r);
  kiln::runtime::Expected<std::unique_ptr<Communicator>> made =
      nccl().split(color, rank());
  ASSERT_TRUE(made) << made.error().message();
  auto *sub = dynamic_cast<NcclCommunicator *>(made->get());
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), static_cast<int>(members.size()));
  EXPECT_EQ(sub->rank(), rank() / 2);
  EXPECT_EQ(sub->host().size(), sub->size());
  EXPECT_EQ(sub->device(), nccl().device());
  const int64_t n = 4099;
  Buffers b(n, n);
  for (int64_t i = 0; i < n; ++i)
    b.hostIn[i] = value(rank(), i);
  EXPECT_CUDA(
      cudaMemcpy(b.send, b.hostIn, n * sizeof(float), cudaMemcpyHostToDevice));
  EXPECT_OK(sub->wait(
      sub->startAllReduce(b.send, b.recv, n, ElementType::F32, ReduceOp::Sum)));
  EXPECT_CUDA(
      cudaMemcpy(b.hostOut, b.recv, n * sizeof(float), cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r : members)
      want += value(r, i);
    bad += b.hostOut[i] != want;
  }
  EXPECT_EQ(bad, 0);
}

// The mesh's axes as the CUDA executor makes them: an NCCL communicator
// over a host communicator it does not own (the Trainer's), then
// splitMesh over it, for every mesh of this world. Each axis has its size
// and this rank's position, an axis of more than one rank is an NCCL
// communicator whose host() has as many ranks, and its all-reduce sums the
// contributions of its line only. At world size 1 nothing is split, so the
// borrowed host communicator's split (what ncclCommSplit's host side goes
// through) is called once by itself.
TEST_F(NcclCommunicatorTest, MeshAxesSplitOverABorrowedHost) {
  kiln::runtime::Expected<std::unique_ptr<NcclCommunicator>> made =
      createNcclCommunicator(nccl().host(), 0);
  ASSERT_TRUE(made) << made.error().message();
  NcclCommunicator &world = **made;
  if (size() == 1) {
    kiln::runtime::Expected<std::unique_ptr<Communicator>> alone =
        world.split(0, 0);
    ASSERT_TRUE(alone) << alone.error().message();
    EXPECT_EQ((*alone)->size(), 1);
  }
  const int64_t n = 1031;
  forEachMesh(world, [&](const Mesh &mesh, AxisCommunicators &axes) {
    struct Line {
      Communicator *comm;
      std::vector<int> members;
      int position;
      const char *name;
    };
    auto lineOf = [&](Communicator *comm, MeshAxis axis, const char *name) {
      return Line{comm, mesh.line(rank(), axis), mesh.coordinate(rank(), axis),
                  name};
    };
    for (const Line &line :
         {lineOf(axes.pp, MeshAxis::Pp, "pp"),
          lineOf(axes.dpShard, MeshAxis::DpShard, "dp_shard"),
          lineOf(axes.tp, MeshAxis::Tp, "tp")}) {
      SCOPED_TRACE(line.name);
      ASSERT_EQ(line.comm->size(), static_cast<int>(line.members.size()));
      EXPECT_EQ(line.comm->rank(), line.position);
      if (line.comm->size() == 1)
        continue; // a local communicator: the executor copies instead
      auto *axis = dynamic_cast<NcclCommunicator *>(line.comm);
      ASSERT_NE(axis, nullptr);
      EXPECT_EQ(axis->host().size(), axis->size());
      EXPECT_EQ(axis->host().rank(), axis->rank());
      Buffers b(n, n);
      for (int64_t i = 0; i < n; ++i)
        b.hostIn[i] = value(rank(), i);
      EXPECT_CUDA(cudaMemcpy(b.send, b.hostIn, n * sizeof(float),
                             cudaMemcpyHostToDevice));
      EXPECT_OK(axis->wait(axis->startAllReduce(
          b.send, b.recv, n, ElementType::F32, ReduceOp::Sum)));
      EXPECT_CUDA(cudaMemcpy(b.hostOut, b.recv, n * sizeof(float),
                             cudaMemcpyDeviceToHost));
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r : line.members)
          want += value(r, i);
        bad += b.hostOut[i] != want;
      }
      EXPECT_EQ(bad, 0);
    }
  });
}

TEST_F(NcclCommunicatorTest, U8AllGather) {
  const int64_t n = 1001;
  std::vector<unsigned char> mine(n), all(size() * n);
  for (int64_t i = 0; i < n; ++i)
    mine[i] = static_cast<unsigned char>(rank() * 31 + i);
  void *send = nullptr, *recv = nullptr;
  EXPECT_CUDA(cudaMalloc(&send, n));
  EXPECT_CUDA(cudaMalloc(&recv, size() * n));
  EXPECT_CUDA(cudaMemcpy(send, mine.data(), n, cudaMemcpyHostToDevice));
  EXPECT_OK(nccl().wait(nccl().startAllGather(send, recv, n, ElementType::U8)));
  EXPECT_CUDA(cudaMemcpy(all.data(), recv, size() * n, cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  for (int r = 0; r < size(); ++r)
    for (int64_t i = 0; i < n; ++i)
      bad += all[r * n + i] != static_cast<unsigned char>(r * 31 + i);
  EXPECT_EQ(bad, 0);
  cudaFree(send);
  cudaFree(recv);
}

// The producer stream sleeps 100 ms, then copies the contributions in; a
// collective that did not wait for it would reduce the zeros before.
TEST_F(NcclCommunicatorTest, CollectivesWaitForTheProducerStream) {
  const int64_t n = 1 << 16;
  Buffers b(n, n);
  for (int64_t i = 0; i < n; ++i)
    b.hostIn[i] = value(rank(), i);
  cudaStream_t producer = nullptr;
  EXPECT_CUDA(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  nccl().setProducerStream(producer);
  EXPECT_CUDA(cudaLaunchHostFunc(
      producer,
      [](void *) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      },
      nullptr));
  EXPECT_CUDA(cudaMemcpyAsync(b.send, b.hostIn, n * sizeof(float),
                              cudaMemcpyHostToDevice, producer));
  CommHandle h =
      nccl().startAllReduce(b.send, b.recv, n, ElementType::F32, ReduceOp::Sum);
  EXPECT_OK(nccl().wait(h));
  nccl().setProducerStream(nullptr);
  EXPECT_CUDA(
      cudaMemcpy(b.hostOut, b.recv, n * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT_EQ(wrongSums(b.hostOut, n, size()), 0);
  EXPECT_CUDA(cudaStreamDestroy(producer));
}

// A consumer stream waits on the device (streamWait) and copies the result
// out; the host never calls wait() before the copy is done.
TEST_F(NcclCommunicatorTest, StreamWaitOrdersAnotherStream) {
  const int64_t n = 1 << 18;
  Buffers b(n, n);
  for (int64_t i = 0; i < n; ++i)
    b.hostIn[i] = value(rank(), i);
  EXPECT_CUDA(
      cudaMemcpy(b.send, b.hostIn, n * sizeof(float), cudaMemcpyHostToDevice));
  cudaStream_t consumer = nullptr;
  EXPECT_CUDA(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  CommHandle h =
      nccl().startAllReduce(b.send, b.recv, n, ElementType::F32, ReduceOp::Sum);
  EXPECT_EQ(nccl().streamWait(h, consumer).message(), "");
  EXPECT_CUDA(cudaMemcpyAsync(b.hostOut, b.recv, n * sizeof(float),
                              cudaMemcpyDeviceToHost, consumer));
  EXPECT_CUDA(cudaStreamSynchronize(consumer));
  EXPECT_TRUE(nccl().test(h)) << "the consumer waited for its event";
  EXPECT_EQ(wrongSums(b.hostOut, n, size()), 0);
  EXPECT_OK(nccl().wait(h));
  EXPECT_NE(
      nccl().streamWait(CommHandle{uint64_t(1) << 60}, consumer).message(), "");
  EXPECT_FALSE(nccl().failure());
  EXPECT_CUDA(cudaStreamDestroy(consumer));
}

// Copy in, all-reduce, copy out, captured from a producer stream into one
// graph, launched twice with other inputs. An eager collective is still in
// flight when the capture begins: test() and streamWait() on it, and
// test() and wait() on the captured one, must leave the capture valid.
TEST_F(NcclCommunicatorTest, CapturedIntoACudaGraph) {
  const int64_t n = 1 << 16;
  Buffers b(n, n), eager(n, n);
  for (int64_t i = 0; i < n; ++i)
    eager.hostIn[i] = value(rank(), i);
  EXPECT_CUDA(cudaMemcpy(eager.send, eager.hostIn, n * sizeof(float),
                         cudaMemcpyHostToDevice));
  cudaStream_t s = nullptr;
  EXPECT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CommHandle before = nccl().startAllReduce(eager.send, eager.recv, n,
                                            ElementType::F32, ReduceOp::Sum);

  nccl().setProducerStream(s);
  cudaGraph_t graph = nullptr;
  EXPECT_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  EXPECT_CUDA(cudaMemcpyAsync(b.send, b.hostIn, n * sizeof(float),
                              cudaMemcpyHostToDevice, s));
  CommHandle h =
      nccl().startAllReduce(b.send, b.recv, n, ElementType::F32, ReduceOp::Sum);
  nccl().test(before); // either answer; it must not query the event
  (void)nccl().streamWait(before, s); // fine if seen complete, else an error
  bool tested = nccl().test(h);
  kiln::runtime::Error waited = nccl().wait(h);
  std::string joined = nccl().streamWait(h, s).message();
  EXPECT_CUDA(cudaMemcpyAsync(b.hostOut, b.recv, n * sizeof(float),
                              cudaMemcpyDeviceToHost, s));
  cudaError_t ended = cudaStreamEndCapture(s, &graph);
  nccl().setProducerStream(nullptr);
  EXPECT_TRUE(tested) << "a captured collective tests complete";
  EXPECT_TRUE(waited) << "waiting on a captured collective";
  EXPECT_EQ(joined, "");
  EXPECT_EQ(ended, cudaSuccess) << cudaGetErrorString(ended);
  EXPECT_FALSE(nccl().failure());

  EXPECT_OK(nccl().wait(before));
  EXPECT_CUDA(cudaMemcpy(eager.hostOut, eager.recv, n * sizeof(float),
                         cudaMemcpyDeviceToHost));
  EXPECT_EQ(wrongSums(eager.hostOut, n, size()), 0) << "issued before";

  cudaGraphExec_t exec = nullptr;
  bool ok = ended == cudaSuccess &&
            cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess;
  EXPECT_TRUE(ok);
  // Launch on every rank or on none.
  Communicator &host = nccl().host();
  unsigned char mine = ok ? 1 : 0;
  std::vector<unsigned char> all(size());
  EXPECT_OK(
      host.wait(host.startAllGather(&mine, all.data(), 1, ElementType::U8)));
  for (unsigned char a : all)
    ok = ok && a;
  for (int round = 0; ok && round < 2; ++round) {
    for (int64_t i = 0; i < n; ++i)
      b.hostIn[i] = value(rank(), i, round);
    std::memset(b.hostOut, 0, n * sizeof(float));
    EXPECT_CUDA(cudaGraphLaunch(exec, s));
    EXPECT_CUDA(cudaStreamSynchronize(s));
    EXPECT_EQ(wrongSums(b.hostOut, n, size(), round), 0) << "launch " << round;
  }
  if (exec)
    cudaGraphExecDestroy(exec);
  if (graph)
    cudaGraphDestroy(graph);
  // Eager collectives go on after the capture.
  EXPECT_OK(nccl().barrier());
  EXPECT_FALSE(nccl().failure());
  EXPECT_CUDA(cudaStreamDestroy(s));
}
