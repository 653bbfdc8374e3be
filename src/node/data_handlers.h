#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "node/gpu_bounce.h"
#include "node/node_metrics.h"
#include "node/node_service.h"
#include "node/segments.h"
#include "node/transfer_watchdog.h"
#include "proto/frame.h"
#include "transport/rma.h"
#include "transport/rpc_server.h"

namespace granary::node {

// The requests a node serves on its RPC port, through one dispatch table (as the master's):
//   Fetch  reads bytes one-sided from another segment into this node's memory: a replica from
//          another node (a client's Copy or Move), or a client's staged slot into a GPU
//          segment (the client's side of the bounce, through GpuBounce);
//   Push   writes values into a client's registered buffer and answers with their headers;
//   Read   copies values and then their headers into the reply (tcp peers, small values);
//   Write  copies each value and then its header into place, and answers.
// A Read or Write of entries on a disk tier runs on that tier's thread (DiskTier) instead, and
// answers from there: a Read with the values and a header made from each record (so the
// client checks it as it checks a memory replica's), a Write once every record is written.
// Fetch and Push answer later, through `reply`, once their transfer completes or the watchdog
// ends it. Every range is checked by NodeService first.
// Thread safety: Dispatch and Disconnected run on the node worker's progress thread only (the
// RpcServer's callbacks); the completions they start run there too.
class DataHandlers {
 public:
  struct Parts {
    NodeService* service = nullptr;
    NodeSegments* segments = nullptr;
    transport::RmaEngine* rma = nullptr;
    TransferWatchdog* watchdog = nullptr;
    GpuBounce* bounce = nullptr;  // null on a node without GPU segments
    NodeMetrics* metrics = nullptr;
    // Sends a late answer on a connection (dropped once the node is going away).
    std::function<void(transport::RpcServer::ConnId, std::string)> reply;
  };
  explicit DataHandlers(Parts parts);

  // The answer to a request, or nullopt when it comes later through Parts::reply.
  std::optional<std::string> Dispatch(transport::RpcServer::ConnId conn,
                                      const proto::FrameView& frame);
  // A connection closed: forget the same-host clients it pushed to.
  void Disconnected(transport::RpcServer::ConnId conn);

 private:
  std::optional<std::string> Fetch(transport::RpcServer::ConnId conn, const proto::FrameView& f);
  std::optional<std::string> Push(transport::RpcServer::ConnId conn, const proto::FrameView& f);
  std::optional<std::string> Read(transport::RpcServer::ConnId conn, const proto::FrameView& f);
  std::optional<std::string> Write(transport::RpcServer::ConnId conn, const proto::FrameView& f);
  // data_handlers_disk.cc: whether any entry lies on a disk tier, and the Read and Write of
  // entries that all do (each tier's part on its thread; answered through Parts::reply).
  bool AnyDisk(const std::vector<proto::InlineEntry>& entries) const;
  std::optional<std::string> ReadDisk(transport::RpcServer::ConnId conn, const proto::FrameView& f,
                                      std::vector<proto::InlineEntry> entries);
  std::optional<std::string> WriteDisk(transport::RpcServer::ConnId conn, const proto::FrameView& f,
                                       const proto::WriteRequestView& req);
  // The device index of segment `index` (a GPU segment), else -1.
  int DeviceOf(size_t index) const;

  const Parts p_;
  // The clients (RmaEngine peer names) each connection pushed to.
  absl::flat_hash_map<transport::RpcServer::ConnId, std::vector<std::string>> push_clients_;
};

}  // namespace granary::node
