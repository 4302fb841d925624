//===- Safetensors.h - Reading and writing safetensors files ----*- C++ -*-===//
//
// The Hugging Face safetensors format: an 8-byte little-endian header
// length N, N bytes of JSON header (padded with spaces so the data starts
// 8-byte aligned), then the tensors' raw little-endian bytes. The header maps
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, with
// offsets relative to the start of the data, and may hold string metadata
// under "__metadata__".
//
// Files are written as F32 (bit-exact) and read from F32, BF16 or F16. Reading
// checks every field against the file before allocating, so a damaged or
// hostile file gives one error line, never a crash or a huge allocation.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SAFETENSORS_H
#define KILN_RUNTIME_SAFETENSORS_H

#include "kiln/Runtime/Support/AtomicFile.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime {

/// A named float32 tensor; `data` holds product(shape) values, row-major
/// (one value for a 0-d tensor, none when a dimension is 0).
struct FloatTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// What a safetensors file holds: its tensors in name order and its
/// metadata.
struct SafetensorsContents {
  std::vector<FloatTensor> tensors;
  std::map<std::string, std::string> metadata;
};

/// The largest header the reader accepts; real headers are kilobytes.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;
/// The largest checkpoint file read: 4 TiB, past any model's weights and
/// optimizer state in f32.
inline constexpr int64_t kMaxSafetensorsBytes = int64_t(1) << 42;

/// Writes `tensors` as F32 in name order, with `metadata`, into `file`'s
/// temporary file (committing is the caller's). Fails, writing nothing, on
/// a duplicate or reserved name, a negative dimension or a data size that is
/// not the product of the shape.
Error stageSafetensors(AtomicFile &file,
                       const std::vector<FloatTensor> &tensors,
                       const std::map<std::string, std::string> &metadata);

/// stageSafetensors and commit: `path` ends up holding the old file or the
/// new one, never a part. Fails with an error line.
Error writeSafetensors(const std::string &path,
                       const std::vector<FloatTensor> &tensors,
                       const std::map<std::string, std::string> &metadata);

/// Checks that `tensors` and `metadata` can be written (what
/// stageSafetensors checks), without writing; `what` names them in the error.
Error checkWritable(const std::string &what,
                    const std::vector<FloatTensor> &tensors,
                    const std::map<std::string, std::string> &metadata);

/// Reads and checks a safetensors file of F32, BF16 and F16 tensors (the
/// halves widened to float, exactly), or one line naming the file and what
/// is wrong.
Expected<SafetensorsContents> readSafetensors(const std::string &path);

/// "[2, 3]": a shape as error messages print it.
std::string shapeString(const std::vector<int64_t> &shape);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_SAFETENSORS_H
