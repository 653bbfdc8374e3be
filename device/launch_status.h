#pragma once

// Private to device/ and device/fake/: the status of a kernel launch, read the way CUDA reports it.
// Free of absl and of CUDA headers, so that kernels.cu (through nvcc) and the fake backend share
// it.

namespace granary::device::internal {

// A kernel launch (`<<<>>>`) returns nothing: its error, if any, lands in the calling thread's
// last-error slot, which `get_last_error` (cudaGetLastError, or the fake backend's model of it)
// reads and clears. The slot may already hold an error of an earlier call of this thread that
// nobody read (cudaEventQuery's cudaErrorNotReady, another library's unchecked call), which would
// then pass for this launch's. So the slot is cleared just before the launch, as the CUDA
// Programming Guide ("Error Checking") asks, and read right after it. Cost: two reads of a
// thread-local slot.
template <typename GetLastError, typename Launch>
auto LaunchStatus(GetLastError get_last_error, Launch launch) {
  (void)get_last_error();
  launch();
  return get_last_error();
}

}  // namespace granary::device::internal
