#pragma once

// Device memory for Granary (docs/architecture.md section 7). Callers never include CUDA headers:
// this API compiles and links in every build. In a build without CUDA (GRANARY_HAVE_CUDA undefined)
// every call returns FAILED_PRECONDITION "granary was built without CUDA support", DeviceCount() is
// 0 and Available() is false, so callers decide at run time, not at compile time.
//
// Thread safety: every function may be called from any thread. Calls that take a `device` make
// it the calling thread's current CUDA device for the duration of the call and restore the
// previous one before returning.
//
// Error codes: FAILED_PRECONDITION when CUDA is missing (no support built in, no driver, no
// device); INVALID_ARGUMENT for a bad device index, null pointer or size (the value is named);
// RESOURCE_EXHAUSTED when device memory runs out; INTERNAL for any other CUDA error (the CUDA
// error name and text are in the message). None of them is worth retrying unchanged.

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace granary::cuda {

// True when this library was compiled with CUDA (the real runtime, not the stub).
bool BuiltWithCuda();

// Number of usable CUDA devices: 0 in the stub, when no driver is loaded, or when no device is
// visible. Queried once per process, then cached.
int DeviceCount();

// Built with CUDA and at least one device usable.
bool Available();

// cudaMalloc of `bytes` (> 0) on `device`. The caller owns the result and frees it with
// DeviceFree(device, p); prefer DeviceBuffer.
[[nodiscard]] absl::StatusOr<void*> DeviceAlloc(int device, size_t bytes);

// cudaFree. A null `p` is a no-op. Never fails visibly: a failure here means the CUDA context is
// already broken, and the next fallible call reports that.
void DeviceFree(int device, void* p);

// Synchronous copies of `n` bytes (cudaMemcpy, then a wait on the device's legacy default
// stream): on return the bytes are at `dst`, visible to work on any stream. Host memory may be
// pageable. n == 0 is a no-op. For setup and tests; the data path uses streams and kernels.
[[nodiscard]] absl::Status CopyHostToDevice(int device, void* dst, const void* src, size_t n);
[[nodiscard]] absl::Status CopyDeviceToHost(int device, void* dst, const void* src, size_t n);

// Sets `n` bytes at device pointer `p` to (unsigned char)value; synchronous like the copies.
[[nodiscard]] absl::Status Memset(int device, void* p, int value, size_t n);

// True when `p` points into device memory (cudaMemoryTypeDevice or managed memory). False for
// host memory, null, and always in the stub or without a driver.
bool IsDevicePointer(const void* p);

// An owned device allocation. Move-only; the destructor frees it. An object that was moved
// from is empty (data() == nullptr, size() == 0). Not thread-safe: one owner at a time, although
// the memory itself may be used by any thread and stream.
class DeviceBuffer {
 public:
  [[nodiscard]] static absl::StatusOr<DeviceBuffer> Create(int device, size_t bytes);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }
  int device() const { return device_; }

 private:
  DeviceBuffer(int device, void* data, size_t size) : device_(device), data_(data), size_(size) {}
  void Reset();

  int device_ = -1;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// An owned CUDA stream (cudaStreamNonBlocking) on one device, for the `stream` argument of the
// kv_layout.h GPU calls. Move-only; the destructor destroys the stream without waiting for it
// (work already enqueued still completes). Not thread-safe as an object; the stream itself may
// be used from any thread.
class Stream {
 public:
  [[nodiscard]] static absl::StatusOr<Stream> Create(int device);

  Stream() = default;
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  // The cudaStream_t, as void*; nullptr for an empty Stream.
  void* handle() const { return handle_; }
  int device() const { return device_; }

  // Waits until everything enqueued so far has completed; reports the first asynchronous error.
  [[nodiscard]] absl::Status Synchronize() const;

 private:
  Stream(int device, void* handle) : device_(device), handle_(handle) {}
  void Reset();

  int device_ = -1;
  void* handle_ = nullptr;
};

// The message of every error the stub returns.
inline constexpr char kNoCudaMessage[] = "granary was built without CUDA support";

}  // namespace granary::cuda
