#pragma once

#include <cstddef>

namespace granary {

// Whether any byte of [p, p + n) is CUDA device or managed memory, which a CPU copy must never
// touch. Asks the process's device backend (GRANARY_DEVICE_BACKEND: cuda, fake or none; chosen
// once, at the first call) to classify the first and the last byte: device and managed memory
// count, pinned and pageable host memory do not. With the `none` backend (a build without CUDA,
// or no usable device) it asks the CUDA driver instead (libcuda.so.1, opened with dlopen on the
// first call and kept; neither linked nor initialised by the library): false when the driver is
// absent or answers with an error (plain host memory). False when n is 0.
//
// Also true for a range that overlaps one added with testing::AddFakeDeviceRange.
//
// Thread-safe. Cost per call on host memory: with no fake range, one atomic load and a virtual
// call, then per byte asked: cuda, one cudaPointerGetAttributes (no system call); fake, two
// atomic loads (a lock only for an address inside the span of its fake memory); none, up to two
// driver calls, or nothing without a driver. No allocation.
bool IsDevicePointer(const void* p, size_t n);

namespace testing {

// Makes IsDevicePointer answer true for any range overlapping [p, p + n), so tests on machines
// without a GPU can exercise the refusal paths. The memory itself is never touched. Thread-safe.
void AddFakeDeviceRange(const void* p, size_t n);
// Forgets every fake range.
void ClearFakeDeviceRanges();

}  // namespace testing
}  // namespace granary
