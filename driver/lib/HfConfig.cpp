//===- HfConfig.cpp - `kiln config --from-hf`: a model file from HF -------===//
//
// A Hugging Face Llama-family config.json as a Kiln model file (issue #20):
// each field that decides the model's shapes or numerics maps to its Kiln
// key, exactly, and the model folder becomes
// `[checkpoint] initial_load_path`, so `kiln train` starts from its weights.
// What Kiln's model cannot express (another architecture, biases, RoPE
// scaling, another activation) is refused with one line naming the field.
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/Driver/Session.h"
#include "kiln/Frontend/Config.h"
#include "kiln/Frontend/ConfigSchema.h"
#include "kiln/Runtime/Support/Files.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <optional>

using namespace kiln;
using json = nlohmann::json;

namespace {

/// config.json is kilobytes; anything past this is not one.
constexpr int64_t kMaxConfigBytes = 1 << 20;

/// multiple_of and ffn_dim_multiplier that give Llama's rule (ModelConfig::
/// ffnHiddenDim) exactly `size`: Meta's own pairs where one does, else a
/// multiple of `size` itself, the multiplier bringing the rule's hidden
/// size to at most `size` so that it rounds up to it.
std::pair<int64_t, double> ffnKeys(int64_t dim, int64_t size) {
  ModelConfig m;
  m.dim = dim;
  const std::pair<int64_t, double> meta[] = {
      {256, 0.0}, {1024, 1.3}, {4096, 1.3}, {4096, 1.2}, {256, 1.3}};
  for (auto [multiple, multiplier] : meta) {
    m.multiple_of = multiple;
    m.ffn_dim_multiplier = multiplier;
    if (m.ffnHiddenDim() == size)
      return {multiple, multiplier};
  }
  int64_t hidden = 2 * (4 * dim) / 3;
  m.multiple_of = size;
  m.ffn_dim_multiplier = hidden <= size ? 0.0 : double(size) / double(hidden);
  return {size, m.ffn_dim_multiplier};
}

class HfConfigReader {
public:
  HfConfigReader(std::string path, json j)
      : path(std::move(path)), j(std::move(j)) {}

  /// The positive integer under `key`, or nothing after noting the error.
  std::optional<int64_t> positive(const char *key) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) {
      fail(std::string("\"") + key + "\" must be a positive integer");
      return std::nullopt;
    }
    return it->get<int64_t>();
  }
  /// The number under `key` (`fallback` when absent).
  std::optional<double> number(const char *key, double fallback) {
    auto it = j.find(key);
    if (it == j.end())
      return fallback;
    if (!it->is_number() || !std::isfinite(it->get<double>())) {
      fail(std::string("\"") + key + "\" must be a number");
      return std::nullopt;
    }
    return it->get<double>();
  }
  /// The field under `key` is absent or `expected`; otherwise an error
  /// saying what Kiln's model does instead.
  void require(const char *key, const json &expected, const char *why) {
    auto it = j.find(key);
    if (it != j.end() && *it != expected)
      fail(std::string("\"") + key + "\" is " + it->dump() + ": " + why);
  }
  void fail(const std::string &why) {
    if (error.empty())
      error = path + ": " + why;
  }

  std::string path;
  json j;
  std::string error;
};
} // namespace

int kiln::runConfigFromHf(const std::string &dir) {
  std::string folder = dir;
  llvm::SmallString<256> absolute(dir);
  if (!llvm::sys::fs::make_absolute(absolute))
    folder = llvm::sys::path::remove_leading_dotslash(absolute).str();
  std::string path = (llvm::Twine(folder) + "/config.json").str();
  runtime::Expected<std::string> text =
      runtime::readRegularFile(path, kMaxConfigBytes, "Hugging Face config");
  if (!text)
    return commandError(text.error().message());
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return commandError(path + ": not a JSON object");
  HfConfigReader r(path, j);

  // The architecture: a Llama decoder, which Kiln builds.
  auto arch = j.find("architectures");
  // (nlohmann's typed accessors abort on a mismatch in this build: every
  // field's type is checked before it is read.)
  auto type = j.find("model_type");
  bool llama = type != j.end() && *type == "llama";
  if (arch != j.end() && arch->is_array())
    for (const json &a : *arch)
      llama = llama && a == "LlamaForCausalLM";
  if (!llama)
    return commandError(path + ": model_type " +
                        (j.count("model_type") ? j["model_type"].dump()
                                               : std::string("(none)")) +
                        " is not a Llama model (LlamaForCausalLM); Kiln "
                        "builds Llama-family decoders only");
  r.require("hidden_act", "silu", "Kiln's feed-forward is SwiGLU (silu)");
  r.require("attention_bias", false, "Kiln's attention has no biases");
  r.require("mlp_bias", false, "Kiln's feed-forward has no biases");
  r.require("rope_scaling", nullptr,
            "Kiln's RoPE has no scaling (Llama 3.1's \"llama3\" rope_scaling "
            "is not supported)");
  r.require("pretraining_tp", 1, "only 1 is the plain Llama forward");

  std::optional<int64_t> dim = r.positive("hidden_size");
  std::optional<int64_t> layers = r.positive("num_hidden_layers");
  std::optional<int64_t> heads = r.positive("num_attention_heads");
  std::optional<int64_t> vocab = r.positive("vocab_size");
  std::optional<int64_t> ffn = r.positive("intermediate_size");
  std::optional<int64_t> kvHeads = j.contains("num_key_value_heads")
                                       ? r.positive("num_key_value_heads")
                                       : heads;
  std::optional<int64_t> positions =
      j.contains("max_position_embeddings")
          ? r.positive("max_position_embeddings")
          : std::optional<int64_t>(ModelConfig().max_seq_len);
  std::optional<double> eps = r.number("rms_norm_eps", 1e-6);
  std::optional<double> theta = r.number("rope_theta", 10000.0);
  auto tie = j.find("tie_word_embeddings");
  if (tie != j.end() && !tie->is_boolean())
    r.fail("\"tie_word_embeddings\" must be true or false");
  if (r.error.empty() && *dim % *heads != 0)
    r.fail("hidden_size " + std::to_string(*dim) +
           " is not a multiple of num_attention_heads " +
           std::to_string(*heads));
  if (r.error.empty() && j.contains("head_dim") &&
      j["head_dim"] != *dim / *heads)
    r.fail("\"head_dim\" is " + j["head_dim"].dump() +
           ": Kiln's head size is hidden_size / num_attention_heads (" +
           std::to_string(*dim / *heads) + ")");
  if (!r.error.empty())
    return commandError(r.error);

  auto [multiple, multiplier] = ffnKeys(*dim, *ffn);
  std::string out;
  llvm::raw_string_ostream os(out);
  os << "# From the Hugging Face model " << folder
     << " (config.json), by kiln config --from-hf.\n"
     << "[model]\n"
     << "dim = " << *dim << "\n"
     << "n_layers = " << *layers << "\n"
     << "n_heads = " << *heads << "\n"
     << "n_kv_heads = " << *kvHeads << "\n"
     << "vocab_size = " << *vocab << "\n"
     << "# intermediate_size " << *ffn << " by Llama's rule\n"
     << "multiple_of = " << multiple << "\n";
  if (multiplier > 0)
    os << "ffn_dim_multiplier = " << formatFloat(multiplier) << "\n";
  os << "norm_eps = " << formatFloat(*eps) << "\n"
     << "rope_theta = " << formatFloat(*theta) << "\n"
     << "max_seq_len = " << *positions << "\n"
     << "tie_embeddings = "
     << (tie != j.end() && tie->get<bool>() ? "true" : "false") << "\n"
     << (*positions < TrainingConfig().seq_len
             ? "\n[training]\nseq_len = " + std::to_string(*positions) + "\n"
             : std::string())
     << "\n[checkpoint]\n"
     << "initial_load_path = "
     << json(folder).dump(-1, ' ', false, json::error_handler_t::replace)
     << "\n";
  llvm::outs() << out;
  return 0;
}
