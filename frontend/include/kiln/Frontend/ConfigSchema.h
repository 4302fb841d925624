//===- ConfigSchema.h - Every key of a model description --------*- C++ -*-===//

#ifndef KILN_FRONTEND_CONFIGSCHEMA_H
#define KILN_FRONTEND_CONFIGSCHEMA_H

#include "kiln/Frontend/Config.h"

#include <string>
#include <variant>
#include <vector>

namespace kiln {

/// Reaches the Config field that a key sets.
using ConfigField =
    std::variant<int64_t &(*)(Config &), double &(*)(Config &),
                 bool &(*)(Config &), std::string &(*)(Config &),
                 std::array<double, 2> &(*)(Config &),
                 std::vector<std::string> &(*)(Config &)>;

/// One key of the schema.
struct KeySpec {
  const char *section;
  const char *key;
  ConfigField field;
  /// Numeric range, inclusive unless the *Open flag says otherwise. For
  /// pairs it bounds each element; ignored for strings and bools.
  double min, max;
  bool minOpen, maxOpen;
  /// Allowed values of a string key, '|'-separated; empty means any string.
  const char *choices;
  /// An unset optional key keeps a 0 sentinel and is documented by this text;
  /// nullptr for keys whose default is an ordinary value.
  const char *unsetMeaning;
  const char *doc;
  /// The capability that gives the key effect.
  const char *capability;
  /// Whether that capability exists yet. A key that has no effect yet may be
  /// written only with its default value.
  bool implemented;
  /// Required keys have no default and must be written.
  bool required;
};

/// Another spelling accepted for a key (TorchTitan's, where it differs).
struct KeyAlias {
  const char *section, *key;        // as written
  const char *toSection, *toKey;    // canonical
};

const std::vector<KeySpec> &configSchema();

/// Whether a key must have the value a checkpoint was trained with to
/// resume from it: everything in [model] (the same tensor shapes can hold
/// another model: n_heads, rope_theta, norm_eps) and training.seed (the
/// data order). Steps, learning rates, intervals, data, precision and
/// parallelism may change between runs.
bool mustMatchOnResume(const KeySpec &spec);
const std::vector<KeyAlias> &configAliases();
/// Section names in schema order.
std::vector<std::string> configSections();

/// Finds a key by its canonical or aliased spelling; nullptr if unknown.
const KeySpec *lookupKey(const std::string &section, const std::string &key);

/// The shortest decimal form of `v` that reads back exactly, as TOML.
std::string formatFloat(double v);

/// The value of `spec` in `config`, as TOML would write it.
std::string formatValue(const KeySpec &spec, const Config &config);
/// The allowed range of `spec` in words, e.g. "(0, 10]" or "one of a, b".
std::string describeRange(const KeySpec &spec);
/// Type name for documentation: integer, float, bool, string, ...
std::string describeType(const KeySpec &spec);

/// docs/config.md, generated from the schema.
std::string renderConfigMarkdown();

} // namespace kiln

#endif // KILN_FRONTEND_CONFIGSCHEMA_H
