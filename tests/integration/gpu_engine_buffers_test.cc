// Engine buffers on the GPU tier between real processes, on the fake device backend
// (gpu_tier_fixture.h): scatter lists of device and host regions, PagedKv's Put and Get
// against the CPU reference (device staging kept, the legacy default stream never used, the
// checksum catching a corrupt value), and the engine's stream contract on every path.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/client_impl.h"
#include "client/paged_kv_trailer.h"
#include "device/checksum.h"
#include "device/device_backend.h"
#include "device/fake/fake_backend.h"
#include "granary/device_pointer.h"
#include "granary/error_reason.h"
#include "granary/paged_kv.h"
#include "node/node_server.h"
#include "proto/alloc_header.h"
#include "proto/messages.h"
#include "tests/integration/cluster.h"
#include "tests/integration/gpu_tier_fixture.h"

namespace granary::testing {
namespace {

using GpuTierTest = GpuTierFixture;

// Point 4, scatter lists: an object is the concatenation of its regions (device, host or both);
// multi-region lists are gathered into and scattered from one staging buffer per batch.
TEST_F(GpuTierTest, ScatterListsOfDeviceAndHostRegionsRoundTripByteExact) {
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(client_->Put("warm", "up").ok());
  ASSERT_TRUE(client_->Get("warm").ok());
  // Region sizes per key; `on_device` says which regions are device memory.
  const std::vector<std::vector<size_t>> shape = {
      {1000, 70000, 5}, {300, 4096}, {65536}, {7, 9000, 1}};
  const std::vector<std::vector<bool>> on_device = {
      {true, true, true}, {false, false}, {true}, {false, true, false}};
  std::vector<std::string> keys, values;
  std::vector<std::vector<BufferRegion>> src, dst;
  std::vector<std::vector<char>> host_mem;  // keeps host regions alive
  host_mem.reserve(64);
  auto region = [&](size_t n, bool device) -> BufferRegion {
    if (device) return {DeviceAlloc(n), n};
    host_mem.emplace_back(n, '\x5a');
    return {host_mem.back().data(), n};
  };
  for (size_t i = 0; i < shape.size(); ++i) {
    keys.push_back(absl::StrCat("sl", i));
    size_t total = 0;
    for (size_t n : shape[i]) total += n;
    values.push_back(MakeValue(keys.back(), 1, total));
    std::vector<BufferRegion> s, d;
    size_t off = 0;
    for (size_t j = 0; j < shape[i].size(); ++j) {
      s.push_back(region(shape[i][j], on_device[i][j]));
      const std::string part = values.back().substr(off, shape[i][j]);
      if (on_device[i][j]) {
        ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(s.back().data), part));
      } else {
        std::memcpy(s.back().data, part.data(), part.size());
      }
      d.push_back(region(shape[i][j], on_device[i][j]));
      if (on_device[i][j]) {
        ASSERT_NO_FATAL_FAILURE(
            ToDevice(static_cast<char*>(d.back().data), std::string(shape[i][j], '\x5a')));
      }
      off += shape[i][j];
    }
    src.push_back(s);
    dst.push_back(d);
  }
  for (const absl::Status& st : client_->BatchPutFromRegions(keys, src)) ASSERT_TRUE(st.ok()) << st;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto got = client_->Get(keys[i]);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == values[i]) << keys[i] << ": the gathered value differs";
  }
  auto read = client_->BatchGetIntoRegions(keys, dst);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(read[i].ok()) << keys[i] << ": " << read[i].status();
    EXPECT_EQ(*read[i], values[i].size());
    std::string back;
    for (size_t j = 0; j < dst[i].size(); ++j) {
      const auto* p = static_cast<const char*>(dst[i][j].data);
      back += on_device[i][j] ? FromDevice(p, dst[i][j].size) : std::string(p, dst[i][j].size);
    }
    EXPECT_TRUE(back == values[i]) << keys[i] << ": the scattered value differs";
  }
  // Too small a list, and an empty one.
  auto small =
      client_->BatchGetIntoRegions({keys[0], keys[1]}, {{region(10, true), region(10, false)}, {}});
  EXPECT_EQ(small[0].status().code(), absl::StatusCode::kFailedPrecondition) << small[0].status();
  EXPECT_EQ(small[1].status().code(), absl::StatusCode::kInvalidArgument) << small[1].status();
}

// A paged cache of 32 blocks (its layout, caches unset) and contents for its K and V caches.
struct KvContents {
  KvContents(int64_t block_size, int64_t num_heads, int64_t head_dim, int64_t elem_bytes,
             uint64_t seed) {
    layout.num_blocks = 32;
    layout.block_size = block_size;
    layout.num_heads = num_heads;
    layout.head_dim = head_dim;
    layout.elem_bytes = elem_bytes;
    block = static_cast<size_t>(block_size * num_heads * head_dim * elem_bytes);
    cache_bytes = 32 * block;
    k = MakeValue("K", seed, cache_bytes);
    v = MakeValue("V", seed, cache_bytes);
  }
  // The value stored for a block list: [K(b0) | V(b0) | K(b1) | ...].
  std::string Value(const std::vector<int32_t>& ids) const {
    std::string r;
    for (int32_t x : ids) r += k.substr(x * block, block) + v.substr(x * block, block);
    return r;
  }
  PagedKvCache layout;
  size_t block = 0, cache_bytes = 0;
  std::string k, v;
};

// Point 5: PagedKv::Put gathers an engine's paged blocks (device caches here, host caches too)
// into one value per key, PagedKv::Get scatters them back; both against the CPU reference, with
// the refusals named.
TEST_F(GpuTierTest, PagedKvPutAndGetMatchTheCpuReference) {
  ASSERT_NO_FATAL_FAILURE(Start());
  PagedKv paged(*client_);
  const KvContents kv(4, 2, 8, 2, 1);
  PagedKvCache c = kv.layout;
  const size_t block = kv.block, cache_bytes = kv.cache_bytes;
  const std::string &k_host = kv.k, &v_host = kv.v;
  const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}, {30, 0}};
  auto reference = [&](const std::vector<int32_t>& b) { return kv.Value(b); };
  for (const bool device : {true, false}) {
    SCOPED_TRACE(device ? "device caches" : "host caches");
    std::string kh = k_host, vh = v_host;
    if (device) {
      c.k_cache = DeviceAlloc(cache_bytes);
      c.v_cache = DeviceAlloc(cache_bytes);
      ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.k_cache), k_host));
      ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.v_cache), v_host));
    } else {
      c.k_cache = kh.data();
      c.v_cache = vh.data();
    }
    const std::vector<std::string> keys = {device ? "kvd0" : "kvh0", device ? "kvd1" : "kvh1"};
    for (const absl::Status& st : paged.Put(keys, c, ids)) ASSERT_TRUE(st.ok()) << st;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto got = client_->Get(keys[i]);
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_TRUE(*got == reference(ids[i])) << keys[i];
    }
    // Clear the caches, scatter back: the listed blocks return, the others stay cleared.
    const std::string zero(cache_bytes, '\0');
    if (device) {
      ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.k_cache), zero));
      ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.v_cache), zero));
    } else {
      kh = zero;
      vh = zero;
      c.k_cache = kh.data();
      c.v_cache = vh.data();
    }
    for (const absl::Status& st : paged.Get(keys, c, ids)) ASSERT_TRUE(st.ok()) << st;
    const std::string kb = device ? FromDevice(static_cast<char*>(c.k_cache), cache_bytes) : kh;
    const std::string vb = device ? FromDevice(static_cast<char*>(c.v_cache), cache_bytes) : vh;
    for (int32_t b = 0; b < 32; ++b) {
      const bool listed = b == 3 || b == 7 || b == 1 || b == 30 || b == 0;
      EXPECT_EQ(kb.substr(b * block, block),
                listed ? k_host.substr(b * block, block) : std::string(block, '\0'))
          << "K block " << b;
      EXPECT_EQ(vb.substr(b * block, block),
                listed ? v_host.substr(b * block, block) : std::string(block, '\0'))
          << "V block " << b;
    }
    // Refusals: a block out of range, a block listed by two keys of one get, a value of
    // another layout, a bad layout field.
    auto out_of_range = paged.Put({"bad"}, c, {{2, 32}});
    EXPECT_EQ(out_of_range[0].code(), absl::StatusCode::kInvalidArgument) << out_of_range[0];
    EXPECT_TRUE(absl::StrContains(out_of_range[0].message(), "32")) << out_of_range[0];
    EXPECT_FALSE(*client_->Exist("bad"));
    auto twice = paged.Get(keys, c, {ids[0], {7}});
    EXPECT_TRUE(twice[0].ok()) << twice[0];
    EXPECT_EQ(twice[1].code(), absl::StatusCode::kInvalidArgument) << twice[1];
    EXPECT_TRUE(absl::StrContains(twice[1].message(), "block 7")) << twice[1];
    auto other = paged.Get({keys[0]}, c, {{3, 7}});  // stored with 3 blocks
    EXPECT_EQ(other[0].code(), absl::StatusCode::kFailedPrecondition) << other[0];
    PagedKvCache odd = c;
    odd.elem_bytes = 3;
    auto layout = paged.Put({"odd"}, odd, {{1}});
    EXPECT_EQ(layout[0].code(), absl::StatusCode::kInvalidArgument) << layout[0];
    EXPECT_TRUE(absl::StrContains(layout[0].message(), "elem_bytes")) << layout[0];
  }
}

// The paged-KV calls stage through device memory allocated once and kept: a later call
// allocates nothing (a cudaFree per call would wait for the whole device, the engine's kernels
// included, and a cudaMalloc per call competes with the engine's allocator), so an allocation
// that would now fail does not fail it.
TEST_F(GpuTierTest, PagedKvCallsReuseTheirDeviceStaging) {
  if (fake_ == nullptr) GTEST_SKIP() << "injects an allocation failure";
  ASSERT_NO_FATAL_FAILURE(Start());
  PagedKv paged(*client_);  // its staging is kept for reuse
  const KvContents kv(4, 2, 8, 2, 1);
  PagedKvCache c = kv.layout;
  c.k_cache = DeviceAlloc(kv.cache_bytes);
  c.v_cache = DeviceAlloc(kv.cache_bytes);
  ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.k_cache), kv.k));
  ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.v_cache), kv.v));
  const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}, {30, 0}};
  for (const absl::Status& st : paged.Put({"r0", "r1"}, c, ids)) {
    ASSERT_TRUE(st.ok()) << st;
  }
  fake_->FailNthAllocation(1);  // the next device allocation would fail
  for (const absl::Status& st : paged.Put({"r2", "r3"}, c, ids)) EXPECT_TRUE(st.ok()) << st;
  for (const absl::Status& st : paged.Get({"r2", "r3"}, c, ids)) EXPECT_TRUE(st.ok()) << st;
  fake_->FailNthAllocation(0);
  auto got = client_->Get("r3");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == kv.Value(ids[1]));
}

// The paged-KV and scatter-list calls run their device work (gathers, scatters, checksums,
// staging copies) on non-blocking streams of the buffer's device, never on the legacy default
// stream, which would wait for the engine's queued work, make the engine's later work wait for
// it, and break an engine capturing a CUDA graph.
TEST_F(GpuTierTest, DevicePathsKeepOffTheLegacyDefaultStream) {
  if (fake_ == nullptr) GTEST_SKIP() << "counts the fake's default-stream work";
  ASSERT_NO_FATAL_FAILURE(Start());
  PagedKv paged(*client_);
  const KvContents kv(4, 2, 8, 2, 1);
  PagedKvCache c = kv.layout;
  c.k_cache = DeviceAlloc(kv.cache_bytes);
  c.v_cache = DeviceAlloc(kv.cache_bytes);
  ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.k_cache), kv.k));
  ASSERT_NO_FATAL_FAILURE(ToDevice(static_cast<char*>(c.v_cache), kv.v));
  char* region = DeviceAlloc(300);
  ASSERT_NO_FATAL_FAILURE(ToDevice(region, std::string(300, 'r')));
  const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}, {30, 0}};
  const uint64_t before = fake_->DefaultStreamOps();
  PagedKvOptions checked;
  checked.checksum = true;
  for (const absl::Status& st : paged.Put({"s0", "s1"}, c, ids, checked)) {
    ASSERT_TRUE(st.ok()) << st;
  }
  for (const absl::Status& st : paged.Get({"s0", "s1"}, c, ids, checked)) {
    ASSERT_TRUE(st.ok()) << st;
  }
  const std::string host(100, 'h');
  std::vector<BufferRegion> two = {{region, 300}, {const_cast<char*>(host.data()), 100}};
  ASSERT_TRUE(client_->BatchPutFromRegions({"s2"}, {two})[0].ok());
  EXPECT_EQ(fake_->DefaultStreamOps(), before);
  auto got = client_->Get("s2");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == std::string(300, 'r') + host);
}

// Point 5, the checksum: each value carries a 16-byte trailer with the CPU reference's checksum
// of its blocks, and round trips byte-exact for device and host caches; a value corrupted in
// place is DATA_LOSS naming the key and both checksums and scatters nothing of itself while the
// other keys of the batch scatter; checksum on and off do not mix. Blocks of 15 bytes, so that
// values and their trailers sit at odd offsets of the staging buffer.
TEST_F(GpuTierTest, PagedKvChecksumCatchesACorruptValue) {
  ASSERT_NO_FATAL_FAILURE(Start());
  PagedKv paged(*client_);
  const KvContents kv(3, 1, 5, 1, 2);
  PagedKvCache c = kv.layout;
  const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}, {30, 0}, {12}};
  auto hex = [](uint64_t v) { return absl::StrCat("0x", absl::Hex(v)); };
  PagedKvOptions on;
  on.checksum = true;
  for (const bool device : {true, false}) {
    SCOPED_TRACE(device ? "device caches" : "host caches");
    std::string kh = kv.k, vh = kv.v;
    c.k_cache = device ? static_cast<void*>(DeviceAlloc(kv.cache_bytes)) : kh.data();
    c.v_cache = device ? static_cast<void*>(DeviceAlloc(kv.cache_bytes)) : vh.data();
    // Sets both caches to `k` and `v`, or reads them back.
    auto set = [&](const std::string& k, const std::string& v) {
      if (!device) {
        kh = k;
        vh = v;
        c.k_cache = kh.data();
        c.v_cache = vh.data();
        return;
      }
      ToDevice(static_cast<char*>(c.k_cache), k);
      ToDevice(static_cast<char*>(c.v_cache), v);
    };
    auto get = [&](bool v) {
      if (!device) return v ? vh : kh;
      return FromDevice(static_cast<char*>(v ? c.v_cache : c.k_cache), kv.cache_bytes);
    };
    // The blocks of `listed` hold the original bytes, all others `fill`.
    auto expect_blocks = [&](const std::vector<int32_t>& listed, char fill) {
      const std::string kb = get(false), vb = get(true);
      for (int32_t b = 0; b < 32; ++b) {
        const bool in = std::find(listed.begin(), listed.end(), b) != listed.end();
        EXPECT_EQ(kb.substr(b * kv.block, kv.block),
                  in ? kv.k.substr(b * kv.block, kv.block) : std::string(kv.block, fill))
            << "K block " << b;
        EXPECT_EQ(vb.substr(b * kv.block, kv.block),
                  in ? kv.v.substr(b * kv.block, kv.block) : std::string(kv.block, fill))
            << "V block " << b;
      }
    };
    ASSERT_NO_FATAL_FAILURE(set(kv.k, kv.v));
    const std::string p = device ? "sumd" : "sumh";
    const std::vector<std::string> keys = {p + "0", p + "1", p + "2"};
    for (const absl::Status& st : paged.Put(keys, c, ids, on)) {
      ASSERT_TRUE(st.ok()) << st;
    }
    // Stored: the blocks, then "GKVC", algorithm 1 and the CPU reference's checksum.
    for (size_t i = 0; i < keys.size(); ++i) {
      auto got = client_->Get(keys[i]);
      ASSERT_TRUE(got.ok()) << got.status();
      const std::string blocks = kv.Value(ids[i]);
      ASSERT_EQ(got->size(), blocks.size() + client::kKvTrailerBytes) << keys[i];
      EXPECT_TRUE(got->substr(0, blocks.size()) == blocks) << keys[i];
      const uint64_t sum = device::ChecksumCpu(blocks.data(), blocks.size());
      std::string trailer = "GKVC" + std::string("\x01\0\0\0", 4);
      for (int b = 0; b < 8; ++b) trailer += static_cast<char>(sum >> (8 * b));
      EXPECT_EQ(absl::BytesToHexString(got->substr(blocks.size())), absl::BytesToHexString(trailer))
          << keys[i];
    }
    // Read back into cleared caches: the listed blocks return, the others stay cleared.
    ASSERT_NO_FATAL_FAILURE(
        set(std::string(kv.cache_bytes, '\0'), std::string(kv.cache_bytes, '\0')));
    for (const absl::Status& st : paged.Get(keys, c, ids, on)) {
      ASSERT_TRUE(st.ok()) << st;
    }
    expect_blocks({3, 7, 1, 30, 0, 12}, '\0');

    // Corrupt key 1 in place: one byte of its blocks flipped, same size, same trailer.
    auto raw = client_->Get(keys[1]);
    ASSERT_TRUE(raw.ok()) << raw.status();
    std::string corrupt = *raw;
    corrupt[20] ^= 0x40;
    ASSERT_TRUE(client_->Remove(keys[1]).ok());
    ASSERT_TRUE(client_->Put(keys[1], corrupt).ok());
    const size_t payload = corrupt.size() - client::kKvTrailerBytes;
    const uint64_t stored = device::ChecksumCpu(raw->data(), payload);
    const uint64_t computed = device::ChecksumCpu(corrupt.data(), payload);
    ASSERT_NE(stored, computed);
    ASSERT_NO_FATAL_FAILURE(
        set(std::string(kv.cache_bytes, 'z'), std::string(kv.cache_bytes, 'z')));
    auto res = paged.Get(keys, c, ids, on);
    EXPECT_TRUE(res[0].ok()) << res[0];
    EXPECT_TRUE(res[2].ok()) << res[2];
    EXPECT_EQ(res[1].code(), absl::StatusCode::kDataLoss) << res[1];
    for (const std::string& want : {keys[1], hex(stored), hex(computed)}) {
      EXPECT_TRUE(absl::StrContains(res[1].message(), want)) << want << " not in " << res[1];
    }
    expect_blocks({3, 7, 1, 12}, 'z');  // key 1's blocks 30 and 0 untouched

    // Checksum on and off do not mix, and nothing is scattered.
    ASSERT_NO_FATAL_FAILURE(
        set(std::string(kv.cache_bytes, 'q'), std::string(kv.cache_bytes, 'q')));
    auto off = paged.Get({keys[0]}, c, {ids[0]});
    EXPECT_EQ(off[0].code(), absl::StatusCode::kFailedPrecondition) << off[0];
    EXPECT_TRUE(absl::StrContains(off[0].message(), "checksum trailer")) << off[0];
    EXPECT_TRUE(absl::StrContains(off[0].message(), "checksum on")) << off[0];
    const std::string plain = p + "plain";
    for (const absl::Status& st : paged.Put({plain}, c, {{5, 6}})) {
      ASSERT_TRUE(st.ok()) << st;
    }
    auto plain_on = paged.Get({plain}, c, {{5, 6}}, on);
    EXPECT_EQ(plain_on[0].code(), absl::StatusCode::kFailedPrecondition) << plain_on[0];
    EXPECT_TRUE(absl::StrContains(plain_on[0].message(), "without a checksum trailer"))
        << plain_on[0];
    auto other = paged.Get({keys[0]}, c, {{3, 7}}, on);  // stored with 3 blocks
    EXPECT_EQ(other[0].code(), absl::StatusCode::kFailedPrecondition) << other[0];
    expect_blocks({}, 'q');
  }
}

// The stream contract (include/granary/client.h, DeviceWait). The engine writes each value on
// its stream, the fake's engine stream, whose writes land only once something waits for them
// (or after 60 s): as on a GPU, where the engine's kernels may still be writing when the put
// starts. A put without a DeviceWait reads the bytes from before the write and stores them as
// if they were good; with the engine's stream or an event recorded on it, every path (the host
// segment's mapped copy, the GPU segment's IPC copy, a scatter list's gather, the paged-KV
// gather, staging) waits, and stores the engine's bytes.
class EngineStreamTest : public GpuTierTest {
 protected:
  void SetUp() override {
    GpuTierTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (fake_ == nullptr) GTEST_SKIP() << "the engine stream whose writes land late is the fake's";
    auto engine = fake_->CreateEngineStream(0, absl::Seconds(60));
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = *engine;
    auto event = fake_->runtime().CreateEvent(0);
    ASSERT_TRUE(event.ok()) << event.status();
    event_ = *event;
  }
  void TearDown() override {
    if (engine_ != nullptr) {
      EXPECT_TRUE(backend_->runtime().SynchronizeStream(engine_).ok());
      backend_->runtime().DestroyStream(engine_);
    }
    if (event_ != nullptr) backend_->runtime().DestroyEvent(event_);
    GpuTierTest::TearDown();
  }
  // Device memory at `at` holds `old` (the value `tag` had before), and the engine's stream has
  // a write of `fresh` into it queued. The engine's source bytes live until TearDown.
  struct Write {
    std::string old, fresh;
  };
  Write EngineWrites(char* at, const std::string& tag, size_t n) {
    Write w{MakeValue(tag + "/old", 1, n), MakeValue(tag + "/fresh", 2, n)};
    EXPECT_TRUE(
        backend_->runtime().SynchronizeStream(engine_).ok());  // the last test's write first
    ToDevice(at, w.old);
    sources_.push_back(std::make_unique<std::string>(w.fresh));
    EXPECT_TRUE(backend_->runtime().CopyAsync(engine_, at, sources_.back()->data(), n).ok());
    return w;
  }
  std::string Stored(const std::string& key) {
    auto got = client_->Get(key);
    EXPECT_TRUE(got.ok()) << key << ": " << got.status();
    return got.ok() ? *got : std::string();
  }
  DeviceWait OnStream() const { return DeviceWait{engine_, nullptr}; }
  // An event recorded on the engine's stream after its write.
  DeviceWait OnEvent() {
    EXPECT_TRUE(backend_->runtime().RecordEvent(event_, engine_).ok());
    return DeviceWait{nullptr, event_};
  }
  // PutFrom of a device buffer, without and with the contract.
  void PutFromWaits(const std::string& tag, size_t n, bool by_event) {
    char* d = DeviceAlloc(n);
    ASSERT_NE(d, nullptr);
    Write w = EngineWrites(d, tag, n);
    ASSERT_TRUE(client_->PutFrom(tag + "/without", d, n).ok());
    EXPECT_TRUE(Stored(tag + "/without") == w.old)
        << tag << ": a put without the contract did not read the bytes from before the write";
    w = EngineWrites(d, tag + "/again", n);
    const DeviceWait wait = by_event ? OnEvent() : OnStream();
    ASSERT_TRUE(client_->PutFrom(tag + "/with", d, n, wait).ok());
    EXPECT_TRUE(Stored(tag + "/with") == w.fresh)
        << tag << ": a put with the engine's " << (by_event ? "event" : "stream")
        << " stored bytes from before the engine's write";
  }

  void* engine_ = nullptr;
  void* event_ = nullptr;
  std::vector<std::unique_ptr<std::string>> sources_;
};

TEST_F(EngineStreamTest, APutWaitsForTheEngineOnEveryPathAndReadsStaleBytesWithout) {
  ASSERT_NO_FATAL_FAILURE(StartWithGpu());
  ASSERT_TRUE(client_->Put("warm", "up").ok());  // maps the host segment into this process
  ASSERT_TRUE(client_->Get("warm").ok());
  // The host segment, mapped: a device-to-host copy on the client's stream.
  ASSERT_NO_FATAL_FAILURE(PutFromWaits("hs", 70000, /*by_event=*/false));
  ASSERT_NO_FATAL_FAILURE(PutFromWaits("hs-event", 4096, /*by_event=*/true));
  EXPECT_GT(ClientMetric("granary_client_gpu_transfers_total{path=\"host_segment\"}"), 0);
  // The GPU segment: a device-to-device copy through the IPC mapping (BatchPutWith, tier gpu).
  {
    constexpr size_t kBytes = 50000;
    char* d = DeviceAlloc(kBytes);
    ASSERT_NE(d, nullptr);
    PutOptions on_gpu;
    on_gpu.tier = StorageTier::kGpu;
    Write w = EngineWrites(d, "gpu", kBytes);
    ASSERT_TRUE(
        client_->BatchPutWith({"gpu/without"}, {absl::string_view(d, kBytes)}, on_gpu)[0].ok());
    EXPECT_TRUE(Stored("gpu/without") == w.old) << "the IPC put waited without the contract";
    for (const bool by_event : {false, true}) {
      w = EngineWrites(d, absl::StrCat("gpu", by_event), kBytes);
      on_gpu.wait = by_event ? OnEvent() : OnStream();
      const std::string key = absl::StrCat("gpu/with", by_event);
      ASSERT_TRUE(client_->BatchPutWith({key}, {absl::string_view(d, kBytes)}, on_gpu)[0].ok());
      EXPECT_TRUE(Stored(key) == w.fresh) << key << ": the IPC put did not wait";
      ASSERT_EQ(ReplicasOf(key).size(), 1u);
      EXPECT_EQ(ReplicasOf(key)[0].segment_id, SegmentsOf(proto::Tier::kGpu)[0].segment_id);
    }
    EXPECT_GT(ClientMetric("granary_client_gpu_transfers_total{path=\"ipc\"}"), 0);
  }
  // A scatter list: two device regions gathered (synchronously) and a one-region list.
  {
    constexpr size_t kBytes = 3000;
    char* d = DeviceAlloc(3 * kBytes);
    ASSERT_NE(d, nullptr);
    const auto lists = [&] {
      return std::vector<std::vector<BufferRegion>>{{{d, kBytes}, {d + kBytes, kBytes}},
                                                    {{d + 2 * kBytes, kBytes}}};
    };
    Write w = EngineWrites(d, "regions", 3 * kBytes);
    for (const absl::Status& st :
         client_->BatchPutFromRegions({"r0/without", "r1/without"}, lists())) {
      ASSERT_TRUE(st.ok()) << st;
    }
    EXPECT_TRUE(Stored("r0/without") == w.old.substr(0, 2 * kBytes));
    EXPECT_TRUE(Stored("r1/without") == w.old.substr(2 * kBytes));
    w = EngineWrites(d, "regions/again", 3 * kBytes);
    for (const absl::Status& st :
         client_->BatchPutFromRegions({"r0/with", "r1/with"}, lists(), OnStream())) {
      ASSERT_TRUE(st.ok()) << st;
    }
    EXPECT_TRUE(Stored("r0/with") == w.fresh.substr(0, 2 * kBytes)) << "the gather did not wait";
    EXPECT_TRUE(Stored("r1/with") == w.fresh.substr(2 * kBytes)) << "the direct key did not wait";
  }
  // Paged KV: the gather kernel reads the caches after the wait.
  {
    const KvContents kv(4, 2, 8, 2, 1);
    PagedKv paged(*client_);
    PagedKvCache c = kv.layout;
    char* k = DeviceAlloc(kv.cache_bytes);
    char* v = DeviceAlloc(kv.cache_bytes);
    ASSERT_TRUE(k != nullptr && v != nullptr);
    c.k_cache = k;
    c.v_cache = v;
    ASSERT_NO_FATAL_FAILURE(ToDevice(v, kv.v));
    const std::vector<std::vector<int32_t>> ids = {{3, 7, 1}};
    const Write w = EngineWrites(k, "kv", kv.cache_bytes);
    ASSERT_TRUE(paged.Put({"kv/without"}, c, ids)[0].ok());
    KvContents old = kv;
    old.k = w.old;
    EXPECT_TRUE(Stored("kv/without") == old.Value(ids[0]));
    const Write again = EngineWrites(k, "kv/again", kv.cache_bytes);
    PagedKvOptions options;
    options.wait = OnStream();
    ASSERT_TRUE(paged.Put({"kv/with"}, c, ids, options)[0].ok());
    KvContents fresh = kv;
    fresh.k = again.fresh;
    EXPECT_TRUE(Stored("kv/with") == fresh.Value(ids[0])) << "the paged-KV gather did not wait";
  }
  // A handle the backend does not know fails the put, which stores nothing.
  char* d = DeviceAlloc(100);
  ASSERT_NE(d, nullptr);
  int not_an_event = 0;
  absl::Status bad = client_->PutFrom("bad", d, 100, DeviceWait{nullptr, &not_an_event});
  EXPECT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.message(), "DeviceWait")) << bad;
  EXPECT_FALSE(*client_->Exist("bad"));
}

// Staging (UCX_TLS=tcp: nothing is mapped): chunk copies into the client's pinned slots wait.
TEST_F(EngineStreamTest, AStagedPutWaitsForTheEngine) {
  setenv("UCX_TLS", "tcp", 1);
  extra_env_ = {"UCX_TLS=tcp"};
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_NO_FATAL_FAILURE(PutFromWaits("st", (4u << 20) + 3, /*by_event=*/false));
  ASSERT_NO_FATAL_FAILURE(PutFromWaits("st-event", 1000, /*by_event=*/true));
  EXPECT_GT(ClientMetric("granary_client_gpu_transfers_total{path=\"staging\"}"), 0);
  EXPECT_EQ(ClientMetric("granary_client_gpu_transfers_total{path=\"host_segment\"}"), 0);
}

}  // namespace
}  // namespace granary::testing
