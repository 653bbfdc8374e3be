#pragma once

// The engine's stream and event of a put (granary::DeviceWait, the stream contract of
// include/granary/client.h) from Python: the `stream=` and `event=` arguments of put_from,
// batch_put_from and batch_put_from_regions.

#include "granary/client.h"
#include "pybind11/pybind11.h"

namespace granary::python {

// Each of `stream` and `event` is None (nothing to wait for), an int (a raw cudaStream_t or
// cudaEvent_t of the process's device backend), or an object carrying one: torch.cuda.Stream's
// `cuda_stream`, torch.cuda.Event's `cuda_event` (0 until the event is first recorded: nothing
// to wait for, as CUDA treats it). A stream handle of 0 is CUDA's legacy default stream (torch's
// default stream), passed on as cudaStreamLegacy. TypeError naming the argument otherwise, or
// ValueError for a negative int. Needs the GIL.
DeviceWait WaitOf(pybind11::handle stream, pybind11::handle event);

}  // namespace granary::python
