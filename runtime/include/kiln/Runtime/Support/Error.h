//===- Error.h - The runtime's error and value-or-error types ---*- C++ -*-===//
//
// How the runtime reports a failure it does not recover from itself:
//
// - An operation without a value returns an `Error`: a message, empty on
//   success. It tests true when it holds a failure, so a caller passes it
//   up with `if (Error e = f()) return e;`.
// - An operation with a value returns an `Expected<T>`: the value, or the
//   Error that kept it from being made. It tests true when it holds the
//   value.
//
// Both are [[nodiscard]]: a failure is read or passed on, never dropped.
// The message is the whole of an Error; nothing else is carried, and no
// caller recovers by kind. This is the bottom layer: the standard library
// only.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SUPPORT_ERROR_H
#define KILN_RUNTIME_SUPPORT_ERROR_H

#include <cassert>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>

namespace kiln::runtime {

/// Success (no message) or a failure (its message).
class [[nodiscard]] Error {
public:
  /// Success.
  Error() = default;
  /// A failure with `message`; an empty message is success.
  explicit Error(std::string message) : message_(std::move(message)) {}

  static Error success() { return Error(); }

  /// True when this is a failure.
  explicit operator bool() const { return !message_.empty(); }

  /// The failure's message; empty on success.
  const std::string &message() const { return message_; }
  /// Moves the message out, leaving success behind.
  std::string takeMessage() { return std::exchange(message_, {}); }

private:
  std::string message_;
};

/// Prints the message (for tests and logs).
inline std::ostream &operator<<(std::ostream &os, const Error &error) {
  return os << error.message();
}

/// A value of type T, or the Error that replaced it.
template <typename T> class [[nodiscard]] Expected {
public:
  /// The value.
  Expected(T value) : value_(std::move(value)) {}
  /// A failure; `error` must hold one.
  Expected(Error error) : error_(std::move(error)) {
    assert(error_ && "an Expected built from an Error needs a failure");
  }
  /// The value or failure of an Expected of a type T converts from (a
  /// derived class's pointer to its base's).
  template <typename U,
            typename = std::enable_if_t<!std::is_same_v<U, T> &&
                                        std::is_convertible_v<U, T>>>
  Expected(Expected<U> &&other) {
    if (other)
      value_.emplace(std::move(*other));
    else
      error_ = other.takeError();
  }

  /// True when this holds the value.
  explicit operator bool() const { return value_.has_value(); }
  bool hasValue() const { return value_.has_value(); }

  T &operator*() & { return *value_; }
  const T &operator*() const & { return *value_; }
  T &&operator*() && { return std::move(*value_); }
  T *operator->() { return &*value_; }
  const T *operator->() const { return &*value_; }

  /// The failure; success when this holds the value.
  const Error &error() const { return error_; }
  /// Moves the failure out (to return it from the caller).
  Error takeError() { return std::move(error_); }

private:
  std::optional<T> value_;
  Error error_;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_SUPPORT_ERROR_H
