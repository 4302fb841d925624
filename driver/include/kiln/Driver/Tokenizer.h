//===- Tokenizer.h - A Hugging Face tokenizer.json, through `tokenizers` -*- C++
//-*-===//
//
// Kiln reads tokenizer.json files through the library that defines them,
// Hugging Face `tokenizers` (the pinned wheel scripts/bootstrap installs
// into .deps/hf-python), run as a child python3 that answers encode and
// decode requests over pipes (driver/lib/tokenizer_server.py holds the
// protocol). One Tokenizer is one child; it ends with the object.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DRIVER_TOKENIZER_H
#define KILN_DRIVER_TOKENIZER_H

#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

class Tokenizer {
public:
  /// Starts the child for the tokenizer.json at `path`; fails with one line
  /// when python3 or `tokenizers` is missing or the file is not a
  /// tokenizer. `tokenizers` is looked for on $KILN_HF_PYTHON, else in the
  /// source tree's .deps/hf-python.
  static runtime::Expected<std::unique_ptr<Tokenizer>>
  open(const std::string &path);
  ~Tokenizer();
  Tokenizer(const Tokenizer &) = delete;
  Tokenizer &operator=(const Tokenizer &) = delete;

  /// Tokens of the vocabulary, added tokens included.
  int64_t vocabSize() const { return vocab; }

  /// The ids of each document (valid UTF-8), with the tokenizer's special
  /// tokens (its post-processor's BOS and the like) when `addSpecial`.
  runtime::Expected<std::vector<std::vector<uint32_t>>>
  encode(const std::vector<std::string> &documents, bool addSpecial);

  /// The text of `ids`, special tokens included.
  runtime::Expected<std::string> decode(const std::vector<uint32_t> &ids);

  /// The id of the token spelled `token`, if the vocabulary has it.
  runtime::Expected<std::optional<uint32_t>> tokenId(const std::string &token);

  /// The token that goes before each document (kiln tokenize) and before
  /// a prompt (kiln sample): `named` when given ('' for none; a name the
  /// vocabulary lacks is an error), else the first of <|end_of_text|>,
  /// <|endoftext|>, </s>, <eos> it has; nothing when it has none. Sets
  /// `name` to the token's spelling.
  runtime::Expected<std::optional<uint32_t>>
  documentSeparator(const std::optional<std::string> &named, std::string &name);

private:
  Tokenizer() = default;
  /// Sends `message` and reads the reply's status: success leaves its
  /// payload to be read; a failure is the child's message.
  runtime::Error request(const std::string &message);
  runtime::Error readExactly(void *into, size_t bytes);

  std::string path;
  int toChild = -1, fromChild = -1;
  int pid = -1;
  int64_t vocab = 0;
};

/// Where `text` stops being UTF-8: the byte offset of the first invalid
/// sequence, or nothing when it is all valid.
std::optional<size_t> firstInvalidUtf8(const std::string &text);

} // namespace kiln

#endif // KILN_DRIVER_TOKENIZER_H
