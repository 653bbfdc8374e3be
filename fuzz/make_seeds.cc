// Writes the fuzz_frame seed corpus: real encoded frames of several request and reply types.
// Build and run once (the output is committed under fuzz/corpus/frame):
//   clang++ -std=c++20 -Isrc -Iinclude fuzz/make_seeds.cc
//   src/proto/{codec,frame,messages,msg_type}.cc \
//     src/common/error_reason.cc src/common/tier_preference.cc \
//     $(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format absl_cord) \
//     -o /tmp/make_seeds && /tmp/make_seeds fuzz/corpus/frame   (from the repository root)
// run.sh does not need it; it is kept to regenerate the seeds when the wire format changes.

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "common/error_reason.h"
#include "proto/messages.h"

using namespace granary::proto;  // NOLINT

namespace {

std::string g_dir;

template <typename T>
void Emit(const char* name, MsgType type, bool reply, const T& m) {
  uint16_t t = static_cast<uint16_t>(type) | (reply ? kReplyBit : 0);
  std::string frame = EncodeFrame(t, 42, m);
  std::ofstream(g_dir + "/" + name, std::ios::binary) << frame;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  g_dir = argv[1];

  HelloRequest hello;
  hello.role = Role::kClient;
  hello.client_id = "client-1";
  hello.tenant_id = "tenant-a";
  hello.token = "tenant-a-token";
  Emit("hello_req", MsgType::kHello, false, hello);
  HelloReply hello_rep;
  hello_rep.session_id = 7;
  hello_rep.heartbeat_interval_ms = 1000;
  hello_rep.master_id = "master-0";
  Emit("hello_rep", MsgType::kHello, true, hello_rep);

  Emit("heartbeat_req", MsgType::kHeartbeat, false, HeartbeatRequest{});

  MountSegmentRequest mount;
  mount.name = "seg0";
  mount.node_id = "node-1";
  mount.node_address = "10.0.0.1:7000";
  mount.base = 0x7f0000000000;
  mount.size = 1 << 20;
  mount.tier = Tier::kGpu;
  mount.rkey = std::string("\x01\x02\x03\x04", 4);
  mount.pool = "tenant-a";
  mount.worker_address = "worker";
  mount.host_id = "boot-1";
  mount.nic = "mlx5_0:1";
  mount.numa_node = 0;
  mount.gpu = 0;
  Emit("mount_req", MsgType::kMountSegment, false, mount);
  MountSegmentReply mount_rep;
  mount_rep.segment_id = 3;
  Emit("mount_rep", MsgType::kMountSegment, true, mount_rep);

  PutStartRequest put;
  put.entries = {{"k1", 4096}, {"kv1/3:abc/6:sha256/-/4:ab12", 65536}};
  put.replica_num = 2;
  Emit("putstart_req", MsgType::kPutStart, false, put);
  PutStartReply put_rep;
  PutStartResult r1;
  r1.generation = 9;
  r1.replicas = {{3, 0x1000, 4160}, {4, 0x2000, 4160}};
  PutStartResult r2;
  r2.status = WireStatus::From(granary::WithReason(
      absl::ResourceExhaustedError("QUOTA_EXCEEDED: quota"), granary::ErrorReason::kQuotaExceeded));
  put_rep.results = {r1, r2};
  Emit("putstart_rep", MsgType::kPutStart, true, put_rep);

  KeyGenRequest kg;
  kg.entries = {{"k1", 9}, {"k2", 10}};
  Emit("putend_req", MsgType::kPutEnd, false, kg);
  BatchStatusReply bs;
  bs.results = {WireStatus{}, WireStatus::From(absl::NotFoundError("k2"))};
  Emit("putend_rep", MsgType::kPutEnd, true, bs);

  KeysRequest keys;
  keys.keys = {"k1", "k2", "k3"};
  Emit("get_req", MsgType::kGet, false, keys);
  Emit("remove_req", MsgType::kRemove, false, RemoveRequest{{"k1", "k2"}, true});
  GetReply get_rep;
  GetResult g;
  g.size = 4096;
  g.generation = 9;
  g.lease_ms = 5000;
  g.lease_token = 1'700'000'005'000;
  g.replicas = {{3, 0x1000, 4160}};
  get_rep.results = {g};
  Emit("get_rep", MsgType::kGet, true, get_rep);
  KeyGenRequest ends;
  ends.entries = {{"k1", 9, 1'700'000'005'000}};
  Emit("getend_req", MsgType::kGetEnd, false, ends);

  ListRequest list;
  list.prefix = "kv1/";
  list.start_after = "kv1/3:abc";
  list.limit = 10;
  Emit("list_req", MsgType::kList, false, list);
  ListReply list_rep;
  ObjectInfo oi;
  oi.key = "k1";
  oi.size = 4096;
  oi.generation = 9;
  oi.state = ObjectState::kComplete;
  oi.replica_count = 1;
  oi.age_ms = 12;
  oi.replicas = {{3, 0x1000, 4160}};
  list_rep.objects = {oi};
  list_rep.more = true;
  Emit("list_rep", MsgType::kList, true, list_rep);

  SegmentsReply segs;
  SegmentInfo si;
  si.segment_id = 3;
  si.name = "seg0";
  si.node_id = "node-1";
  si.node_address = "10.0.0.1:7000";
  si.size = 1 << 20;
  si.used = 4160;
  si.nic = "mlx5_1:1";
  si.numa_node = 1;
  segs.segments = {si};
  Emit("segments_rep", MsgType::kSegments, true, segs);

  CopyStartRequest cs;
  cs.entries = {{"k1", "node-2"}};
  Emit("copystart_req", MsgType::kCopyStart, false, cs);
  CopyStartReply cs_rep;
  CopyStartResult cr;
  cr.generation = 9;
  cr.source = {3, 0x1000, 4160};
  cr.dest = {4, 0x3000, 4160};
  cr.dest_node_address = "10.0.0.2:7000";
  cs_rep.results = {cr};
  Emit("copystart_rep", MsgType::kCopyStart, true, cs_rep);
  CopyEndRequest ce;
  ce.entries = {{"k1", 9, 4}};
  Emit("moveend_req", MsgType::kMoveEnd, false, ce);

  FetchRequest fetch;
  fetch.source = si;
  fetch.source_address = 0x1000;
  fetch.dest_address = 0x3000;
  fetch.length = 4160;
  Emit("fetch_req", MsgType::kFetch, false, fetch);

  PushRequest push;
  push.dest = si;
  push.entries = {{0x1040, 0x7000, 4096}, {0x3040, 0x8000, 4096}};
  push.headers = {0x1000, 0x3000};
  Emit("push_req", MsgType::kPush, false, push);
  PushReply push_rep;
  push_rep.headers = std::string(128, '\x01');
  Emit("push_rep", MsgType::kPush, true, push_rep);
  ReadRequest read;
  read.entries = {{0x1000, 4096}, {0x3000, 10}};
  Emit("read_req", MsgType::kRead, false, read);
  ReadReply read_rep;
  read_rep.data = std::string(4096 + 10, '\x02') + std::string(128, '\x01');
  Emit("read_rep", MsgType::kRead, true, read_rep);
  WriteRequest write;
  write.entries = {{0x1000, 16}};
  write.data = std::string(64, '\x01') + std::string(16, '\x03');
  Emit("write_req", MsgType::kWrite, false, write);
  Emit("attach_req", MsgType::kAttach, false,
       AttachRequest{0x0123456789abcdefull, std::string("\x00ucx-address\xff", 13)});

  LookupPrefixRequest lp;
  lp.keys = {"kv1/3:abc/6:sha256/-/1:a", "kv1/3:abc/6:sha256/-/1:b"};
  lp.lease = true;
  Emit("lookup_req", MsgType::kLookupPrefix, false, lp);
  LookupPrefixReply lp_rep;
  lp_rep.present = 1;
  lp_rep.hints = {{4096, 9, "10.0.0.1:7000"}};
  lp_rep.lease_ms = 5000;
  Emit("lookup_rep", MsgType::kLookupPrefix, true, lp_rep);

  InventoryRecord rec;
  rec.tenant = "tenant-a";
  rec.key = "k1";
  rec.segment_id = 3;
  rec.offset = 4096;
  rec.alloc_size = 4160;
  rec.value_length = 4096;
  rec.generation = 42;
  rec.commit_ms = 1700000000000;
  InventoryRecord freed = rec;
  freed.op = InventoryOp::kFree;
  freed.tenant.clear();
  freed.key.clear();
  Emit("inventory_sync", MsgType::kInventorySync, false, InventorySyncRequest{500, 42});
  Emit("inventory_sync_rep", MsgType::kInventorySync, true,
       InventorySyncReply{WireStatus{}, {rec, freed}, 43});
  Emit("inventory_report", MsgType::kInventoryReport, false, InventoryReportRequest{{rec}, true});
  Emit("inventory_report_rep", MsgType::kInventoryReport, true, InventoryReportReply{{}, 1, 0});

  Emit("unmount_status_rep", MsgType::kUnmountSegment, true,
       StatusReply{WireStatus::From(absl::InvalidArgumentError("bad segment"))});
  return 0;
}
