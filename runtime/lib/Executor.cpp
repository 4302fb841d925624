//===- Executor.cpp - What runs a plan: the backends' interface -----------===//
//
// The interface alone; the factory that picks a backend by name is in
// Backends.cpp, the one file above both backends.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Executor.h"

namespace kiln::runtime {

Executor::~Executor() = default;

} // namespace kiln::runtime
