//===- MpiDeadline.cpp - Naming the ranks a late collective waits for -----===//
//
// Deadline (setTimeout). MPI cannot say which ranks have joined a
// collective, so the ranks keep a side channel, a second duplicate of
// MPI_COMM_WORLD: the communication thread answers "which collective have
// you reached?" whenever it polls, and every 100 ms while idle. When a
// collective passes its deadline the thread asks every other rank, waits 2 s
// for the answers, fails the collective with a line naming the ranks that
// had not reached it (those that did not answer are stopped or hung), and
// leaves the MPI request pending: a collective cannot be cancelled, so the
// communicator is never finalised after that and the run ends by abortRun
// (MPI_Abort, made by this thread, so FUNNELED still suffices). Ranks are
// compared by their collectives' ordinals, not handle ids: point-to-point
// transfers take ids too, and differ between ranks. (A transfer's own
// deadline is in MpiCollectives.cpp: it names the peer, asking nobody.)
//
//===----------------------------------------------------------------------===//

#include "MpiCommunicatorImpl.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace kiln::runtime::comm::mpi {

void MpiCommunicator::answerPeers() {
  for (;;) {
    int asked = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kAskTag, side_, &asked, &status) !=
            MPI_SUCCESS ||
        !asked)
      return;
    int64_t question = 0;
    if (MPI_Recv(&question, 1, MPI_INT64_T, status.MPI_SOURCE, kAskTag, side_,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS)
      return;
    // The collective this rank has reached: the one in MPI now, else the
    // last one done (its successor is not issued yet); its ordinal, which
    // every rank counts alike, and its handle id, which transfers shift.
    if (running_)
      answers_.push_back({static_cast<int64_t>(running_),
                          static_cast<int64_t>(runningHandle_)});
    else
      answers_.push_back({static_cast<int64_t>(finished_),
                          static_cast<int64_t>(finishedHandle_)});
    MPI_Request sent;
    if (MPI_Isend(answers_.back().data(), 2, MPI_INT64_T, status.MPI_SOURCE,
                  kAnswerTag, side_, &sent) == MPI_SUCCESS)
      MPI_Request_free(&sent);
  }
}

std::string MpiCommunicator::missingRanks() {
  using Clock = std::chrono::steady_clock;
  asked_ = static_cast<int64_t>(running_);
  peerReached_.assign(2 * size_, -1);
  std::vector<MPI_Request> answers(size_, MPI_REQUEST_NULL);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_)
      continue;
    MPI_Request sent;
    if (MPI_Irecv(&peerReached_[2 * r], 2, MPI_INT64_T, r, kAnswerTag, side_,
                  &answers[r]) != MPI_SUCCESS ||
        MPI_Isend(&asked_, 1, MPI_INT64_T, r, kAskTag, side_, &sent) !=
            MPI_SUCCESS)
      continue;
    MPI_Request_free(&sent);
  }
  // Other ranks waiting on this collective ask too: keep answering.
  Clock::time_point until = Clock::now() + kAnswerGrace;
  for (int pending = size_ - 1; pending > 0 && Clock::now() < until;) {
    answerPeers();
    pending = 0;
    for (int r = 0; r < size_; ++r) {
      int done = 1;
      if (answers[r] != MPI_REQUEST_NULL &&
          MPI_Test(&answers[r], &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        done = 0;
      pending += done ? 0 : 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string missing;
  for (int r = 0; r < size_; ++r) {
    std::string why;
    if (r == rank_)
      continue;
    if (answers[r] != MPI_REQUEST_NULL)
      why = "no answer within " + std::to_string(kAnswerGrace.count()) +
            " s: stopped or hung";
    else if (peerReached_[2 * r] < asked_)
      why = peerReached_[2 * r] == 0
                ? "alive, no collective issued yet"
                : "alive, its latest collective is #" +
                      std::to_string(peerReached_[2 * r + 1]);
    else
      continue;
    missing += (missing.empty() ? "" : ", ") + std::string("rank ") +
               std::to_string(r) + " (" + why + ")";
  }
  if (missing.empty())
    return "every rank reached it: MPI itself is stuck";
  return "did not arrive: " + missing;
}

void MpiCommunicator::abortIfAsked() {
  int code = abortCode_.load();
  if (code >= 0)
    MPI_Abort(MPI_COMM_WORLD, code);
}

void MpiCommunicator::abortRun(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  abortCode_.store(std::max(code, 0));
  workCv_.notify_one();
  // The communication thread calls MPI_Abort within its next poll; should
  // it be unable to, this process at least ends.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  std::_Exit(code);
}

} // namespace kiln::runtime::comm::mpi
