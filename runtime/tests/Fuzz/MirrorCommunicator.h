//===- MirrorCommunicator.h - N ranks in one process, all alike -*- C++ -*-===//
//
// The plan fuzzer runs a mutant of a multi-rank plan as one rank in one
// process. This communicator is rank `rank` of `size` where every other
// rank contributes exactly what this one does (the same plan, the same
// batch, the same weights): an all-gather repeats the send buffer `size`
// times; a reduction folds `size` copies of this rank's contribution by the
// rules every CPU backend shares (lib/Comm/Collective.cpp). Arguments are
// checked as the real backends check them, so a plan that makes the
// executor pass a bad buffer fails the collective instead of being
// accepted silently. Every collective completes inside its start call.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_FUZZ_MIRRORCOMMUNICATOR_H
#define KILN_RUNTIME_TESTS_FUZZ_MIRRORCOMMUNICATOR_H

#include "kiln/Runtime/Comm/Communicator.h"

#include <memory>

namespace kiln::fuzz {

std::unique_ptr<runtime::comm::Communicator>
createMirrorCommunicator(int rank, int size);

} // namespace kiln::fuzz

#endif // KILN_RUNTIME_TESTS_FUZZ_MIRRORCOMMUNICATOR_H
