// The test hooks of the fake device backend's engine stream (bindings.h) in a module without the
// fake (GRANARY_DEVICE_FAKE off, the default): each raises, saying how to get a module with it.

#include <string>

#include "absl/strings/str_cat.h"
#include "bindings.h"

namespace granary::python {
namespace py = pybind11;

void BindEngineStreamHooks(py::module_& m) {
  for (const char* name : {"_testing_engine_stream", "_testing_engine_write",
                           "_testing_engine_event", "_testing_stream_synchronize"}) {
    const std::string message =
        absl::StrCat(name,
                     ": this module was built without the fake device backend (test code); "
                     "configure with -DGRANARY_DEVICE_FAKE=ON for one that carries it");
    m.def(
        name, [message](py::args, py::kwargs) -> py::none { throw py::value_error(message); },
        "Test hook of the fake device backend, which this module was built without.");
  }
}

}  // namespace granary::python
