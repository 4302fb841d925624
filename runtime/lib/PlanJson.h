//===- PlanJson.h - The plan loader's checked JSON readers ------*- C++ -*-===//
//
// Internal to runtime/lib/Plan.cpp: reading a JSON value of a plan as an
// integer in a range, a string, an array, a shape or a dtype, each
// returning an Error or an Expected<T> whose line names the field, never
// throwing (the types are checked before they are read).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_PLANJSON_H
#define KILN_RUNTIME_LIB_PLANJSON_H

#include "kiln/Runtime/Plan.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime::planjson {

using nlohmann::json;

/// A problem with what the plan wrote: `what` names the field.
inline Error fail(const std::string &what, const std::string &problem) {
  return Error(what + " " + problem);
}

/// A short rendering of what the plan wrote, for messages.
inline std::string shown(const json &j) {
  std::string text = j.dump();
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

/// Member `key` of the object `j` (`what` names it in messages).
inline Expected<const json *> member(const json &j, const char *key,
                                     const std::string &what) {
  if (!j.is_object())
    return fail(what, "must be an object, not " + shown(j));
  auto it = j.find(key);
  if (it == j.end())
    return fail(what, std::string("has no '") + key + "'");
  return &*it;
}

/// A JSON integer in [min, max]: 3.0, -0.5, 1e3, true and "3" are not one.
inline Expected<int64_t> integer(const json &j, int64_t min, int64_t max,
                                 const std::string &what) {
  if (j.is_number_unsigned() &&
      j.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
    return fail(what, "is " + shown(j) + ", past " + std::to_string(max));
  if (!j.is_number_integer())
    return fail(what, "must be an integer, not " + shown(j));
  int64_t v = j.get<int64_t>();
  if (v < min || v > max)
    return fail(what, "is " + std::to_string(v) + ", outside [" +
                          std::to_string(min) + ", " + std::to_string(max) +
                          "]");
  return v;
}

inline Expected<int64_t> integerMember(const json &j, const char *key,
                                       int64_t min, int64_t max,
                                       const std::string &what) {
  Expected<const json *> m = member(j, key, what);
  if (!m)
    return m.takeError();
  return integer(**m, min, max, what + " " + key);
}

/// Member `key` of the object `j`, read by `read` (text, number, shapeOf,
/// ...) and named "`what` `key`" in its messages.
template <typename Read>
auto readMember(const json &j, const char *key, const std::string &what,
                Read read) -> decltype(read(j, what)) {
  Expected<const json *> m = member(j, key, what);
  if (!m)
    return m.takeError();
  return read(**m, what + " " + key);
}

inline Expected<double> number(const json &j, const std::string &what) {
  if (!j.is_number())
    return fail(what, "must be a number, not " + shown(j));
  return j.get<double>();
}

/// Every string of a plan (names, locations, ops, attribute values, and
/// the keys that name entries, outputs and attributes) ends up in one-line
/// messages: none may hold a control character (a line break, a tab, an
/// escape sequence).
inline Error plain(const std::string &s, const std::string &what) {
  for (char c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      return fail(what, json(s).dump().size() > 40
                            ? "holds a control character"
                            : json(s).dump() + " holds a control character");
  return Error::success();
}

inline Expected<std::string> text(const json &j, const std::string &what) {
  if (!j.is_string())
    return fail(what, "must be a string, not " + shown(j));
  const std::string &s = j.get_ref<const std::string &>();
  if (Error e = plain(s, what))
    return e;
  return s;
}

inline Error array(const json &j, const std::string &what) {
  if (!j.is_array())
    return fail(what, "must be a list, not " + shown(j));
  return Error::success();
}

/// The list member `key` of the object `j`, named `what key`.
inline Expected<const json *> arrayMember(const json &j, const char *key,
                                          const std::string &what) {
  Expected<const json *> m = member(j, key, what);
  if (!m)
    return m;
  if (Error e = array(**m, what + " " + key))
    return e;
  return m;
}

inline Expected<std::vector<int64_t>>
integers(const json &j, int64_t min, int64_t max, const std::string &what) {
  if (Error e = array(j, what))
    return e;
  std::vector<int64_t> out;
  for (const json &e : j) {
    Expected<int64_t> v = integer(e, min, max, what + " element");
    if (!v)
      return v.takeError();
    out.push_back(*v);
  }
  return out;
}

/// A tensor shape: dimensions of at most kMaxElements, and so many
/// elements at most (checked without overflow).
inline Expected<std::vector<int64_t>> shapeOf(const json &j,
                                              const std::string &what) {
  Expected<std::vector<int64_t>> shape =
      integers(j, 0, plan::kMaxElements, what);
  if (!shape)
    return shape;
  if (shape->size() > 8)
    return fail(what, "has " + std::to_string(shape->size()) +
                          " dimensions; plan tensors have at most 8");
  int64_t n = 1;
  for (int64_t d : *shape) {
    if (d != 0 && n > plan::kMaxElements / d)
      return fail(what, "has more than 2^48 elements");
    n *= d;
  }
  return shape;
}

inline Expected<DType> parseDType(const json &j, const std::string &what) {
  static const std::map<std::string, DType> names = {
      {"f32", DType::F32},       {"bf16", DType::BF16},    {"f16", DType::F16},
      {"f64", DType::F64},       {"i32", DType::I32},      {"i64", DType::I64},
      {"f8e4m3", DType::F8E4M3}, {"f8e5m2", DType::F8E5M2}};
  Expected<std::string> name = text(j, what);
  if (!name)
    return name.takeError();
  auto it = names.find(*name);
  if (it == names.end())
    return fail(what, "is an unknown dtype " + shown(j));
  return it->second;
}

/// A value of `names`, named by the string member `key` of `j` (an
/// unknown one is "`what` has an unknown `noun` ...").
template <typename T>
Expected<T> enumMember(const std::map<std::string, T> &names, const json &j,
                       const char *key, const std::string &what,
                       const char *noun) {
  Expected<const json *> m = member(j, key, what);
  if (!m)
    return m.takeError();
  Expected<std::string> name = text(**m, what + " " + key);
  if (!name)
    return name.takeError();
  auto it = names.find(*name);
  if (it == names.end())
    return fail(what, std::string("has an unknown ") + noun + " " + shown(**m));
  return it->second;
}

} // namespace kiln::runtime::planjson

#endif // KILN_RUNTIME_LIB_PLANJSON_H
