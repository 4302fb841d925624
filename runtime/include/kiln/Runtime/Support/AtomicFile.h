//===- AtomicFile.h - Replacing a file all at once --------------*- C++ -*-===//
//
// Every file Kiln saves (checkpoints, metrics, traces, cached kernels,
// compiled plans) is written beside its destination, synced, then renamed
// over it, so a crash or a full disk leaves the old file or the new one,
// never a part of either.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SUPPORT_ATOMICFILE_H
#define KILN_RUNTIME_SUPPORT_ATOMICFILE_H

#include "kiln/Runtime/Support/Error.h"

#include <cstdio>
#include <functional>
#include <optional>
#include <string>

namespace kiln::runtime {

/// A file written beside its destination, at `<path>.tmp.<pid>`, that
/// replaces the destination only on commit(), so `path` always holds either
/// its old contents or all of the new ones. A temporary file that is never
/// committed (a failed write, an early return) is removed by the destructor.
/// Two AtomicFiles let a caller write both before replacing either.
class AtomicFile {
public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile &) = delete;
  AtomicFile &operator=(const AtomicFile &) = delete;

  /// Writes the temporary file with `fill` (which returns false when a
  /// write fails), flushes and fsyncs it. Fails with an error line.
  Error write(const std::function<bool(std::FILE *)> &fill);
  /// Renames the written temporary file over the destination.
  Error commit();

  const std::string &path() const { return target; }
  const std::string &tempPath() const { return temp; }

private:
  std::string target, temp;
  bool written = false, committed = false;
};

/// Writes `bytes` to `path` through an AtomicFile: `path` ends up holding
/// its old contents or `bytes`. Fails with an error line.
Error writeFileAtomically(const std::string &path, const std::string &bytes);

/// Writes all `bytes` bytes of `data` to `f`; false when a write fails.
/// For the fill functions of AtomicFile::write.
bool writeAll(std::FILE *f, const void *data, size_t bytes);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_SUPPORT_ATOMICFILE_H
