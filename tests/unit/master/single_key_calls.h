#pragma once

// One-key forms of MasterService's batch RPCs, shared by the master's unit tests: each sends a
// batch of one and returns that one result (or the batch's own error status).

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "master/master_service.h"
#include "proto/messages.h"

namespace granary::master::test_calls {

inline absl::StatusCode Code(const proto::WireStatus& s) { return s.ToStatus().code(); }

// The one result of a one-key reply, or the reply's own error as that result.
inline proto::WireStatus& StatusOf(proto::WireStatus& s) { return s; }
template <typename Result>
proto::WireStatus& StatusOf(Result& r) {
  return r.status;
}
template <typename Reply>
auto OnlyResult(const Reply& rep) {
  using Result = typename decltype(rep.results)::value_type;
  if (Code(rep.status) != absl::StatusCode::kOk) {
    Result res;
    StatusOf(res) = rep.status;
    return res;
  }
  EXPECT_EQ(rep.results.size(), 1u);
  return rep.results.at(0);
}

// Hello as a client of tenant `name`, or as node `name` (role kNode); the client id is `name`.
inline proto::WireStatus Hello(MasterService& svc, SessionId sid, proto::Role role,
                               const std::string& name) {
  proto::HelloRequest h;
  h.role = role;
  h.client_id = name;
  if (role == proto::Role::kClient) h.tenant_id = name;
  return svc.Hello(sid, h).status;
}

inline proto::PutStartResult PutStart(MasterService& svc, SessionId sid, const std::string& key,
                                      uint64_t size, int replicas = 1) {
  proto::PutStartRequest r;
  r.entries.push_back({key, size});
  r.replica_num = static_cast<uint8_t>(replicas);
  return OnlyResult(svc.PutStart(sid, r));
}

// PutEnd, PutRevoke, GetEnd (which echoes the Get's lease token).
inline proto::WireStatus KeyGenOp(
    MasterService& svc,
    proto::BatchStatusReply (MasterService::*op)(SessionId, const proto::KeyGenRequest&),
    SessionId sid, const std::string& key, uint64_t gen, uint64_t lease_token = 0) {
  proto::KeyGenRequest r;
  r.entries.push_back({key, gen, lease_token});
  return OnlyResult((svc.*op)(sid, r));
}

// Exist.
inline proto::WireStatus KeysOp(
    MasterService& svc,
    proto::BatchStatusReply (MasterService::*op)(SessionId, const proto::KeysRequest&),
    SessionId sid, const std::string& key) {
  return OnlyResult((svc.*op)(sid, proto::KeysRequest{{key}}));
}

inline proto::WireStatus Remove(MasterService& svc, SessionId sid, const std::string& key,
                                bool force = false) {
  return OnlyResult(svc.Remove(sid, proto::RemoveRequest{{key}, force}));
}

// PutStart then PutEnd of one key with `flags` (pins): OK once it is committed, else the first
// error.
inline absl::Status PutCommitted(MasterService& svc, SessionId sid, const std::string& key,
                                 uint64_t size, uint32_t flags = 0) {
  proto::PutStartRequest req;
  req.entries.push_back({key, size});
  req.flags = flags;
  proto::PutStartResult started = OnlyResult(svc.PutStart(sid, req));
  if (Code(started.status) != absl::StatusCode::kOk) return started.status.ToStatus();
  return OnlyResult(svc.PutEnd(sid, proto::KeyGenRequest{{{key, started.generation}}})).ToStatus();
}

inline proto::GetResult Get(MasterService& svc, SessionId sid, const std::string& key) {
  return OnlyResult(svc.Get(sid, proto::GetRequest{{key}}));
}

// The lease token of each session's last Get of a key, which its GetEnd sends back, as a client
// does: a fixture's Get records it, its GetEnd looks it up (0, no lease, when there was no Get).
class LeaseTokens {
 public:
  const proto::GetResult& Took(SessionId sid, const std::string& key, const proto::GetResult& g) {
    tokens_[{sid, key}] = g.lease_token;
    return g;
  }
  uint64_t Of(SessionId sid, const std::string& key) const {
    auto it = tokens_.find({sid, key});
    return it == tokens_.end() ? 0 : it->second;
  }

 private:
  std::map<std::pair<SessionId, std::string>, uint64_t> tokens_;
};

}  // namespace granary::master::test_calls
