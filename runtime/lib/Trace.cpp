//===- Trace.cpp - A Chrome trace of a run's steps ------------------------===//

#include "kiln/Runtime/Trace.h"
#include "kiln/Runtime/Support/AtomicFile.h"

#include <sstream>

namespace kiln::runtime {

void Trace::add(std::string name, Track track, Clock::time_point begin,
                Clock::time_point end) {
  using Micro = std::chrono::duration<double, std::micro>;
  events.push_back({std::move(name), track, Micro(begin - origin).count(),
                    Micro(end - begin).count()});
}

namespace {
std::string quoted(const std::string &s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20)
      out += c;
  }
  return out + "\"";
}
} // namespace

Error Trace::write(const std::string &path) const {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed << "{\"traceEvents\": [\n";
  double originUs =
      std::chrono::duration<double, std::micro>(origin.time_since_epoch())
          .count();
  os << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << rank
     << ", \"args\": {\"name\": \"rank " << rank
     << "\", \"origin_us\": " << originUs << "}},\n";
  os << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << rank
     << ", \"tid\": 1, \"args\": {\"name\": \"compute\"}},\n";
  os << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << rank
     << ", \"tid\": 2, \"args\": {\"name\": \"communication\"}},\n";
  os << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << rank
     << ", \"tid\": 3, \"args\": {\"name\": \"communication tp\"}},\n";
  os << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << rank
     << ", \"tid\": 4, \"args\": {\"name\": \"pipeline\"}},\n";
  os << "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << rank
     << ", \"tid\": 5, \"args\": {\"name\": \"pipeline units\"}}";
  for (const Event &e : events)
    os << ",\n{\"name\": " << quoted(e.name) << ", \"ph\": \"X\", \"pid\": "
       << rank << ", \"tid\": " << static_cast<int>(e.track)
       << ", \"ts\": " << e.begin << ", \"dur\": " << e.duration << "}";
  os << "\n]}\n";
  return writeFileAtomically(path, os.str());
}

} // namespace kiln::runtime
