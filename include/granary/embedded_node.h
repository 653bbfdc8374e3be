#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "granary/log_sink.h"

namespace granary {

// Options of an EmbeddedNode. Every field has a default; Start names a bad value.
struct EmbeddedNodeOptions {
  // host:port of the master, or etcd://h1:2379;h2:2379 to follow the active master of HA
  // cluster `cluster_id` (as a granary_node's --master and --cluster_id).
  std::string master = "127.0.0.1:50051";
  std::string cluster_id = "granary_cluster";  // with an etcd:// master
  uint64_t segment_size = 0;                   // bytes of host memory to contribute; at least 1 MiB
  std::string hostname = "127.0.0.1";          // the address clients reach this node at
  // The node's UCX listener port. 0: a free port drawn at random from 12300-14300 (Mooncake's
  // client port range), up to 20 draws.
  uint16_t port = 0;
  // The level of this node's own log lines (they go to stderr); unset: the process-wide
  // threshold. The process-wide threshold itself is never changed.
  std::optional<LogLevel> log_level;
  // How long Start waits for the segment to be mounted at the master.
  int64_t mount_timeout_ms = 10'000;
};

// A storage node inside the calling process (Mooncake's "embedded" mode): it contributes a host
// segment of `segment_size` bytes, mounted at the master like a granary_node's, and serves
// clients' one-sided reads and writes from this process's memory. It runs on threads of its own
// (one UCX progress thread and one for the master session) and changes no process-wide setting
// (environment, signals, log threshold). It serves no HTTP.
//
// Owned by the caller; Stop() (or the destructor) unmounts the segment gracefully and frees it.
// Thread-safe: address() and segment_name() are fixed at Start, and Stop may be called from any
// thread, any number of times.
class EmbeddedNode {
 public:
  // Allocates and registers the segment, starts the node and waits until the master has mounted
  // it. INVALID_ARGUMENT for a bad option, or a segment_size larger than the machine's physical
  // memory; RESOURCE_EXHAUSTED for one larger than the memory available now (both checked before
  // anything is allocated); UNAVAILABLE when the master does not mount it within
  // mount_timeout_ms (or no port of the range is free).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EmbeddedNode>> Start(
      const EmbeddedNodeOptions& options);
  ~EmbeddedNode();
  EmbeddedNode(const EmbeddedNode&) = delete;
  EmbeddedNode& operator=(const EmbeddedNode&) = delete;

  // "host:port": where clients reach the node (SegmentInfo::node_address; a Copy/Move target).
  const std::string& address() const;
  // The segment's name at the master (GET /get_all_segments lists it): the same "host:port".
  const std::string& segment_name() const;
  // Unmounts the segment (the master drops the replicas on it), stops the node's threads and
  // frees the memory. Idempotent; after it the node is gone but address() still answers.
  void Stop();

 private:
  struct Impl;
  explicit EmbeddedNode(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace granary
