#include "errors.h"

#include "granary/error_reason.h"

namespace py = pybind11;

namespace granary::python {

py::object ErrorObject(absl::string_view code, absl::string_view reason,
                       absl::string_view message) {
  py::module_ errors = py::module_::import("granary._errors");
  return errors.attr("_from_status")(py::str(code.data(), code.size()),
                                     py::str(reason.data(), reason.size()),
                                     py::str(message.data(), message.size()));
}

py::object ErrorObject(const absl::Status& status) {
  std::string code = absl::StatusCodeToString(status.code());
  return ErrorObject(code, ErrorReasonName(ErrorReasonOf(status)), status.message());
}

namespace {

[[noreturn]] void Raise(py::object error) {
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

}  // namespace

void ThrowStatus(const absl::Status& status) { Raise(ErrorObject(status)); }

void ThrowError(absl::string_view code, absl::string_view reason, absl::string_view message) {
  Raise(ErrorObject(code, reason, message));
}

void ThrowInvalidArgument(const std::string& message) {
  ThrowError("INVALID_ARGUMENT", "NONE", message);
}

void ThrowClosed() {
  py::module_ errors = py::module_::import("granary._errors");
  Raise(errors.attr("Closed")("the client is closed"));
}

void ThrowTypeError(const std::string& message) { throw py::type_error(message); }

std::string TypeName(py::handle h) {
  PyTypeObject* t = Py_TYPE(h.ptr());
  py::object module =
      py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(t)).attr("__module__");
  std::string name = t->tp_name;
  if (py::isinstance<py::str>(module)) {
    std::string m = module.cast<std::string>();
    if (m != "builtins" && name.find('.') == std::string::npos) name = m + "." + name;
  }
  return name;
}

}  // namespace granary::python
