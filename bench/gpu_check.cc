// granary_gpu_check: the measurements of the device check (bench/gpu_check.sh, ../shared/GPU.md
// section 7), on the active device backend (the CUDA runtime on a GPU machine).
//   --mode=refs    the references, in this process: device-to-device copies, pinned and
//                  pageable host<->device copies, HostRegister of mapped memory (its cost and the
//                  copy from it), and the paged-KV gather and scatter kernels against a
//                  device-to-device copy of the same bytes.
//   --mode=client  Granary's client paths against a running master and node: values of
//                  --value_bytes, --values of them, read with BatchGetInto into one device
//                  buffer and into a pinned host buffer, from the host tier and from the GPU tier
//                  (the node's GPU segment, another process's device memory), and written with
//                  BatchPutFrom/BatchPutWith from device memory. The paths the client took are
//                  read back from its granary_client_gpu_transfers_total{path}.
// Every figure is the median of --rounds timed rounds after one warm-up, as one JSON object per
// line appended to --json: {"name", "bytes", "seconds", "GBps", ...}. Copies are checked byte
// for byte once per measure (a checksum of what arrived against what was sent).
#include <gflags/gflags.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cuda/device_backend.h"
#include "granary/client.h"
#include "granary/client_options.h"
#include "nlohmann/json.hpp"

DEFINE_string(mode, "refs", "refs or client");
DEFINE_string(json, "", "append one JSON object per measure to this file (also printed)");
DEFINE_string(master, "127.0.0.1:50051", "client mode: the master");
DEFINE_string(label, "", "client mode: a label for the records (the transport, say)");
DEFINE_uint64(value_bytes, 16ull << 20, "client mode: bytes per value");
DEFINE_int32(values, 64, "client mode: values per batch");
DEFINE_int32(rounds, 5, "timed rounds per measure (the median is reported)");
DEFINE_bool(gpu_tier, true, "client mode: also measure the GPU tier (needs a node GPU segment)");
DEFINE_int32(device, 0, "the device");

namespace {

using granary::cuda::CopyKind;
using granary::cuda::DeviceBackend;

[[noreturn]] void Die(const std::string& what) {
  std::cerr << "granary_gpu_check: " << what << "\n";
  std::exit(1);
}

template <typename T>
T Ok(absl::StatusOr<T> v, const std::string& what) {
  if (!v.ok()) Die(absl::StrCat(what, ": ", v.status().ToString()));
  return *std::move(v);
}
void Ok(const absl::Status& st, const std::string& what) {
  if (!st.ok()) Die(absl::StrCat(what, ": ", st.ToString()));
}

void Record(nlohmann::json j) {
  const std::string line = j.dump();
  std::cout << line << std::endl;
  if (!FLAGS_json.empty()) {
    std::ofstream f(FLAGS_json, std::ios::app);
    f << line << "\n";
  }
}

double Seconds(const std::function<void()>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One warm-up, then --rounds timed runs of fn moving `bytes` each; the median. `reset`, when
// given, runs untimed before each run (a put's keys removed, say).
void Measure(const std::string& name, size_t bytes, const std::function<void()>& fn,
             nlohmann::json extra = nlohmann::json::object(),
             const std::function<void()>& reset = nullptr) {
  if (reset) reset();
  fn();
  std::vector<double> t;
  for (int i = 0; i < FLAGS_rounds; ++i) {
    if (reset) reset();
    t.push_back(Seconds(fn));
  }
  std::sort(t.begin(), t.end());
  const double med = t[t.size() / 2];
  nlohmann::json j = {{"name", name},       {"bytes", bytes},
                      {"seconds", med},     {"GBps", static_cast<double>(bytes) / med / 1e9},
                      {"min_s", t.front()}, {"max_s", t.back()}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  Record(j);
}

void Fill(unsigned char* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t w = rng();
    std::memcpy(p + i, &w, std::min<size_t>(8, n - i));
  }
}

// Device bytes checked against host bytes through a pinned bounce.
void CheckDevice(DeviceBackend& b, const void* dev, const unsigned char* want, size_t n,
                 const std::string& what) {
  std::vector<unsigned char> got(n);
  Ok(b.Copy(FLAGS_device, got.data(), dev, n, CopyKind::kDeviceToHost), what + ": read back");
  const bool same = std::memcmp(got.data(), want, n) == 0;
  Record({{"name", "check/" + what}, {"bytes", n}, {"byte_exact", same}});
  if (!same) Die(what + ": the bytes differ");
}

void Refs(DeviceBackend& b) {
  const int dev = FLAGS_device;
  void* stream = Ok(b.CreateStream(dev), "CreateStream");
  auto sync = [&] { Ok(b.SynchronizeStream(stream), "SynchronizeStream"); };
  // 1. Device to device, 1 GiB, 4 copies per timed run.
  const size_t big = 1ull << 30;
  void* d0 = Ok(b.Alloc(dev, big), "Alloc 1 GiB");
  void* d1 = Ok(b.Alloc(dev, big), "Alloc 1 GiB");
  Ok(b.Memset(dev, d0, 0x3c, big), "Memset");
  Measure("d2d/1GiB", 4 * big,
          [&] {
            for (int i = 0; i < 4; ++i) Ok(b.CopyAsync(stream, d1, d0, big), "d2d");
            sync();
          },
          {{"note", "bytes copied; read+write traffic is twice this"}});
  // 2. Pinned host <-> device, at several sizes (one copy per call, as many as make 256 MiB).
  const size_t host_bytes = 256ull << 20;
  auto* pinned = static_cast<unsigned char*>(Ok(b.HostAllocPinned(host_bytes), "HostAllocPinned"));
  Fill(pinned, host_bytes, 1);
  for (size_t chunk :
       {size_t{64} << 10, size_t{1} << 20, size_t{4} << 20, size_t{16} << 20, host_bytes}) {
    const std::string sz =
        chunk >= (1 << 20) ? absl::StrCat(chunk >> 20, "MiB") : absl::StrCat(chunk >> 10, "KiB");
    Measure("h2d/pinned/" + sz, host_bytes, [&] {
      for (size_t off = 0; off < host_bytes; off += chunk) {
        Ok(b.CopyAsync(stream, static_cast<char*>(d0) + off, pinned + off, chunk), "h2d");
      }
      sync();
    });
    Measure("d2h/pinned/" + sz, host_bytes, [&] {
      for (size_t off = 0; off < host_bytes; off += chunk) {
        Ok(b.CopyAsync(stream, pinned + off, static_cast<char*>(d0) + off, chunk), "d2h");
      }
      sync();
    });
  }
  Ok(b.CopyAsync(stream, d0, pinned, host_bytes), "h2d");
  sync();
  CheckDevice(b, d0, pinned, host_bytes, "h2d/pinned");
  // Both directions at once, on two streams.
  void* stream2 = Ok(b.CreateStream(dev), "CreateStream");
  auto* pinned2 = static_cast<unsigned char*>(Ok(b.HostAllocPinned(host_bytes), "HostAllocPinned"));
  Measure("h2d+d2h/pinned/256MiB", 2 * host_bytes,
          [&] {
            Ok(b.CopyAsync(stream, d0, pinned, host_bytes), "h2d");
            Ok(b.CopyAsync(stream2, pinned2, d1, host_bytes), "d2h");
            sync();
            Ok(b.SynchronizeStream(stream2), "sync");
          },
          {{"note", "both directions together; bytes of both"}});
  // 3. Pageable host memory.
  std::vector<unsigned char> pageable(host_bytes);
  Fill(pageable.data(), host_bytes, 2);
  Measure("h2d/pageable/256MiB", host_bytes, [&] {
    Ok(b.CopyAsync(stream, d0, pageable.data(), host_bytes), "h2d pageable");
    sync();
  });
  Measure("d2h/pageable/256MiB", host_bytes, [&] {
    Ok(b.CopyAsync(stream, pageable.data(), d0, host_bytes), "d2h pageable");
    sync();
  });
  // 4. mmap'ed shared memory (as a node's segment is), registered: the cost and the copy.
  void* m = mmap(nullptr, big, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) Die("mmap 1 GiB");
  std::memset(m, 0x5a, big);
  const double reg_s = Seconds([&] { Ok(b.HostRegister(m, big), "HostRegister 1 GiB"); });
  Record({{"name", "host_register/1GiB"}, {"bytes", big}, {"seconds", reg_s}});
  Measure("h2d/registered_mmap/1GiB", big, [&] {
    Ok(b.CopyAsync(stream, d1, m, big), "h2d registered");
    sync();
  });
  Ok(b.HostUnregister(m), "HostUnregister");
  Measure("h2d/unregistered_mmap/1GiB", big, [&] {
    Ok(b.CopyAsync(stream, d1, m, big), "h2d unregistered");
    sync();
  });
  munmap(m, big);
  // 5. Paged KV: gather and scatter of 4096 of 8192 blocks (block 16 tokens x 8 heads x 128,
  // bf16: 32 KiB for K and for V), against one device-to-device copy of the same bytes.
  granary::cuda::PagedKvLayout layout;
  layout.num_blocks = 8192;
  layout.block_size = 16;
  layout.num_heads = 8;
  layout.head_dim = 128;
  layout.elem_bytes = 2;
  Ok(layout.Validate(), "layout");
  const size_t cache = layout.num_blocks * layout.BlockStride();
  void* k = Ok(b.Alloc(dev, cache), "Alloc K");
  void* v = Ok(b.Alloc(dev, cache), "Alloc V");
  Ok(b.Memset(dev, k, 0x11, cache), "Memset");
  Ok(b.Memset(dev, v, 0x22, cache), "Memset");
  std::vector<int32_t> ids(layout.num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
  const int n = 4096;
  const size_t gathered = layout.GatheredBytes(n);
  void* out = Ok(b.Alloc(dev, gathered), "Alloc gathered");
  nlohmann::json shape = {{"blocks", n},
                          {"block_bytes", layout.BlockBytes()},
                          {"layout", "[8192, 16, 8, 128] bf16, random block order"}};
  Measure("d2d/same_bytes_as_gather", gathered, [&] {
    Ok(b.CopyAsync(stream, out, k, gathered), "d2d");
    sync();
  });
  Measure(
      "gather/paged_kv", gathered,
      [&] {
        Ok(b.GatherBlocks(dev, layout, k, v, ids.data(), n, out, stream), "GatherBlocks");
        sync();
      },
      shape);
  Measure(
      "scatter/paged_kv", gathered,
      [&] {
        Ok(b.ScatterBlocks(dev, layout, out, ids.data(), n, k, v, stream), "ScatterBlocks");
        sync();
      },
      shape);
  // The kernels against the CPU reference, once, on a small layout.
  {
    granary::cuda::PagedKvLayout s = layout;
    s.num_blocks = 64;
    const size_t c = s.num_blocks * s.BlockStride();
    std::vector<unsigned char> hk(c), hv(c);
    Fill(hk.data(), c, 3);
    Fill(hv.data(), c, 4);
    void* sk = Ok(b.Alloc(dev, c), "Alloc");
    void* sv = Ok(b.Alloc(dev, c), "Alloc");
    Ok(b.Copy(dev, sk, hk.data(), c, CopyKind::kHostToDevice), "copy");
    Ok(b.Copy(dev, sv, hv.data(), c, CopyKind::kHostToDevice), "copy");
    std::vector<int32_t> sid = {5, 63, 0, 17, 42, 8};
    const size_t g = s.GatheredBytes(static_cast<int>(sid.size()));
    std::vector<unsigned char> want(g);
    Ok(granary::cuda::GatherBlocksCpu(s, hk.data(), hv.data(), sid.data(),
                                      static_cast<int>(sid.size()), want.data()),
       "GatherBlocksCpu");
    void* so = Ok(b.Alloc(dev, g), "Alloc");
    Ok(b.GatherBlocks(dev, s, sk, sv, sid.data(), static_cast<int>(sid.size()), so, nullptr),
       "GatherBlocks");
    CheckDevice(b, so, want.data(), g, "gather_vs_cpu_reference");
    b.Free(dev, sk);
    b.Free(dev, sv);
    b.Free(dev, so);
  }
  b.Free(dev, k);
  b.Free(dev, v);
  b.Free(dev, out);
  b.Free(dev, d0);
  b.Free(dev, d1);
  b.HostFreePinned(pinned);
  b.HostFreePinned(pinned2);
  b.DestroyStream(stream);
  b.DestroyStream(stream2);
}

std::string PathCounts(granary::Client& c) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(c.MetricsText(), '\n')) {
    if (absl::StartsWith(line, "granary_client_gpu_transfers_total{") ||
        absl::StartsWith(line, "granary_client_gpu_pinned_node_bytes ")) {
      absl::StrAppend(&out, out.empty() ? "" : "; ", line);
    }
  }
  return out;
}

void ClientPaths(DeviceBackend& b) {
  const int dev = FLAGS_device;
  granary::ClientOptions o;
  o.master_server_address = FLAGS_master;
  o.transfer_timeout_ms = 60'000;
  auto client = Ok(granary::Client::Create(o), "Client::Create");
  const size_t vb = FLAGS_value_bytes;
  const int nv = FLAGS_values;
  const size_t total = vb * nv;
  auto* dsrc = static_cast<unsigned char*>(Ok(b.Alloc(dev, total), "Alloc source"));
  auto* ddst = static_cast<unsigned char*>(Ok(b.Alloc(dev, total), "Alloc destination"));
  auto* pinned = static_cast<unsigned char*>(Ok(b.HostAllocPinned(total), "HostAllocPinned"));
  std::vector<unsigned char> host(total);
  Fill(host.data(), total, 11);
  Ok(b.Copy(dev, dsrc, host.data(), total, CopyKind::kHostToDevice), "fill the device source");
  nlohmann::json shape = {{"value_bytes", vb}, {"values", nv}, {"label", FLAGS_label}};
  auto keys_of = [&](const std::string& p) {
    std::vector<std::string> k;
    for (int i = 0; i < nv; ++i) k.push_back(absl::StrCat(p, i));
    return k;
  };
  auto slices = [&](unsigned char* base) {
    std::vector<void*> v;
    for (int i = 0; i < nv; ++i) v.push_back(base + i * vb);
    return v;
  };
  const std::vector<size_t> sizes(nv, vb);
  auto all_ok = [](const auto& results, const std::string& what) {
    for (const auto& r : results) {
      if (!r.ok()) Die(absl::StrCat(what, ": ", r.status().ToString()));
    }
  };
  auto put_ok = [](const std::vector<absl::Status>& results, const std::string& what) {
    for (const auto& r : results) {
      if (!r.ok()) Die(absl::StrCat(what, ": ", r.ToString()));
    }
  };
  const std::string pre = FLAGS_label.empty() ? "x" : FLAGS_label;
  // Host tier: written from host memory, read into device memory and into pinned host memory.
  const std::vector<std::string> hk = keys_of(pre + "/h");
  std::vector<const void*> hsrc;
  for (int i = 0; i < nv; ++i) hsrc.push_back(host.data() + i * vb);
  put_ok(client->BatchPutFrom(hk, hsrc, sizes), "put host tier");
  Measure(
      "client/host_tier/get_into_device", total,
      [&] { all_ok(client->BatchGetInto(hk, slices(ddst), sizes), "get into device"); }, shape);
  CheckDevice(b, ddst, host.data(), total, "client/host_tier/get_into_device/" + pre);
  Record({{"name", "paths/host_tier/" + pre}, {"metrics", PathCounts(*client)}});
  Measure(
      "client/host_tier/get_into_pinned_host", total,
      [&] { all_ok(client->BatchGetInto(hk, slices(pinned), sizes), "get into pinned host"); },
      shape);
  const std::vector<std::string> dk = keys_of(pre + "/dh");
  std::vector<const void*> dsrcs;
  for (int i = 0; i < nv; ++i) dsrcs.push_back(dsrc + i * vb);
  auto remove = [&](const std::vector<std::string>& keys) {
    return [&client, keys] { (void)client->BatchRemove(keys, /*force=*/true); };
  };
  Measure(
      "client/host_tier/put_from_device", total,
      [&] { put_ok(client->BatchPutFrom(dk, dsrcs, sizes), "put from device"); }, shape,
      remove(dk));
  all_ok(client->BatchGetInto(dk, slices(pinned), sizes), "read back");
  if (std::memcmp(pinned, host.data(), total) != 0) Die("put_from_device: bytes differ");
  Record({{"name", "check/client/host_tier/put_from_device/" + pre}, {"byte_exact", true}});
  if (!FLAGS_gpu_tier) return;
  // GPU tier: the node's GPU segment, written from device memory, read into device memory
  // (device to device through the IPC mapping) and into pinned host memory.
  const std::vector<std::string> gk = keys_of(pre + "/g");
  granary::PutOptions on_gpu;
  on_gpu.tier = granary::StorageTier::kGpu;
  std::vector<absl::string_view> views;
  for (int i = 0; i < nv; ++i) views.emplace_back(reinterpret_cast<char*>(dsrc) + i * vb, vb);
  Measure(
      "client/gpu_tier/put_from_device", total,
      [&] { put_ok(client->BatchPutWith(gk, views, on_gpu), "put gpu tier"); }, shape, remove(gk));
  Ok(b.Memset(dev, ddst, 0, total), "clear");
  Measure(
      "client/gpu_tier/get_into_device", total,
      [&] { all_ok(client->BatchGetInto(gk, slices(ddst), sizes), "get gpu tier into device"); },
      shape);
  CheckDevice(b, ddst, host.data(), total, "client/gpu_tier/get_into_device/" + pre);
  Measure(
      "client/gpu_tier/get_into_pinned_host", total,
      [&] { all_ok(client->BatchGetInto(gk, slices(pinned), sizes), "get gpu tier into host"); },
      shape);
  Record({{"name", "paths/gpu_tier/" + pre}, {"metrics", PathCounts(*client)}});
}

}  // namespace

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  DeviceBackend& b = granary::cuda::ActiveBackend();
  if (b.DeviceCount() <= FLAGS_device) {
    Die(absl::StrCat("no device ", FLAGS_device, " on the ", b.Name(), " backend"));
  }
  Record({{"name", "backend"}, {"backend", std::string(b.Name())}, {"devices", b.DeviceCount()}});
  if (FLAGS_mode == "refs") {
    Refs(b);
  } else if (FLAGS_mode == "client") {
    ClientPaths(b);
  } else {
    Die("--mode must be refs or client, not '" + FLAGS_mode + "'");
  }
  return 0;
}
