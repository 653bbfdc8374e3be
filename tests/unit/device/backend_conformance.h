#pragma once

// The device backend test bodies that every backend must pass (device/device_backend.h), as a
// typed gtest pattern. backend_fake_test.cc instantiates it for the fake (runs everywhere),
// backend_cuda_test.cc for the CUDA runtime (label gpu; skips without a device), so on a GPU
// machine the same bodies show that the real backend matches the fake.
//
// A Traits type has `static constexpr char kName[]` and
// `static DeviceBackend* Make(std::unique_ptr<DeviceBackend>* owned)` (nullptr: not available).

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "device/checksum.h"
#include "device/device_backend.h"
#include "device/kv_layout.h"
#include "tests/unit/device/backend_pattern.h"

namespace granary::device {
namespace {

// The second process of the IPC tests: $GRANARY_BACKEND_IPC_HELPER where set (bench/gpu_check.sh
// sets it to the bundle's copy), else the path the build compiled in.
inline const char* IpcHelper() {
  const char* env = std::getenv("GRANARY_BACKEND_IPC_HELPER");
  return env != nullptr && *env != '\0' ? env : GRANARY_BACKEND_IPC_HELPER;
}

using Bytes = std::vector<unsigned char>;

template <typename Traits>
class BackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = Traits::Make(&owned_);
    if (backend_ == nullptr || backend_->runtime().DeviceCount() == 0) {
      GTEST_SKIP() << "the " << Traits::kName << " backend has no usable device here";
    }
  }

  void TearDown() override {
    if (backend_ == nullptr) return;
    for (void* s : streams_) backend_->runtime().DestroyStream(s);
    for (void* e : events_) backend_->runtime().DestroyEvent(e);
    for (void* p : device_) backend_->runtime().Free(0, p);
    for (void* p : pinned_) backend_->runtime().HostFreePinned(p);
  }

  DeviceRuntime& b() { return backend_->runtime(); }
  KvKernels& k() { return backend_->kernels(); }

  // Device memory on device 0 holding `content`, freed at TearDown.
  void* Upload(const Bytes& content) {
    absl::StatusOr<void*> p = b().Alloc(0, std::max<size_t>(content.size(), 1));
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    device_.push_back(*p);
    EXPECT_TRUE(b().Copy(0, *p, content.data(), content.size(), CopyKind::kHostToDevice).ok());
    return *p;
  }

  Bytes Download(const void* p, size_t n) {
    Bytes out(n);
    absl::Status s = b().Copy(0, out.data(), p, n, CopyKind::kDeviceToHost);
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // Pinned host memory of n bytes set to `fill`, freed at TearDown (after the streams). A
  // device-to-host copy into pageable memory is synchronous on CUDA, so a copy queued behind a
  // gate needs this.
  unsigned char* Pinned(size_t n, unsigned char fill) {
    absl::StatusOr<void*> p = b().HostAllocPinned(n);
    EXPECT_TRUE(p.ok()) << p.status();
    if (!p.ok()) return nullptr;
    pinned_.push_back(*p);
    std::memset(*p, fill, n);
    return static_cast<unsigned char*>(*p);
  }

  void* NewStream() {
    absl::StatusOr<void*> s = b().CreateStream(0);
    EXPECT_TRUE(s.ok()) << s.status();
    if (!s.ok()) return nullptr;
    streams_.push_back(*s);
    return *s;
  }

  void* NewEvent() {
    absl::StatusOr<void*> e = b().CreateEvent(0);
    EXPECT_TRUE(e.ok()) << e.status();
    if (!e.ok()) return nullptr;
    events_.push_back(*e);
    return *e;
  }

  std::unique_ptr<DeviceBackend> owned_;
  DeviceBackend* backend_ = nullptr;
  std::vector<void*> device_, pinned_, streams_, events_;
};

// Holds a stream at LaunchHostFunc(Wait) until Open(); opens on destruction too, so that a
// failed assertion never leaves a stream worker blocked.
class Gate {
 public:
  ~Gate() { Open(); }
  std::function<void()> Wait() {
    return [this] { open_.WaitForNotification(); };
  }
  void Open() {
    if (!open_.HasBeenNotified()) open_.Notify();
  }

 private:
  granary::common::Notification open_;
};

TYPED_TEST_SUITE_P(BackendTest);

TYPED_TEST_P(BackendTest, ClassifiesEveryKindOfMemory) {
  DeviceRuntime& b = this->b();
  int on_stack = 0;
  std::vector<unsigned char> heap(1 << 16);
  EXPECT_EQ(b.Classify(&on_stack).kind, MemoryKind::kHost);
  EXPECT_EQ(b.Classify(heap.data()).kind, MemoryKind::kHost);
  EXPECT_EQ(b.Classify(nullptr).kind, MemoryKind::kHost);

  absl::StatusOr<void*> dev = b.Alloc(0, 4096);
  ASSERT_TRUE(dev.ok()) << dev.status();
  const PointerInfo d = b.Classify(static_cast<char*>(*dev) + 100);
  EXPECT_EQ(d.kind, MemoryKind::kDevice) << MemoryKindName(d.kind);
  EXPECT_EQ(d.device, 0);

  absl::StatusOr<void*> managed = b.AllocManaged(0, 4096);
  ASSERT_TRUE(managed.ok()) << managed.status();
  EXPECT_EQ(b.Classify(*managed).kind, MemoryKind::kManaged);
  // Managed memory is CPU-addressable on every backend.
  static_cast<unsigned char*>(*managed)[10] = 42;
  EXPECT_EQ(this->Download(*managed, 11)[10], 42);

  absl::StatusOr<void*> pinned = b.HostAllocPinned(4096);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_EQ(b.Classify(static_cast<char*>(*pinned) + 4095).kind, MemoryKind::kPinnedHost);

  ASSERT_TRUE(b.HostRegister(heap.data(), heap.size()).ok());
  EXPECT_EQ(b.Classify(heap.data() + 1000).kind, MemoryKind::kPinnedHost);
  ASSERT_TRUE(b.HostUnregister(heap.data()).ok());
  EXPECT_EQ(b.Classify(heap.data() + 1000).kind, MemoryKind::kHost);

  b.Free(0, *dev);
  b.Free(0, *managed);
  b.HostFreePinned(*pinned);
  EXPECT_EQ(MemoryKindName(MemoryKind::kPinnedHost), "pinned_host");
}

TYPED_TEST_P(BackendTest, AsyncCopiesRoundTripInEveryDirection) {
  DeviceRuntime& b = this->b();
  constexpr size_t kN = 3 * 4096 + 17;
  const Bytes src = testing::Pattern(kN, 1);
  void* dev_a = this->Upload(Bytes(kN, 0));
  void* dev_b = this->Upload(Bytes(kN, 0));
  void* stream = this->NewStream();
  absl::StatusOr<void*> pinned = b.HostAllocPinned(kN);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  Bytes host_out(kN, 0), host_copy(kN, 0);

  ASSERT_TRUE(b.CopyAsync(stream, dev_a, src.data(), kN).ok());         // H2D
  ASSERT_TRUE(b.CopyAsync(stream, dev_b, dev_a, kN).ok());              // D2D
  ASSERT_TRUE(b.CopyAsync(stream, *pinned, dev_b, kN).ok());            // D2H, pinned
  ASSERT_TRUE(b.CopyAsync(stream, host_out.data(), *pinned, kN).ok());  // H2H
  ASSERT_TRUE(b.CopyAsync(stream, host_copy.data(), dev_a, kN).ok());   // D2H, pageable
  ASSERT_TRUE(b.SynchronizeStream(stream).ok());
  EXPECT_EQ(host_out, src);
  EXPECT_EQ(host_copy, src);
  EXPECT_EQ(this->Download(dev_b, kN), src);
  // A copy into the middle of an allocation lands there and nowhere else.
  const Bytes patch = testing::Pattern(100, 9);
  ASSERT_TRUE(b.CopyAsync(stream, static_cast<char*>(dev_a) + 4000, patch.data(), 100).ok());
  ASSERT_TRUE(b.SynchronizeStream(stream).ok());
  Bytes expected = src;
  std::copy(patch.begin(), patch.end(), expected.begin() + 4000);
  EXPECT_EQ(this->Download(dev_a, kN), expected);
  // Zero bytes is a no-op; a null pointer with bytes is named.
  EXPECT_TRUE(b.CopyAsync(stream, nullptr, nullptr, 0).ok());
  absl::Status null_dst = b.CopyAsync(stream, nullptr, src.data(), 8);
  EXPECT_EQ(null_dst.code(), absl::StatusCode::kInvalidArgument) << null_dst;
  EXPECT_TRUE(absl::StrContains(null_dst.message(), "dst")) << null_dst;
  b.HostFreePinned(*pinned);
}

TYPED_TEST_P(BackendTest, ReadingBeforeTheEventSeesTheOldBytes) {
  DeviceRuntime& b = this->b();
  constexpr size_t kN = 8192;
  const Bytes fresh = testing::Pattern(kN, 2);
  void* dev = this->Upload(fresh);
  void* stream = this->NewStream();
  void* event = this->NewEvent();
  unsigned char* host = this->Pinned(kN, 0xEE);
  ASSERT_NE(host, nullptr);
  // The stream is held at a gate, so the copy behind it cannot have run when we look.
  Gate gate;
  ASSERT_TRUE(b.LaunchHostFunc(stream, gate.Wait()).ok());
  ASSERT_TRUE(b.CopyAsync(stream, host, dev, kN).ok());
  ASSERT_TRUE(b.RecordEvent(event, stream).ok());
  absl::StatusOr<bool> done = b.EventDone(event);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_FALSE(*done);
  EXPECT_EQ(Bytes(host, host + kN), Bytes(kN, 0xEE)) << "the copy ran before the work ahead of it";
  gate.Open();
  ASSERT_TRUE(b.WaitEvent(event).ok());
  done = b.EventDone(event);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);
  EXPECT_EQ(Bytes(host, host + kN), fresh);
}

// CUDA keeps one last-error slot per host thread: a poll of an unfinished event leaves
// cudaErrorNotReady there, and a kernel launch's status is read from it. A backend must clear the
// slot before it launches, or a healthy launch after a poll on the same thread fails.
TYPED_TEST_P(BackendTest, APollOfAnUnfinishedEventFailsNoLaterLaunch) {
  DeviceRuntime& b = this->b();
  KvKernels& kernels = this->k();
  constexpr size_t kN = 4096;
  const Bytes fresh = testing::Pattern(kN, 5);
  auto* dev = static_cast<unsigned char*>(this->Upload(fresh));
  auto* dst = static_cast<unsigned char*>(this->Upload(Bytes(kN, 0)));
  ASSERT_TRUE(dev != nullptr && dst != nullptr);
  void* stream = this->NewStream();
  void* event = this->NewEvent();
  Gate gate;
  ASSERT_TRUE(b.LaunchHostFunc(stream, gate.Wait()).ok());
  ASSERT_TRUE(b.RecordEvent(event, stream).ok());
  auto poll = [&] {
    absl::StatusOr<bool> done = b.EventDone(event);
    ASSERT_TRUE(done.ok()) << done.status();
    EXPECT_FALSE(*done);
  };
  const CopyRegion region{dev, dst, kN};
  ASSERT_NO_FATAL_FAILURE(poll());
  absl::Status s = kernels.BatchCopy(0, &region, 1, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  ASSERT_NO_FATAL_FAILURE(poll());
  uint64_t sum = 0;
  const ChecksumRegion whole{dev, kN};
  s = kernels.BatchChecksum(0, &whole, 1, &sum, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(sum, ChecksumCpu(fresh.data(), kN));
  ASSERT_NO_FATAL_FAILURE(poll());
  const CasOp64 op{dst, 0, 1};
  s = kernels.CompareExchange64(0, &op, 1);
  EXPECT_TRUE(s.ok()) << s;
  gate.Open();
  ASSERT_TRUE(b.SynchronizeStream(stream).ok());
  EXPECT_EQ(this->Download(dst, kN), fresh);
}

TYPED_TEST_P(BackendTest, AnotherStreamWaitsForTheEvent) {
  DeviceRuntime& b = this->b();
  constexpr size_t kN = 4096;
  const Bytes fresh = testing::Pattern(kN, 3);
  void* dev = this->Upload(Bytes(kN, 0));
  void* producer = this->NewStream();
  void* consumer = this->NewStream();
  void* event = this->NewEvent();
  // The source is pinned: a copy from pageable memory may synchronize with its stream first
  // (CUDA's "API synchronization behavior"), which behind the gate would never return.
  unsigned char* source = this->Pinned(kN, 0);
  ASSERT_NE(source, nullptr);
  std::memcpy(source, fresh.data(), kN);
  Gate gate;
  ASSERT_TRUE(b.LaunchHostFunc(producer, gate.Wait()).ok());
  ASSERT_TRUE(b.CopyAsync(producer, dev, source, kN).ok());
  ASSERT_TRUE(b.RecordEvent(event, producer).ok());
  unsigned char* host = this->Pinned(kN, 0);
  ASSERT_NE(host, nullptr);
  ASSERT_TRUE(b.StreamWaitEvent(consumer, event).ok());
  ASSERT_TRUE(b.CopyAsync(consumer, host, dev, kN).ok());
  // While the producer is held, the consumer must be held too (a broken wait lets it run, and
  // 100 ms is plenty for that; a correct one never signals here).
  granary::common::Notification consumer_ran;
  ASSERT_TRUE(b.LaunchHostFunc(consumer, [&consumer_ran] { consumer_ran.Notify(); }).ok());
  EXPECT_FALSE(consumer_ran.WaitForNotificationWithTimeout(absl::Milliseconds(100)))
      << "the consumer ran before the producer's event";
  gate.Open();
  ASSERT_TRUE(b.SynchronizeStream(consumer).ok());
  EXPECT_EQ(Bytes(host, host + kN), fresh) << "the consumer copied before the producer's event";
  ASSERT_TRUE(b.SynchronizeStream(producer).ok());
}

TYPED_TEST_P(BackendTest, HostFunctionsRunInStreamOrder) {
  DeviceRuntime& b = this->b();
  constexpr size_t kN = 2048;
  const Bytes fresh = testing::Pattern(kN, 4);
  void* dev = this->Upload(fresh);
  void* stream = this->NewStream();
  granary::common::Mutex mu;
  std::vector<std::string> order;
  Bytes host(kN, 0);
  bool saw_copy = false;
  auto note = [&](std::string what) {
    return [&, what] {
      granary::common::MutexLock lock(&mu);
      order.push_back(what);
    };
  };
  ASSERT_TRUE(b.LaunchHostFunc(stream, note("first")).ok());
  ASSERT_TRUE(b.CopyAsync(stream, host.data(), dev, kN).ok());
  ASSERT_TRUE(b.LaunchHostFunc(stream, [&] {
                 granary::common::MutexLock lock(&mu);
                 saw_copy = host == fresh;  // the copy before it has completed
                 order.push_back("after copy");
               }).ok());
  ASSERT_TRUE(b.LaunchHostFunc(stream, note("last")).ok());
  ASSERT_TRUE(b.SynchronizeStream(stream).ok());
  granary::common::MutexLock lock(&mu);
  EXPECT_EQ(order, (std::vector<std::string>{"first", "after copy", "last"}));
  EXPECT_TRUE(saw_copy);
}

TYPED_TEST_P(BackendTest, BatchCopyAsyncMatchesTheCpuReference) {
  DeviceRuntime& b = this->b();
  KvKernels& kernels = this->k();
  std::mt19937_64 rng(7);
  constexpr size_t kN = 64 * 1024;
  Bytes src_host(kN);
  for (auto& c : src_host) c = static_cast<unsigned char>(rng());
  void* src = this->Upload(src_host);
  void* dst = this->Upload(Bytes(kN, 0));
  Bytes expected(kN, 0);
  std::vector<CopyRegion> regions, cpu;
  // Disjoint destination slices of random sizes, from random source offsets.
  for (size_t at = 0; at + 4096 <= kN; at += 4096) {
    const size_t bytes = 1 + rng() % 4096;
    const size_t from = rng() % (kN - bytes);
    regions.push_back({static_cast<char*>(src) + from, static_cast<char*>(dst) + at, bytes});
    cpu.push_back({src_host.data() + from, expected.data() + at, bytes});
  }
  ASSERT_TRUE(BatchCopyCpu(cpu.data(), static_cast<int>(cpu.size())).ok());
  void* stream = this->NewStream();
  ASSERT_TRUE(b.BatchCopyAsync(stream, regions.data(), static_cast<int>(regions.size())).ok());
  ASSERT_TRUE(b.SynchronizeStream(stream).ok());
  EXPECT_EQ(this->Download(dst, kN), expected);
  // The kernel version, synchronous and on a stream, gives the same bytes.
  void* dst2 = this->Upload(Bytes(kN, 0));
  for (auto& r : regions)
    r.dst = static_cast<char*>(dst2) + (static_cast<char*>(r.dst) - static_cast<char*>(dst));
  ASSERT_TRUE(kernels.BatchCopy(0, regions.data(), static_cast<int>(regions.size()), nullptr).ok());
  EXPECT_EQ(this->Download(dst2, kN), expected);
  ASSERT_TRUE(b.Memset(0, dst2, 0, kN).ok());
  ASSERT_TRUE(kernels.BatchCopy(0, regions.data(), static_cast<int>(regions.size()), stream).ok());
  ASSERT_TRUE(b.SynchronizeStream(stream).ok());
  EXPECT_EQ(this->Download(dst2, kN), expected);
  CopyRegion bad{nullptr, dst, 8};
  EXPECT_EQ(b.BatchCopyAsync(stream, &bad, 1).code(), absl::StatusCode::kInvalidArgument);
}

TYPED_TEST_P(BackendTest, GatherAndScatterMatchTheCpuReference) {
  DeviceRuntime& b = this->b();
  KvKernels& kernels = this->k();
  std::mt19937_64 rng(11);
  PagedKvLayout l;
  l.num_blocks = 16;
  l.block_size = 4;
  l.num_heads = 2;
  l.head_dim = 8;
  l.elem_bytes = 2;
  l.block_stride_bytes = 2 * static_cast<int64_t>(l.BlockBytes());  // interleaved K and V
  const size_t cache = static_cast<size_t>(l.num_blocks) * l.BlockStride();
  Bytes kv(cache + l.BlockBytes());
  for (auto& c : kv) c = static_cast<unsigned char>(rng());
  const std::vector<int32_t> ids = {5, 0, 15, 7, 3};
  const int n = static_cast<int>(ids.size());
  Bytes expected(l.GatheredBytes(n));
  ASSERT_TRUE(
      GatherBlocksCpu(l, kv.data(), kv.data() + l.BlockBytes(), ids.data(), n, expected.data())
          .ok());
  void* dkv = this->Upload(kv);
  void* dk = dkv;
  void* dv = static_cast<char*>(dkv) + l.BlockBytes();
  void* dout = this->Upload(Bytes(expected.size(), 0));
  ASSERT_TRUE(kernels.GatherBlocks(0, l, dk, dv, ids.data(), n, dout, nullptr).ok());
  EXPECT_EQ(this->Download(dout, expected.size()), expected);

  // Scatter other bytes back on a stream; compare the whole cache with the CPU scatter.
  Bytes in(expected.size());
  for (auto& c : in) c = static_cast<unsigned char>(rng());
  void* din = this->Upload(in);
  Bytes kv_expected = kv;
  ASSERT_TRUE(ScatterBlocksCpu(l, in.data(), ids.data(), n, kv_expected.data(),
                               kv_expected.data() + l.BlockBytes())
                  .ok());
  void* stream = this->NewStream();
  ASSERT_TRUE(kernels.ScatterBlocks(0, l, din, ids.data(), n, dk, dv, stream).ok());
  ASSERT_TRUE(b.SynchronizeStream(stream).ok());
  EXPECT_EQ(this->Download(dkv, kv.size()), kv_expected);

  const std::vector<int32_t> twice = {1, 1};
  EXPECT_EQ(kernels.ScatterBlocks(0, l, din, twice.data(), 2, dk, dv, stream).code(),
            absl::StatusCode::kInvalidArgument);
}

TYPED_TEST_P(BackendTest, BatchChecksumMatchesTheCpuReference) {
  DeviceRuntime& b = this->b();
  KvKernels& kernels = this->k();
  std::mt19937_64 rng(13);
  constexpr size_t kN = (1 << 20) + 64;
  Bytes host(kN);
  for (auto& c : host) c = static_cast<unsigned char>(rng());
  auto* dev = static_cast<unsigned char*>(this->Upload(host));
  ASSERT_NE(dev, nullptr);
  // Sizes around the word and the per-block piece (64 KiB), at aligned and odd starts.
  const std::vector<std::pair<size_t, size_t>> spans = {
      {0, 0},     {0, 1},     {3, 7},          {8, 8},      {1, 9},       {16, 4095},
      {0, 65536}, {5, 65537}, {64, 3 * 65536}, {7, 200003}, {0, 1 << 20}, {33, 1 << 19}};
  std::vector<ChecksumRegion> regions, cpu;
  for (const auto& [start, bytes] : spans) {
    regions.push_back({dev + start, bytes});
    cpu.push_back({host.data() + start, bytes});
  }
  const int n = static_cast<int>(regions.size());
  std::vector<uint64_t> expected(regions.size());
  ASSERT_TRUE(BatchChecksumCpu(cpu.data(), n, expected.data()).ok());
  std::vector<uint64_t> got(regions.size(), 0);
  absl::Status s = kernels.BatchChecksum(0, regions.data(), n, got.data(), nullptr);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, expected);

  // On a stream: `out` is written when the stream gets there, not before (pinned, so that the
  // device-to-host copy behind the gate is asynchronous on CUDA too).
  void* stream = this->NewStream();
  auto* out = reinterpret_cast<uint64_t*>(this->Pinned(regions.size() * sizeof(uint64_t), 0xEE));
  ASSERT_NE(out, nullptr);
  Gate gate;
  ASSERT_TRUE(b.LaunchHostFunc(stream, gate.Wait()).ok());
  s = kernels.BatchChecksum(0, regions.data(), n, out, stream);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(out[0], 0xEEEEEEEEEEEEEEEEull) << "the checksum ran before the work ahead of it";
  gate.Open();
  ASSERT_TRUE(b.SynchronizeStream(stream).ok());
  EXPECT_EQ(std::vector<uint64_t>(out, out + regions.size()), expected);

  // One changed byte in device memory changes that region's checksum only.
  const unsigned char flipped = host[5 + 1000] ^ 0x01;
  ASSERT_TRUE(b.Copy(0, dev + 5 + 1000, &flipped, 1, CopyKind::kHostToDevice).ok());
  ASSERT_TRUE(kernels.BatchChecksum(0, regions.data(), n, got.data(), nullptr).ok());
  for (size_t i = 0; i < spans.size(); ++i) {
    const bool covers = spans[i].first <= 1005 && 1005 < spans[i].first + spans[i].second;
    EXPECT_EQ(got[i] != expected[i], covers) << "region " << i;
  }

  // Bad arguments, named; n == 0 is a no-op.
  EXPECT_TRUE(kernels.BatchChecksum(0, nullptr, 0, nullptr, nullptr).ok());
  absl::Status negative = kernels.BatchChecksum(0, regions.data(), -1, got.data(), nullptr);
  EXPECT_EQ(negative.code(), absl::StatusCode::kInvalidArgument) << negative;
  EXPECT_TRUE(absl::StrContains(negative.message(), "-1")) << negative;
  const ChecksumRegion null_data[] = {{dev, 8}, {nullptr, 8}};
  absl::Status bad = kernels.BatchChecksum(0, null_data, 2, got.data(), nullptr);
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  EXPECT_TRUE(absl::StrContains(bad.message(), "regions[1]")) << bad;
  absl::Status no_out = kernels.BatchChecksum(0, regions.data(), 1, nullptr, nullptr);
  EXPECT_EQ(no_out.code(), absl::StatusCode::kInvalidArgument) << no_out;
  absl::Status device_out =
      kernels.BatchChecksum(0, regions.data(), 1, reinterpret_cast<uint64_t*>(dev), nullptr);
  EXPECT_EQ(device_out.code(), absl::StatusCode::kInvalidArgument) << device_out;
  EXPECT_TRUE(absl::StrContains(device_out.message(), "device memory")) << device_out;
  const int count = b.DeviceCount();
  absl::Status bad_device = kernels.BatchChecksum(count, regions.data(), 1, got.data(), nullptr);
  EXPECT_EQ(bad_device.code(), absl::StatusCode::kInvalidArgument) << bad_device;
  EXPECT_TRUE(absl::StrContains(bad_device.message(), std::to_string(count))) << bad_device;
}

TYPED_TEST_P(BackendTest, IpcMapsTheSameBytesInAnotherProcess) {
  DeviceRuntime& b = this->b();
  constexpr size_t kN = 3 * 4096 + 5;
  constexpr size_t kOffset = 4096 + 64;
  const Bytes outer = testing::Pattern(kN, 20);
  void* dev = this->Upload(outer);
  const Bytes inner = testing::Pattern(kN - kOffset, 30);
  // Export a pointer inside the allocation: the other side must land on the same byte.
  void* inside = static_cast<char*>(dev) + kOffset;
  ASSERT_TRUE(b.Copy(0, inside, inner.data(), inner.size(), CopyKind::kHostToDevice).ok());
  absl::StatusOr<std::string> blob = b.ExportIpc(inside);
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_LE(blob->size(), kMaxIpcBlobBytes);
  testing::Child child({IpcHelper(), "open", TypeParam::kName, "0", absl::BytesToHexString(*blob),
                        std::to_string(inner.size()), "30"});
  ASSERT_TRUE(child.ok());
  const int code = child.Wait();
  ASSERT_EQ(code, 0) << child.ReadStderr();
  // The child wrote Pattern(31) through its mapping.
  EXPECT_EQ(this->Download(inside, inner.size()), testing::Pattern(inner.size(), 31));
  EXPECT_EQ(this->Download(dev, kOffset), Bytes(outer.begin(), outer.begin() + kOffset));
}

// CUDA counts the opens of one IPC handle in a process: a second open returns the same pointer,
// and the mapping lasts until as many closes have been made. Every backend counts the same way,
// so two users of one handle in a process (a segment re-mounted under a new id, two clients)
// each close their own open.
TYPED_TEST_P(BackendTest, OpeningAHandleTwiceSharesOneCountedMapping) {
  DeviceRuntime& b = this->b();
  constexpr size_t kN = 5000;
  testing::Child exporter({IpcHelper(), "export", TypeParam::kName, std::to_string(kN), "70"});
  ASSERT_TRUE(exporter.ok());
  std::string blob;
  const std::string hex = exporter.ReadLine();
  ASSERT_TRUE(testing::FromHex(hex, &blob)) << "helper said: " << hex;
  absl::StatusOr<void*> first = b.OpenIpc(0, blob);
  ASSERT_TRUE(first.ok()) << first.status();
  absl::StatusOr<void*> second = b.OpenIpc(0, blob);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*first, *second);
  absl::Status closed = b.CloseIpc(*first);
  EXPECT_TRUE(closed.ok()) << closed;
  // One open is left: the mapping still reads the exporter's bytes.
  EXPECT_EQ(this->Download(*second, kN), testing::Pattern(kN, 70));
  closed = b.CloseIpc(*second);
  EXPECT_TRUE(closed.ok()) << closed;
  EXPECT_EQ(b.CloseIpc(*second).code(), absl::StatusCode::kInvalidArgument);
  exporter.CloseStdin();
  EXPECT_EQ(exporter.Wait(), 0);
}

TYPED_TEST_P(BackendTest, RejectsBadArgumentsNamingThem) {
  DeviceRuntime& b = this->b();
  absl::StatusOr<void*> zero = b.Alloc(0, 0);
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  const int count = b.DeviceCount();
  absl::StatusOr<void*> bad_device = b.Alloc(count, 64);
  EXPECT_EQ(bad_device.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      absl::StrContains(bad_device.status().message(), "CUDA device " + std::to_string(count)))
      << bad_device.status();
  int host = 0;
  absl::StatusOr<std::string> export_host = b.ExportIpc(&host);
  EXPECT_EQ(export_host.status().code(), absl::StatusCode::kInvalidArgument)
      << export_host.status();
  absl::StatusOr<void*> garbage = b.OpenIpc(0, "not a handle");
  EXPECT_EQ(garbage.status().code(), absl::StatusCode::kInvalidArgument) << garbage.status();
  EXPECT_TRUE(absl::StrContains(garbage.status().message(), "12")) << garbage.status();
  EXPECT_EQ(b.CloseIpc(&host).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.DeviceUuidOf(count).status().code(), absl::StatusCode::kInvalidArgument);
}

TYPED_TEST_P(BackendTest, DeviceUuidIsStableAndNotZero) {
  absl::StatusOr<DeviceUuid> a = this->b().DeviceUuidOf(0);
  absl::StatusOr<DeviceUuid> again = this->b().DeviceUuidOf(0);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*a, *again);
  EXPECT_NE(*a, DeviceUuid{});
}

// CompareExchange64 swaps exactly the words that hold their expected value, in one call; a
// host or unaligned pointer is refused, naming the op.
TYPED_TEST_P(BackendTest, CompareExchange64SwapsOnlyMatchingWords) {
  KvKernels& kernels = this->k();
  std::vector<uint64_t> words = {10, 20, 30, 40};
  Bytes content(words.size() * 8);
  std::memcpy(content.data(), words.data(), content.size());
  auto* d = static_cast<unsigned char*>(this->Upload(content));
  ASSERT_NE(d, nullptr);
  const CasOp64 ops[] = {{d, 10, 0}, {d + 8, 99, 0}, {d + 24, 40, 7}};
  ASSERT_TRUE(kernels.CompareExchange64(0, ops, 3).ok());
  const Bytes after = this->Download(d, content.size());
  std::vector<uint64_t> got(words.size());
  std::memcpy(got.data(), after.data(), after.size());
  EXPECT_EQ(got, (std::vector<uint64_t>{0, 20, 30, 7}));
  EXPECT_TRUE(kernels.CompareExchange64(0, nullptr, 0).ok());
  uint64_t host = 5;
  const CasOp64 on_host[] = {{d, 0, 1}, {&host, 5, 6}};
  absl::Status st = kernels.CompareExchange64(0, on_host, 2);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "ops[1]")) << st;
  EXPECT_EQ(host, 5u);
  const CasOp64 unaligned[] = {{d + 4, 0, 1}};
  st = kernels.CompareExchange64(0, unaligned, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "ops[0]")) << st;
}

REGISTER_TYPED_TEST_SUITE_P(
    BackendTest, ClassifiesEveryKindOfMemory, AsyncCopiesRoundTripInEveryDirection,
    ReadingBeforeTheEventSeesTheOldBytes, APollOfAnUnfinishedEventFailsNoLaterLaunch,
    AnotherStreamWaitsForTheEvent, HostFunctionsRunInStreamOrder,
    BatchCopyAsyncMatchesTheCpuReference, GatherAndScatterMatchTheCpuReference,
    BatchChecksumMatchesTheCpuReference, IpcMapsTheSameBytesInAnotherProcess,
    OpeningAHandleTwiceSharesOneCountedMapping, RejectsBadArgumentsNamingThem,
    DeviceUuidIsStableAndNotZero, CompareExchange64SwapsOnlyMatchingWords);

}  // namespace
}  // namespace granary::device
