//===- Tokenizer.cpp - tokenizer.json through a `tokenizers` child --------===//

#include "kiln/Driver/Tokenizer.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

using namespace kiln;
using namespace kiln::runtime;

namespace {
/// driver/lib/tokenizer_server.py, compiled in (driver/CMakeLists.txt).
constexpr const char *kServer =
#include "kiln/Driver/TokenizerServer.inc"
    ;
constexpr const char *kPython = "/usr/bin/python3";
/// Separators looked for when none is named, in order.
constexpr const char *kSeparators[] = {"<|end_of_text|>", "<|endoftext|>",
                                       "</s>", "<eos>"};

void appendU32(std::string &out, uint32_t value) {
  out.append(reinterpret_cast<const char *>(&value), 4);
}
} // namespace

std::optional<size_t> kiln::firstInvalidUtf8(const std::string &text) {
  const auto *s = reinterpret_cast<const unsigned char *>(text.data());
  size_t n = text.size();
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    size_t length = c < 0x80           ? 1
                    : (c >> 5) == 0x6  ? 2
                    : (c >> 4) == 0xe  ? 3
                    : (c >> 3) == 0x1e ? 4
                                       : 0;
    if (length == 0 || i + length > n)
      return i;
    uint32_t code = length == 1 ? c : c & (0x7f >> length);
    for (size_t k = 1; k < length; ++k) {
      if ((s[i + k] & 0xc0) != 0x80)
        return i;
      code = (code << 6) | (s[i + k] & 0x3f);
    }
    // Overlong forms, surrogates and code points past U+10FFFF.
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (code < least[length] || (code >= 0xd800 && code <= 0xdfff) ||
        code > 0x10ffff)
      return i;
    i += length;
  }
  return std::nullopt;
}

Expected<std::unique_ptr<Tokenizer>> Tokenizer::open(const std::string &path) {
  if (access(kPython, X_OK) != 0)
    return Error(std::string("reading a tokenizer needs ") + kPython +
                 " (Debian: python3)");
  if (access(path.c_str(), R_OK) != 0)
    return Error("cannot read the tokenizer '" + path +
                 "': " + std::strerror(errno));
  // A write to a child that died is an error below, not a SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  int in[2], out[2];
  if (pipe2(in, O_CLOEXEC) != 0)
    return Error(std::string("cannot start the tokenizer: ") +
                 std::strerror(errno));
  if (pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]);
    ::close(in[1]);
    return Error(std::string("cannot start the tokenizer: ") +
                 std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);

  // PYTHONPATH: where `tokenizers` is, before whatever the caller has.
  const char *hf = std::getenv("KILN_HF_PYTHON");
  std::string pythonPath =
      std::string("PYTHONPATH=") + (hf && *hf ? hf : KILN_HF_PYTHON_DEFAULT);
  if (const char *was = std::getenv("PYTHONPATH"); was && *was)
    pythonPath += std::string(":") + was;
  std::vector<std::string> env;
  for (char **e = environ; *e; ++e)
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0)
      env.push_back(*e);
  env.push_back(pythonPath);
  std::vector<char *> envp;
  for (std::string &e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string script = kServer;
  std::vector<std::string> args = {kPython, "-c", script, path};
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  int code =
      posix_spawn(&pid, kPython, &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  ::close(in[0]);
  ::close(out[1]);
  std::unique_ptr<Tokenizer> tokenizer(new Tokenizer());
  tokenizer->path = path;
  tokenizer->toChild = in[1];
  tokenizer->fromChild = out[0];
  if (code != 0)
    return Error(std::string("cannot start ") + kPython + ": " +
                 std::strerror(code));
  tokenizer->pid = pid;
  uint32_t vocab = 0;
  if (Error failure = tokenizer->request(""))
    return failure;
  if (Error failure = tokenizer->readExactly(&vocab, 4))
    return failure;
  tokenizer->vocab = vocab;
  return tokenizer;
}

Tokenizer::~Tokenizer() {
  if (toChild >= 0)
    ::close(toChild); // the child ends at the end of its input
  if (fromChild >= 0)
    ::close(fromChild);
  if (pid > 0) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

Error Tokenizer::readExactly(void *into, size_t bytes) {
  auto *p = static_cast<char *>(into);
  while (bytes > 0) {
    ssize_t got = ::read(fromChild, p, bytes);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0)
      return Error("the tokenizer child (python3 with tokenizers) for '" +
                   path + "' ended without answering");
    p += got;
    bytes -= static_cast<size_t>(got);
  }
  return Error::success();
}

Error Tokenizer::request(const std::string &message) {
  const char *p = message.data();
  size_t left = message.size();
  while (left > 0) {
    ssize_t wrote = ::write(toChild, p, left);
    if (wrote < 0 && errno == EINTR)
      continue;
    if (wrote <= 0)
      return Error("the tokenizer child (python3 with tokenizers) for '" +
                   path + "' stopped reading: " + std::strerror(errno));
    p += wrote;
    left -= static_cast<size_t>(wrote);
  }
  // Replies are 'K' and a payload whose length the request fixes, or 'X'
  // and a message. The payload is read by its reader below.
  char status = 0;
  if (Error failure = readExactly(&status, 1))
    return failure;
  if (status == 'X') {
    uint32_t n = 0;
    if (Error failure = readExactly(&n, 4))
      return failure;
    std::string why(n, '\0');
    if (Error failure = readExactly(why.data(), n))
      return failure;
    return Error(why);
  }
  if (status != 'K')
    return Error("the tokenizer child for '" + path +
                 "' answered something that is not a reply");
  return Error::success();
}

Expected<std::vector<std::vector<uint32_t>>>
Tokenizer::encode(const std::vector<std::string> &documents, bool addSpecial) {
  std::string message = "E";
  message += addSpecial ? '\1' : '\0';
  appendU32(message, static_cast<uint32_t>(documents.size()));
  for (const std::string &d : documents) {
    appendU32(message, static_cast<uint32_t>(d.size()));
    message += d;
  }
  if (Error failure = request(message))
    return failure;
  std::vector<std::vector<uint32_t>> ids(documents.size());
  for (std::vector<uint32_t> &doc : ids) {
    uint32_t count = 0;
    if (Error failure = readExactly(&count, 4))
      return failure;
    doc.resize(count);
    if (Error failure = readExactly(doc.data(), 4 * size_t(count)))
      return failure;
  }
  return ids;
}

Expected<std::string> Tokenizer::decode(const std::vector<uint32_t> &ids) {
  std::string message = "D";
  appendU32(message, static_cast<uint32_t>(ids.size()));
  message.append(reinterpret_cast<const char *>(ids.data()), 4 * ids.size());
  if (Error failure = request(message))
    return failure;
  uint32_t n = 0;
  if (Error failure = readExactly(&n, 4))
    return failure;
  std::string text(n, '\0');
  if (Error failure = readExactly(text.data(), n))
    return failure;
  return text;
}

Expected<std::optional<uint32_t>> Tokenizer::tokenId(const std::string &token) {
  std::string message = "T";
  appendU32(message, static_cast<uint32_t>(token.size()));
  message += token;
  if (Error failure = request(message))
    return failure;
  int32_t id = -1;
  if (Error failure = readExactly(&id, 4))
    return failure;
  if (id < 0)
    return std::optional<uint32_t>();
  return std::optional<uint32_t>(static_cast<uint32_t>(id));
}

Expected<std::optional<uint32_t>>
Tokenizer::documentSeparator(const std::optional<std::string> &named,
                             std::string &name) {
  std::vector<std::string> candidates;
  if (named)
    candidates = {*named};
  else
    candidates.assign(std::begin(kSeparators), std::end(kSeparators));
  for (const std::string &candidate : candidates) {
    if (candidate.empty())
      break;
    Expected<std::optional<uint32_t>> id = tokenId(candidate);
    if (!id || *id) {
      name = candidate;
      return id;
    }
  }
  if (named && !named->empty())
    return Error("the tokenizer has no token '" + *named + "'");
  return std::optional<uint32_t>();
}
