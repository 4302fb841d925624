// Parameter counts of the presets against the published sizes of the Llama 3
// models (as their HF checkpoints report them), and the HF names and order.
#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Frontend/Presets.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace kiln;

namespace {
Config loadPreset(const char *name) {
  mlir::MLIRContext context;
  std::string error;
  std::optional<ModelSource> source = loadModelSource(name, error);
  EXPECT_TRUE(source) << error;
  mlir::FailureOr<Config> config = parseConfig(&context, *source);
  EXPECT_TRUE(mlir::succeeded(config));
  return *config;
}

int64_t countParameters(const Config &config) {
  int64_t total = 0;
  for (const ParamSpec &p : modelParameters(config)) {
    int64_t n = 1;
    for (int64_t d : p.shape)
      n *= d;
    total += n;
  }
  return total;
}
} // namespace

TEST(ModelParameters, PublishedLlama3Sizes) {
  EXPECT_EQ(countParameters(loadPreset("llama3-1b")), 1235814400);
  EXPECT_EQ(countParameters(loadPreset("llama3-8b")), 8030261248);
  EXPECT_EQ(countParameters(loadPreset("llama3-70b")), 70553706496);
  EXPECT_EQ(countParameters(loadPreset("llama3-405b")), 405853388800);
}

TEST(ModelParameters, PublishedFeedForwardWidths) {
  EXPECT_EQ(loadPreset("llama3-1b").model.ffnHiddenDim(), 8192);
  EXPECT_EQ(loadPreset("llama3-8b").model.ffnHiddenDim(), 14336);
  EXPECT_EQ(loadPreset("llama3-70b").model.ffnHiddenDim(), 28672);
  EXPECT_EQ(loadPreset("llama3-405b").model.ffnHiddenDim(), 53248);
  EXPECT_EQ(loadPreset("llama3-debug").model.ffnHiddenDim(), 704);
}

TEST(ModelParameters, HuggingFaceNamesAndOrder) {
  std::vector<ParamSpec> params = modelParameters(loadPreset("llama3-debug"));
  ASSERT_EQ(params.size(), 1u + 4 * 9 + 2);
  EXPECT_EQ(params.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(params[1].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(params[9].name, "model.layers.0.mlp.down_proj.weight");
  EXPECT_EQ(params[9].shape, (std::vector<int64_t>{256, 704}));
  EXPECT_EQ(params[3].shape, (std::vector<int64_t>{128, 256})); // k_proj, GQA
  EXPECT_EQ(params.back().name, "lm_head.weight");

  // A tied model has no lm_head: the embedding is the output projection.
  std::vector<ParamSpec> tied = modelParameters(loadPreset("llama3-1b"));
  for (const ParamSpec &p : tied)
    EXPECT_NE(p.name, "lm_head.weight");
}

TEST(ModelParameters, DepthScaledInit) {
  std::vector<ParamSpec> params = modelParameters(loadPreset("llama3-debug"));
  // Layer i's parameters start at 1 + 9 * i; o_proj is the fifth. Output
  // layers of block i get 0.02 / sqrt(2 * (i + 1)), the others 0.02.
  auto oProj = [&](int layer) { return params[1 + 9 * layer + 4]; };
  EXPECT_EQ(oProj(3).name, "model.layers.3.self_attn.o_proj.weight");
  EXPECT_DOUBLE_EQ(oProj(0).std, 0.02 / std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(oProj(3).std, 0.02 / std::sqrt(8.0));
  EXPECT_DOUBLE_EQ(params[2].std, 0.02); // q_proj
  EXPECT_EQ(params[1].init, InitKind::ones);
  EXPECT_DOUBLE_EQ(params.back().std, 1.0 / 16.0);
  EXPECT_DOUBLE_EQ(params.back().hi, 3.0 / 16.0);
}
