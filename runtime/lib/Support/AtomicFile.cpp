//===- AtomicFile.cpp - Replacing a file all at once ----------------------===//
//
// The temporary file is checked (checkReplaceable) before it is created
// and again before the rename, because what was a regular file or nothing
// may have changed while it was written.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Support/AtomicFile.h"
#include "kiln/Runtime/Support/Files.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace kiln::runtime {

namespace {
std::string errnoText() { return std::strerror(errno); }
} // namespace

bool writeAll(std::FILE *f, const void *data, size_t bytes) {
  return bytes == 0 || std::fwrite(data, 1, bytes, f) == bytes;
}

AtomicFile::AtomicFile(std::string path)
    : target(std::move(path)),
      temp(target + ".tmp." + std::to_string(::getpid())) {}

AtomicFile::~AtomicFile() {
  if (!committed)
    ::unlink(temp.c_str());
}

Error AtomicFile::write(const std::function<bool(std::FILE *)> &fill) {
  written = false;
  if (Error why = checkReplaceable(target))
    return Error("cannot save: " + why.message());
  std::FILE *f = std::fopen(temp.c_str(), "wb");
  if (!f)
    return Error("cannot save '" + target + "': cannot create '" + temp +
                 "': " + errnoText());
  // Each step's errno is read before the next call can change it; a failed
  // write may only show at the flush (buffering) or the close (NFS).
  std::string failed;
  if (!fill(f) || std::ferror(f))
    failed = "cannot write '" + temp + "': " + errnoText();
  else if (std::fflush(f) != 0)
    failed = "cannot write '" + temp + "': " + errnoText();
  else if (::fsync(::fileno(f)) != 0)
    failed = "cannot sync '" + temp + "': " + errnoText();
  if (std::fclose(f) != 0 && failed.empty())
    failed = "cannot close '" + temp + "': " + errnoText();
  if (!failed.empty()) {
    ::unlink(temp.c_str());
    return Error("cannot save '" + target + "': " + failed);
  }
  written = true;
  return Error::success();
}

Error AtomicFile::commit() {
  if (!written)
    return Error("cannot save '" + target + "': nothing was written");
  // Checked again: what was a regular file or nothing may have changed.
  if (Error why = checkReplaceable(target)) {
    ::unlink(temp.c_str());
    return Error("cannot save: " + why.message());
  }
  if (std::rename(temp.c_str(), target.c_str()) != 0) {
    std::string error = "cannot save '" + target + "': cannot rename '" + temp +
                        "' over it: " + errnoText();
    ::unlink(temp.c_str());
    return Error(error);
  }
  committed = true;
  // The rename is durable once the directory is synced. This is best effort:
  // the new file is already in place, so a failure here is not a failed save.
  std::string dir = target.substr(0, target.find_last_of('/') + 1);
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  return Error::success();
}

Error writeFileAtomically(const std::string &path, const std::string &bytes) {
  AtomicFile file(path);
  if (auto error = file.write([&](std::FILE *f) {
        return writeAll(f, bytes.data(), bytes.size());
      }))
    return Error(error);
  return file.commit();
}

} // namespace kiln::runtime
