#pragma once

// One-key forms of MasterService's batch RPCs, shared by the master's unit tests: each sends a
// batch of one and returns that one result (or the batch's own error status).

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "master/master_service.h"
#include "proto/messages.h"

namespace granary::master::test_calls {

inline absl::StatusCode Code(const proto::WireStatus& s) { return s.ToStatus().code(); }

inline proto::PutStartResult PutStart(MasterService& svc, SessionId sid, const std::string& key,
                                      uint64_t size, int replicas = 1) {
  proto::PutStartRequest r;
  r.entries.push_back({key, size});
  r.replica_num = static_cast<uint8_t>(replicas);
  auto rep = svc.PutStart(sid, r);
  if (Code(rep.status) != absl::StatusCode::kOk) {
    proto::PutStartResult res;
    res.status = rep.status;
    return res;
  }
  EXPECT_EQ(rep.results.size(), 1u);
  return rep.results.at(0);
}

// PutEnd, PutRevoke, GetEnd.
inline proto::WireStatus KeyGenOp(
    MasterService& svc,
    proto::BatchStatusReply (MasterService::*op)(SessionId, const proto::KeyGenRequest&),
    SessionId sid, const std::string& key, uint64_t gen) {
  proto::KeyGenRequest r;
  r.entries.push_back({key, gen});
  auto rep = (svc.*op)(sid, r);
  if (Code(rep.status) != absl::StatusCode::kOk) return rep.status;
  EXPECT_EQ(rep.results.size(), 1u);
  return rep.results.at(0);
}

// Exist, Remove.
inline proto::WireStatus KeysOp(
    MasterService& svc,
    proto::BatchStatusReply (MasterService::*op)(SessionId, const proto::KeysRequest&),
    SessionId sid, const std::string& key) {
  proto::KeysRequest r;
  r.keys.push_back(key);
  auto rep = (svc.*op)(sid, r);
  if (Code(rep.status) != absl::StatusCode::kOk) return rep.status;
  EXPECT_EQ(rep.results.size(), 1u);
  return rep.results.at(0);
}

inline proto::GetResult Get(MasterService& svc, SessionId sid, const std::string& key) {
  proto::KeysRequest r;
  r.keys.push_back(key);
  auto rep = svc.Get(sid, r);
  if (Code(rep.status) != absl::StatusCode::kOk) {
    proto::GetResult res;
    res.status = rep.status;
    return res;
  }
  EXPECT_EQ(rep.results.size(), 1u);
  return rep.results.at(0);
}

}  // namespace granary::master::test_calls
