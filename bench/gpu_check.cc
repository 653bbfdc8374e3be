// granary_gpu_check: the measurements of the device check (bench/gpu_check.sh), on the active
// device backend (the CUDA runtime on a GPU machine).
//   --mode=refs    the references, in this process: device-to-
//                  device copies (1), pinned (2) and pageable (3) host<->device copies,
//                  HostRegister of mmap'ed and of SysV shared memory (its cost and the copy from
//                  it, 4), both directions at once (5), the batched-copy kernel reading pinned
//                  host memory through UVA against a copy per region and one contiguous copy (6),
//                  the staged pipeline through 2 or 3 slots of 1, 4 or 16 MiB (7), and the paged-KV
//                  gather and scatter kernels against a device-to-device copy of the same bytes.
//   --mode=client  Granary's client paths against a running master and node: values of
//                  --value_bytes, --values of them, read with BatchGetInto into one device
//                  buffer and into a pinned host buffer, from the host tier and from the GPU tier
//                  (the node's GPU segment, another process's device memory), and written with
//                  BatchPutFrom/BatchPutWith from device memory. The paths the client took are
//                  read back from its granary_client_gpu_transfers_total{path}.
// Every figure is the median of --rounds timed rounds after one warm-up, as one JSON object per
// line appended to --json: {"name", "bytes", "seconds", "GBps", "timing", ...}. Stream work is
// timed as the device sees it (as nvbandwidth times it): the stream is held while
// the round is enqueued (a host function waiting on a gate), so launch gaps are not timed, and
// the time is taken between two marks on the stream: CUDA events with the cuda backend
// ("cuda_events"), host functions on the others ("host_functions": the fake, in the dry run).
// Host-driven work (the staged pipeline, pageable copies, the client calls) is timed on the host
// clock ("host_clock"). Copies are checked byte for byte once per measure.
// --scale=small shrinks every size for the dry run (bench/gpu_check.sh --dry-run).
#include <gflags/gflags.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
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
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "device/device_backend.h"
#include "granary/client.h"
#include "granary/client_options.h"
#include "nlohmann/json.hpp"

#ifdef GRANARY_HAVE_CUDA
#include <cuda_runtime.h>
#endif

DEFINE_string(mode, "refs", "refs or client");
DEFINE_string(json, "", "append one JSON object per measure to this file (also printed)");
DEFINE_string(master, "127.0.0.1:50051", "client mode: the master");
DEFINE_string(label, "", "client mode: a label for the records (the transport, say)");
DEFINE_uint64(value_bytes, 16ull << 20, "client mode: bytes per value");
DEFINE_int32(values, 64, "client mode: values per batch");
DEFINE_int32(rounds, 5, "timed rounds per measure (the median is reported)");
DEFINE_bool(gpu_tier, true, "client mode: also measure the GPU tier (needs a node GPU segment)");
DEFINE_int32(device, 0, "the device");
DEFINE_string(scale, "full", "full, or small (every size shrunk: the dry run on the fake)");

namespace {

using granary::device::CopyKind;
using granary::device::DeviceRuntime;
using granary::device::KvKernels;

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
double Measure(const std::string& name, size_t bytes, const std::function<void()>& fn,
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
  nlohmann::json j = {{"name", name},          {"bytes", bytes},
                      {"seconds", med},        {"GBps", static_cast<double>(bytes) / med / 1e9},
                      {"min_s", t.front()},    {"max_s", t.back()},
                      {"timing", "host_clock"}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  Record(j);
  return static_cast<double>(bytes) / med / 1e9;
}

// Two marks on a stream and the time between them, as the device ran the work: CUDA events on
// the cuda backend, host functions (which run when the stream reaches them) elsewhere.
class StreamTimer {
 public:
  virtual ~StreamTimer() = default;
  virtual void Start(void* stream) = 0;
  virtual void Stop(void* stream) = 0;
  // After the stream has been synchronized.
  virtual double Seconds() = 0;
  virtual const char* Method() const = 0;
};

class HostFunctionTimer : public StreamTimer {
 public:
  explicit HostFunctionTimer(DeviceRuntime& b) : b_(b) {}
  void Start(void* stream) override { Mark(stream, &t0_); }
  void Stop(void* stream) override { Mark(stream, &t1_); }
  double Seconds() override { return std::chrono::duration<double>(t1_ - t0_).count(); }
  const char* Method() const override { return "host_functions"; }

 private:
  void Mark(void* stream, std::chrono::steady_clock::time_point* at) {
    Ok(b_.LaunchHostFunc(stream, [at] { *at = std::chrono::steady_clock::now(); }), "mark");
  }
  DeviceRuntime& b_;
  std::chrono::steady_clock::time_point t0_, t1_;
};

#ifdef GRANARY_HAVE_CUDA
class CudaEventTimer : public StreamTimer {
 public:
  CudaEventTimer() {
    Check(cudaEventCreate(&start_), "cudaEventCreate");
    Check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~CudaEventTimer() override {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  void Start(void* stream) override {
    Check(cudaEventRecord(start_, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
  }
  void Stop(void* stream) override {
    Check(cudaEventRecord(stop_, static_cast<cudaStream_t>(stream)), "cudaEventRecord");
  }
  double Seconds() override {
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return ms / 1e3;
  }
  const char* Method() const override { return "cuda_events"; }

 private:
  static void Check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) Die(absl::StrCat(what, ": ", cudaGetErrorString(e)));
  }
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};
#endif

std::unique_ptr<StreamTimer> MakeTimer(DeviceRuntime& b) {
#ifdef GRANARY_HAVE_CUDA
  if (b.Name() == "cuda") return std::make_unique<CudaEventTimer>();
#endif
  return std::make_unique<HostFunctionTimer>(b);
}

// Holds a stream (a host function waiting on it) while a round is enqueued.
class Gate {
 public:
  explicit Gate(DeviceRuntime& b) : b_(b) {}
  void Hold(void* stream) {
    open_.store(false);
    Ok(b_.LaunchHostFunc(stream,
                         [this] {
                           while (!open_.load()) std::this_thread::yield();
                         }),
       "gate");
  }
  void Open() { open_.store(true); }

 private:
  DeviceRuntime& b_;
  std::atomic<bool> open_{true};
};

// One warm-up, then --rounds timed rounds of `enqueue` on `stream` (held while it enqueues when
// `gated`; pageable copies are not, as the driver may wait for the stream to stage them); the
// median of the device's time. `bytes` per round.
void MeasureStream(DeviceRuntime& b, const std::string& name, size_t bytes, void* stream,
                   const std::function<void()>& enqueue, bool gated = true,
                   nlohmann::json extra = nlohmann::json::object()) {
  std::unique_ptr<StreamTimer> timer = MakeTimer(b);
  Gate gate(b);
  std::vector<double> t;
  for (int i = 0; i <= FLAGS_rounds; ++i) {
    if (gated) gate.Hold(stream);
    timer->Start(stream);
    enqueue();
    timer->Stop(stream);
    gate.Open();
    Ok(b.SynchronizeStream(stream), name + ": synchronize");
    if (i > 0) t.push_back(timer->Seconds());  // round 0 warms up
  }
  std::sort(t.begin(), t.end());
  const double med = std::max(t[t.size() / 2], 1e-9);
  nlohmann::json j = {{"name", name},
                      {"bytes", bytes},
                      {"seconds", med},
                      {"GBps", static_cast<double>(bytes) / med / 1e9},
                      {"min_s", t.front()},
                      {"max_s", t.back()},
                      {"timing", timer->Method()}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  Record(j);
}

bool Small() { return FLAGS_scale == "small"; }

void Fill(unsigned char* p, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t w = rng();
    std::memcpy(p + i, &w, std::min<size_t>(8, n - i));
  }
}

// Device bytes checked against host bytes through a pinned bounce.
void CheckDevice(DeviceRuntime& b, const void* dev, const unsigned char* want, size_t n,
                 const std::string& what) {
  std::vector<unsigned char> got(n);
  Ok(b.Copy(FLAGS_device, got.data(), dev, n, CopyKind::kDeviceToHost), what + ": read back");
  const bool same = std::memcmp(got.data(), want, n) == 0;
  Record({{"name", "check/" + what}, {"bytes", n}, {"byte_exact", same}});
  if (!same) Die(what + ": the bytes differ");
}

std::string SizeName(size_t n) {
  return n >= (1u << 30)   ? absl::StrCat(n >> 30, "GiB")
         : n >= (1u << 20) ? absl::StrCat(n >> 20, "MiB")
                           : absl::StrCat(n >> 10, "KiB");
}

// Row 6: the batched-copy kernel reading pinned host memory through UVA (one launch for every
// region) against a copy per region and one contiguous copy of the same bytes.
void UvaRows(DeviceRuntime& b, KvKernels& kernels, void* stream, unsigned char* pinned, void* dev,
             size_t bytes) {
  const int dv = FLAGS_device;
  for (size_t region : {size_t{32} << 10, size_t{64} << 10}) {
    const int n = static_cast<int>(bytes / region);
    std::vector<granary::device::CopyRegion> regions;
    for (int i = 0; i < n; ++i) {  // scattered destinations: every other region, reversed
      const size_t at = static_cast<size_t>((n - 1 - i) ^ 1) % static_cast<size_t>(n);
      regions.push_back({pinned + static_cast<size_t>(i) * region,
                         static_cast<char*>(dev) + at * region, region});
    }
    const nlohmann::json shape = {{"regions", n}, {"region_bytes", region}};
    MeasureStream(
        b, "uva/batch_copy_kernel/" + SizeName(region), bytes, stream,
        [&] { Ok(kernels.BatchCopy(dv, regions.data(), n, stream), "BatchCopy"); }, true, shape);
    MeasureStream(
        b, "uva/copy_per_region/" + SizeName(region), bytes, stream,
        [&] { Ok(b.BatchCopyAsync(stream, regions.data(), n), "BatchCopyAsync"); }, true, shape);
  }
  MeasureStream(b, "uva/contiguous/" + SizeName(bytes), bytes, stream,
                [&] { Ok(b.CopyAsync(stream, dev, pinned, bytes), "h2d"); });
}

// Row 7: a value in ordinary host memory to the device through `slots` pinned slots of `slot`
// bytes: the CPU copies chunk k into slot k % slots once the copy that last used it is done,
// then the slot goes host to device. Host-driven, so timed on the host clock.
void PipelineRows(DeviceRuntime& b, void* stream, void* dev, size_t total) {
  const int dv = FLAGS_device;
  std::vector<unsigned char> src(total);
  Fill(src.data(), total, 9);
  double best = 0;
  for (size_t slot : {size_t{1} << 20, size_t{4} << 20, size_t{16} << 20}) {
    if (slot > total) continue;
    for (int slots : {2, 3}) {
      auto* pool = static_cast<unsigned char*>(Ok(b.HostAllocPinned(slot * slots), "slots"));
      std::vector<void*> events;
      for (int i = 0; i < slots; ++i) events.push_back(Ok(b.CreateEvent(dv), "CreateEvent"));
      const std::string name = absl::StrCat("pipeline/h2d/", slots, "x", SizeName(slot));
      const double gbps = Measure(name, total, [&] {
        for (size_t off = 0, k = 0; off < total; off += slot, ++k) {
          const size_t n = std::min(slot, total - off);
          const size_t i = k % static_cast<size_t>(slots);
          Ok(b.WaitEvent(events[i]), "slot free");
          std::memcpy(pool + i * slot, src.data() + off, n);
          Ok(b.CopyAsync(stream, static_cast<char*>(dev) + off, pool + i * slot, n), "h2d");
          Ok(b.RecordEvent(events[i], stream), "RecordEvent");
        }
        Ok(b.SynchronizeStream(stream), "sync");
      });
      best = std::max(best, gbps);
      for (void* e : events) b.DestroyEvent(e);
      b.HostFreePinned(pool);
    }
  }
  Record(
      {{"name", "pipeline/h2d/best"}, {"bytes", total}, {"GBps", best}, {"timing", "host_clock"}});
  CheckDevice(b, dev, src.data(), total, "pipeline/h2d");
}

void Refs(DeviceRuntime& b, KvKernels& kernels) {
  const int dev = FLAGS_device;
  void* stream = Ok(b.CreateStream(dev), "CreateStream");
  // 1. Device to device, 4 copies of 1 GiB per round.
  const size_t big = Small() ? size_t{32} << 20 : size_t{1} << 30;
  void* d0 = Ok(b.Alloc(dev, big), "Alloc big");
  void* d1 = Ok(b.Alloc(dev, big), "Alloc big");
  Ok(b.Memset(dev, d0, 0x3c, big), "Memset");
  MeasureStream(
      b, "d2d/1GiB", 4 * big, stream,
      [&] {
        for (int i = 0; i < 4; ++i) Ok(b.CopyAsync(stream, d1, d0, big), "d2d");
      },
      true, {{"note", "bytes copied; read+write traffic (nvbandwidth's figure) is twice this"}});
  // 2. Pinned host <-> device, at several sizes (one copy per chunk, 256 MiB per round).
  const size_t host_bytes = Small() ? size_t{16} << 20 : size_t{256} << 20;
  auto* pinned = static_cast<unsigned char*>(Ok(b.HostAllocPinned(host_bytes), "HostAllocPinned"));
  Fill(pinned, host_bytes, 1);
  for (size_t chunk :
       {size_t{64} << 10, size_t{1} << 20, size_t{4} << 20, size_t{16} << 20, host_bytes}) {
    if (chunk > host_bytes) continue;
    const std::string sz = chunk == host_bytes ? "256MiB" : SizeName(chunk);
    MeasureStream(b, "h2d/pinned/" + sz, host_bytes, stream, [&] {
      for (size_t off = 0; off < host_bytes; off += chunk) {
        Ok(b.CopyAsync(stream, static_cast<char*>(d0) + off, pinned + off, chunk), "h2d");
      }
    });
    MeasureStream(b, "d2h/pinned/" + sz, host_bytes, stream, [&] {
      for (size_t off = 0; off < host_bytes; off += chunk) {
        Ok(b.CopyAsync(stream, pinned + off, static_cast<char*>(d0) + off, chunk), "d2h");
      }
    });
  }
  Ok(b.CopyAsync(stream, d0, pinned, host_bytes), "h2d");
  Ok(b.SynchronizeStream(stream), "sync");
  CheckDevice(b, d0, pinned, host_bytes, "h2d/pinned");
  // 5. Both directions at once, on two streams: each direction timed on its own stream.
  void* stream2 = Ok(b.CreateStream(dev), "CreateStream");
  auto* pinned2 = static_cast<unsigned char*>(Ok(b.HostAllocPinned(host_bytes), "HostAllocPinned"));
  {
    std::unique_ptr<StreamTimer> up = MakeTimer(b), down = MakeTimer(b);
    Gate g1(b), g2(b);
    std::vector<double> tu, td;
    for (int i = 0; i <= FLAGS_rounds; ++i) {
      g1.Hold(stream);
      g2.Hold(stream2);
      up->Start(stream);
      down->Start(stream2);
      Ok(b.CopyAsync(stream, d0, pinned, host_bytes), "h2d");
      Ok(b.CopyAsync(stream2, pinned2, d1, host_bytes), "d2h");
      up->Stop(stream);
      down->Stop(stream2);
      g1.Open();
      g2.Open();
      Ok(b.SynchronizeStream(stream), "sync");
      Ok(b.SynchronizeStream(stream2), "sync");
      if (i == 0) continue;
      tu.push_back(up->Seconds());
      td.push_back(down->Seconds());
    }
    for (auto* v : {&tu, &td}) std::sort(v->begin(), v->end());
    const double mu = tu[tu.size() / 2], md = td[td.size() / 2];
    Record({{"name", "h2d_under_d2h/pinned/256MiB"},
            {"bytes", host_bytes},
            {"seconds", mu},
            {"GBps", host_bytes / mu / 1e9},
            {"timing", up->Method()}});
    Record({{"name", "d2h_under_h2d/pinned/256MiB"},
            {"bytes", host_bytes},
            {"seconds", md},
            {"GBps", host_bytes / md / 1e9},
            {"timing", down->Method()}});
  }
  // 3. Pageable host memory (not gated: the driver may wait for the stream to stage it).
  std::vector<unsigned char> pageable(host_bytes);
  Fill(pageable.data(), host_bytes, 2);
  MeasureStream(
      b, "h2d/pageable/256MiB", host_bytes, stream,
      [&] { Ok(b.CopyAsync(stream, d0, pageable.data(), host_bytes), "h2d pageable"); }, false);
  MeasureStream(
      b, "d2h/pageable/256MiB", host_bytes, stream,
      [&] { Ok(b.CopyAsync(stream, pageable.data(), d0, host_bytes), "d2h pageable"); }, false);
  // 4. Shared memory as a node's segment is (mmap'ed, and SysV shmat), registered: the cost of
  // the registration and the copy from it; the same memory unregistered.
  void* m = mmap(nullptr, big, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) Die("mmap");
  std::memset(m, 0x5a, big);
  const double reg_s = Seconds([&] { Ok(b.HostRegister(m, big), "HostRegister"); });
  Record({{"name", "host_register/mmap/1GiB"},
          {"bytes", big},
          {"seconds", reg_s},
          {"timing", "host_clock"}});
  MeasureStream(b, "h2d/registered_mmap/1GiB", big, stream,
                [&] { Ok(b.CopyAsync(stream, d1, m, big), "h2d registered"); });
  Ok(b.HostUnregister(m), "HostUnregister");
  MeasureStream(
      b, "h2d/unregistered_mmap/1GiB", big, stream,
      [&] { Ok(b.CopyAsync(stream, d1, m, big), "h2d unregistered"); }, false);
  munmap(m, big);
  const int shm = shmget(IPC_PRIVATE, big, IPC_CREAT | 0600);
  if (shm >= 0) {
    void* sp = shmat(shm, nullptr, 0);
    shmctl(shm, IPC_RMID, nullptr);  // gone once detached
    if (sp != reinterpret_cast<void*>(-1)) {
      std::memset(sp, 0x5b, big);
      const double s_reg = Seconds([&] { Ok(b.HostRegister(sp, big), "HostRegister shm"); });
      Record({{"name", "host_register/shmat/1GiB"},
              {"bytes", big},
              {"seconds", s_reg},
              {"timing", "host_clock"}});
      MeasureStream(b, "h2d/registered_shmat/1GiB", big, stream,
                    [&] { Ok(b.CopyAsync(stream, d1, sp, big), "h2d shmat"); });
      Ok(b.HostUnregister(sp), "HostUnregister shm");
      shmdt(sp);
    }
  } else {
    Record({{"name", "host_register/shmat/1GiB"}, {"error", std::strerror(errno)}});
  }
  // 6. Kernels reading pinned host memory through UVA.
  UvaRows(b, kernels, stream, pinned, d0, host_bytes);
  // 7. The staged pipeline.
  PipelineRows(b, stream, d1, big);
  // Paged KV: gather and scatter of 4096 of 8192 blocks (block 16 tokens x 8 heads x 128, bf16:
  // 32 KiB for K and for V), against one device-to-device copy of the same bytes.
  granary::device::PagedKvLayout layout;
  layout.num_blocks = Small() ? 256 : 8192;
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
  const int n = static_cast<int>(layout.num_blocks / 2);
  const size_t gathered = layout.GatheredBytes(n);
  void* out = Ok(b.Alloc(dev, gathered), "Alloc gathered");
  nlohmann::json shape = {
      {"blocks", n},
      {"block_bytes", layout.BlockBytes()},
      {"layout", absl::StrCat("[", layout.num_blocks, ", 16, 8, 128] bf16, random block order")},
      {"note", "includes the launch's table upload, on the stream"}};
  MeasureStream(b, "d2d/same_bytes_as_gather", gathered, stream,
                [&] { Ok(b.CopyAsync(stream, out, k, gathered), "d2d"); });
  MeasureStream(
      b, "gather/paged_kv", gathered, stream,
      [&] {
        Ok(kernels.GatherBlocks(dev, layout, k, v, ids.data(), n, out, stream), "GatherBlocks");
      },
      true, shape);
  MeasureStream(
      b, "scatter/paged_kv", gathered, stream,
      [&] {
        Ok(kernels.ScatterBlocks(dev, layout, out, ids.data(), n, k, v, stream), "ScatterBlocks");
      },
      true, shape);
  // The kernels against the CPU reference, once, on a small layout.
  {
    granary::device::PagedKvLayout s = layout;
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
    Ok(granary::device::GatherBlocksCpu(s, hk.data(), hv.data(), sid.data(),
                                        static_cast<int>(sid.size()), want.data()),
       "GatherBlocksCpu");
    void* so = Ok(b.Alloc(dev, g), "Alloc");
    Ok(kernels.GatherBlocks(dev, s, sk, sv, sid.data(), static_cast<int>(sid.size()), so, nullptr),
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

void ClientPaths(DeviceRuntime& b) {
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
  DeviceRuntime& b = granary::device::ActiveRuntime();
  if (b.DeviceCount() <= FLAGS_device) {
    Die(absl::StrCat("no device ", FLAGS_device, " on the ", b.Name(), " backend"));
  }
  Record({{"name", "backend"}, {"backend", std::string(b.Name())}, {"devices", b.DeviceCount()}});
  if (FLAGS_mode == "refs") {
    Refs(b, granary::device::ActiveKernels());
  } else if (FLAGS_mode == "client") {
    ClientPaths(b);
  } else {
    Die("--mode must be refs or client, not '" + FLAGS_mode + "'");
  }
  return 0;
}
