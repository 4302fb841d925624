//===- Tokenize.cpp - `kiln tokenize`: text to llm.c token shards ---------===//
//
// Inputs are text files (each one document) and JSONL files (each line an
// object whose `--field` string is a document). Text files are cut into
// pieces of about kPieceBytes at a newline followed by a character that is
// not whitespace, where byte-level pre-tokenizers split anyway, so the
// pieces encode as the whole file would. Pieces are encoded in batches by
// the tokenizer child (Tokenizer.h); the separator token goes before each
// document, as llm.c puts <|endoftext|> before each.
//
// The first piece and then one in every 1 / val_fraction go to the
// validation shards (val_NNNNNN.bin), the rest to the training shards
// (train_NNNNNN.bin), each at most `shard_tokens` long: the folder the
// loader reads (loadDataset in kiln/Runtime/Train/Data.h).
//
//===----------------------------------------------------------------------===//

#include "kiln/Driver/Driver.h"
#include "kiln/Driver/Session.h"
#include "kiln/Driver/Tokenizer.h"
#include "kiln/Runtime/Support/Files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

using namespace kiln;
using namespace kiln::runtime;
namespace fs = std::filesystem;

namespace {
constexpr size_t kPieceBytes = size_t(1) << 16;
constexpr size_t kBatchBytes = size_t(1) << 22;
constexpr int64_t kMaxInputBytes = int64_t(1) << 40;

/// One llm.c shard being filled (header: magic, version, token count).
class ShardWriter {
public:
  ShardWriter(std::string dir, std::string prefix, int version, int64_t limit)
      : dir(std::move(dir)), prefix(std::move(prefix)), version(version),
        limit(limit) {}

  Error add(const std::vector<uint32_t> &ids) {
    for (uint32_t id : ids) {
      tokens.push_back(id);
      if (static_cast<int64_t>(tokens.size()) == limit)
        if (Error failure = flush())
          return failure;
    }
    return Error::success();
  }

  /// Writes what is held as the next shard (nothing when empty).
  Error flush() {
    if (tokens.empty())
      return Error::success();
    char name[32];
    std::snprintf(name, sizeof name, "%s_%06d.bin", prefix.c_str(), shards);
    std::string path = dir + "/" + name, temporary = path + ".partial";
    int32_t header[256] = {20240520, version,
                           static_cast<int32_t>(tokens.size())};
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file.write(reinterpret_cast<const char *>(header), sizeof header);
    if (version == 1) {
      std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
      file.write(reinterpret_cast<const char *>(narrow.data()),
                 2 * narrow.size());
    } else {
      file.write(reinterpret_cast<const char *>(tokens.data()),
                 4 * tokens.size());
    }
    file.close();
    if (!file)
      return Error("cannot write '" + temporary + "'");
    std::error_code ec;
    fs::rename(temporary, path, ec);
    if (ec)
      return Error("cannot rename '" + temporary + "': " + ec.message());
    total += static_cast<int64_t>(tokens.size());
    ++shards;
    tokens.clear();
    return Error::success();
  }

  int shards = 0;
  int64_t total = 0;

private:
  std::string dir, prefix;
  int version;
  int64_t limit;
  std::vector<uint32_t> tokens;
};

struct Piece {
  std::string text;
  bool startsDocument;
};

/// Where text stops being UTF-8, as "line L, column C".
std::string lineAndColumn(const std::string &text, size_t offset) {
  size_t line = 1, start = 0;
  for (size_t i = 0; i < offset; ++i)
    if (text[i] == '\n') {
      ++line;
      start = i + 1;
    }
  return std::to_string(line) + ":" + std::to_string(offset - start + 1);
}

/// The pieces of a text file (one document).
void cutText(const std::string &text, std::vector<Piece> &pieces) {
  size_t begin = 0;
  bool first = true;
  while (begin < text.size()) {
    size_t end = text.size();
    for (size_t at = begin + kPieceBytes; at + 1 < text.size(); ++at)
      if (text[at - 1] == '\n' &&
          !std::isspace(static_cast<unsigned char>(text[at]))) {
        end = at;
        break;
      }
    pieces.push_back({text.substr(begin, end - begin), first});
    first = false;
    begin = end;
  }
}

/// The documents of a JSONL file: each non-empty line's `field`.
Error cutJsonLines(const std::string &path, const std::string &text,
                   const std::string &field, std::vector<Piece> &pieces) {
  size_t begin = 0;
  for (int64_t line = 1; begin < text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos)
      end = text.size();
    std::string row = text.substr(begin, end - begin);
    begin = end + 1;
    if (row.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    nlohmann::json object = nlohmann::json::parse(row, nullptr, false);
    std::string where = path + ":" + std::to_string(line) + ":1: error: ";
    if (object.is_discarded() || !object.is_object())
      return Error(where + "not a JSON object");
    auto found = object.find(field);
    if (found == object.end() || !found->is_string())
      return Error(where + "no string field '" + field + "'");
    pieces.push_back({found->get<std::string>(), true});
  }
  return Error::success();
}

bool isJsonLines(const std::string &path) {
  std::string ext = fs::path(path).extension().string();
  return ext == ".jsonl" || ext == ".ndjson";
}

std::string megabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  return text;
}
} // namespace

int kiln::runTokenize(const TokenizeCommand &command) {
  if (!(command.valFraction > 0 && command.valFraction < 1))
    return commandError("--val-fraction must be above 0 and below 1");
  // Every input is a readable regular file before anything is written.
  int64_t totalBytes = 0;
  for (const std::string &input : command.inputs) {
    int64_t size = 0;
    Expected<int> fd = openRegularFile(input, kMaxInputBytes, "input", size);
    if (!fd)
      return commandError(fd.error().message());
    ::close(*fd);
    totalBytes += size;
  }
  std::error_code ec;
  if (fs::exists(command.out, ec)) {
    if (!fs::is_directory(command.out, ec))
      return commandError("'" + command.out + "' is not a folder");
    std::vector<std::string> shards;
    for (const fs::directory_entry &e : fs::directory_iterator(command.out, ec))
      if (e.path().extension() == ".bin")
        shards.push_back(e.path().filename().string());
    std::sort(shards.begin(), shards.end());
    if (!shards.empty())
      return commandError("'" + command.out + "' already holds token shards (" +
                          shards.front() + (shards.size() > 1 ? ", ..." : "") +
                          "); name an empty or new folder");
  }
  fs::create_directories(command.out, ec);
  if (ec)
    return commandError("cannot create '" + command.out + "': " + ec.message());

  Expected<std::unique_ptr<Tokenizer>> opened =
      Tokenizer::open(command.tokenizer);
  if (!opened)
    return commandError(opened.error().message());
  Tokenizer &tokenizer = **opened;
  int64_t vocab = tokenizer.vocabSize();
  int version = vocab <= 65536 ? 1 : 2;

  std::string separatorName;
  Expected<std::optional<uint32_t>> found =
      tokenizer.documentSeparator(command.separator, separatorName);
  if (!found)
    return commandError(found.error().message() + " (--separator)");
  std::optional<uint32_t> separator = *found;

  ShardWriter train(command.out, "train", version, command.shardTokens);
  ShardWriter valid(command.out, "val", version, command.shardTokens);
  const bool bar = isatty(STDERR_FILENO);
  auto began = std::chrono::steady_clock::now();
  int64_t doneBytes = 0, documents = 0, piecesSeen = 0;
  auto progress = [&](bool last) {
    if (!bar)
      return;
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - began)
            .count();
    int width = 30;
    int filled =
        totalBytes ? static_cast<int>(width * doneBytes / totalBytes) : width;
    std::fprintf(stderr, "\r[%s%s] %s of %s, %lld tokens, %.1f MB/s   %s",
                 std::string(filled, '#').c_str(),
                 std::string(width - filled, ' ').c_str(),
                 megabytes(doneBytes).c_str(), megabytes(totalBytes).c_str(),
                 static_cast<long long>(train.total + valid.total),
                 seconds > 0 ? doneBytes / seconds / 1e6 : 0.0,
                 last ? "\n" : "");
    std::fflush(stderr);
  };

  // Encodes `batch` and routes each piece to its shard.
  auto encode = [&](std::vector<Piece> &batch) -> Error {
    std::vector<std::string> texts;
    for (Piece &p : batch)
      texts.push_back(std::move(p.text));
    Expected<std::vector<std::vector<uint32_t>>> ids =
        tokenizer.encode(texts, /*addSpecial=*/false);
    if (!ids)
      return Error(command.tokenizer + ": " + ids.error().message());
    for (size_t i = 0; i < batch.size(); ++i, ++piecesSeen) {
      double f = command.valFraction;
      bool isValid =
          std::floor(piecesSeen * f) != std::floor((piecesSeen - 1) * f);
      ShardWriter &into = isValid ? valid : train;
      if (batch[i].startsDocument && separator)
        if (Error failure = into.add({*separator}))
          return failure;
      if (Error failure = into.add((*ids)[i]))
        return failure;
      doneBytes += static_cast<int64_t>(texts[i].size());
    }
    batch.clear();
    progress(false);
    return Error::success();
  };

  std::vector<Piece> batch;
  size_t batchBytes = 0;
  for (const std::string &input : command.inputs) {
    Expected<std::string> text =
        readRegularFile(input, kMaxInputBytes, "input");
    if (!text)
      return commandError(text.error().message());
    if (std::optional<size_t> bad = firstInvalidUtf8(*text)) {
      std::fprintf(stderr, "%s:%s: error: not UTF-8 text (byte 0x%02x)\n",
                   input.c_str(), lineAndColumn(*text, *bad).c_str(),
                   static_cast<unsigned char>((*text)[*bad]));
      return 1;
    }
    std::vector<Piece> pieces;
    if (isJsonLines(input)) {
      if (Error failure = cutJsonLines(input, *text, command.field, pieces)) {
        std::fprintf(stderr, "%s\n", failure.message().c_str());
        return 1;
      }
    } else {
      cutText(*text, pieces);
    }
    // JSONL: the JSON around the documents counts as done with the file.
    doneBytes += static_cast<int64_t>(text->size());
    for (const Piece &p : pieces)
      doneBytes -= static_cast<int64_t>(p.text.size());
    for (Piece &p : pieces) {
      documents += p.startsDocument;
      batchBytes += p.text.size();
      batch.push_back(std::move(p));
      if (batchBytes >= kBatchBytes) {
        if (Error failure = encode(batch))
          return commandError(failure.message());
        batchBytes = 0;
      }
    }
  }
  if (!batch.empty())
    if (Error failure = encode(batch))
      return commandError(failure.message());
  for (ShardWriter *w : {&train, &valid})
    if (Error failure = w->flush())
      return commandError(failure.message());
  progress(true);
  if (train.total == 0 || valid.total == 0)
    return commandError(
        "too little text for both parts: " + std::to_string(train.total) +
        " training and " + std::to_string(valid.total) +
        " validation tokens from " + std::to_string(piecesSeen) +
        " pieces (the first piece and one in every 1 / --val-fraction are "
        "validation); give more text or change --val-fraction");

  std::printf(
      "kiln tokenize: %zu input%s, %lld documents, %s -> %lld tokens "
      "(%.2f bytes a token), vocabulary %lld (uint%d), separator %s\n",
      command.inputs.size(), command.inputs.size() == 1 ? "" : "s",
      static_cast<long long>(documents), megabytes(totalBytes).c_str(),
      static_cast<long long>(train.total + valid.total),
      double(totalBytes) / double(train.total + valid.total),
      static_cast<long long>(vocab), version == 1 ? 16 : 32,
      separator
          ? (separatorName + " (" + std::to_string(*separator) + ")").c_str()
          : "none");
  std::printf("  %s/train_*.bin: %lld tokens in %d shard%s\n",
              command.out.c_str(), static_cast<long long>(train.total),
              train.shards, train.shards == 1 ? "" : "s");
  std::printf("  %s/val_*.bin: %lld tokens in %d shard%s\n",
              command.out.c_str(), static_cast<long long>(valid.total),
              valid.shards, valid.shards == 1 ? "" : "s");
  std::printf("train with: --data %s --set model.vocab_size=%lld (or more)\n",
              command.out.c_str(), static_cast<long long>(vocab));
  return 0;
}
