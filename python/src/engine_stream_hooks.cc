// The test hooks of the fake device backend's engine stream (bindings.h), in a module that
// carries the fake (GRANARY_DEVICE_FAKE; engine_stream_hooks_absent.cc otherwise).

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bindings.h"
#include "device/device_backend.h"
#include "device/fake/fake_backend.h"

namespace granary::python {
namespace py = pybind11;

namespace {

device::FakeBackend& Fake() {
  auto* fake = dynamic_cast<device::FakeBackend*>(&device::ActiveBackend());
  if (fake == nullptr) {
    throw py::value_error(absl::StrCat("the engine stream needs the fake device backend, not ",
                                       device::ActiveBackendName()));
  }
  return *fake;
}

void Ok(const absl::Status& st) {
  if (!st.ok()) throw py::value_error(std::string(st.message()));
}

}  // namespace

void BindEngineStreamHooks(py::module_& m) {
  m.def(
      "_testing_engine_stream",
      [](int64_t hold_ms) {
        absl::StatusOr<void*> s = Fake().CreateEngineStream(0, absl::Milliseconds(hold_ms));
        Ok(s.status());
        return reinterpret_cast<uintptr_t>(*s);
      },
      py::arg("hold_ms"),
      "Test hook (fake backend): an engine stream on device 0 whose writes land only once it "
      "is synchronized, an event recorded on it is waited for, or hold_ms has passed.");
  m.def(
      "_testing_engine_write",
      [](uintptr_t stream, uintptr_t dst, uintptr_t src, size_t size) {
        Ok(Fake().runtime().CopyAsync(reinterpret_cast<void*>(stream), reinterpret_cast<void*>(dst),
                                      reinterpret_cast<const void*>(src), size));
      },
      py::arg("stream"), py::arg("dst"), py::arg("src"), py::arg("size"),
      "Test hook (fake backend): enqueue a copy on the stream (src must stay alive until the "
      "stream is synchronized).");
  m.def(
      "_testing_engine_event",
      [](uintptr_t stream) {
        absl::StatusOr<void*> e = Fake().runtime().CreateEvent(0);
        Ok(e.status());
        Ok(Fake().runtime().RecordEvent(*e, reinterpret_cast<void*>(stream)));
        return reinterpret_cast<uintptr_t>(*e);
      },
      py::arg("stream"),
      "Test hook (fake backend): a new event, recorded on the stream (never destroyed).");
  m.def(
      "_testing_stream_synchronize",
      [](uintptr_t stream) {
        Ok(Fake().runtime().SynchronizeStream(reinterpret_cast<void*>(stream)));
      },
      py::arg("stream"), "Test hook (fake backend): synchronize the stream.");
}

}  // namespace granary::python
