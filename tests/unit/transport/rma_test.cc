// RMA in one process (transport/rma.h, memory.h, on transport_fixture.h): an RmaEngine on the
// client worker moving bytes into and out of a region registered on the server worker, from
// several caller threads at once (checked byte for byte, and under ThreadSanitizer); same-host
// segments in shared memory copied on the caller's thread, and unmapped under copies in flight;
// a node marked unreachable; device memory and UCX; and what Allocate refuses.

#include "transport/rma.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/error_reason.h"
#include "common/metrics.h"
#include "tests/unit/transport/transport_fixture.h"
#include "transport/context.h"
#include "transport/memory.h"
#include "transport/worker.h"

namespace granary::transport {
namespace {

class TransportTest : public TransportFixture {
 protected:
  static constexpr size_t kSlot = 64 << 10, kSlots = 64;
  void RmaRoundTrips(MemoryRegion* region);
};

// The RMA batches below run on both TransportTest and this (transport_fixture.h's CallerDriven).
using TransportDriveTest = CallerDriven<TransportTest>;

// Four threads write their slots of `region` through the client worker's endpoint, read them
// back, and compare, 20 rounds each; then the segment itself holds the last round's bytes.
void TransportTest::RmaRoundTrips(MemoryRegion* region) {
  ASSERT_GE(region->length(), kSlot * kSlots);
  uint8_t* segment = static_cast<uint8_t*>(region->addr());
  auto rkey = region->PackRkey();
  ASSERT_TRUE(rkey.ok()) << rkey.status();
  auto addr = server_worker_->Address();
  ASSERT_TRUE(addr.ok()) << addr.status();
  auto seg = std::make_shared<RemoteSegment>();
  seg->segment_id = 1;
  seg->node_address = absl::StrCat("127.0.0.1:", server_->port());
  seg->rkey = *rkey;
  seg->worker_address = *addr;
  SetHostInfo(seg.get(), LocalHostId());
  EXPECT_TRUE(seg->same_host);
  std::shared_ptr<const RemoteSegment> cseg = seg;

  RmaEngine engine(client_worker_.get());
  constexpr int kThreads = 4, kRounds = 20;
  std::atomic<int> errors{0}, mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Each thread owns every kThreads-th slot; a batch writes them all, then reads them back.
      std::vector<std::vector<uint8_t>> out, in;
      for (size_t s = t; s < kSlots; s += kThreads) {
        out.emplace_back(kSlot);
        in.emplace_back(kSlot);
      }
      for (int round = 0; round < kRounds; ++round) {
        std::vector<RmaOp> puts, gets;
        size_t k = 0;
        for (size_t s = t; s < kSlots; s += kThreads, ++k) {
          for (size_t i = 0; i < kSlot; ++i) out[k][i] = static_cast<uint8_t>(s * 31 + round + i);
          uint64_t remote = reinterpret_cast<uint64_t>(segment) + s * kSlot;
          puts.push_back({true, out[k].data(), kSlot, nullptr, remote, cseg});
          gets.push_back({false, in[k].data(), kSlot, nullptr, remote, cseg});
        }
        if (!engine.ExecuteSync(std::move(puts)).ok()) errors.fetch_add(1);
        if (!engine.ExecuteSync(std::move(gets)).ok()) errors.fetch_add(1);
        for (size_t j = 0; j < out.size(); ++j) {
          if (std::memcmp(out[j].data(), in[j].data(), kSlot) != 0) mismatches.fetch_add(1);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  // The last round's bytes are in the segment itself. The server's progress thread wrote them
  // (UCX's put handler) before it acknowledged the flushes; a round trip through that thread
  // orders those writes before the reads below.
  server_worker_->Run([] {});
  for (size_t s = 0; s < kSlots; ++s) {
    ASSERT_EQ(segment[s * kSlot + 5], static_cast<uint8_t>(s * 31 + (kRounds - 1) + 5)) << s;
  }
}

TEST_F(TransportTest, ConcurrentRmaBatchesMoveExactBytes) {
  // The "remote" segment: registered through the server worker's context, reached through the
  // client worker's endpoint, as a node's segment is.
  std::vector<uint8_t> segment(kSlot * kSlots, 0);
  auto region = MemoryRegion::Create(ctx_.get(), segment.data(), segment.size());
  ASSERT_TRUE(region.ok()) << region.status();
  RmaRoundTrips(region->get());
}

// The same with callers driving their transfers (RmaEngine::ExecuteSync waits in SpinUntil).
TEST_F(TransportDriveTest, ConcurrentRmaBatchesMoveExactBytes) {
  std::vector<uint8_t> segment(kSlot * kSlots, 0);
  auto region = MemoryRegion::Create(ctx_.get(), segment.data(), segment.size());
  ASSERT_TRUE(region.ok()) << region.status();
  RmaRoundTrips(region->get());
  EXPECT_GT(Drives(), 0u);
}

TEST_F(TransportTest, ConcurrentRmaBatchesOnUcxAllocatedMemory) {
  // A node's segment as UCX allocates it (shared memory a same-host peer maps directly).
  auto region = MemoryRegion::Allocate(ctx_.get(), kSlot * kSlots);
  ASSERT_TRUE(region.ok()) << region.status();
  std::memset((*region)->addr(), 0, (*region)->length());
  RmaRoundTrips(region->get());
}

// What a client holds for a segment of `region`, reached through the server worker.
std::shared_ptr<RemoteSegment> SegmentOf(MemoryRegion* region, Worker* owner, uint16_t port) {
  auto seg = std::make_shared<RemoteSegment>();
  auto rkey = region->PackRkey();
  auto addr = owner->Address();
  EXPECT_TRUE(rkey.ok() && addr.ok());
  seg->segment_id = 7;
  seg->node_address = absl::StrCat("127.0.0.1:", port);
  seg->rkey = rkey.ok() ? *rkey : "";
  seg->worker_address = addr.ok() ? *addr : "";
  seg->base = reinterpret_cast<uint64_t>(region->addr());
  seg->size = region->length();
  SetHostInfo(seg.get(), LocalHostId());
  return seg;
}

// A same-host segment in shared memory is copied with memcpy on the caller's thread once an
// Execute has mapped it; ops it cannot copy stay, in order, for Execute.
TEST_F(TransportTest, MappedSegmentIsCopiedOnTheCallingThread) {
  auto region = MemoryRegion::Allocate(ctx_.get(), kSlot * 4);
  ASSERT_TRUE(region.ok()) << region.status();
  auto* mem = static_cast<uint8_t*>((*region)->addr());
  std::memset(mem, 0, (*region)->length());
  std::shared_ptr<const RemoteSegment> seg =
      SegmentOf(region->get(), server_worker_.get(), server_->port());
  const uint64_t base = seg->base;
  RmaEngine engine(client_worker_.get());
  std::vector<uint8_t> out(kSlot, 0xA5), in(kSlot, 0);

  // Not mapped before an Execute reached the segment.
  std::vector<RmaOp> ops = {{true, out.data(), kSlot, nullptr, base, seg}};
  EXPECT_EQ(engine.CopyMapped(&ops), 0u);
  ASSERT_EQ(ops.size(), 1u);
  ASSERT_TRUE(engine.ExecuteSync(std::move(ops)).ok());
  server_worker_->Run([] {});
  EXPECT_EQ(mem[kSlot - 1], 0xA5);

  // Now a put and a get are plain copies.
  std::fill(out.begin(), out.end(), 0x3C);
  ops = {{true, out.data(), kSlot, nullptr, base + kSlot, seg}};
  EXPECT_EQ(engine.CopyMapped(&ops), 1u);
  EXPECT_TRUE(ops.empty());
  EXPECT_EQ(mem[kSlot], 0x3C);
  EXPECT_EQ(mem[2 * kSlot - 1], 0x3C);
  mem[kSlot + 9] = 0x77;
  ops = {{false, in.data(), kSlot, nullptr, base + kSlot, seg}};
  EXPECT_EQ(engine.CopyMapped(&ops), 1u);
  EXPECT_EQ(in[0], 0x3C);
  EXPECT_EQ(in[9], 0x77);

  // Out of the segment's range (even by one byte), and zero-length ops, stay for Execute; the
  // ops it keeps keep their order.
  uint8_t small[16] = {};
  ops = {{false, in.data(), kSlot, nullptr, base + 3 * kSlot + 1, seg},
         {false, small, 16, nullptr, base, seg},
         {false, small, 0, nullptr, base, seg},
         {false, in.data(), kSlot, nullptr, base - 1, seg}};
  EXPECT_EQ(engine.CopyMapped(&ops), 1u);
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].remote_addr, base + 3 * kSlot + 1);
  EXPECT_EQ(ops[1].length, 0u);
  EXPECT_EQ(ops[2].remote_addr, base - 1);
  EXPECT_EQ(small[0], 0xA5);

  // A node process that is gone: left to Execute, which reports it.
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  auto dead = std::make_shared<RemoteSegment>(*seg);
  dead->pid = child;
  ops = {{false, in.data(), kSlot, nullptr, base, dead}};
  EXPECT_EQ(engine.CopyMapped(&ops), 0u);
  EXPECT_EQ(ops.size(), 1u);

  // Forgetting the node unmaps it: nothing is copied until an Execute maps it again.
  engine.ForgetNode(seg->node_address);
  client_worker_->Run([] {});
  ops = {{false, in.data(), kSlot, nullptr, base, seg}};
  EXPECT_EQ(engine.CopyMapped(&ops), 0u);
  EXPECT_EQ(ops.size(), 1u);
}

// Memory the node registered but did not allocate in shared memory is never mapped: every op
// goes through UCX.
TEST_F(TransportTest, RegisteredHeapSegmentIsNotMapped) {
  // Never freed: within one process UCX reads it from the client worker through hand-offs of
  // its own that ThreadSanitizer cannot see, so a free at the end of the test reads as a race.
  static auto* heap = new std::vector<uint8_t>(kSlot, 1);
  std::vector<uint8_t>& segment = *heap;
  auto region = MemoryRegion::Create(ctx_.get(), segment.data(), segment.size());
  ASSERT_TRUE(region.ok()) << region.status();
  std::shared_ptr<const RemoteSegment> seg =
      SegmentOf(region->get(), server_worker_.get(), server_->port());
  std::vector<uint8_t> in(kSlot, 0);
  RmaEngine engine(client_worker_.get());
  ASSERT_TRUE(engine.ExecuteSync({{false, in.data(), kSlot, nullptr, seg->base, seg}}).ok());
  EXPECT_EQ(in[kSlot - 1], 1);
  std::vector<RmaOp> ops = {{false, in.data(), kSlot, nullptr, seg->base, seg}};
  EXPECT_EQ(engine.CopyMapped(&ops), 0u);
  EXPECT_EQ(ops.size(), 1u);
}

// A node marked unreachable (after a transfer to it timed out) is refused at once, counted,
// for a jittered back-off of kUnreachableInitialMs / 2 .. kUnreachableInitialMs; then it is
// tried again.
TEST_F(TransportTest, UnreachableNodeIsRefusedUntilItsBackOffPasses) {
  static auto* heap = new std::vector<uint8_t>(kSlot, 7);
  auto region = MemoryRegion::Create(ctx_.get(), heap->data(), heap->size());
  ASSERT_TRUE(region.ok()) << region.status();
  std::shared_ptr<const RemoteSegment> seg =
      SegmentOf(region->get(), server_worker_.get(), server_->port());
  common::MetricsRegistry registry;
  common::MetricCounter* refusals = registry.Counter("refusals", "test");
  RmaEngine engine(client_worker_.get());
  engine.set_refusal_counter(refusals);
  std::vector<uint8_t> in(kSlot, 0);
  ASSERT_TRUE(engine.ExecuteSync({{false, in.data(), kSlot, nullptr, seg->base, seg}}).ok());
  auto marked = std::chrono::steady_clock::now();
  engine.MarkUnreachable({seg->node_address, seg->node_address});
  absl::Status st = engine.ExecuteSync({{false, in.data(), kSlot, nullptr, seg->base, seg}});
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("unreachable"), std::string::npos) << st;
  EXPECT_EQ(refusals->value(), 1u);
  // Retried (and served) once the back-off has passed, never before its lower bound.
  absl::Status later;
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    later = engine.ExecuteSync({{false, in.data(), kSlot, nullptr, seg->base, seg}});
  } while (!later.ok() &&
           std::chrono::steady_clock::now() - marked < std::chrono::milliseconds(2000));
  int64_t waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - marked)
                       .count();
  ASSERT_TRUE(later.ok()) << later;
  EXPECT_GE(waited, RmaEngine::kUnreachableInitialMs / 2);
  EXPECT_LE(waited, RmaEngine::kUnreachableInitialMs + 500);
  EXPECT_EQ(in[kSlot - 1], 7);
}

// Copies on caller threads while the progress thread unmaps and remaps the segment: a copy
// never reads through an unmapped rkey (the ASan build of this test would fault), and every
// op is either copied or left for Execute.
TEST_F(TransportTest, UnmappingWaitsForCopiesInFlight) {
  auto region = MemoryRegion::Allocate(ctx_.get(), kSlot * 4);
  ASSERT_TRUE(region.ok()) << region.status();
  std::memset((*region)->addr(), 0x5A, (*region)->length());
  std::shared_ptr<const RemoteSegment> seg =
      SegmentOf(region->get(), server_worker_.get(), server_->port());
  RmaEngine engine(client_worker_.get());
  std::atomic<bool> stop{false};
  std::atomic<int> copied{0}, bad{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      std::vector<uint8_t> in(kSlot);
      while (!stop.load()) {
        std::vector<RmaOp> ops = {{false, in.data(), kSlot, nullptr, seg->base + kSlot, seg}};
        size_t n = engine.CopyMapped(&ops);
        if (n + ops.size() != 1) bad.fetch_add(1);
        if (n == 1) {
          copied.fetch_add(1);
          if (in[0] != 0x5A || in[kSlot - 1] != 0x5A) bad.fetch_add(1);
        }
      }
    });
  }
  uint8_t probe[8];
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(engine.ExecuteSync({{false, probe, sizeof(probe), nullptr, seg->base, seg}}).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    engine.ForgetNode(seg->node_address);
  }
  stop.store(true);
  for (auto& th : readers) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(copied.load(), 0);
}

// The gates of the path for a UCX with CUDA (Context::SupportsCudaMemory). Device memory is never
// registered with a UCX that cannot handle it: on Debian's UCX (no CUDA memory type) a CUDA
// registration is refused up front, naming what to install. An op that says its local side
// is device memory is refused by the engine unless set_device_memory(true) (a CUDA UCX); with
// it, the op goes to UCX as it is (here its memory is really host memory, so UCX moves it).
TEST_F(TransportTest, DeviceMemoryReachesUcxOnlyWhereUcxSupportsIt) {
  static auto* heap = new std::vector<uint8_t>(kSlot, 9);
  std::vector<uint8_t> gpu_like(kSlot, 0);
  if (!ctx_->SupportsCudaMemory()) {
    auto cuda = MemoryRegion::Create(ctx_.get(), gpu_like.data(), gpu_like.size(), /*cuda=*/true);
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition) << cuda.status();
    EXPECT_TRUE(absl::StrContains(cuda.status().message(), "--with-cuda")) << cuda.status();
  }
  auto region = MemoryRegion::Create(ctx_.get(), heap->data(), heap->size());
  ASSERT_TRUE(region.ok()) << region.status();
  std::shared_ptr<const RemoteSegment> seg =
      SegmentOf(region->get(), server_worker_.get(), server_->port());
  RmaOp op{false, gpu_like.data(), kSlot, nullptr, seg->base, seg};
  op.device = 0;
  RmaEngine refusing(client_worker_.get());
  absl::Status st = refusing.ExecuteSync({op});
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "device memory (device 0)")) << st;
  EXPECT_EQ(gpu_like[0], 0);
  RmaEngine allowing(client_worker_.get());
  allowing.set_device_memory(true);
  ASSERT_TRUE(allowing.ExecuteSync({op}).ok());
  EXPECT_EQ(gpu_like[0], 9);
  EXPECT_EQ(gpu_like[kSlot - 1], 9);
}

TEST_F(TransportTest, AllocateRefusesZeroBytes) {
  auto region = MemoryRegion::Allocate(ctx_.get(), 0);
  EXPECT_TRUE(absl::IsInvalidArgument(region.status())) << region.status();
}

}  // namespace
}  // namespace granary::transport
