//===- NcclReplayWatchdog.cpp - The NCCL watchdog times graph replays -----===//
//
// kiln-nccl-replay-watchdog: one rank, an NCCL communicator whose watchdog
// deadline is 0.5 s, and a CUDA graph holding an all-reduce and a host node
// that sleeps 30 s: a replay that does not complete, as one stuck behind a
// dead peer would not. The collective inside the graph is not in the
// watchdog's list; the replay, handed to watchReplay(), is. The watchdog
// must end the process with exit code 1 and the line
//   error: NCCL: replay of probe (a CUDA graph), step 7 on rank 0: not
//   complete after 0.5 s (...)
// long before the sleep ends (the test's timeout is 20 s). Exit 77 without
// a usable GPU, 2 when the set-up fails, 0 never (the replay "completing"
// means the watchdog missed it, which ctest's expected exit code catches).
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Comm/NcclCommunicator.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <thread>

using namespace kiln::runtime;
using namespace kiln::runtime::comm;

namespace {
void sleepLong(void *) {
  std::this_thread::sleep_for(std::chrono::seconds(30));
}

int setupFailed(const char *what, cudaError_t e) {
  std::fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(e));
  return 2;
}
} // namespace

int main() {
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices);
      e != cudaSuccess || devices == 0) {
    std::printf("skipped: no usable GPU (%s)\n",
                e == cudaSuccess ? "none visible" : cudaGetErrorString(e));
    return 77;
  }
  Expected<std::unique_ptr<Communicator>> host = createCommunicator();
  if (!host) {
    std::fprintf(stderr, "error: %s\n", host.error().message().c_str());
    return 2;
  }
  Expected<std::unique_ptr<NcclCommunicator>> nccl =
      createNcclCommunicator(std::move(*host), /*watchdogSeconds=*/0.5);
  if (!nccl) {
    std::fprintf(stderr, "error: %s\n", nccl.error().message().c_str());
    return 2;
  }
  NcclCommunicator &c = **nccl;
  void *buffer = nullptr;
  cudaStream_t s = nullptr;
  if (cudaError_t e = cudaMalloc(&buffer, 1024 * sizeof(float)); e)
    return setupFailed("cudaMalloc", e);
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking); e)
    return setupFailed("cudaStreamCreate", e);

  c.setProducerStream(s);
  cudaGraph_t graph = nullptr;
  if (cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal); e)
    return setupFailed("cudaStreamBeginCapture", e);
  CommHandle h =
      c.startAllReduce(buffer, buffer, 1024, ElementType::F32, ReduceOp::Sum);
  if (Error e = c.streamWait(h, s)) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 2;
  }
  if (cudaError_t e = cudaLaunchHostFunc(s, sleepLong, nullptr); e)
    return setupFailed("cudaLaunchHostFunc", e);
  if (cudaError_t e = cudaStreamEndCapture(s, &graph); e)
    return setupFailed("cudaStreamEndCapture", e);
  cudaGraphExec_t exec = nullptr;
  if (cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e)
    return setupFailed("cudaGraphInstantiate", e);

  if (cudaError_t e = cudaGraphLaunch(exec, s); e)
    return setupFailed("cudaGraphLaunch", e);
  if (Error e = c.watchReplay(s, "replay of probe (a CUDA graph), step 7")) {
    std::fprintf(stderr, "error: %s\n", e.message().c_str());
    return 2;
  }
  cudaStreamSynchronize(s); // the watchdog ends the process in here
  std::fprintf(stderr, "error: the replay completed; the watchdog never "
                       "fired\n");
  return 0;
}
