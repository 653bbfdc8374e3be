// The control-plane codec's cost per message: for every struct of proto/message_table.h (its
// sample in tests/unit/proto/message_samples.h) and a few batches of 32, the nanoseconds to
// encode a whole frame (EncodeFrame) and to decode one (DecodeFrame, then DecodeBody), the
// fastest of --reps runs of about --ms milliseconds each.
//
//   granary_codec_bench [--reps 5] [--ms 20] [--iters N] [--filter SUBSTRING]
//   prints: <message> <encode ns> <decode ns> <body bytes>
//
// bench/codec_ab.sh builds this same file against an older tree as well and prints the ratios.
// It uses only what every protocol-13 tree has (the structs, EncodeFrame, DecodeFrame,
// DecodeBody); the table comes from this tree.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "proto/frame.h"
#include "proto/message_table.h"
#include "proto/messages.h"
#include "tests/unit/proto/message_samples.h"

namespace granary::proto {
namespace {

int g_reps = 5;
int g_ms = 20;
size_t g_iters = 0;  // fixed iterations per run (for instruction counts under valgrind); 0: timed
const char* g_filter = "";

template <class T>
inline void Keep(const T& v) {
  asm volatile("" : : "g"(&v) : "memory");
}

// The fastest ns per call of fn over g_reps runs of about g_ms each.
template <class Fn>
double Time(Fn&& fn) {
  using Clock = std::chrono::steady_clock;
  size_t n = g_iters > 0 ? g_iters : 1;
  while (g_iters == 0) {  // calibrate: about g_ms per run
    const auto t0 = Clock::now();
    for (size_t i = 0; i < n; ++i) fn();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (ms >= g_ms / 4.0 || n >= (size_t{1} << 30)) {
      n = static_cast<size_t>(static_cast<double>(n) * g_ms / std::max(ms, 0.001)) + 1;
      break;
    }
    n *= 4;
  }
  double best = 1e300;
  for (int r = 0; r < g_reps; ++r) {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < n; ++i) fn();
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
    best = std::min(best, ns / static_cast<double>(n));
  }
  return best;
}

std::set<std::string> g_done;

// Encodes m as a frame of `type` and decodes it as D (T itself, or the zero-copy view the hot
// paths decode: ReadReplyView, WriteRequestView).
template <class D, class T>
void MeasureAs(const std::string& name, uint16_t type, const T& m) {
  if (!g_done.insert(name).second) return;  // a struct several messages share
  if (std::strstr(name.c_str(), g_filter) == nullptr) return;
  const std::string frame = EncodeFrame(type, 42, m);
  const double enc = Time([&] {
    std::string f = EncodeFrame(type, 42, m);
    Keep(f);
  });
  const double dec = Time([&] {
    auto f = DecodeFrame(frame);
    if (!f.ok()) std::abort();
    auto d = DecodeBody<D>(f->body);
    if (!d.ok()) std::abort();
    Keep(d);
  });
  std::printf("%-28s %10.1f %10.1f %8zu\n", name.c_str(), enc, dec,
              frame.size() - kFrameHeaderSize);
  std::fflush(stdout);
}

template <class T>
void Measure(const std::string& name, uint16_t type, const T& m) {
  MeasureAs<T>(name, type, m);
}

template <class T>
T Sampled() {
  T m;
  samples::Sample(&m);
  return m;
}

void Batches() {
  const uint16_t get = static_cast<uint16_t>(MsgType::kGet);
  KeysRequest keys;
  GetReply got;
  PutStartRequest put;
  KeyGenRequest ends;
  BatchStatusReply statuses;
  ReadRequest reads;
  for (int i = 0; i < 32; ++i) {
    const std::string key =
        "kv1/3:abc/6:sha256/-/64:" + std::string(64, static_cast<char>('a' + i % 26));
    keys.keys.push_back(key);
    GetResult r;
    r.size = 65536;
    r.generation = 1000 + i;
    r.lease_ms = 5000;
    r.lease_token = 0x1234567890ull + i;
    r.replicas = {{3, 0x100000ull * i, 65600}};
    got.results.push_back(r);
    put.entries.push_back({key, 65536});
    ends.entries.push_back({key, 1000ull + i, 0x1234567890ull + i});
    statuses.results.push_back(WireStatus{});
    reads.entries.push_back({0x100000ull * i, 4096});
  }
  Measure("KeysRequest x32", get, keys);
  Measure("GetReply x32", get | kReplyBit, got);
  Measure("PutStartRequest x32", static_cast<uint16_t>(MsgType::kPutStart), put);
  Measure("KeyGenRequest x32", static_cast<uint16_t>(MsgType::kGetEnd), ends);
  Measure("BatchStatusReply x32", static_cast<uint16_t>(MsgType::kGetEnd) | kReplyBit, statuses);
  Measure("ReadRequest x32", static_cast<uint16_t>(MsgType::kRead), reads);
  WriteRequest write;
  write.entries = reads.entries;
  write.data = std::string(InlineDataBytes(write.entries), '\x5a');
  MeasureAs<WriteRequestView>("WriteRequestView x32", static_cast<uint16_t>(MsgType::kWrite),
                              write);
  ReadReply read;
  read.data = write.data;
  MeasureAs<ReadReplyView>("ReadReplyView x32", static_cast<uint16_t>(MsgType::kRead) | kReplyBit,
                           read);
}

}  // namespace
}  // namespace granary::proto

int main(int argc, char** argv) {
  using namespace granary::proto;  // NOLINT
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--reps") {
      g_reps = std::atoi(argv[i + 1]);
    } else if (flag == "--ms") {
      g_ms = std::atoi(argv[i + 1]);
    } else if (flag == "--iters") {
      g_iters = std::strtoull(argv[i + 1], nullptr, 10);
    } else if (flag == "--filter") {
      g_filter = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--reps N] [--ms N] [--iters N] [--filter SUBSTRING]\n",
                   argv[0]);
      return 2;
    }
  }
  std::printf("%-28s %10s %10s %8s\n", "message", "encode_ns", "decode_ns", "bytes");
#define GRANARY_BENCH_ROW(Name, number, Req, Rep, ...)          \
  Measure(#Req, static_cast<uint16_t>(number), Sampled<Req>()); \
  Measure(#Rep, static_cast<uint16_t>(number) | kReplyBit, Sampled<Rep>());
  GRANARY_MESSAGES(GRANARY_BENCH_ROW)
#undef GRANARY_BENCH_ROW
  Batches();
  return 0;
}
