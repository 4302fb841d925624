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
#include <functional>
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
    std::string path = pathOf(shards), temporary = path + ".partial";
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
    written.push_back(path);
    total += static_cast<int64_t>(tokens.size());
    ++shards;
    tokens.clear();
    return Error::success();
  }

  /// Removes the shards written (a run that failed leaves none).
  void discard() {
    std::error_code ec;
    for (const std::string &path : written)
      fs::remove(path, ec);
    fs::remove(pathOf(shards) + ".partial", ec);
  }

  int shards = 0;
  int64_t total = 0;

private:
  std::string dir, prefix;
  int version;
  int64_t limit;
  std::vector<uint32_t> tokens;
  std::vector<std::string> written;

  std::string pathOf(int index) const {
    char name[32];
    std::snprintf(name, sizeof name, "%s_%06d.bin", prefix.c_str(), index);
    return dir + "/" + name;
  }
};

struct Piece {
  std::string text;
  bool startsDocument;
};

/// Why `text`, which starts at line `line` of `path`, is not UTF-8, as
/// FILE:LINE:COL: error:, or success.
Error checkUtf8(const std::string &path, const std::string &text,
                int64_t line) {
  std::optional<size_t> bad = firstInvalidUtf8(text);
  if (!bad)
    return Error::success();
  size_t start = 0;
  for (size_t i = 0; i < *bad; ++i)
    if (text[i] == '\n') {
      ++line;
      start = i + 1;
    }
  char byte[8];
  std::snprintf(byte, sizeof byte, "0x%02x",
                static_cast<unsigned char>(text[*bad]));
  return Error(path + ":" + std::to_string(line) + ":" +
               std::to_string(*bad - start + 1) +
               ": error: not UTF-8 text (byte " + byte + ")");
}

/// Where a piece of text may end at or after `from`: after a newline, before
/// a character that is not whitespace; npos when `text` has no such place
/// (yet).
size_t cutAfter(const std::string &text, size_t from) {
  for (size_t at = std::max<size_t>(from, 1); at < text.size(); ++at)
    if (text[at - 1] == '\n' &&
        !std::isspace(static_cast<unsigned char>(text[at])))
      return at;
  return std::string::npos;
}

using TakePiece = std::function<Error(Piece piece, int64_t bytesRead)>;

/// A text file, read in blocks, as pieces of at least kPieceBytes (the
/// last may be shorter) cut by cutAfter.
Error readTextPieces(const std::string &path, std::ifstream &in,
                     const TakePiece &take) {
  std::string pending;
  std::vector<char> block(size_t(1) << 20);
  size_t scanned = kPieceBytes; // no cut before here in `pending`
  int64_t line = 1;
  bool first = true, atEnd = false;
  while (!atEnd) {
    in.read(block.data(), static_cast<std::streamsize>(block.size()));
    atEnd = in.gcount() < static_cast<std::streamsize>(block.size());
    if (in.bad())
      return Error("cannot read '" + path + "'");
    pending.append(block.data(), static_cast<size_t>(in.gcount()));
    while (!pending.empty()) {
      size_t end = pending.size() > kPieceBytes ? cutAfter(pending, scanned)
                                                : std::string::npos;
      if (end == std::string::npos) {
        if (!atEnd) {
          scanned = std::max(kPieceBytes, pending.size());
          break;
        }
        end = pending.size();
      }
      Piece piece{pending.substr(0, end), first};
      if (Error failure = checkUtf8(path, piece.text, line))
        return failure;
      line += std::count(piece.text.begin(), piece.text.end(), '\n');
      pending.erase(0, end);
      scanned = kPieceBytes;
      first = false;
      int64_t size = static_cast<int64_t>(piece.text.size());
      if (Error failure = take(std::move(piece), size))
        return failure;
    }
  }
  return Error::success();
}

/// A JSONL file, line by line: each non-empty line's `field` is a document.
Error readJsonLines(const std::string &path, std::ifstream &in,
                    const std::string &field, const TakePiece &take) {
  std::string row;
  for (int64_t line = 1; std::getline(in, row); ++line) {
    int64_t size = static_cast<int64_t>(row.size()) + 1;
    if (row.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    if (Error failure = checkUtf8(path, row, line))
      return failure;
    nlohmann::json object = nlohmann::json::parse(row, nullptr, false);
    std::string where = path + ":" + std::to_string(line) + ":1: error: ";
    if (object.is_discarded() || !object.is_object())
      return Error(where + "not a JSON object");
    auto found = object.find(field);
    if (found == object.end() || !found->is_string())
      return Error(where + "no string field '" + field + "'");
    if (Error failure = take({found->get<std::string>(), true}, size))
      return failure;
  }
  if (in.bad())
    return Error("cannot read '" + path + "'");
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
  // A failed run leaves no shards behind (the folder would refuse a rerun).
  auto fail = [&](const std::string &message) {
    if (bar)
      std::fputc('\n', stderr);
    train.discard();
    valid.discard();
    return commandError(message);
  };
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
  // Bytes read but not yet encoded: what a JSONL line holds besides its
  // document counts as done when the line is read.
  TakePiece take = [&](Piece piece, int64_t bytesRead) -> Error {
    doneBytes += bytesRead - static_cast<int64_t>(piece.text.size());
    documents += piece.startsDocument;
    batchBytes += piece.text.size();
    batch.push_back(std::move(piece));
    if (batchBytes < kBatchBytes)
      return Error::success();
    batchBytes = 0;
    return encode(batch);
  };
  for (const std::string &input : command.inputs) {
    std::ifstream in(input, std::ios::binary);
    if (!in)
      return fail("cannot open '" + input + "'");
    Error failure = isJsonLines(input)
                        ? readJsonLines(input, in, command.field, take)
                        : readTextPieces(input, in, take);
    if (failure)
      return fail(failure.message());
  }
  if (!batch.empty())
    if (Error failure = encode(batch))
      return fail(failure.message());
  for (ShardWriter *w : {&train, &valid})
    if (Error failure = w->flush())
      return fail(failure.message());
  progress(true);
  if (train.total == 0 || valid.total == 0)
    return fail(
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
