#pragma once

// Device memory for Granary (docs/architecture.md section 7). Callers never include CUDA headers:
// this API compiles and links in every build. Every call goes to the active device backend
// (device_backend.h: cuda, none or fake, chosen at first use from GRANARY_DEVICE_BACKEND). In a
// build without CUDA the default is `none`: every call returns FAILED_PRECONDITION "granary was
// built without CUDA support", DeviceCount() is 0 and Available() is false, so callers decide at
// run time, not at compile time.
//
// Thread safety: every function may be called from any thread. Calls that take a `device` make
// it the calling thread's current CUDA device for the duration of the call and restore the
// previous one before returning.
//
// Error codes: FAILED_PRECONDITION when CUDA is missing (no support built in, no driver, no
// device); INVALID_ARGUMENT for a bad device index, null pointer or size (the value is named);
// RESOURCE_EXHAUSTED when device memory runs out; INTERNAL for any other CUDA error (the CUDA
// error name and text are in the message); UNAVAILABLE only from IPC (device_backend.h), when
// the exporter is gone. None of them is worth retrying unchanged.

#include <cstddef>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace granary::device {

class DeviceRuntime;

// True when this library was compiled with CUDA (the real runtime, not the stub).
bool BuiltWithCuda();

// Number of usable devices of the active backend: 0 for `none` (no CUDA built in, no driver, or
// no device visible); the fake's device count for `fake`. Queried once per process, then cached.
int DeviceCount();

// The active backend has at least one usable device (the fake counts).
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
// host memory, null, and always for the none backend. (DeviceRuntime::Classify tells the kinds
// apart.)
bool IsDevicePointer(const void* p);

// An owned device allocation of the backend active when it was created, which also frees it.
// Move-only; the destructor frees it. An object that was moved
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
  DeviceBuffer(DeviceRuntime* runtime, int device, void* data, size_t size)
      : runtime_(runtime), device_(device), data_(data), size_(size) {}
  void Reset();

  DeviceRuntime* runtime_ = nullptr;
  int device_ = -1;
  void* data_ = nullptr;
  size_t size_ = 0;
};

// An owned stream of the active backend (for cuda: a cudaStreamNonBlocking cudaStream_t) on one
// device, for the `stream` argument of the kv_layout.h GPU calls and the backend's calls.
// Move-only; the destructor destroys the stream without waiting for it (work already enqueued still
// completes; the fake backend waits for it). Not thread-safe as an object; the stream itself may be
// used from any thread.
class Stream {
 public:
  [[nodiscard]] static absl::StatusOr<Stream> Create(int device);

  Stream() = default;
  Stream(Stream&& other) noexcept;
  Stream& operator=(Stream&& other) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();

  // The backend's handle (for cuda: the cudaStream_t) as void*; nullptr for an empty Stream.
  void* handle() const { return handle_; }
  int device() const { return device_; }

  // Waits until everything enqueued so far has completed; reports the first asynchronous error.
  [[nodiscard]] absl::Status Synchronize() const;

 private:
  Stream(DeviceRuntime* runtime, int device, void* handle)
      : runtime_(runtime), device_(device), handle_(handle) {}
  void Reset();

  DeviceRuntime* runtime_ = nullptr;
  int device_ = -1;
  void* handle_ = nullptr;
};

// The message of every error the none backend returns in a build without CUDA.
inline constexpr char kNoCudaMessage[] = "granary was built without CUDA support";

}  // namespace granary::device
