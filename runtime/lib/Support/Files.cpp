//===- Files.cpp - Reading files that may be anything ---------------------===//

#include "kiln/Runtime/Support/Files.h"

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln::runtime {

namespace {
std::string kindOf(mode_t mode) {
  if (S_ISREG(mode))
    return "a regular file";
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a file";
}
} // namespace

Error checkReplaceable(const std::string &path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode))
      return Error("'" + path +
                   "' is a symbolic link; Kiln replaces only regular "
                   "files (name the file it points to)");
    if (!S_ISREG(st.st_mode))
      return Error("'" + path + "' is " + kindOf(st.st_mode) +
                   ", not a regular file; Kiln replaces only regular files");
  } else if (errno != ENOENT && errno != ENOTDIR) {
    // ENOTDIR: a parent is not a folder, which the folder check names.
    return Error("cannot write '" + path + "': " + std::strerror(errno));
  }
  size_t slash = path.find_last_of('/');
  std::string dir = slash == std::string::npos ? "."
                    : slash == 0               ? "/"
                                               : path.substr(0, slash);
  if (Error why = checkCreatableFolder(dir))
    return Error("cannot write '" + path + "': " + why.message());
  return Error::success();
}

Error checkCreatableFolder(const std::string &dir) {
  // The folder, or the nearest of its parents that exists: a writable
  // folder.
  std::string existing = dir.empty() ? "." : dir;
  struct stat st;
  while (::stat(existing.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      return Error("'" + existing + "': " + std::strerror(errno));
    size_t slash = existing.find_last_of('/');
    existing = slash == std::string::npos ? "."
               : slash == 0               ? "/"
                                          : existing.substr(0, slash);
  }
  if (!S_ISDIR(st.st_mode))
    return Error("'" + existing + "' is " + kindOf(st.st_mode) +
                 ", not a folder");
  if (::access(existing.c_str(), W_OK) != 0)
    return Error("the folder '" + existing + "' is not writable");
  return Error::success();
}

int removeStaleTemporaries(const std::string &dir) {
  DIR *d = ::opendir(dir.c_str());
  if (!d)
    return 0;
  int removed = 0;
  while (dirent *e = ::readdir(d)) {
    std::string name = e->d_name;
    size_t at = name.rfind(".tmp.");
    if (at == std::string::npos || at + 5 >= name.size())
      continue;
    char *end = nullptr;
    long pid = std::strtol(name.c_str() + at + 5, &end, 10);
    if (*end || pid <= 0)
      continue;
    // A live process (ours included) may still be writing it; EPERM means
    // it exists under another user.
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)
      continue;
    std::string path = dir + "/" + name;
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::unlink(path.c_str()) == 0)
      ++removed;
  }
  ::closedir(d);
  return removed;
}

std::string fileKind(const std::string &path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return std::strerror(errno);
  return kindOf(st.st_mode);
}

Expected<int> openRegularFile(const std::string &path, int64_t maxBytes,
                              const std::string &what, int64_t &size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return Error("cannot open " + what + " '" + path +
                 "': " + std::strerror(errno));
  struct stat st;
  Error problem;
  if (::fstat(fd, &st) != 0)
    problem = Error("cannot stat " + what + " '" + path +
                    "': " + std::strerror(errno));
  else if (!S_ISREG(st.st_mode))
    problem = Error(what + " '" + path + "' is not a regular file (it is " +
                    kindOf(st.st_mode) + ")");
  else if (st.st_size > maxBytes)
    problem = Error(what + " '" + path + "' has " + std::to_string(st.st_size) +
                    " bytes, more than the " + std::to_string(maxBytes) +
                    " Kiln reads from one");
  if (problem) {
    ::close(fd);
    return problem;
  }
  // Reads of a regular file never block; clear the flag anyway so that
  // callers see an ordinary descriptor.
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0)
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  size = static_cast<int64_t>(st.st_size);
  return fd;
}

Expected<std::string> readRegularFile(const std::string &path, int64_t maxBytes,
                                      const std::string &what) {
  int64_t size = 0;
  Expected<int> opened = openRegularFile(path, maxBytes, what, size);
  if (!opened)
    return opened.takeError();
  int fd = *opened;
  std::string text(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      Error error(
          "cannot read " + what + " '" + path + "': " +
          (n < 0 ? std::strerror(errno) : "it became shorter while read"));
      ::close(fd);
      return error;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return text;
}

} // namespace kiln::runtime
