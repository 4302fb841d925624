//===- Presets.cpp - Built-in model descriptions --------------------------===//
//
// Presets are model files like any other: they go through the same parser,
// and diagnostics and IR locations point into this text (printed by
// `kiln config --source PRESET`). Shapes of the published Llama 3 models; RoPE
// frequency scaling (Llama 3.1/3.2) is not modelled.
//
//===----------------------------------------------------------------------===//

#include "kiln/Frontend/Presets.h"

using namespace kiln;

const std::vector<Preset> &kiln::presets() {
  static const std::vector<Preset> all = {
      {"llama3-debug", "4 layers, dim 256: trains on a 2-core CPU", R"toml(# A small Llama-3-shaped model for tests and the CPU demo.
[model]
dim = 256
n_layers = 4
n_heads = 8
n_kv_heads = 4
vocab_size = 256
multiple_of = 64
norm_eps = 1e-5
rope_theta = 500000
max_seq_len = 2048

[training]
global_batch_size = 8
seq_len = 128
)toml"},
      {"llama3-1b", "Llama 3.2 1B shape, tied embeddings", R"toml([model]
dim = 2048
n_layers = 16
n_heads = 32
n_kv_heads = 8
vocab_size = 128256
multiple_of = 256
ffn_dim_multiplier = 1.5
norm_eps = 1e-5
rope_theta = 500000
max_seq_len = 131072
tie_embeddings = true

[training]
global_batch_size = 8
seq_len = 8192
)toml"},
      {"llama3-8b", "Llama 3 8B shape", R"toml([model]
dim = 4096
n_layers = 32
n_heads = 32
n_kv_heads = 8
vocab_size = 128256
multiple_of = 1024
ffn_dim_multiplier = 1.3
norm_eps = 1e-5
rope_theta = 500000
max_seq_len = 131072

[training]
global_batch_size = 8
seq_len = 8192
)toml"},
      {"llama3-70b", "Llama 3 70B shape", R"toml([model]
dim = 8192
n_layers = 80
n_heads = 64
n_kv_heads = 8
vocab_size = 128256
multiple_of = 4096
ffn_dim_multiplier = 1.3
norm_eps = 1e-5
rope_theta = 500000
max_seq_len = 131072

[training]
global_batch_size = 8
seq_len = 8192
)toml"},
      {"llama3-405b", "Llama 3.1 405B shape", R"toml([model]
dim = 16384
n_layers = 126
n_heads = 128
n_kv_heads = 8
vocab_size = 128256
multiple_of = 4096
ffn_dim_multiplier = 1.2
norm_eps = 1e-5
rope_theta = 500000
max_seq_len = 131072

[training]
global_batch_size = 8
seq_len = 8192
)toml"},
  };
  return all;
}

const Preset *kiln::findPreset(const std::string &name) {
  for (const Preset &preset : presets())
    if (name == preset.name)
      return &preset;
  return nullptr;
}
