// Properties of the schema table that hold for every key.
#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Frontend/ConfigSchema.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace kiln;

TEST(ConfigSchema, KeysAreUniqueAndAliasesResolve) {
  std::set<std::string> seen;
  for (const KeySpec &spec : configSchema())
    EXPECT_TRUE(seen.insert(std::string(spec.section) + "." + spec.key).second)
        << spec.section << "." << spec.key;
  for (const KeyAlias &alias : configAliases()) {
    const KeySpec *target = lookupKey(alias.section, alias.key);
    ASSERT_NE(target, nullptr) << alias.section << "." << alias.key;
    EXPECT_STREQ(target->section, alias.toSection);
    EXPECT_STREQ(target->key, alias.toKey);
    EXPECT_EQ(lookupKey(alias.section, alias.key)->field.index(),
              lookupKey(alias.toSection, alias.toKey)->field.index());
  }
}

// Writing every key with its own default value must be accepted, whether or
// not the key has taken effect yet: the defaults lie inside their ranges.
TEST(ConfigSchema, EveryDefaultIsValid) {
  std::string text;
  std::string section;
  Config defaults;
  for (const KeySpec &spec : configSchema()) {
    if (section != spec.section) {
      section = spec.section;
      text += "[" + section + "]\n";
    }
    if (spec.unsetMeaning)
      continue;
    std::string value = formatValue(spec, defaults);
    if (spec.required)
      value = std::string(spec.key) == "n_heads" ? "4" : "64";
    text += std::string(spec.key) + " = " + value + "\n";
  }
  mlir::MLIRContext context;
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    diagnostics += d.str() + "\n";
    return mlir::success();
  });
  ModelSource source{"all-defaults.toml", text, false};
  Config config;
  EXPECT_TRUE(mlir::succeeded(parseConfig(&context, source))) << diagnostics
                                                              << text;
}

TEST(ConfigSchema, MarkdownListsEveryKey) {
  std::string md = renderConfigMarkdown();
  for (const KeySpec &spec : configSchema())
    EXPECT_NE(md.find("| `" + std::string(spec.key) + "` |"),
              std::string::npos)
        << spec.key;
}
