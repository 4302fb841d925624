//===- Trace.h - A Chrome trace of a run's steps ----------------*- C++ -*-===//
//
// Events in the Trace Event Format (chrome://tracing, Perfetto): one
// complete event per plan step on a "compute" track, and one per collective
// on its mesh axis's communication track ("communication" for dp_shard,
// "communication tp" for tp, "pipeline" for pp's transfers and sums), from
// its start to when it was seen complete,
// so overlap of the two is visible; under pipeline parallel, one event per
// unit on a "pipeline units" track. Times are microseconds since the trace
// began; the process's metadata carries that origin on the steady clock
// (`origin_us`), which one machine's ranks share, so that their traces can
// be laid on one time axis.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRACE_H
#define KILN_RUNTIME_TRACE_H

#include "kiln/Runtime/Support/Error.h"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

class Trace {
public:
  enum Track {
    Compute = 1,
    Communication = 2,
    TpCommunication = 3,
    PpCommunication = 4,
    /// A pipeline unit (the forward or backward of one microbatch on one
    /// stage, docs/pp.md): from its first compute step to its last.
    PipelineUnit = 5
  };
  using Clock = std::chrono::steady_clock;

  explicit Trace(int rank) : rank(rank), origin(Clock::now()) {}

  void add(std::string name, Track track, Clock::time_point begin,
           Clock::time_point end);
  size_t size() const { return events.size(); }

  /// Writes the trace as JSON; fails with the error line.
  Error write(const std::string &path) const;

private:
  struct Event {
    std::string name;
    Track track;
    double begin, duration; // microseconds
  };
  int rank;
  Clock::time_point origin;
  std::vector<Event> events;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRACE_H
