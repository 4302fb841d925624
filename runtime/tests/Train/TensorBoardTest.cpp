// TensorBoard event files: the CRC-32C of TFRecord framing against the
// published check values, and the records' framing as written. The
// Event messages themselves are read back by tensorboard's own reader in
// tests/Train/tensorboard.test.
#include "kiln/Runtime/Train/TensorBoard.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

using namespace kiln::runtime;

TEST(TensorBoard, Crc32cCheckValues) {
  // RFC 3720 B.4 and the CRC catalogue's check value ("123456789").
  EXPECT_EQ(crc32c("123456789", 9), 0xe3069283u);
  std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8a9136aau);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62a8ab43u);
  uint32_t c = crc32c("123456789", 9);
  EXPECT_EQ(maskedCrc32c("123456789", 9),
            ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

#if KILN_HAVE_PROTOBUF
TEST(TensorBoard, RecordsAreFramed) {
  std::string dir = ::testing::TempDir() + "/tb-framing";
  std::filesystem::remove_all(dir);
  auto writer = TensorBoardWriter::create(dir);
  ASSERT_TRUE(writer) << writer.error();
  ASSERT_FALSE((*writer)->scalars(3, {{"loss", 2.5}, {"lr", 1e-3}}));
  std::string path = (*writer)->path();
  EXPECT_NE(path.find("/events.out.tfevents."), std::string::npos);
  writer->reset();
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  // Two records, each length, its CRC, the data and the data's CRC.
  size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t length;
    uint32_t lengthCrc, dataCrc;
    std::memcpy(&length, bytes.data() + at, 8);
    std::memcpy(&lengthCrc, bytes.data() + at + 8, 4);
    EXPECT_EQ(lengthCrc, maskedCrc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 16 + length, bytes.size());
    std::memcpy(&dataCrc, bytes.data() + at + 12 + length, 4);
    EXPECT_EQ(dataCrc, maskedCrc32c(bytes.data() + at + 12, length));
    at += 16 + length;
    ++records;
  }
  EXPECT_EQ(records, 2);
}
#endif
