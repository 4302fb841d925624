//===- StateLayout.h - Persistent state in host memory ----------*- C++ -*-===//
//
// What every backend does with the plan's persistent state on the host: its
// initial values from the seed, its unsharded layout (what a checkpoint
// holds) and back. A state is f32; a sharded one is rank r's piece of a flat
// buffer of ranks x numel elements holding several parameters (ShardPart),
// the rest padding. The CPU backend keeps its state here; the CUDA backend
// goes through here to initialise, save and restore its device copy.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_STATELAYOUT_H
#define KILN_RUNTIME_STATELAYOUT_H

#include "kiln/Runtime/Comm/Communicator.h"
#include "kiln/Runtime/Plan.h"
#include "kiln/Runtime/Safetensors.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

/// Every state of a plan by value id, in f32.
using HostStates = std::map<int64_t, std::vector<float>>;

/// Zeros of every state's size.
HostStates zeroStates(const Plan &plan);

/// The `init` entry: every state from its initialiser and `seed`; a sharded
/// state gets the elements of rank `rank`'s piece of the flat buffer (its
/// position on the dp_shard axis), and a tensor-parallel slice those of
/// its slice, as if the whole tensors had been initialised (padding zero).
void initializeStates(const Plan &plan, int rank, uint64_t seed,
                      HostStates &states);

/// Every state in the unsharded layout (whole HF tensors): flat shards are
/// all-gathered over the `dpShard` axis and cut into their parts, and
/// tensor-parallel slices (`tp_shard`) gathered over the `tp` axis into
/// their whole tensors (host memory; every rank must call this, in step).
Expected<std::vector<FloatTensor>>
unshardedStates(const Plan &plan, const HostStates &states,
                comm::Communicator *dpShard, comm::Communicator *tp = nullptr);

/// Sets every state from tensors in the unsharded layout, the rank at
/// position `rank` of the dp_shard axis keeping its shard of its tp slice.
/// An error names a missing tensor or a wrong shape.
Error setUnshardedStates(
    const Plan &plan, int rank,
    const std::map<std::string, const FloatTensor *> &byName,
    HostStates &states);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_STATELAYOUT_H
