//===- Safetensors.cpp - Reading and writing safetensors files ------------===//
//
// The header is parsed with nlohmann::json's non-throwing parse and every
// field is type-checked before use, so no input reaches a throwing accessor.
// All offsets are checked against the file's size before any tensor is
// allocated: a file can only make the reader allocate about its own size.
//
//===----------------------------------------------------------------------===//

#include "kiln/Runtime/Safetensors.h"
#include "kiln/Runtime/Support/Files.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fcntl.h>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

// Tensor bytes are copied to and from memory as they are: the file is
// little-endian, so the host must be too.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors I/O assumes a little-endian host");

namespace kiln::runtime {

using nlohmann::json;

namespace {
constexpr const char *kMetadataKey = "__metadata__";
// Bounds element counts far below int64 overflow (and any real tensor).
constexpr uint64_t kMaxElements = uint64_t(1) << 60;

std::string errnoText() { return std::strerror(errno); }

/// Product of `shape`, or nothing when it exceeds kMaxElements.
std::optional<uint64_t> elementCount(const std::vector<uint64_t> &shape) {
  uint64_t count = 1;
  for (uint64_t d : shape)
    if (d == 0)
      return 0;
  for (uint64_t d : shape) {
    if (d > kMaxElements || count > kMaxElements / d)
      return std::nullopt;
    count *= d;
  }
  return count;
}

/// The header's JSON text, padded with spaces so that 8 + its length is a
/// multiple of 8 (the data then starts 8-byte aligned), or an error.
Error buildHeader(const std::string &what,
                  const std::vector<FloatTensor> &tensors,
                  const std::map<std::string, std::string> &metadata,
                  std::string &header,
                  std::vector<const FloatTensor *> *inNameOrder = nullptr) {
  std::vector<const FloatTensor *> sorted;
  for (const FloatTensor &t : tensors)
    sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const FloatTensor *a, const FloatTensor *b) {
              return a->name < b->name;
            });
  json j = json::object();
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const FloatTensor &t = *sorted[i];
    std::string where = what + ": tensor '" + t.name + "'";
    if (t.name == kMetadataKey)
      return Error(where + " has the reserved name " + kMetadataKey);
    if (i > 0 && sorted[i - 1]->name == t.name)
      return Error(where + " appears twice");
    std::vector<uint64_t> dims;
    for (int64_t d : t.shape) {
      if (d < 0)
        return Error(where + " has a negative dimension in shape " +
                     shapeString(t.shape));
      dims.push_back(static_cast<uint64_t>(d));
    }
    std::optional<uint64_t> count = elementCount(dims);
    if (!count || *count != t.data.size())
      return Error(where + " has " + std::to_string(t.data.size()) +
                   " values but shape " + shapeString(t.shape) + " needs " +
                   (count ? std::to_string(*count) : std::string("too many")));
    uint64_t end = offset + *count * sizeof(float);
    j[t.name] = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  if (!metadata.empty())
    j[kMetadataKey] = metadata;
  // dump() throws only on invalid UTF-8 in a name or metadata string.
  try {
    header = j.dump();
  } catch (const json::exception &) {
    return Error(what +
                 ": a tensor name or metadata string is not valid UTF-8");
  }
  header.append((8 - header.size() % 8) % 8, ' ');
  if (inNameOrder)
    *inNameOrder = std::move(sorted);
  return Error::success();
}

/// Reads exactly `bytes` at `offset`; false on an error or a short file.
bool readAt(int fd, uint64_t offset, void *out, size_t bytes) {
  char *p = static_cast<char *>(out);
  while (bytes > 0) {
    ssize_t n = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      if (n == 0)
        errno = EIO; // the file shrank after it was measured
      return false;
    }
    p += n;
    offset += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return true;
}

struct FdCloser {
  int fd;
  ~FdCloser() { ::close(fd); }
};

/// One header entry, checked against the data's size.
enum class Stored { F32, BF16, F16 };

struct Entry {
  std::string name;
  Stored stored = Stored::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0, count = 0;
};

/// A JSON value that is a non-negative integer (the parser stores those as
/// unsigned).
bool isNonNegativeInteger(const json &j) { return j.is_number_unsigned(); }

Error parseEntry(const std::string &name, const json &j, uint64_t dataBytes,
                 Entry &entry) {
  std::string where = "tensor '" + name + "'";
  if (!j.is_object())
    return Error("the entry of " + where + " is not an object");
  entry.name = name;

  auto dtype = j.find("dtype");
  if (dtype == j.end() || !dtype->is_string())
    return Error(where + " has no dtype string");
  const std::string &type = dtype->get_ref<const std::string &>();
  if (type != "F32" && type != "BF16" && type != "F16")
    return Error(where + " has unsupported dtype '" + type +
                 "' (this reader takes F32, BF16 and F16)");
  entry.stored = type == "BF16"  ? Stored::BF16
                 : type == "F16" ? Stored::F16
                                 : Stored::F32;
  uint64_t elementBytes = entry.stored == Stored::F32 ? 4 : 2;

  auto shape = j.find("shape");
  std::vector<uint64_t> dims;
  if (shape == j.end() || !shape->is_array())
    return Error("the shape of " + where +
                 " is not a list of non-negative integers");
  for (const json &d : *shape) {
    if (!isNonNegativeInteger(d))
      return Error("the shape of " + where +
                   " is not a list of non-negative integers");
    dims.push_back(d.get<uint64_t>());
  }
  std::optional<uint64_t> count = elementCount(dims);
  if (!count)
    return Error("the shape of " + where + " has too many elements");
  entry.count = *count;
  for (uint64_t d : dims)
    entry.shape.push_back(static_cast<int64_t>(d));

  auto offsets = j.find("data_offsets");
  if (offsets == j.end() || !offsets->is_array() || offsets->size() != 2 ||
      !isNonNegativeInteger((*offsets)[0]) ||
      !isNonNegativeInteger((*offsets)[1]))
    return Error("the data_offsets of " + where +
                 " are not a list of two non-negative integers");
  entry.begin = (*offsets)[0].get<uint64_t>();
  entry.end = (*offsets)[1].get<uint64_t>();
  std::string range = "[" + std::to_string(entry.begin) + ", " +
                      std::to_string(entry.end) + "]";
  if (entry.begin > entry.end)
    return Error("the data_offsets " + range + " of " + where + " decrease");
  if (entry.end > dataBytes)
    return Error("the data_offsets " + range + " of " + where +
                 " reach beyond the data, which has " +
                 std::to_string(dataBytes) + " bytes (is the file truncated?)");
  if (entry.end - entry.begin != entry.count * elementBytes)
    return Error("the data_offsets " + range + " of " + where + " span " +
                 std::to_string(entry.end - entry.begin) + " bytes but shape " +
                 shapeString(entry.shape) + " of " + type + " needs " +
                 std::to_string(entry.count * elementBytes));
  return Error::success();
}

Error parseMetadata(const json &j,
                    std::map<std::string, std::string> &metadata) {
  if (!j.is_object())
    return Error(std::string(kMetadataKey) + " is not an object");
  for (const auto &[key, value] : j.items()) {
    if (!value.is_string())
      return Error("metadata value of '" + key + "' is not a string");
    metadata[key] = value.get<std::string>();
  }
  return Error::success();
}

/// Tensors with data must occupy disjoint byte ranges. (Gaps are allowed:
/// they waste space but do not make the file ambiguous.)
Error checkDisjoint(std::vector<const Entry *> entries) {
  entries.erase(
      std::remove_if(entries.begin(), entries.end(),
                     [](const Entry *e) { return e->begin == e->end; }),
      entries.end());
  std::sort(entries.begin(), entries.end(),
            [](const Entry *a, const Entry *b) { return a->begin < b->begin; });
  for (size_t i = 1; i < entries.size(); ++i)
    if (entries[i]->begin < entries[i - 1]->end)
      return Error("tensors '" + entries[i - 1]->name + "' and '" +
                   entries[i]->name + "' overlap in the data");
  return Error::success();
}

/// Parses the header text into checked entries (in name order) and
/// metadata. `dataBytes` is the size of the data section.
Error parseHeader(const std::string &text, uint64_t dataBytes,
                  std::vector<Entry> &entries,
                  std::map<std::string, std::string> &metadata) {
  // A JSON object keeps only the last of repeated keys; a repeated tensor
  // name is an ambiguous file, so the parser callback notices it.
  std::set<std::string> keys;
  std::string repeated;
  json::parser_callback_t noteKeys = [&](int depth, json::parse_event_t event,
                                         json &parsed) {
    if (event == json::parse_event_t::key && depth == 1 &&
        !keys.insert(parsed.get<std::string>()).second && repeated.empty())
      repeated = parsed.get<std::string>();
    return true;
  };
  json j = json::parse(text, noteKeys, /*allow_exceptions=*/false);
  // The parser stops at a NUL byte as at the end of its input, which would
  // accept anything after one.
  if (j.is_discarded() || text.find('\0') != std::string::npos)
    return Error(std::string("the header is not valid JSON"));
  if (!j.is_object())
    return Error(std::string("the header is not a JSON object"));
  if (!repeated.empty())
    return Error("the header names '" + repeated + "' twice");
  for (const auto &[name, value] : j.items()) {
    if (name == kMetadataKey) {
      if (auto error = parseMetadata(value, metadata))
        return error;
      continue;
    }
    Entry entry;
    if (auto error = parseEntry(name, value, dataBytes, entry))
      return error;
    entries.push_back(std::move(entry));
  }
  std::vector<const Entry *> pointers;
  for (const Entry &e : entries)
    pointers.push_back(&e);
  return checkDisjoint(std::move(pointers));
}

/// The float an IEEE binary16 holds (exact: every half is a float).
float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  int exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) // zero or subnormal: mantissa x 2^-24
    return std::copysign(std::ldexp(float(mantissa), -24), sign ? -1.0f : 1.0f);
  uint32_t bits =
      exponent == 0x1f
          ? sign | 0x7f800000u | (mantissa << 13) // inf, NaN
          : sign | (uint32_t(exponent - 15 + 127) << 23) | (mantissa << 13);
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

/// Reads one checked entry's data, widening BF16 and F16 to float.
bool readTensor(int fd, uint64_t dataStart, const Entry &entry,
                FloatTensor &tensor) {
  tensor.name = entry.name;
  tensor.shape = entry.shape;
  tensor.data.resize(entry.count);
  uint64_t offset = dataStart + entry.begin;
  if (entry.stored == Stored::F32)
    return readAt(fd, offset, tensor.data.data(), entry.count * 4);
  std::vector<uint16_t> halves(entry.count);
  if (!readAt(fd, offset, halves.data(), entry.count * 2))
    return false;
  for (uint64_t i = 0; i < entry.count; ++i) {
    if (entry.stored == Stored::F16) {
      tensor.data[i] = halfToFloat(halves[i]);
      continue;
    }
    uint32_t bits = uint32_t(halves[i]) << 16;
    std::memcpy(&tensor.data[i], &bits, sizeof bits);
  }
  return true;
}
} // namespace

std::string shapeString(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

//===----------------------------------------------------------------------===//
// Writing and reading
//===----------------------------------------------------------------------===//

Error checkWritable(const std::string &what,
                    const std::vector<FloatTensor> &tensors,
                    const std::map<std::string, std::string> &metadata) {
  std::string header;
  return buildHeader(what, tensors, metadata, header);
}

Error stageSafetensors(AtomicFile &file,
                       const std::vector<FloatTensor> &tensors,
                       const std::map<std::string, std::string> &metadata) {
  std::string header;
  std::vector<const FloatTensor *> sorted;
  if (auto error = buildHeader(file.path(), tensors, metadata, header, &sorted))
    return error;
  return file.write([&](std::FILE *f) {
    unsigned char length[8];
    for (int i = 0; i < 8; ++i)
      length[i] =
          static_cast<unsigned char>(uint64_t(header.size()) >> (8 * i));
    if (!writeAll(f, length, sizeof length) ||
        !writeAll(f, header.data(), header.size()))
      return false;
    for (const FloatTensor *t : sorted)
      if (!writeAll(f, t->data.data(), t->data.size() * sizeof(float)))
        return false;
    return true;
  });
}

Error writeSafetensors(const std::string &path,
                       const std::vector<FloatTensor> &tensors,
                       const std::map<std::string, std::string> &metadata) {
  AtomicFile file(path);
  if (auto error = stageSafetensors(file, tensors, metadata))
    return error;
  return file.commit();
}

Expected<SafetensorsContents> readSafetensors(const std::string &path) {
  auto fail = [&](const std::string &what) {
    return Error(path + ": " + what);
  };
  // A FIFO in a checkpoint's place must not block the open: the check
  // refuses anything but a regular file.
  int64_t fileBytes = 0;
  Expected<int> opened =
      openRegularFile(path, kMaxSafetensorsBytes, "checkpoint file", fileBytes);
  if (!opened)
    return opened.takeError();
  int fd = *opened;
  FdCloser closer{fd};
  uint64_t size = static_cast<uint64_t>(fileBytes);
  if (size < 8)
    return fail("the file has " + std::to_string(size) +
                " bytes, too short for the 8-byte header length");

  unsigned char length[8];
  if (!readAt(fd, 0, length, sizeof length))
    return fail("cannot read: " + errnoText());
  uint64_t headerBytes = 0;
  for (int i = 0; i < 8; ++i)
    headerBytes |= uint64_t(length[i]) << (8 * i);
  if (headerBytes > kMaxSafetensorsHeaderBytes)
    return fail("the header length " + std::to_string(headerBytes) +
                " is absurd (more than 100 MB); not a safetensors file?");
  if (headerBytes > size - 8)
    return fail("the header length " + std::to_string(headerBytes) +
                " is larger than the file (" + std::to_string(size) +
                " bytes)");

  std::string header(headerBytes, '\0');
  if (!readAt(fd, 8, header.data(), header.size()))
    return fail("cannot read the header: " + errnoText());
  uint64_t dataStart = 8 + headerBytes;
  std::vector<Entry> entries;
  SafetensorsContents contents;
  if (auto what =
          parseHeader(header, size - dataStart, entries, contents.metadata))
    return fail(what.message());

  for (const Entry &entry : entries) {
    FloatTensor tensor;
    if (!readTensor(fd, dataStart, entry, tensor))
      return fail("cannot read tensor '" + entry.name + "': " + errnoText());
    contents.tensors.push_back(std::move(tensor));
  }
  return contents;
}

} // namespace kiln::runtime
