//===- ConfigFuzz.cpp - Bounded fuzzing of model descriptions -------------===//
//
// Mutates model files (the presets, the examples, the error cases) and feeds
// each mutant to the frontend in-process. A crash, an abort or a hang fails
// the run outright; besides that, every mutant must either be rejected with
// at least one diagnostic located inside its text, or be accepted and import
// to IR that verifies.
//
//   kiln-fuzz-config [--iterations N] [--seed S] [FILE...]
//
//===----------------------------------------------------------------------===//

#include "kiln/Frontend/ConfigParser.h"
#include "kiln/Frontend/ModelImporter.h"
#include "kiln/Frontend/Presets.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace kiln;

namespace {
const char *kInteresting[] = {
    "0", "-1", "1", "2", "3", "7", "16", "65536", "65537", "4194305",
    "2147483648", "4611686018427387904", "9223372036854775807",
    "-9223372036854775808", "1e308", "-1e-308", "nan", "inf", "-inf", "0.5",
    "1.5", "\"x\"", "\"\"", "true", "false", "[]", "[1, 2]", "[0.9, 0.95]",
    "[\"a\"]", "{ a = 1 }", "1979-05-27", "'lit'", "\"\"\"multi\"\"\""};
const char *kWords[] = {
    "dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "multiple_of",
    "ffn_dim_multiplier", "norm_eps", "rope_theta", "max_seq_len",
    "tie_embeddings", "global_batch_size", "seq_len", "recipe", "betas",
    "filter_fqns", "[model]", "[training]", "[float8]", "[[model]]",
    "[model.x]", "=", "#", "\"", "[", "]", "{", "}", "\\", "\n", "\t", "\r\n"};

class Mutator {
public:
  explicit Mutator(uint64_t seed) : rng(seed) {}

  std::string mutate(std::string text) {
    int rounds = 1 + pick(3);
    for (int i = 0; i < rounds; ++i)
      text = mutateOnce(std::move(text));
    return text;
  }

private:
  size_t pick(size_t n) { return n ? rng() % n : 0; }

  std::vector<std::string> lines(const std::string &text) {
    std::vector<std::string> out;
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(text).split(parts, '\n');
    for (llvm::StringRef p : parts)
      out.push_back(p.str());
    return out;
  }
  std::string join(const std::vector<std::string> &ls) {
    std::string out;
    for (size_t i = 0; i < ls.size(); ++i)
      out += (i ? "\n" : "") + ls[i];
    return out;
  }

  std::string mutateOnce(std::string text) {
    std::vector<std::string> ls = lines(text);
    switch (pick(9)) {
    case 0: { // replace a value
      size_t i = pick(ls.size());
      size_t eq = ls[i].find('=');
      if (eq != std::string::npos)
        ls[i] = ls[i].substr(0, eq + 1) + " " +
                kInteresting[pick(std::size(kInteresting))];
      return join(ls);
    }
    case 1: { // rename a key
      size_t i = pick(ls.size());
      size_t eq = ls[i].find('=');
      if (eq != std::string::npos)
        ls[i] = std::string(kWords[pick(16)]) + " " + ls[i].substr(eq);
      return join(ls);
    }
    case 2: // delete a line
      if (!ls.empty())
        ls.erase(ls.begin() + pick(ls.size()));
      return join(ls);
    case 3: { // duplicate a line somewhere
      if (ls.empty())
        return text;
      std::string l = ls[pick(ls.size())];
      ls.insert(ls.begin() + pick(ls.size() + 1), l);
      return join(ls);
    }
    case 4: // insert a word
      return text.insert(pick(text.size() + 1),
                         kWords[pick(std::size(kWords))]);
    case 5: // flip a byte
      if (!text.empty())
        text[pick(text.size())] = static_cast<char>(pick(256));
      return text;
    case 6: // truncate
      return text.substr(0, pick(text.size() + 1));
    case 7: { // new key = value line
      std::string l = std::string(kWords[pick(16)]) + " = " +
                      kInteresting[pick(std::size(kInteresting))];
      ls.insert(ls.begin() + pick(ls.size() + 1), l);
      return join(ls);
    }
    default: // a small number nudged
      for (size_t i = pick(text.size()); i < text.size(); ++i)
        if (text[i] >= '0' && text[i] <= '9') {
          text[i] = static_cast<char>('0' + pick(10));
          break;
        }
      return text;
    }
  }

  std::mt19937_64 rng;
};

struct Stats {
  unsigned accepted = 0, rejected = 0, violations = 0;
};

void check(const std::string &name, const std::string &text, Stats &stats) {
  mlir::MLIRContext context;
  unsigned lineCount = 1 + std::count(text.begin(), text.end(), '\n');
  std::vector<std::string> problems;
  unsigned diagnostics = 0;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    ++diagnostics;
    auto loc = llvm::dyn_cast<mlir::FileLineColLoc>(d.getLocation());
    if (!loc)
      problems.push_back("diagnostic without a file location: " + d.str());
    else if (loc.getFilename() == name &&
             (loc.getLine() < 1 || loc.getLine() > lineCount))
      problems.push_back("diagnostic outside the file (line " +
                         std::to_string(loc.getLine()) + "): " + d.str());
    return mlir::success();
  });
  ModelSource source{name, text, false};
  mlir::FailureOr<Config> config = parseConfig(&context, source);
  if (mlir::failed(config)) {
    ++stats.rejected;
    if (diagnostics == 0)
      problems.push_back("rejected without a diagnostic");
  } else {
    ++stats.accepted;
    if (diagnostics != 0)
      problems.push_back("accepted, yet a diagnostic was emitted");
    auto module = importModel(&context, *config);
    if (!module)
      problems.push_back("accepted, but the import failed");
    else if (mlir::failed(mlir::verify(*module)))
      problems.push_back("accepted, but the imported IR does not verify");
  }
  if (problems.empty())
    return;
  ++stats.violations;
  std::fprintf(stderr, "--- violation: %s\n", problems.front().c_str());
  std::fprintf(stderr, "--- mutant:\n%s\n--- end\n", text.c_str());
}
} // namespace

int main(int argc, char **argv) {
  unsigned iterations = 2000;
  uint64_t seed = 1;
  std::vector<std::string> seeds;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--iterations") && i + 1 < argc)
      iterations = std::strtoul(argv[++i], nullptr, 10);
    else if (!std::strcmp(argv[i], "--seed") && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 10);
    else if (auto buffer = llvm::MemoryBuffer::getFile(argv[i]))
      seeds.push_back((*buffer)->getBuffer().str());
    else {
      std::fprintf(stderr, "error: cannot read seed file '%s'\n", argv[i]);
      return 1;
    }
  }
  for (const Preset &preset : presets())
    seeds.push_back(preset.toml);

  Mutator mutator(seed);
  Stats stats;
  for (unsigned i = 0; i < iterations; ++i) {
    const std::string &base = seeds[i % seeds.size()];
    check("mutant.toml", mutator.mutate(base), stats);
  }
  std::printf("fuzz: %u mutants (seed %llu), %u accepted, %u rejected with "
              "diagnostics, %u violations\n",
              iterations, static_cast<unsigned long long>(seed),
              stats.accepted, stats.rejected, stats.violations);
  return stats.violations ? 1 : 0;
}
