#pragma once

// The parts of the granary._granary module, each in its own file; module.cc calls them in order.

#include "pybind11/pybind11.h"

namespace granary::python {

void BindTypes(pybind11::module_& m);   // types.cc: KvKey, ObjectInfo, SegmentInfo, ...
void BindClient(pybind11::module_& m);  // client_bind.cc: Client
// embedded.cc: EmbeddedNode and the device-pointer test hooks.
void BindEmbedded(pybind11::module_& m);
// engine_stream_hooks.cc: the test hooks of the fake backend's engine stream (the stream
// contract); engine_stream_hooks_absent.cc in a module without the fake (GRANARY_DEVICE_FAKE).
void BindEngineStreamHooks(pybind11::module_& m);

}  // namespace granary::python
