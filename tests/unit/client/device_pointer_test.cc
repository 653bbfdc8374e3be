#include "granary/device_pointer.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "client/device_check.h"
#include "device/device_backend.h"
#include "device/fake/fake_backend.h"
#include "granary/error_reason.h"

namespace granary {
namespace {

class DevicePointerTest : public ::testing::Test {
 protected:
  void TearDown() override { testing::ClearFakeDeviceRanges(); }
};

TEST_F(DevicePointerTest, HostMemoryIsNotDeviceMemory) {
  std::vector<char> heap(1 << 20);
  char stack[64];
  EXPECT_FALSE(IsDevicePointer(heap.data(), heap.size()));
  EXPECT_FALSE(IsDevicePointer(stack, sizeof(stack)));
  EXPECT_FALSE(IsDevicePointer(nullptr, 0));
}

// The check goes through the active device backend's Classify: on the fake backend, its device
// and managed memory are device memory (first or last byte), its pinned host memory is not.
TEST_F(DevicePointerTest, TheFakeBackendsDeviceAndManagedMemoryAreDevicePinnedIsNot) {
  auto fake = device::FakeBackend::Create(device::FakeOptions{});
  ASSERT_TRUE(fake.ok()) << fake.status();
  device::DeviceBackend* previous = device::SetBackendForTesting(fake->get());
  std::vector<char> heap(1 << 20);
  EXPECT_FALSE(IsDevicePointer(heap.data(), heap.size()));  // before any fake memory exists
  auto dev = (*fake)->runtime().Alloc(0, 1 << 20);
  auto managed = (*fake)->runtime().AllocManaged(0, 4096);
  auto pinned = (*fake)->runtime().HostAllocPinned(4096);
  ASSERT_TRUE(dev.ok() && managed.ok() && pinned.ok());
  char* d = static_cast<char*>(*dev);
  EXPECT_TRUE(IsDevicePointer(d, 1 << 20));
  EXPECT_TRUE(IsDevicePointer(d + 4096, 1));
  EXPECT_TRUE(IsDevicePointer(*managed, 4096));
  EXPECT_FALSE(IsDevicePointer(*pinned, 4096));
  EXPECT_FALSE(IsDevicePointer(heap.data(), heap.size()));
  EXPECT_EQ(client::CheckHostMemory(d, 16).code(), absl::StatusCode::kInvalidArgument);
  // The client's classification: the fake's device and managed memory take the device paths,
  // pinned and pageable host memory the host ones, a buffer running off a device allocation is
  // refused untouched.
  EXPECT_EQ(*client::BufferDevice(d, 1 << 20), 0);
  EXPECT_EQ(*client::BufferDevice(*managed, 4096), 0);
  EXPECT_EQ(*client::BufferDevice(*pinned, 4096), -1);
  EXPECT_EQ(*client::BufferDevice(heap.data(), heap.size()), -1);
  EXPECT_EQ(ErrorReasonOf(client::BufferDevice(d + (1 << 20) - 8, 4096).status()),
            ErrorReason::kDevicePointer);
  (*fake)->runtime().Free(0, d);
  (*fake)->runtime().Free(0, *managed);
  (*fake)->runtime().HostFreePinned(*pinned);
  EXPECT_FALSE(IsDevicePointer(heap.data(), heap.size()));
  device::SetBackendForTesting(previous);
}

TEST_F(DevicePointerTest, AFakeRangeIsDeviceMemoryWhereverARangeOverlapsIt) {
  std::vector<char> mem(3 * 4096);
  char* fake = mem.data() + 4096;
  testing::AddFakeDeviceRange(fake, 4096);
  EXPECT_TRUE(IsDevicePointer(fake, 4096));
  EXPECT_TRUE(IsDevicePointer(fake + 4095, 1));          // its last byte
  EXPECT_TRUE(IsDevicePointer(mem.data(), 4097));        // ends in it
  EXPECT_TRUE(IsDevicePointer(fake + 100, 1 << 30));     // starts in it
  EXPECT_TRUE(IsDevicePointer(mem.data(), mem.size()));  // covers it
  EXPECT_FALSE(IsDevicePointer(mem.data(), 4096));       // ends just before it
  EXPECT_FALSE(IsDevicePointer(fake + 4096, 4096));      // starts just after it
  EXPECT_FALSE(IsDevicePointer(fake, 0));                // no byte at all
  testing::ClearFakeDeviceRanges();
  EXPECT_FALSE(IsDevicePointer(fake, 4096));
}

TEST_F(DevicePointerTest, TheRefusalIsInvalidArgumentWithTheReasonAndTheHexAddress) {
  auto* p = reinterpret_cast<const void*>(uintptr_t{0x7f00deadbe00});
  absl::Status st = client::DevicePointerError(p, 4096);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorReasonOf(st), ErrorReason::kDevicePointer);
  EXPECT_STREQ(ErrorReasonName(ErrorReasonOf(st)), "DEVICE_POINTER");
  EXPECT_TRUE(absl::StrContains(st.message(), "0x7f00deadbe00")) << st;
  EXPECT_TRUE(client::CheckHostMemory(p, 4096).ok());
  testing::AddFakeDeviceRange(p, 1);
  EXPECT_EQ(ErrorReasonOf(client::CheckHostMemory(p, 4096)), ErrorReason::kDevicePointer);
}

TEST_F(DevicePointerTest, ABatchRunsOnlyItsHostKeysInOrder) {
  std::vector<char> mem(4 * 1024);
  testing::AddFakeDeviceRange(mem.data() + 1024, 1024);
  const std::vector<std::string> keys = {"a", "dev", "b"};
  const std::vector<const void*> bufs = {mem.data(), mem.data() + 1024, mem.data() + 2048};
  const std::vector<size_t> sizes = {1024, 1024, 1024};
  std::vector<std::string> ran;
  auto out = client::WithBufferDevices<absl::StatusOr<size_t>, const void*>(
      keys, bufs, sizes,
      [&](absl::Span<const std::string> k, absl::Span<const void* const> b,
          absl::Span<const size_t>, const std::vector<int>* devices) {
        EXPECT_EQ(devices, nullptr) << "host buffers only";
        ran.assign(k.begin(), k.end());
        EXPECT_EQ(b[1], mem.data() + 2048);
        return std::vector<absl::StatusOr<size_t>>{size_t{1}, size_t{2}};
      });
  EXPECT_EQ(ran, (std::vector<std::string>{"a", "b"}));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(*out[0], 1u);
  EXPECT_EQ(ErrorReasonOf(out[1].status()), ErrorReason::kDevicePointer);
  EXPECT_EQ(*out[2], 2u);
  // Every key refused: the batch never runs.
  bool called = false;
  const std::vector<std::string> dev_key = {"dev"};
  const std::vector<const void*> dev_buf = {mem.data() + 1500};
  const std::vector<size_t> dev_size = {1};
  auto none = client::WithBufferDevices<absl::Status, const void*>(
      dev_key, dev_buf, dev_size, [&](const auto&, const auto&, const auto&, const auto*) {
        called = true;
        return std::vector<absl::Status>{};
      });
  EXPECT_FALSE(called);
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(ErrorReasonOf(none[0]), ErrorReason::kDevicePointer);
}

TEST_F(DevicePointerTest, ConcurrentChecksWhileRangesChange) {
  std::vector<char> mem(1 << 16);
  std::atomic<bool> stop{false};
  std::thread checker([&] {
    while (!stop.load()) (void)IsDevicePointer(mem.data(), mem.size());
  });
  for (int i = 0; i < 1000; ++i) {
    testing::AddFakeDeviceRange(mem.data() + (i % 64) * 1024, 1024);
    if (i % 10 == 0) testing::ClearFakeDeviceRanges();
  }
  stop = true;
  checker.join();
}

// Real device memory, through the driver API opened by hand (no CUDA headers or libraries at
// build time). Skips where there is no driver or no device.
TEST_F(DevicePointerTest, RealDeviceAndManagedMemoryAreDetectedPinnedHostIsNot) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) GTEST_SKIP() << "no CUDA driver (libcuda.so.1)";
  using CUdeviceptr = unsigned long long;  // NOLINT(runtime/int): the driver's typedef
  auto sym = [lib](auto* fn, const char* name) {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
    return *fn != nullptr;
  };
  int (*init)(unsigned) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*retain)(void**, int) = nullptr;
  int (*set_current)(void*) = nullptr;
  int (*alloc)(CUdeviceptr*, size_t) = nullptr;
  int (*alloc_managed)(CUdeviceptr*, size_t, unsigned) = nullptr;
  int (*alloc_host)(void**, size_t) = nullptr;
  int (*free_dev)(CUdeviceptr) = nullptr;
  int (*free_host)(void*) = nullptr;
  ASSERT_TRUE(sym(&init, "cuInit") && sym(&device_get, "cuDeviceGet") &&
              sym(&retain, "cuDevicePrimaryCtxRetain") && sym(&set_current, "cuCtxSetCurrent") &&
              sym(&alloc, "cuMemAlloc_v2") && sym(&alloc_managed, "cuMemAllocManaged") &&
              sym(&alloc_host, "cuMemAllocHost_v2") && sym(&free_dev, "cuMemFree_v2") &&
              sym(&free_host, "cuMemFreeHost"));
  std::vector<char> before(4096);
  EXPECT_FALSE(IsDevicePointer(before.data(), before.size()));  // driver loaded, not initialised
  if (init(0u) != 0) GTEST_SKIP() << "cuInit failed: no usable GPU";
  int dev = 0;
  void* ctx = nullptr;
  ASSERT_EQ(device_get(&dev, 0), 0);
  ASSERT_EQ(retain(&ctx, dev), 0);
  ASSERT_EQ(set_current(ctx), 0);
  CUdeviceptr d = 0, m = 0;
  void* pinned = nullptr;
  ASSERT_EQ(alloc(&d, size_t{1} << 20), 0);
  ASSERT_EQ(alloc_managed(&m, size_t{1} << 20, 1u), 0);  // CU_MEM_ATTACH_GLOBAL
  ASSERT_EQ(alloc_host(&pinned, size_t{1} << 20), 0);
  EXPECT_TRUE(IsDevicePointer(reinterpret_cast<void*>(d), 1 << 20));
  EXPECT_TRUE(IsDevicePointer(reinterpret_cast<void*>(d + 4096), 1));
  EXPECT_TRUE(IsDevicePointer(reinterpret_cast<void*>(m), 1 << 20));
  EXPECT_FALSE(IsDevicePointer(pinned, 1 << 20));
  EXPECT_FALSE(IsDevicePointer(before.data(), before.size()));
  free_dev(d);
  free_dev(m);
  free_host(pinned);
}

}  // namespace
}  // namespace granary
