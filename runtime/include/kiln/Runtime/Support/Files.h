//===- Files.h - Reading files that may be anything -------------*- C++ -*-===//
//
// Every file Kiln reads (plans, data, checkpoints, caches) is named by a
// user and may be a FIFO, a device such as /dev/zero, a directory or far
// larger than anything Kiln writes. These open without blocking, refuse
// anything that is not a regular file and anything larger than the bound
// the caller states, so a bad path is one error line, never a hang or an
// allocation that cannot succeed.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SUPPORT_FILES_H
#define KILN_RUNTIME_SUPPORT_FILES_H

#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <string>

namespace kiln::runtime {

/// Opens `path` for reading (O_RDONLY | O_NONBLOCK | O_CLOEXEC, so a FIFO
/// without a writer does not block) and checks the open file with fstat:
/// a regular file of at most `maxBytes`. Returns the descriptor, in
/// blocking mode, and sets `size`; or one line naming the path and what it
/// is ("'/dev/zero' is not a regular file (a character device)"). `what`
/// names the file in messages ("data file", "plan").
Expected<int> openRegularFile(const std::string &path, int64_t maxBytes,
                              const std::string &what, int64_t &size);

/// The whole of a regular file of at most `maxBytes` (openRegularFile),
/// read with checked reads; the error otherwise.
Expected<std::string> readRegularFile(const std::string &path, int64_t maxBytes,
                                      const std::string &what);

/// Why a file cannot be written at `path` (by writing a temporary file
/// beside it and renaming it over `path`), or success: `path` must be
/// missing or a regular file (a device node, a FIFO, a directory or a
/// symbolic link is never replaced), and its folder must be writable or
/// creatable (checkCreatableFolder). Checked before a run starts and again when
/// a file is saved.
Error checkReplaceable(const std::string &path);

/// Why the folder `dir` cannot be there to write into, or success: it is a
/// writable folder, or the nearest of its parents that exists is one (so
/// it can be created).
Error checkCreatableFolder(const std::string &dir);

/// Removes the temporary files (`NAME.tmp.PID`) that writers killed before
/// they could rename them left in `dir`: only those whose process is gone.
/// Returns how many were removed.
int removeStaleTemporaries(const std::string &dir);

/// What the file at `path` is, for messages: "a regular file", "a
/// directory", "a FIFO", "a character device", ... (lstat is not used:
/// a symbolic link is what it points to).
std::string fileKind(const std::string &path);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_SUPPORT_FILES_H
