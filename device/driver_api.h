#pragma once

// Private to device/ and to the client's pointer checks: what the CUDA driver says about an
// address, asked without initializing CUDA and without creating a context. CUDA-free: the driver
// (libcuda.so.1) is opened with dlopen at first use and never closed, so this builds without the
// toolkit, and where the driver is absent every address is host memory.
//
// Why not the runtime: cudaPointerGetAttributes creates a primary context on the calling thread's
// current device (GPU 0 unless the thread chose one: hundreds of MiB of GPU memory in every
// process that classifies a buffer, host-only ones included), and any runtime call initializes
// the driver (cuInit), after which a child forked from the process can no longer use CUDA. The
// driver's cuPointerGetAttributes does neither. Before anything in the process initialized the
// driver it answers CUDA_ERROR_NOT_INITIALIZED, and then no device memory can exist here.

#include "device/device_runtime.h"

namespace granary::device::internal {

// Whether the NVIDIA driver library (libcuda.so.1) loads. Loads it once; initializes nothing.
bool DriverPresent();

// The driver's answer for `p`: kDevice or kManaged with the device index (the runtime's numbering:
// both honour CUDA_VISIBLE_DEVICES), kPinnedHost for page-locked or registered host memory, kHost
// for anything else, and when the driver is absent or not initialized. Thread-safe; cost per
// call: one driver call, no lock, no allocation.
PointerInfo ClassifyWithDriver(const void* p);

}  // namespace granary::device::internal
