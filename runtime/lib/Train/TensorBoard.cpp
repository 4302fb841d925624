//===- TensorBoard.cpp - Metrics as TensorBoard event files ---------------===//

#include "kiln/Runtime/Train/TensorBoard.h"

#if KILN_HAVE_PROTOBUF
#include "tensorboard_event.pb.h"
#endif

#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <unistd.h>

namespace kiln::runtime {

namespace {
/// The table of the reflected Castagnoli polynomial 0x82f63b78.
std::array<uint32_t, 256> crcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}

double wallTime() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}
} // namespace

uint32_t crc32c(const void *data, size_t size) {
  static const std::array<uint32_t, 256> table = crcTable();
  const auto *p = static_cast<const unsigned char *>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < size; ++i)
    c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t maskedCrc32c(const void *data, size_t size) {
  uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file)
    std::fclose(file);
}

Error TensorBoardWriter::record(const std::string &bytes) {
  uint64_t length = bytes.size();
  uint32_t lengthCrc = maskedCrc32c(&length, sizeof length);
  uint32_t dataCrc = maskedCrc32c(bytes.data(), bytes.size());
  bool ok = std::fwrite(&length, sizeof length, 1, file) == 1 &&
            std::fwrite(&lengthCrc, sizeof lengthCrc, 1, file) == 1 &&
            std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size() &&
            std::fwrite(&dataCrc, sizeof dataCrc, 1, file) == 1 &&
            std::fflush(file) == 0;
  if (!ok)
    return Error("cannot write the TensorBoard events '" + path_ +
                 "': " + std::strerror(errno));
  return Error::success();
}

#if KILN_HAVE_PROTOBUF
Expected<std::unique_ptr<TensorBoardWriter>>
TensorBoardWriter::create(const std::string &dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Error("cannot create the TensorBoard folder '" + dir +
                 "': " + ec.message());
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter());
  double now = wallTime();
  writer->path_ = dir + "/events.out.tfevents." +
                  std::to_string(static_cast<int64_t>(now)) + "." + host + "." +
                  std::to_string(getpid()) + ".kiln";
  writer->file = std::fopen(writer->path_.c_str(), "wb");
  if (!writer->file)
    return Error("cannot create the TensorBoard events '" + writer->path_ +
                 "': " + std::strerror(errno));
  tensorboard::Event event;
  event.set_wall_time(now);
  event.set_file_version("brain.Event:2");
  if (Error failure = writer->record(event.SerializeAsString()))
    return failure;
  return writer;
}

Error TensorBoardWriter::scalars(
    int64_t step, const std::vector<std::pair<std::string, double>> &values) {
  tensorboard::Event event;
  event.set_wall_time(wallTime());
  event.set_step(step);
  tensorboard::Summary *summary = event.mutable_summary();
  for (const auto &[tag, value] : values) {
    tensorboard::SummaryValue *v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return record(event.SerializeAsString());
}
#else
Expected<std::unique_ptr<TensorBoardWriter>>
TensorBoardWriter::create(const std::string &) {
  return Error("this build of Kiln has no TensorBoard writer: protobuf was "
               "not found when it was built (Debian: libprotobuf-dev "
               "protobuf-compiler)");
}

Error TensorBoardWriter::scalars(
    int64_t, const std::vector<std::pair<std::string, double>> &) {
  return Error("no TensorBoard writer in this build");
}
#endif

} // namespace kiln::runtime
