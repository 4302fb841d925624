//===- TensorBoard.h - Metrics as TensorBoard event files -------*- C++ -*-===//
//
// A run's per-step scalars in TensorBoard's format: a file
// `events.out.tfevents.<seconds>.<host>.<pid>.kiln` of TFRecords (length,
// masked CRC-32C of the length, an Event protobuf, masked CRC-32C of it),
// the Event messages serialized by the protobuf library from
// runtime/proto/tensorboard_event.proto. A build without protobuf has no
// writer: create() says so.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRAIN_TENSORBOARD_H
#define KILN_RUNTIME_TRAIN_TENSORBOARD_H

#include "kiln/Runtime/Support/Error.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime {

class TensorBoardWriter {
public:
  /// Creates `dir` if needed and a new event file in it, which starts with
  /// the file-version event. Fails with one line when the folder cannot be
  /// written or this build has no protobuf.
  static Expected<std::unique_ptr<TensorBoardWriter>>
  create(const std::string &dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter &) = delete;
  TensorBoardWriter &operator=(const TensorBoardWriter &) = delete;

  /// One event at `step` with a scalar per (tag, value), written through
  /// to the file.
  Error scalars(int64_t step,
                const std::vector<std::pair<std::string, double>> &values);

  const std::string &path() const { return path_; }

private:
  TensorBoardWriter() = default;
  Error record(const std::string &bytes);

  std::string path_;
  std::FILE *file = nullptr;
};

/// CRC-32C (Castagnoli) of `size` bytes, and the masked form TFRecord
/// stores: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t crc32c(const void *data, size_t size);
uint32_t maskedCrc32c(const void *data, size_t size);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAIN_TENSORBOARD_H
