#pragma once

// One sample value of every wire struct that message_table.h names, for the codec test (each
// round-trips and every truncation of it is refused), the fuzz target's seed corpus (fuzz/,
// generated at build time) and the codec benchmark (bench/codec_bench.cc). Most fields hold
// values other than their defaults: strings with embedded NUL and high bytes where the limits
// allow, numbers at the ends of their ranges, lists at their limits (PutStartReply's replicas).
//
// Sample(&m) fills m; a struct of the table without an overload here does not compile.

#include <string>

#include "absl/status/status.h"
#include "common/error_reason.h"
#include "proto/messages.h"

namespace granary::proto::samples {

using std::string_literals::operator""s;

inline WireStatus Ws(absl::StatusCode code, std::string msg,
                     ErrorReason reason = ErrorReason::kNone) {
  return WireStatus{static_cast<uint8_t>(code), std::move(msg), reason};
}
inline const std::string kBinary =
    "r\0k\xff\x01\x80"
    "ey"s;  // embedded NUL and high bytes

inline HelloRequest SampleHelloRequest() {
  return {Role::kNode, "client-7" + kBinary, "tenant-a", 0xBEEF, "tok" + kBinary};
}
inline HelloReply SampleHelloReply() {
  return {Ws(absl::StatusCode::kNotFound, "no such tenant"),
          0x0123456789ABCDEFull,
          5000,
          "master-1",
          0x0000123400005678ull,
          5000};
}
inline HeartbeatRequest SampleHeartbeatWithCgroup() {
  HeartbeatRequest m;
  m.has_cgroup = true;
  m.cgroup = NodeCgroupReport{"/sys/fs/cgroup/memory/granary-a",
                              "v1",
                              1ull << 34,
                              1ull << 33,
                              123456789,
                              987654321,
                              7,
                              0,
                              1};
  return m;
}
inline HeartbeatReply SampleHeartbeatReply() {
  return {Ws(absl::StatusCode::kUnavailable, "draining")};
}
inline MountSegmentRequest SampleMount() {
  return {"seg-0",
          "node-a",
          "10.0.0.1:4000",
          0x7F0000001000ull,
          48ull << 30,
          Tier::kGpu,
          kBinary,
          "pool-x",
          "worker" + kBinary,
          "boot-id-1",
          true,
          "ipc" + kBinary,
          std::string(16, '\xfa'),
          "mlx5_3:1",
          1,
          7};
}
inline MountSegmentReply SampleMountReply() { return {Ws(absl::StatusCode::kOk, ""), 42}; }
inline UnmountSegmentRequest SampleUnmount() { return {~0ull - 1}; }
inline StatusReply SampleStatusReply() {
  return {Ws(absl::StatusCode::kFailedPrecondition, "busy")};
}
inline PutStartRequest SamplePutStart() {
  return {{{"k1", 1}, {"", 0}, {kBinary, 1ull << 40}}, 3, 0xA5A5A5A5};
}
inline PutStartReply SamplePutStartReply() {
  PutStartReply m{Ws(absl::StatusCode::kOk, ""), {}};
  m.results.push_back({Ws(absl::StatusCode::kOk, ""), 9, {{1, 0x1000, 4160}, {2, 0x2000, 4160}}});
  m.results.push_back(
      {Ws(absl::StatusCode::kResourceExhausted, "full", ErrorReason::kQuotaExceeded), 0, {}});
  m.results.push_back({Ws(absl::StatusCode::kOk, ""), ~0ull, {}});
  for (uint32_t i = 0; i < kMaxReplicaNum; ++i) m.results[2].replicas.push_back({i, i * 64, 64});
  return m;
}
inline KeyGenRequest SampleKeyGen() { return {{{"a", 1, 0}, {kBinary, ~0ull, 0x123456789ull}}}; }
inline BatchStatusReply SampleBatchStatus() {
  return {Ws(absl::StatusCode::kOk, ""),
          {Ws(absl::StatusCode::kOk, ""), Ws(absl::StatusCode::kNotFound, "gone"),
           Ws(absl::StatusCode::kUnauthenticated, "who"),
           Ws(absl::StatusCode::kFailedPrecondition, "not empty", common::kLastErrorReason)}};
}
inline KeysRequest SampleKeys() { return {{"x", "", kBinary}}; }
inline RemoveRequest SampleRemove() { return {{"x", kBinary}, true}; }
inline GetReply SampleGetReply() {
  return {Ws(absl::StatusCode::kAborted, "partial"),
          {{Ws(absl::StatusCode::kOk, ""), 4096, 17, 30000, 0x1234567890ull, {{5, 0x40, 4160}}},
           {Ws(absl::StatusCode::kNotFound, "missing"), 0, 0, 0, 0, {}}}};
}
inline ListRequest SampleList() { return {"pre/", "pre/m", kMaxListLimit}; }
inline ListReply SampleListReply() {
  return {Ws(absl::StatusCode::kOk, ""),
          {{"pre/a", 100, 3, ObjectState::kComplete, 2, 12345, {{1, 64, 164}, {2, 128, 164}}},
           {"pre/b" + kBinary, 0, 4, ObjectState::kProcessing, 0, 0, {}}},
          true};
}
inline SegmentsReply SampleSegmentsReply() {
  SegmentsReply m{Ws(absl::StatusCode::kOk, ""), {}};
  m.segments.push_back(
      {1, "seg-0", "node-a", "h:1", 0x1000, 1 << 20, 4096, Tier::kHost, "", kBinary, "w1", "boot"});
  m.segments.push_back({~0ull, "seg-1", "node-b", "h:2", 0, 0, 0, Tier::kGpu, "pool", "", "", "",
                        "ipc" + kBinary, std::string(16, '\x01')});
  return m;
}

inline SegmentInfo SampleSegment() {
  SegmentInfo s{3, "seg-3",     "node-c", "10.0.0.3:4000", 0x7F0000000000ull, 1ull << 30,
                0, Tier::kHost, "",       kBinary,         "worker-c",        "boot/7"};
  s.nic = "mlx5_0:1";
  s.numa_node = -1;  // negative values survive the unsigned wire field
  s.gpu = 2;
  return s;
}
inline CopyStartRequest SampleCopyStart() {
  return {{{"k1", "node-b"}, {kBinary, "10.0.0.2:4000"}}};
}
inline CopyStartReply SampleCopyStartReply() {
  CopyStartReply m{Ws(absl::StatusCode::kOk, ""), {}};
  m.results.push_back(
      {Ws(absl::StatusCode::kOk, ""), 11, {1, 0x1000, 4160}, {2, 0x9000, 4160}, "10.0.0.2:4000"});
  m.results.push_back({Ws(absl::StatusCode::kNotFound, "no such key"), 0, {}, {}, ""});
  m.results.push_back({Ws(absl::StatusCode::kOk, ""), ~0ull, {~0ull, ~0ull, ~0ull}, {}, kBinary});
  return m;
}
inline CopyEndRequest SampleCopyEnd() { return {{{"k1", 11, 2}, {kBinary, ~0ull, ~0ull}}}; }
inline FetchRequest SampleFetch() {
  return {SampleSegment(), 0x7F0000001000ull, 0x10040, 4160, kMaxNodeTransferTimeoutMs};
}
inline LookupPrefixRequest SampleLookupPrefix() { return {{"kv/a", "", kBinary}, true}; }
inline LookupPrefixReply SampleLookupPrefixReply() {
  return {Ws(absl::StatusCode::kOk, ""),
          2,
          {{4096, 5, "10.0.0.1:4000"}, {1ull << 40, ~0ull, kBinary}},
          30000};
}
inline InventoryRecord SampleRecord(InventoryOp op) {
  return {op,   "tenant-b", "key" + kBinary,       0x1122334455667788ull, 4096,
          4160, 4000,       0x00AB00CD00EF0012ull, kPutFlagHardPin,       1700000000123ull};
}
inline InventorySyncReply SampleInventorySyncReply() {
  return {Ws(absl::StatusCode::kOk, ""),
          {SampleRecord(InventoryOp::kCommit), SampleRecord(InventoryOp::kFree)},
          0x0102030405060708ull};
}
inline InventoryReportRequest SampleInventoryReport() {
  return {{SampleRecord(InventoryOp::kCommit), SampleRecord(InventoryOp::kCommit)}, true, 1234567};
}
inline InventoryReportReply SampleInventoryReportReply() {
  return {Ws(absl::StatusCode::kFailedPrecondition, "not a node"), 17, 3};
}

inline PushRequest SamplePush() {
  PushRequest m;
  m.dest = {7,
            "",
            "",
            "client/ab12",
            0x7f0000000000ull,
            32 << 20,
            0,
            Tier::kHost,
            "",
            kBinary,
            std::string("worker\0addr", 11),
            "boot/42"};
  m.entries.push_back({0x10040, 0x7f0000000000ull, 4096});
  m.entries.push_back({~0ull, ~0ull, ~0ull});
  m.headers = {0x10000, ~0ull};
  m.timeout_ms = 0xFFFFFFFFu;  // out of range, but the codec carries any u32 (the node refuses it)
  return m;
}

inline PushReply SamplePushReply() {
  PushReply m;
  m.status = {0, ""};
  m.headers = std::string(128, '\xA5');
  return m;
}

inline void Sample(HelloRequest* m) { *m = SampleHelloRequest(); }
inline void Sample(HelloReply* m) { *m = SampleHelloReply(); }
inline void Sample(HeartbeatRequest* m) { *m = SampleHeartbeatWithCgroup(); }
inline void Sample(HeartbeatReply* m) { *m = SampleHeartbeatReply(); }
inline void Sample(MountSegmentRequest* m) { *m = SampleMount(); }
inline void Sample(MountSegmentReply* m) { *m = SampleMountReply(); }
inline void Sample(UnmountSegmentRequest* m) { *m = SampleUnmount(); }
inline void Sample(StatusReply* m) { *m = SampleStatusReply(); }
inline void Sample(PutStartRequest* m) { *m = SamplePutStart(); }
inline void Sample(PutStartReply* m) { *m = SamplePutStartReply(); }
inline void Sample(KeyGenRequest* m) { *m = SampleKeyGen(); }
inline void Sample(BatchStatusReply* m) { *m = SampleBatchStatus(); }
inline void Sample(KeysRequest* m) { *m = SampleKeys(); }
inline void Sample(GetRequest* m) { *m = GetRequest{SampleKeys().keys, 12345}; }
inline void Sample(RemoveRequest* m) { *m = SampleRemove(); }
inline void Sample(GetReply* m) { *m = SampleGetReply(); }
inline void Sample(ListRequest* m) { *m = SampleList(); }
inline void Sample(ListReply* m) { *m = SampleListReply(); }
inline void Sample(SegmentsRequest* m) { *m = SegmentsRequest{}; }
inline void Sample(SegmentsReply* m) { *m = SampleSegmentsReply(); }
inline void Sample(CopyStartRequest* m) { *m = SampleCopyStart(); }
inline void Sample(CopyStartReply* m) { *m = SampleCopyStartReply(); }
inline void Sample(CopyEndRequest* m) { *m = SampleCopyEnd(); }
inline void Sample(FetchRequest* m) { *m = SampleFetch(); }
inline void Sample(LookupPrefixRequest* m) { *m = SampleLookupPrefix(); }
inline void Sample(LookupPrefixReply* m) { *m = SampleLookupPrefixReply(); }
inline void Sample(PushRequest* m) { *m = SamplePush(); }
inline void Sample(PushReply* m) { *m = SamplePushReply(); }
inline void Sample(InventorySyncRequest* m) {
  *m = InventorySyncRequest{750, 0x1122334455667788ull};
}
inline void Sample(InventorySyncReply* m) { *m = SampleInventorySyncReply(); }
inline void Sample(InventoryReportRequest* m) { *m = SampleInventoryReport(); }
inline void Sample(InventoryReportReply* m) { *m = SampleInventoryReportReply(); }
inline void Sample(ReadRequest* m) { *m = ReadRequest{{{0x10000, 4096}, {~0ull, ~0ull}, {0, 0}}}; }
inline void Sample(ReadReply* m) {
  *m = ReadReply{{0, ""}, std::string("value\0bytes", 11) + std::string(64, '\xA5')};
}
inline void Sample(WriteRequest* m) {
  *m = WriteRequest{{{0x10000, 5}, {0x20000, 0}},
                    std::string(64, '\x11') + "hello" + std::string(64, '\x22')};
}
inline void Sample(AttachRequest* m) {
  *m = AttachRequest{0x0123456789abcdefull, std::string("\x00ucx-address\xff", 13)};
}
template <class T>
T Sample() {
  T m;
  Sample(&m);
  return m;
}

}  // namespace granary::proto::samples
