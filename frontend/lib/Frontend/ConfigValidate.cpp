//===- ConfigValidate.cpp - Checks of a model file across its keys -------===//
//
// What no single key can say: heads that divide the width and kv heads that
// divide the heads, the sequence length, the mesh (Mesh.cpp), an FFN
// that does not round to zero, min_lr below lr, the checkpoint folder, the
// FP8 filters and policy (the dialect's own verifier), batches that split
// over ranks, sizes within the documented element bound, and keys whose
// capability is not built yet. Each diagnostic points at the line of the
// key it names.
//
//===----------------------------------------------------------------------===//

#include "ConfigParserImpl.h"
#include "kiln/Dialect/Kiln/IR/KilnDialect.h"
#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Frontend/ConfigSchema.h"
#include "kiln/Frontend/Mesh.h"
#include "kiln/Frontend/ModelImporter.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/Support/Regex.h"

#include <cmath>

using namespace mlir;
using namespace kiln;
using kiln::detail::ConfigParser;

namespace {
/// a * b, or nullopt if it overflows int64.
std::optional<int64_t> mul(std::optional<int64_t> a, std::optional<int64_t> b) {
  int64_t out;
  if (!a || !b || __builtin_mul_overflow(*a, *b, &out))
    return std::nullopt;
  return out;
}
std::optional<int64_t> add(std::optional<int64_t> a, std::optional<int64_t> b) {
  int64_t out;
  if (!a || !b || __builtin_add_overflow(*a, *b, &out))
    return std::nullopt;
  return out;
}
constexpr int64_t kMaxElements = int64_t(1) << 40;
} // namespace

void ConfigParser::validate() {
  if (!config.positions.count("model")) {
    error(FileLineColLoc::get(context, config.sourceName, 1, 1))
        << "no [model] section: a model file must set at least model.dim, "
           "model.n_layers, model.n_heads and model.vocab_size";
    return;
  }
  for (const KeySpec &spec : configSchema()) {
    std::string full = std::string(spec.section) + "." + spec.key;
    bool written = config.positions.count(full) || overrideLocs.count(full);
    if (spec.required && !written)
      error(keyLocation(context, config, spec.section))
          << "missing required key " << full;
  }
  if (failed)
    return;

  const ModelConfig &m = config.model;
  auto at = [&](const std::string &key) {
    auto it = overrideLocs.find(key);
    return it != overrideLocs.end() ? it->second : keyLoc(key);
  };
  if (m.dim % m.n_heads != 0) {
    error(at("model.n_heads")) << "n_heads (" << m.n_heads
                               << ") must divide dim (" << m.dim << ")";
    return;
  }
  if (m.headDim() % 2 != 0) {
    error(at("model.n_heads"))
        << "head dim (dim / n_heads = " << m.dim << " / " << m.n_heads
        << " = " << m.headDim() << ") must be even for rotary embeddings";
    return;
  }
  if (m.n_heads % m.kvHeads() != 0) {
    error(at("model.n_kv_heads")) << "n_kv_heads (" << m.kvHeads()
                                  << ") must divide n_heads (" << m.n_heads
                                  << ")";
    return;
  }
  if (config.training.seq_len > m.max_seq_len) {
    error(at("training.seq_len"))
        << "seq_len (" << config.training.seq_len
        << ") exceeds model.max_seq_len (" << m.max_seq_len << ")";
    return;
  }
  if (m.ffnHiddenDim() < 1) {
    error(at("model.ffn_dim_multiplier"))
        << "the FFN's hidden size rounds to " << m.ffnHiddenDim()
        << " (dim " << m.dim << ", ffn_dim_multiplier "
        << m.ffn_dim_multiplier << "); it must be at least 1";
    return;
  }
  // The mesh, decided in one place; with tp > 1 still refused below as not
  // implemented, once it is known to be a valid mesh.
  FailureOr<std::optional<MeshShape>> mesh =
      resolveMesh(config, worldSize,
                  [&](llvm::StringRef key) { return error(at(key.str())); });
  if (mlir::failed(mesh))
    return;
  config.mesh = *mesh;
  if (config.lr_scheduler.min_lr > config.optimizer.lr) {
    error(at("lr_scheduler.min_lr"))
        << "lr_scheduler.min_lr (" << config.lr_scheduler.min_lr
        << ") must not exceed optimizer.lr (" << config.optimizer.lr << ")";
    return;
  }
  if (config.checkpoint.folder.find('\0') != std::string::npos) {
    error(at("checkpoint.folder"))
        << "checkpoint.folder holds a NUL character, which no path can";
    return;
  }

  const std::string &policy = config.activation_checkpoint.selective_ac_option;
  if (!KilnDialect::isSelectiveAcPolicy(policy)) {
    error(at("activation_checkpoint.selective_ac_option"))
        << "activation_checkpoint.selective_ac_option must be \"gemm\", "
           "\"op\" or a positive number of blocks; got \""
        << policy << "\"";
    return;
  }

  const Float8Config &f8 = config.float8;
  for (const std::string &pattern : f8.filter_fqns) {
    std::string why;
    if (!llvm::Regex(pattern).isValid(why)) {
      error(at("float8.filter_fqns"))
          << "float8.filter_fqns: the pattern '" << pattern
          << "' does not compile: " << why;
      return;
    }
  }
  // The rest of [float8] by #kiln.float8's own rules (the FP8 all-gather's
  // recipe), checked whether or not FP8 is on; the patterns compile (above),
  // so what can fail is the all-gather.
  if (mlir::failed(verifyFloat8Policy(context, f8, [&] {
        return error(at("float8.enable_fsdp_float8_all_gather"));
      })))
    return;

  // Sizes: no tensor above 2^40 elements, and no overflow on the way.
  int64_t hidden = m.ffnHiddenDim();
  std::optional<int64_t> tokens =
      mul(config.training.global_batch_size, config.training.seq_len);
  std::optional<int64_t> logits = mul(tokens, m.vocab_size);
  if (!logits || *logits > kMaxElements) {
    error(at("training.global_batch_size"))
        << "the logits tensor (global_batch_size * seq_len * vocab_size = "
        << config.training.global_batch_size << " * "
        << config.training.seq_len << " * " << m.vocab_size
        << ") exceeds the 2^40 elements Kiln supports per tensor";
    return;
  }
  std::optional<int64_t> activations = mul(tokens, std::max(hidden, m.dim));
  if (!activations || *activations > kMaxElements) {
    error(at("training.global_batch_size"))
        << "the feed-forward activations (global_batch_size * seq_len * "
        << std::max(hidden, m.dim)
        << ") exceed the 2^40 elements Kiln supports per tensor";
    return;
  }
  std::optional<int64_t> kvDim = mul(m.kvHeads(), m.headDim());
  std::optional<int64_t> perLayer =
      add(add(mul(m.dim, m.dim), mul(mul(2, kvDim), m.dim)),
          add(mul(mul(3, hidden), m.dim), mul(3, m.dim)));
  std::optional<int64_t> params =
      add(mul(m.n_layers, perLayer),
          mul(m.tie_embeddings ? 1 : 2, mul(m.vocab_size, m.dim)));
  if (!params || *params > kMaxElements) {
    error(at("model.n_layers"))
        << "the model has more than 2^40 parameters, more than Kiln supports";
    return;
  }

  // Keys that exist in the schema but have no effect yet.
  Config defaults;
  for (const KeySpec &spec : configSchema()) {
    if (spec.implemented)
      continue;
    if (formatValue(spec, config) == formatValue(spec, defaults))
      continue;
    std::string full = std::string(spec.section) + "." + spec.key;
    error(at(full)) << full << " is not implemented yet (it takes effect with "
                    << spec.capability << "); remove it or set it to "
                    << formatValue(spec, defaults);
  }
}

