//===- Mesh.h - The device mesh of a run, decided once ----------*- C++ -*-===//
//
// `[parallelism] data_parallel_shard_degree` and `tensor_parallel_degree`
// against the model and the run's world size: the one place that decides
// the mesh `[dp_shard, tp]` (docs/tp.md, "The mesh"). The config parser
// calls it; everything after reads Config::mesh or the module's
// `#kiln.mesh`.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_FRONTEND_MESH_H
#define KILN_FRONTEND_MESH_H

#include "kiln/Frontend/Config.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/LLVM.h"

#include <optional>

namespace kiln {

/// Gives a diagnostic at the location of `key` ("section.key") for a
/// problem that key's value is blamed for.
using KeyErrorFn =
    llvm::function_ref<mlir::InFlightDiagnostic(llvm::StringRef)>;

/// Checks the mesh degrees of `config` and returns the mesh of a run of
/// `worldSize` ranks (without one, the degrees are checked against the
/// model only and the result is nullopt). The rules, each reported once
/// through `error` at the key it names:
/// - tensor_parallel_degree divides n_heads, the kv heads, the FFN's hidden
///   size (each tp rank owns a slice of each) and seq_len (sequence
///   parallel); tp >= 1 and dp_shard = -1 or >= 1 (the schema's ranges,
///   and 0 here);
/// - with a world size: dp_shard x tp equals it (-1: dp_shard takes
///   worldSize / tp, which tp must divide), and the global batch splits
///   evenly over the dp_shard ranks (the tp ranks of a group share theirs).
mlir::FailureOr<std::optional<MeshShape>>
resolveMesh(const Config &config, std::optional<int64_t> worldSize,
            KeyErrorFn error);

} // namespace kiln

#endif // KILN_FRONTEND_MESH_H
