// Status and Result<T>: the error channel of the stoker core. No exceptions cross
// module boundaries; the CLI prints, the Python layer translates (one place).
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include <fmt/format.h>

namespace stoker {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,  // the caller (or the user's input) is wrong
  kNotFound,
  kIOError,
  kCorrupt,          // data is malformed: bad CRC, truncated file, undecodable image
  kUnimplemented,
  kCancelled,        // the consumer stopped the pipeline
  kInternal,
  kOutOfRange,       // end of stream
  kDeadlineExceeded, // nothing happened for longer than allowed (a stalled read)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string msg) : code_(code), msg_(std::move(msg)) {}

  static Status OK() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;

  // Prefix context on the error path only ("reading shard x.tar: ...").
  Status WithContext(const std::string& ctx) const {
    if (ok()) return *this;
    return Status(code_, ctx + ": " + msg_);
  }
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string msg_;
};

template <typename... Args>
Status InvalidArgument(fmt::format_string<Args...> f, Args&&... a) {
  return Status(StatusCode::kInvalidArgument, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
Status NotFound(fmt::format_string<Args...> f, Args&&... a) {
  return Status(StatusCode::kNotFound, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
Status IOError(fmt::format_string<Args...> f, Args&&... a) {
  return Status(StatusCode::kIOError, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
Status Corrupt(fmt::format_string<Args...> f, Args&&... a) {
  return Status(StatusCode::kCorrupt, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
Status Internal(fmt::format_string<Args...> f, Args&&... a) {
  return Status(StatusCode::kInternal, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
Status Unimplemented(fmt::format_string<Args...> f, Args&&... a) {
  return Status(StatusCode::kUnimplemented, fmt::format(f, std::forward<Args>(a)...));
}
inline Status Cancelled(std::string m = "cancelled") {
  return Status(StatusCode::kCancelled, std::move(m));
}
template <typename... Args>
Status DeadlineExceeded(fmt::format_string<Args...> f, Args&&... a) {
  return Status(StatusCode::kDeadlineExceeded, fmt::format(f, std::forward<Args>(a)...));
}
inline Status EndOfStream() { return Status(StatusCode::kOutOfRange, "end of stream"); }

// Result<T>: a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status st) : v_(std::move(st)) {    // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from OK status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::OK() : std::get<Status>(v_); }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T ValueOr(T alt) const& { return ok() ? value() : std::move(alt); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace stoker

#define STOKER_CONCAT_INNER(a, b) a##b
#define STOKER_CONCAT(a, b) STOKER_CONCAT_INNER(a, b)

#define STOKER_RETURN_IF_ERROR(expr)            \
  do {                                          \
    ::stoker::Status _st = (expr);              \
    if (!_st.ok()) return _st;                  \
  } while (0)

#define STOKER_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.status();                \
  lhs = std::move(tmp).value()

#define STOKER_ASSIGN_OR_RETURN(lhs, expr) \
  STOKER_ASSIGN_OR_RETURN_IMPL(STOKER_CONCAT(_res_, __LINE__), lhs, expr)
