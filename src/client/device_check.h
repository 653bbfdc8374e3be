#pragma once

// The client's refusal of CUDA device pointers (granary/device_pointer.h) on the calls that have
// no GPU path yet: RegisterBuffer, PutFrom, GetInto and their batch forms. A refused buffer is
// never touched, and a refused key of a batch never reaches the master.

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace granary::client {

// INVALID_ARGUMENT with ErrorReason::kDevicePointer, naming the address (hex) and the size.
absl::Status DevicePointerError(const void* p, size_t n);
// IsDevicePointer(p, n) as a status: OK for host memory, DevicePointerError otherwise.
absl::Status CheckHostMemory(const void* p, size_t n);

// Runs `run(keys, buffers, sizes)` on the keys whose buffer is host memory and answers every
// other key with DevicePointerError. With no device buffer in the batch (the usual case) it is
// `run` on the inputs themselves, with no copy; the extra cost is one IsDevicePointer per key.
// `buffers` and `sizes` must have keys.size() entries.
template <typename Result, typename Ptr, typename Run>
std::vector<Result> WithoutDeviceBuffers(const std::vector<std::string>& keys,
                                         const std::vector<Ptr>& buffers,
                                         const std::vector<size_t>& sizes, const Run& run) {
  const size_t n = keys.size();
  std::vector<absl::Status> refused;  // empty until a device buffer is seen
  for (size_t i = 0; i < n; ++i) {
    absl::Status st = CheckHostMemory(buffers[i], sizes[i]);
    if (st.ok()) continue;
    if (refused.empty()) refused.resize(n);
    refused[i] = std::move(st);
  }
  if (refused.empty()) return run(keys, buffers, sizes);
  std::vector<std::string> k;
  std::vector<Ptr> b;
  std::vector<size_t> s, index;
  for (size_t i = 0; i < n; ++i) {
    if (!refused[i].ok()) continue;
    k.push_back(keys[i]);
    b.push_back(buffers[i]);
    s.push_back(sizes[i]);
    index.push_back(i);
  }
  std::vector<Result> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {  // the host keys' placeholders are replaced below
    out.emplace_back(refused[i].ok() ? absl::UnknownError("not attempted") : refused[i]);
  }
  if (!k.empty()) {
    std::vector<Result> ran = run(k, b, s);
    for (size_t j = 0; j < index.size() && j < ran.size(); ++j) out[index[j]] = std::move(ran[j]);
  }
  return out;
}

}  // namespace granary::client
