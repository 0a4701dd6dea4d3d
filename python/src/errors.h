// The one place where stoker Status errors become Python exceptions.
//
// C++ code in the binding calls ThrowIfError / ValueOrThrow; the exception translator
// registered by RegisterErrors() turns StatusError into the Python class for its code,
// with the core's message unchanged:
//
//   kInvalidArgument -> stoker.InvalidArgumentError (also a ValueError)
//   kNotFound        -> stoker.NotFoundError        (also a FileNotFoundError)
//   kIOError         -> stoker.StokerIOError        (also an OSError)
//   kCorrupt         -> stoker.CorruptDataError
//   kUnimplemented   -> stoker.UnimplementedError   (also a NotImplementedError)
//   kCancelled       -> stoker.CancelledError
//   kOutOfRange      -> stoker.EndOfStreamError     (also an IndexError)
//   kDeadlineExceeded -> stoker.StallError          (also a TimeoutError)
//   kInternal        -> stoker.InternalError
// All derive from stoker.StokerError, which carries `.code` (the StatusCode name).
#pragma once

#include <pybind11/pybind11.h>

#include <exception>
#include <string>
#include <utility>

#include "core/status.h"

namespace stoker::py {

class StatusError : public std::exception {
 public:
  explicit StatusError(Status st) : st_(std::move(st)) {}
  const char* what() const noexcept override { return st_.message().c_str(); }
  const Status& status() const { return st_; }

 private:
  Status st_;
};

inline void ThrowIfError(const Status& st) {
  if (!st.ok()) throw StatusError(st);
}

template <typename T>
T ValueOrThrow(Result<T> r) {
  if (!r.ok()) throw StatusError(r.status());
  return std::move(r).value();
}

// Creates the exception classes in `m` and registers the translator.
void RegisterErrors(pybind11::module_& m);

}  // namespace stoker::py
