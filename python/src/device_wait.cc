// The `stream=` and `event=` arguments of the put calls (device_wait.h).

#include "device_wait.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace granary::python {
namespace py = pybind11;

namespace {

// CUDA's cudaStreamLegacy: nullptr means "no stream" in DeviceWait.
void* const kLegacyStream = reinterpret_cast<void*>(uintptr_t{1});

// The handle in `arg` (an int, or an object whose `attr` is one); `present` tells a 0 handle
// given from nothing given.
uintptr_t HandleOf(py::handle arg, const char* name, const char* attr, bool* present) {
  *present = false;
  if (arg.is_none()) return 0;
  py::object value = py::reinterpret_borrow<py::object>(arg);
  if (!py::isinstance<py::int_>(value) && py::hasattr(value, attr)) value = value.attr(attr);
  if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value)) {
    throw py::type_error(absl::StrCat(name, " must be None, an int handle or an object with `",
                                      attr, "` (torch.cuda.Stream, torch.cuda.Event), not ",
                                      std::string(py::str(py::type::of(arg).attr("__name__")))));
  }
  if (value.cast<py::int_>() < py::int_(0)) {
    throw py::value_error(std::string(name) + " handle must not be negative");
  }
  *present = true;
  return value.cast<uintptr_t>();
}

}  // namespace

DeviceWait WaitOf(py::handle stream, py::handle event) {
  DeviceWait wait;
  bool present = false;
  const uintptr_t s = HandleOf(stream, "stream", "cuda_stream", &present);
  if (present) wait.stream = s == 0 ? kLegacyStream : reinterpret_cast<void*>(s);
  wait.event = reinterpret_cast<void*>(HandleOf(event, "event", "cuda_event", &present));
  return wait;
}

}  // namespace granary::python
