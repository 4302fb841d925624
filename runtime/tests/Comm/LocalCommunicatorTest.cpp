// The argument checks every backend shares, seen through fresh local
// communicators (each check fails the communicator it runs on, so the
// shared one of the conformance suite cannot be used): each bad call
// fails with a one-line message naming the collective and the reason, and
// the communicator stays failed.
#include "kiln/Runtime/Comm/LocalCommunicator.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

using namespace kiln::runtime::comm;

namespace {

std::string failureOf(const std::function<CommHandle(Communicator &)> &start) {
  std::unique_ptr<Communicator> comm = createLocalCommunicator();
  kiln::runtime::Error error = comm->wait(start(*comm));
  if (!error)
    return "";
  EXPECT_EQ(comm->failure().message(), error.message());
  EXPECT_TRUE(comm->barrier()) << "the failure is kept";
  EXPECT_EQ(error.message().find('\n'), std::string::npos);
  return error.message();
}

} // namespace

TEST(LocalCommunicator, BadArguments) {
  std::vector<float> a(16), b(16);
  const ElementType f32 = ElementType::F32;
  struct Case {
    const char *expected;
    std::function<CommHandle(Communicator &)> start;
  } cases[] = {
      {"all-reduce #1 (-1 x f32, sum): negative count",
       [&](Communicator &c) {
         return c.startAllReduce(a.data(), b.data(), -1, f32, ReduceOp::Sum);
       }},
      {"all-gather #1 (4 x f32): null send buffer",
       [&](Communicator &c) {
         return c.startAllGather(nullptr, b.data(), 4, f32);
       }},
      {"reduce-scatter #1 (4 x bf16, max): null receive buffer",
       [&](Communicator &c) {
         return c.startReduceScatter(a.data(), nullptr, 4, ElementType::BF16,
                                     ReduceOp::Max);
       }},
      {"all-gather #1 (4 x f32): send and receive buffers overlap",
       [&](Communicator &c) {
         return c.startAllGather(a.data() + 2, a.data(), 4, f32);
       }},
      {"all-reduce #1 (8 x f32, sum): send and receive buffers overlap "
       "without being the same",
       [&](Communicator &c) {
         return c.startAllReduce(a.data() + 1, a.data(), 8, f32, ReduceOp::Sum);
       }},
      {"unknown element type 7",
       [&](Communicator &c) {
         return c.startAllGather(a.data(), b.data(), 4,
                                 static_cast<ElementType>(7));
       }},
      {"send-recv #1 (4 x f32): shift 1 outside [0, 1)",
       [&](Communicator &c) {
         return c.startSendRecv(a.data(), b.data(), 4, f32, 1);
       }},
      {"send-recv #1 (4 x f32): send and receive buffers overlap",
       [&](Communicator &c) {
         return c.startSendRecv(a.data() + 2, a.data(), 4, f32, 0);
       }},
      {"unknown reduction 9",
       [&](Communicator &c) {
         return c.startAllReduce(a.data(), b.data(), 4, f32,
                                 static_cast<ReduceOp>(9));
       }},
  };
  for (const Case &c : cases) {
    std::string error = failureOf(c.start);
    EXPECT_NE(error.find(c.expected), std::string::npos)
        << "got: " << error << "\nexpected to contain: " << c.expected;
    EXPECT_EQ(error.rfind("local ", 0), 0u) << error;
  }
  // A null buffer is fine with count 0.
  EXPECT_EQ(failureOf([](Communicator &c) {
              return c.startAllReduce(nullptr, nullptr, 0, ElementType::F32,
                                      ReduceOp::Sum);
            }),
            "");
}

TEST(LocalCommunicator, LaterCollectivesReportTheEarlierFailure) {
  std::unique_ptr<Communicator> comm = createLocalCommunicator();
  float x = 1, y = 0;
  CommHandle ok =
      comm->startAllReduce(&x, &y, 1, ElementType::F32, ReduceOp::Sum);
  CommHandle bad =
      comm->startAllReduce(&x, &y, -5, ElementType::F32, ReduceOp::Sum);
  CommHandle later = comm->startAllGather(&x, &y, 1, ElementType::F32);
  EXPECT_FALSE(comm->wait(ok));
  EXPECT_EQ(y, 1.0f);
  EXPECT_TRUE(comm->wait(bad));
  kiln::runtime::Error error = comm->wait(later);
  ASSERT_TRUE(error);
  EXPECT_NE(
      error.message().find("collective #3 not run: the communicator failed "
                           "earlier: local all-reduce #2"),
      std::string::npos)
      << error.message();
}

// World size 1 has no peer: a transfer's handle fails with the argument
// check's line; the communicator does not fail.
TEST(LocalCommunicator, TransfersHaveNoPeer) {
  std::unique_ptr<Communicator> comm = createLocalCommunicator();
  float x[4] = {1, 2, 3, 4}, y[4] = {};
  CommHandle send = comm->startSend(x, 4, ElementType::F32, 1, 0);
  CommHandle recv = comm->startRecv(y, 4, ElementType::BF16, 0, 3);
  EXPECT_TRUE(comm->test(send));
  EXPECT_EQ(comm->wait(send).message(),
            "local send #1 (4 x f32, to rank 1, tag 0): peer 1 is not a rank "
            "of this communicator of 1");
  EXPECT_EQ(comm->wait(recv).message(),
            "local recv #2 (4 x bf16, from rank 0, tag 3): peer 0 is this "
            "rank: a transfer needs another rank");
  EXPECT_FALSE(comm->failure());
  EXPECT_FALSE(comm->wait(
      comm->startAllReduce(x, y, 4, ElementType::F32, ReduceOp::Sum)));
  EXPECT_EQ(y[3], 4.0f);
}
