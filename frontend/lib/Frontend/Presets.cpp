//===- Presets.cpp - Built-in model descriptions --------------------------===//
//
// Presets are model files like any other: their TOML text is rendered from
// the table below and goes through the same parser, so diagnostics and IR
// locations point into it (printed by `kiln config --source PRESET`).
// Shapes of the published Llama 3 models; RoPE frequency scaling (Llama
// 3.1/3.2) is not modelled.
//
//===----------------------------------------------------------------------===//

#include "kiln/Frontend/Presets.h"

#include <sstream>

using namespace kiln;

namespace {
struct PresetShape {
  const char *name, *summary;
  int dim, layers, heads, kvHeads, vocab, multipleOf;
  const char *ffnMultiplier; // as written in TOML; nullptr: unset
  bool tied;
  int maxSeqLen, batch, seqLen;
};

const PresetShape kShapes[] = {
    {"llama3-debug", "4 layers, dim 256: trains on a 2-core CPU", 256, 4, 8,
     4, 256, 64, nullptr, false, 2048, 8, 128},
    {"llama3-1b", "Llama 3.2 1B shape, tied embeddings", 2048, 16, 32, 8,
     128256, 256, "1.5", true, 131072, 8, 8192},
    {"llama3-8b", "Llama 3 8B shape", 4096, 32, 32, 8, 128256, 1024, "1.3",
     false, 131072, 8, 8192},
    {"llama3-70b", "Llama 3 70B shape", 8192, 80, 64, 8, 128256, 4096, "1.3",
     false, 131072, 8, 8192},
    {"llama3-405b", "Llama 3.1 405B shape", 16384, 126, 128, 8, 128256, 4096,
     "1.2", false, 131072, 8, 8192},
};

std::string renderToml(const PresetShape &s) {
  std::ostringstream t;
  t << "# Preset " << s.name << ": " << s.summary << ".\n"
    << "[model]\n"
    << "dim = " << s.dim << "\n"
    << "n_layers = " << s.layers << "\n"
    << "n_heads = " << s.heads << "\n"
    << "n_kv_heads = " << s.kvHeads << "\n"
    << "vocab_size = " << s.vocab << "\n"
    << "multiple_of = " << s.multipleOf << "\n";
  if (s.ffnMultiplier)
    t << "ffn_dim_multiplier = " << s.ffnMultiplier << "\n";
  t << "norm_eps = 1e-5\n"
    << "rope_theta = 500000\n"
    << "max_seq_len = " << s.maxSeqLen << "\n";
  if (s.tied)
    t << "tie_embeddings = true\n";
  t << "\n[training]\n"
    << "global_batch_size = " << s.batch << "\n"
    << "seq_len = " << s.seqLen << "\n";
  return t.str();
}
} // namespace

const std::vector<Preset> &kiln::presets() {
  static const std::vector<Preset> all = [] {
    std::vector<Preset> out;
    for (const PresetShape &shape : kShapes)
      out.push_back({shape.name, shape.summary, renderToml(shape)});
    return out;
  }();
  return all;
}

const Preset *kiln::findPreset(const std::string &name) {
  for (const Preset &preset : presets())
    if (name == preset.name)
      return &preset;
  return nullptr;
}
