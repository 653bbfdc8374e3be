#pragma once

// Errors at the binding boundary: an absl::Status becomes an instance of the granary.Error
// hierarchy (python/granary/_errors.py), chosen by the status's typed reason
// (granary::ErrorReasonOf) first and its code second. The classes live in Python; these helpers
// import granary._errors when they need it (only on an error path). Call them with the GIL held.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "pybind11/pybind11.h"

namespace granary::python {

// A granary.Error instance (not raised) for a non-OK status.
pybind11::object ErrorObject(const absl::Status& status);

// An error instance from its parts: code is an absl code name ("INVALID_ARGUMENT"), reason an
// ErrorReasonName ("NONE", "DEVICE_POINTER", ...).
pybind11::object ErrorObject(absl::string_view code, absl::string_view reason,
                             absl::string_view message);

// Raises ErrorObject(status) (a C++ exception pybind turns back into the Python one).
[[noreturn]] void ThrowStatus(const absl::Status& status);
// Raises ErrorObject(code, reason, message).
[[noreturn]] void ThrowError(absl::string_view code, absl::string_view reason,
                             absl::string_view message);
// Raises granary.InvalidArgument with `message`.
[[noreturn]] void ThrowInvalidArgument(const std::string& message);
// Raises granary.Closed: a call on a closed client.
[[noreturn]] void ThrowClosed();
// Raises TypeError with `message`.
[[noreturn]] void ThrowTypeError(const std::string& message);

// OK: nothing; otherwise ThrowStatus.
inline void Check(const absl::Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

// The Python type name of `h`, for messages ("int", "numpy.ndarray").
std::string TypeName(pybind11::handle h);

}  // namespace granary::python
