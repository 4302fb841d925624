//===- ConfigParser.cpp - Model files and presets to a Config -------------===//
//
// TOML (toml++, without exceptions) is checked against the schema key by
// key: unknown sections and keys (with the nearest valid spelling), types,
// ranges, keys set twice through an alias. What spans several keys is
// checked afterwards (ConfigValidate.cpp). Every diagnostic points at the
// offending line and column.
//
//===----------------------------------------------------------------------===//

#include "kiln/Frontend/ConfigParser.h"
#include "ConfigParserImpl.h"
#include "kiln/Frontend/ConfigSchema.h"
#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Frontend/Presets.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Regex.h"

#include <toml++/toml.h>

#include <cmath>
#include <sstream>

using namespace mlir;
using namespace kiln;
using kiln::detail::ConfigParser;

//===----------------------------------------------------------------------===//
// Model sources
//===----------------------------------------------------------------------===//

namespace {
/// The candidate closest to `word` by edit distance, if it is close enough
/// to be a plausible typo.
std::optional<std::string> nearest(llvm::StringRef word,
                                   llvm::ArrayRef<std::string> candidates) {
  std::optional<std::string> best;
  unsigned bestDistance = std::max<unsigned>(2, word.size() / 3) + 1;
  for (const std::string &candidate : candidates) {
    unsigned d = word.edit_distance(candidate, /*AllowReplacements=*/true,
                                    bestDistance);
    if (d < bestDistance) {
      bestDistance = d;
      best = candidate;
    }
  }
  return best;
}
} // namespace

std::optional<ModelSource> kiln::loadModelSource(llvm::StringRef arg,
                                                 std::string &error) {
  bool looksLikePath = arg.contains('/') || arg.ends_with(".toml");
  if (llvm::sys::fs::exists(arg) || looksLikePath) {
    // A FIFO or a device would block or never end: model files are regular
    // files of at most 16 MiB (a model file is a few hundred bytes).
    llvm::sys::fs::file_status status;
    if (!llvm::sys::fs::status(arg, status)) {
      llvm::sys::fs::file_type type = status.type();
      if (type == llvm::sys::fs::file_type::directory_file) {
        error = "error: '" + arg.str() + "' is a directory, not a model file";
        return std::nullopt;
      }
      if (type != llvm::sys::fs::file_type::regular_file) {
        error = "error: model file '" + arg.str() +
                "' is not a regular file";
        return std::nullopt;
      }
      if (status.getSize() > (16u << 20)) {
        error = "error: model file '" + arg.str() + "' has " +
                std::to_string(status.getSize()) +
                " bytes; model files are at most 16 MiB";
        return std::nullopt;
      }
    }
    auto buffer = llvm::MemoryBuffer::getFile(arg, /*IsText=*/true);
    if (!buffer) {
      error = "error: cannot open model file '" + arg.str() +
              "': " + buffer.getError().message();
      return std::nullopt;
    }
    return ModelSource{arg.str(), (*buffer)->getBuffer().str(), false};
  }
  if (const Preset *preset = findPreset(arg.str()))
    return ModelSource{preset->name, preset->toml, true};
  std::vector<std::string> names;
  for (const Preset &preset : presets())
    names.push_back(preset.name);
  error = "error: '" + arg.str() + "' is neither a model file nor a preset";
  if (auto guess = nearest(arg, names))
    error += "; did you mean '" + *guess + "'?";
  else
    error += " (presets: " + llvm::join(names, ", ") + ")";
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Parsing
//===----------------------------------------------------------------------===//

namespace {
const char *typeName(const toml::node &node) {
  switch (node.type()) {
  case toml::node_type::table:
    return "a table";
  case toml::node_type::array:
    return "an array";
  case toml::node_type::string:
    return "a string";
  case toml::node_type::integer:
    return "an integer";
  case toml::node_type::floating_point:
    return "a float";
  case toml::node_type::boolean:
    return "a bool";
  default:
    return "a date or time";
  }
}

/// A table's entries in the order they were written (toml++ iterates them
/// sorted by key), so diagnostics come out top to bottom.
std::vector<std::pair<toml::key, const toml::node *>>
inFileOrder(const toml::table &table) {
  std::vector<std::pair<toml::key, const toml::node *>> entries;
  for (auto &&[key, node] : table)
    entries.emplace_back(key, &node);
  auto pos = [](const toml::key &k) {
    return std::make_pair(k.source().begin.line, k.source().begin.column);
  };
  std::stable_sort(entries.begin(), entries.end(),
                   [&](const auto &a, const auto &b) {
                     return pos(a.first) < pos(b.first);
                   });
  return entries;
}

} // namespace

void ConfigParser::parseDocument(llvm::StringRef name, llvm::StringRef text) {
  Location start = FileLineColLoc::get(context, name, 1, 1);
  if (text.trim().empty()) {
    error(start) << "empty model file: expected a [model] section with dim, "
                    "n_layers, n_heads and vocab_size";
    return;
  }
  toml::parse_result result =
      toml::parse(std::string_view(text.data(), text.size()),
                  std::string_view(name.data(), name.size()));
  if (!result) {
    const toml::parse_error &err = result.error();
    error(loc(name, err.source())) << "invalid TOML: " << err.description();
    return;
  }
  const toml::table &root = result.table();
  std::vector<std::string> sections = configSections();
  for (auto &&[key, node] : inFileOrder(root)) {
    std::string section(key.str());
    Location at = loc(name, key.source());
    const toml::table *table = node->as_table();
    if (!table) {
      reportStrayKey(section, at);
      continue;
    }
    bool known = llvm::is_contained(sections, section);
    if (!known) {
      auto diag = error(at) << "unknown section [" << section << "]";
      if (auto guess = nearest(section, sections))
        diag << "; did you mean [" << *guess << "]?";
      else
        diag << "; sections are [" << llvm::join(sections, "], [") << "]";
      continue;
    }
    config.positions[section] = {key.source().begin.line,
                                 key.source().begin.column};
    parseSection(name, section, *table);
  }
}

void ConfigParser::reportStrayKey(const std::string &key, Location at) {
  std::vector<std::string> sections = configSections();
  for (const std::string &s : sections)
    if (lookupKey(s, key)) {
      error(at) << "key '" << key << "' must be written in the [" << s
                << "] section";
      return;
    }
  error(at) << "unknown top-level key '" << key
            << "'; a model file has only sections: ["
            << llvm::join(sections, "], [") << "]";
}

void ConfigParser::parseSection(llvm::StringRef name,
                                const std::string &section,
                                const toml::table &table) {
  for (auto &&[key, node] : inFileOrder(table))
    setKey(name, section, std::string(key.str()), *node, key.source(),
           loc(name, node->source()));
}

void ConfigParser::setKey(llvm::StringRef name, const std::string &section,
                          const std::string &key, const toml::node &value,
                          const toml::source_region &keyRegion,
                          Location valueAt) {
  Location at = loc(name, keyRegion);
  const KeySpec *spec = lookupKey(section, key);
  if (!spec) {
    std::vector<std::string> keys;
    for (const KeySpec &s : configSchema())
      if (section == s.section)
        keys.push_back(s.key);
    for (const KeyAlias &a : configAliases())
      if (section == a.section)
        keys.push_back(a.key);
    auto diag = error(at) << "unknown key '" << key << "' in [" << section
                          << "]";
    if (auto guess = nearest(key, keys)) {
      diag << "; did you mean '" << *guess << "'?";
      return;
    }
    for (const std::string &other : configSections())
      if (lookupKey(other, key)) {
        diag << "; did you mean '" << other << "." << key << "'?";
        return;
      }
    diag << "; valid keys: " << llvm::join(keys, ", ");
    return;
  }
  std::string canonical = std::string(spec->section) + "." + spec->key;
  auto [it, inserted] = config.positions.insert(
      {canonical, {keyRegion.begin.line, keyRegion.begin.column}});
  if (!inserted && name == config.sourceName) {
    error(at) << canonical << " is set twice (once through an alias); "
              << "first at line " << it->second.line;
    return;
  }
  if (name != config.sourceName) {
    overrideLocs.insert_or_assign(canonical, at);
    config.positions.erase(canonical);
  }
  assign(*spec, value, valueAt);
}

bool ConfigParser::checkRange(const KeySpec &spec, double value, Location at,
                              const std::string &shown) {
  bool belowMin = spec.minOpen ? !(value > spec.min) : !(value >= spec.min);
  bool aboveMax = spec.maxOpen ? !(value < spec.max) : !(value <= spec.max);
  if (!belowMin && !aboveMax)
    return true;
  error(at) << spec.section << "." << spec.key << " must be in "
            << describeRange(spec) << ", got " << shown;
  return false;
}

bool ConfigParser::assign(const KeySpec &spec, const toml::node &value,
                          Location at) {
  std::string full = std::string(spec.section) + "." + spec.key;
  auto wrongType = [&](const char *expected) {
    error(at) << full << " must be " << expected << ", got "
              << typeName(value);
    return false;
  };
  auto asDouble = [&](const toml::node &n, double &out) {
    if (auto i = n.as_integer())
      out = static_cast<double>(i->get());
    else if (auto f = n.as_floating_point())
      out = f->get();
    else
      return false;
    return true;
  };
  switch (spec.field.index()) {
  case 0: { // integer
    auto i = value.as_integer();
    if (!i)
      return wrongType("an integer");
    // Exactly: 2^53 + 1 is past a bound of 2^53 though it converts to it.
    int64_t v = i->get();
    bool inRange = static_cast<double>(v) >= spec.min &&
                   static_cast<double>(v) <= spec.max &&
                   !(static_cast<double>(v) == spec.max &&
                     spec.max >= 9007199254740992.0 &&
                     v > static_cast<int64_t>(spec.max));
    if (!inRange) {
      error(at) << spec.section << "." << spec.key << " must be in "
                << describeRange(spec) << ", got " << v;
      return false;
    }
    std::get<0>(spec.field)(config) = i->get();
    return true;
  }
  case 1: { // float
    double d;
    if (!asDouble(value, d))
      return wrongType("a number");
    if (!std::isfinite(d)) {
      error(at) << full << " must be finite";
      return false;
    }
    if (!checkRange(spec, d, at, formatFloat(d)))
      return false;
    std::get<1>(spec.field)(config) = d;
    return true;
  }
  case 2: { // bool
    auto b = value.as_boolean();
    if (!b)
      return wrongType("a bool (true or false)");
    std::get<2>(spec.field)(config) = b->get();
    return true;
  }
  case 3: { // string
    auto s = value.as_string();
    if (!s)
      return wrongType("a string");
    std::string str = s->get();
    if (*spec.choices) {
      llvm::SmallVector<llvm::StringRef> choices;
      llvm::StringRef(spec.choices).split(choices, '|');
      if (!llvm::is_contained(choices, str)) {
        error(at) << full << " must be one of " << llvm::join(choices, ", ")
                  << "; got \"" << str << "\"";
        return false;
      }
    }
    std::get<3>(spec.field)(config) = str;
    return true;
  }
  case 4: { // pair of floats
    auto arr = value.as_array();
    double pair[2];
    if (!arr || arr->size() != 2 || !asDouble(*arr->get(0), pair[0]) ||
        !asDouble(*arr->get(1), pair[1]))
      return wrongType("an array of two numbers");
    if (!checkRange(spec, pair[0], at, formatFloat(pair[0])) ||
        !checkRange(spec, pair[1], at, formatFloat(pair[1])))
      return false;
    std::get<4>(spec.field)(config) = {pair[0], pair[1]};
    return true;
  }
  default: { // list of strings
    auto arr = value.as_array();
    if (!arr || (!arr->empty() && !arr->is_homogeneous(toml::node_type::string)))
      return wrongType("an array of strings");
    std::vector<std::string> items;
    for (const toml::node &item : *arr)
      items.push_back(item.as_string()->get());
    std::get<5>(spec.field)(config) = std::move(items);
    return true;
  }
  }
}

void ConfigParser::parseOverride(const std::string &assignment) {
  // One line: a value that spans two would be cut at the first (a TOML
  // value cannot hold a raw newline), and the message could not show it.
  if (assignment.find_first_of("\n\r") != std::string::npos) {
    std::string shown = assignment.substr(0, assignment.find_first_of("\n\r"));
    error(FileLineColLoc::get(context, "--set " + shown, 1, 1))
        << "--set takes one line; this value holds a line break (write "
           "\\n inside a quoted string)";
    return;
  }
  const std::string name = "--set " + assignment;
  Location start = FileLineColLoc::get(context, name, 1, 1);
  size_t eq = assignment.find('=');
  size_t dot = assignment.find('.');
  if (eq == std::string::npos || dot == std::string::npos || dot > eq) {
    error(start) << "expected --set section.key=value, got '" << assignment
                 << "'";
    return;
  }
  std::string section = assignment.substr(0, dot);
  std::string key = assignment.substr(dot + 1, eq - dot - 1);
  std::string text = assignment.substr(eq + 1);
  if (!llvm::is_contained(configSections(), section)) {
    auto diag = error(start) << "unknown section [" << section << "]";
    if (auto guess = nearest(section, configSections()))
      diag << "; did you mean [" << *guess << "]?";
    return;
  }
  // The value is TOML; a bare word that is not TOML is taken as a string.
  toml::parse_result parsed = toml::parse("v = " + text);
  toml::table holder;
  if (parsed && parsed.table().contains("v"))
    holder.insert("v", *parsed.table().get("v"));
  else
    holder.insert("v", text);
  toml::source_region region;
  region.begin = {1, static_cast<toml::source_index>(dot + 2)};
  setKey(name, section, key, *holder.get("v"), region,
         FileLineColLoc::get(context, name, 1, eq + 2));
}

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

int64_t ModelConfig::ffnHiddenDim() const {
  int64_t hidden = 2 * (4 * dim) / 3;
  if (ffn_dim_multiplier > 0.0)
    hidden = static_cast<int64_t>(ffn_dim_multiplier * hidden);
  return multiple_of * ((hidden + multiple_of - 1) / multiple_of);
}

FailureOr<Config> kiln::parseConfig(MLIRContext *context,
                                    const ModelSource &source,
                                    llvm::ArrayRef<std::string> overrides,
                                    std::optional<int64_t> worldSize) {
  Config config;
  config.sourceName = source.name;
  ConfigParser parser(context, config, worldSize);
  parser.parseDocument(source.name, source.text);
  if (parser.failed)
    return failure();
  for (const std::string &assignment : overrides)
    parser.parseOverride(assignment);
  if (parser.failed)
    return failure();
  parser.validate();
  if (parser.failed)
    return failure();
  return config;
}

Location kiln::keyLocation(MLIRContext *context, const Config &config,
                           llvm::StringRef key,
                           llvm::ArrayRef<llvm::StringRef> fallbacks) {
  auto at = [&](const SourcePos &pos) -> Location {
    return FileLineColLoc::get(context, config.sourceName, pos.line,
                               pos.column);
  };
  auto find = [&](llvm::StringRef k) -> const SourcePos * {
    auto it = config.positions.find(k.str());
    return it == config.positions.end() ? nullptr : &it->second;
  };
  if (const SourcePos *pos = find(key))
    return at(*pos);
  for (llvm::StringRef fallback : fallbacks)
    if (const SourcePos *pos = find(fallback))
      return at(*pos);
  if (const SourcePos *pos = find(key.split('.').first))
    return at(*pos);
  return FileLineColLoc::get(context, config.sourceName, 1, 1);
}

std::string kiln::renderConfigToml(const Config &config) {
  std::ostringstream out;
  std::string section;
  for (const KeySpec &spec : configSchema()) {
    if (section != spec.section) {
      section = spec.section;
      out << (out.tellp() > 0 ? "\n" : "") << "[" << section << "]\n";
    }
    bool unset = spec.unsetMeaning && formatValue(spec, config) ==
                                          formatValue(spec, Config());
    if (unset)
      out << "# " << spec.key << ": " << spec.unsetMeaning << "\n";
    else
      out << spec.key << " = " << formatValue(spec, config) << "\n";
  }
  return out.str();
}
