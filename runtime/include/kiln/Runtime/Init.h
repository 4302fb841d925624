//===- Init.h - Parameter initialisation from a counter-based RNG -*- C++ -*-===//
//
// Element i of parameter `name` is a pure function of (seed, name, i): the
// same weights however the parameter is later sharded or in which order the
// elements are computed. docs/plan.md gives the exact construction.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_INIT_H
#define KILN_RUNTIME_INIT_H

#include "kiln/Runtime/Plan.h"

#include <cstdint>
#include <string>

namespace kiln::runtime {

/// 64-bit FNV-1a of the parameter name: the key's name part.
uint64_t nameKey(const std::string &name);

/// A uniform double in (0, 1) for (seed, key, counter).
double uniformAt(uint64_t seed, uint64_t key, uint64_t counter);

/// Element `index` of a parameter initialised by `init`.
float initialValue(const InitSpec &init, uint64_t seed, uint64_t key,
                   uint64_t index);

/// Fills `out[0..count)` with elements `first .. first + count` of the
/// parameter `name`.
void initialize(const InitSpec &init, uint64_t seed, const std::string &name,
                uint64_t first, uint64_t count, float *out);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_INIT_H
