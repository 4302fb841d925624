//===- Executor.cpp - What runs a plan: the backends' interface -----------===//
//
// The interface alone; the factory that picks a backend by name is in
// Backends.cpp, the one file above both backends.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Executor.h"

namespace kiln::runtime {

Executor::~Executor() = default;

Error checkRunFits(const Plan &plan, const comm::Communicator *c) {
  int size = c ? c->size() : 1;
  if (size == 1 && plan.ranks != 1)
    return Error("the plan is for " + std::to_string(plan.ranks) +
                 " ranks; start it with mpirun -np " +
                 std::to_string(plan.ranks));
  if (size != plan.ranks)
    return Error("the plan is for " + std::to_string(plan.ranks) +
                 " ranks but the run has " + std::to_string(size));
  int rank = c ? c->rank() : 0;
  if (rank % plan.mesh.tp != plan.tpIndex)
    return Error("the plan is tp position " + std::to_string(plan.tpIndex) +
                 "'s of a mesh with tp " + std::to_string(plan.mesh.tp) +
                 ", but rank " + std::to_string(rank) + " sits at position " +
                 std::to_string(rank % plan.mesh.tp) +
                 "; each rank runs its own position's plan (kiln train "
                 "MODEL compiles it)");
  int64_t pp = plan.mesh.axisIndex(plan::Axis::Pp, rank);
  if (pp != plan.ppIndex)
    return Error("the plan is pp position " + std::to_string(plan.ppIndex) +
                 "'s of a mesh with pp " + std::to_string(plan.mesh.pp) +
                 ", but rank " + std::to_string(rank) + " sits at position " +
                 std::to_string(pp) +
                 "; each rank runs its own stages' plan (kiln train MODEL "
                 "compiles it)");
  return Error::success();
}

} // namespace kiln::runtime
