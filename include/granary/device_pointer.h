#pragma once

#include <cstddef>

namespace granary {

// Whether any byte of [p, p + n) is CUDA device or managed memory, which a CPU copy must never
// touch. Asks the CUDA driver (libcuda.so.1, opened with dlopen on the first call and kept; the
// library neither links CUDA nor initialises it) for the memory type of the first and the last
// byte. False when n is 0, when the driver is absent, and when it answers with an error (not
// initialised in this process, or memory it does not know: plain host memory). Pinned host
// memory (cudaHostAlloc, cuMemHostRegister) is host memory: false.
//
// Also true for a range that overlaps one added with testing::AddFakeDeviceRange.
//
// Thread-safe. Cost: with no fake range and no driver, one atomic load and a static's guard
// check; with the driver, up to four driver calls (memory type and managed flag, two bytes).
bool IsDevicePointer(const void* p, size_t n);

namespace testing {

// Makes IsDevicePointer answer true for any range overlapping [p, p + n), so tests on machines
// without a GPU can exercise the refusal paths. The memory itself is never touched. Thread-safe.
void AddFakeDeviceRange(const void* p, size_t n);
// Forgets every fake range.
void ClearFakeDeviceRanges();

}  // namespace testing
}  // namespace granary
