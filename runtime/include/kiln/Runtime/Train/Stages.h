//===- Stages.h - A checkpoint's tensors across pipeline stages -*- C++ -*-===//
//
// Under pipeline parallel each pp position holds its stages' tensors
// (docs/pp.md, "Checkpoints"). A checkpoint is the whole model, unsharded
// with HF names, so that it loads at any (pp, dp_shard, tp): saving brings
// every stage's tensors to pp position 0, and loading checks the file
// against the union of every position's tensors, each keeping its own.
// Every rank of the pp axis calls these at the same point.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRAIN_STAGES_H
#define KILN_RUNTIME_TRAIN_STAGES_H

#include "kiln/Runtime/Comm/Communicator.h"
#include "kiln/Runtime/Safetensors.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime {

/// Every stage's tensors on pp position 0 (its own first, then position
/// 1's, ...); the others get theirs back. Point-to-point transfers over
/// `pp`.
Expected<std::vector<FloatTensor>> gatherStages(std::vector<FloatTensor> mine,
                                                comm::Communicator &pp);

/// `shapes` (name -> shape) of every pp position, merged, on every
/// position. A name two positions hold with different shapes is an error.
Error mergeStageShapes(std::map<std::string, std::vector<int64_t>> &shapes,
                       comm::Communicator &pp);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAIN_STAGES_H
