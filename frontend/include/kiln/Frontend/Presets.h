//===- Presets.h - Built-in model descriptions ------------------*- C++ -*-===//

#ifndef KILN_FRONTEND_PRESETS_H
#define KILN_FRONTEND_PRESETS_H

#include <string>
#include <vector>

namespace kiln {

struct Preset {
  const char *name;
  const char *summary;
  std::string toml; // the description, in the model file format
};

/// llama3-debug, llama3-1b, llama3-8b, llama3-70b, llama3-405b.
const std::vector<Preset> &presets();
const Preset *findPreset(const std::string &name);

} // namespace kiln

#endif // KILN_FRONTEND_PRESETS_H
