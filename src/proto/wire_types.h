#pragma once

// What every wire message shares: the limits, the message types (from message_table.h), the
// status every reply carries, the wire enums and the put flags. The messages themselves are in
// session_messages.h, object_messages.h, data_messages.h and inventory_messages.h; include
// messages.h for all of them and the frame functions.

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/error_reason.h"
#include "common/status_macros.h"
#include "common/tier_preference.h"
#include "proto/alloc_header.h"
#include "proto/codec.h"
#include "proto/fields.h"
#include "proto/frame.h"
#include "proto/message_table.h"

namespace granary::proto {

// Documented limits (docs/limits in the README). A frame that exceeds one is rejected whole.
inline constexpr size_t kMaxKeyBytes = 4096;
inline constexpr size_t kMaxTenantIdBytes = 128;
inline constexpr size_t kMaxTokenBytes = 256;  // HelloRequest.token (a tenant credential)
inline constexpr uint32_t kMaxBatch = 16384;
inline constexpr uint32_t kMaxReplicaNum = 8;
inline constexpr size_t kMaxRkeyBytes = 64 << 10;
inline constexpr size_t kMaxNameBytes = 512;
inline constexpr size_t kMaxMessageBytes = 4096;
// A GPU segment's IPC handle (an opaque blob of the node's device backend) and device UUID.
inline constexpr size_t kMaxGpuIpcBytes = 1024;
inline constexpr size_t kGpuUuidBytes = 16;
inline constexpr uint64_t kMaxValueBytes = 1ull << 40;  // 1 TB
inline constexpr uint32_t kMaxListLimit = 100000;
// Records in one InventorySync reply or InventoryReport request.
inline constexpr uint32_t kMaxInventoryBatch = 16384;
// InventorySyncRequest.wait_ms: the longest a poll may be parked at the master.
inline constexpr uint32_t kMaxInventoryWaitMs = 60000;

// Message types (message_table.h). A reply's type is the request's type | kReplyBit.
enum class MsgType : uint16_t {
#define GRANARY_MSG_ENUM(Name, number, ...) k##Name = number,
  GRANARY_MESSAGES(GRANARY_MSG_ENUM) GRANARY_RESERVED_MESSAGES(GRANARY_MSG_ENUM)
#undef GRANARY_MSG_ENUM
};
// Who answers a message (message_table.h's last column).
enum class Server : uint8_t { kMaster, kNode, kRpc };
inline constexpr uint16_t kReplyBit = 0x8000;
const char* MsgTypeName(uint16_t type);

// A status as carried on the wire: absl code, message and the typed reason (an ErrorReason
// payload on the absl::Status; see common/error_reason.h).
struct WireStatus {
  uint8_t code = 0;
  std::string message;
  ErrorReason reason = ErrorReason::kNone;
  static WireStatus From(const absl::Status& s);
  [[nodiscard]] absl::Status ToStatus() const;
  template <class V>
  static constexpr void Fields(V& v) {
    using S = WireStatus;
    v(&S::code, "status.code");
    v(&S::message, "status.message", kMaxMessageBytes);
    v(&S::reason, "status.reason");
    v.Check([](const S& s) {
      return s.code <= static_cast<uint8_t>(absl::StatusCode::kUnauthenticated)
                 ? absl::OkStatus()
                 : absl::InvalidArgumentError(absl::StrCat("unknown status code ", s.code));
    });
  }
};

enum class Role : uint8_t { kClient = 1, kNode = 2 };
// Where a segment's bytes are: host memory, GPU memory, or (protocol 15) a node's disk tier, a
// file the node reads and writes for its clients (node/disk/).
enum class Tier : uint8_t { kHost = 0, kGpu = 1, kDisk = 2 };
inline constexpr Tier kTiers[] = {Tier::kHost, Tier::kGpu, Tier::kDisk};

// An object version's state, in the master's table and in ObjectInfo. Only kComplete objects
// are served; a kProcessing one is being written (between PutStart and PutEnd).
enum class ObjectState : uint8_t { kProcessing = 0, kComplete = 1 };

// The byte values of each enum on the wire (fields.h).
template <>
struct WireEnum<ErrorReason> {
  static constexpr uint8_t kMin = 0, kMax = static_cast<uint8_t>(common::kLastErrorReason);
  static constexpr const char* kNoun = "error reason";
};
template <>
struct WireEnum<Role> {
  static constexpr uint8_t kMin = 1, kMax = 2;
  static constexpr const char* kNoun = "role";
};
template <>
struct WireEnum<Tier> {
  static constexpr uint8_t kMin = 0, kMax = 2;
  static constexpr const char* kNoun = "tier";
};
template <>
struct WireEnum<ObjectState> {
  static constexpr uint8_t kMin = 0, kMax = 1;
  static constexpr const char* kNoun = "object state";
};

// PutStartRequest.flags bits: how the object is pinned against eviction (granary::PutOptions).
inline constexpr uint32_t kPutFlagSoftPin = 1u << 0;  // evicted only when nothing else is left
inline constexpr uint32_t kPutFlagHardPin = 1u << 1;  // never evicted (still removable)
// Bits 2-4: the tier the replicas are placed on (granary::PutOptions::tier): 0 the tenant's
// default_tier from the policy (host when it names none), else 1 GPU segments only, 2 host
// segments only, 3 any (GPU while it has room, else host), 4 disk tiers only (protocol 15).
// Protocol 10 knew only 0 (host) and kPutFlagTierGpu; protocols 11 to 14 bits 2-3.
inline constexpr uint16_t kDiskTierProtocol = 15;
inline constexpr uint32_t kPutFlagTierShift = 2;
inline constexpr uint32_t kPutFlagTierMask = 7u << kPutFlagTierShift;
inline constexpr uint32_t kPutFlagTierGpu = 1u << kPutFlagTierShift;
// The flag bits of a tier preference (nullopt: the tenant's default).
inline uint32_t PutTierFlags(std::optional<common::TierPreference> t) {
  if (!t.has_value()) return 0;
  uint32_t v = 0;
  switch (*t) {
    case common::TierPreference::kGpu:
      v = 1;
      break;
    case common::TierPreference::kHost:
      v = 2;
      break;
    case common::TierPreference::kAny:
      v = 3;
      break;
    case common::TierPreference::kDisk:
      v = 4;
      break;
  }
  return v << kPutFlagTierShift;
}
// The tier preference of PutStartRequest.flags (nullopt: the tenant's default).
inline std::optional<common::TierPreference> PutTierOf(uint32_t flags) {
  switch ((flags & kPutFlagTierMask) >> kPutFlagTierShift) {
    case 1:
      return common::TierPreference::kGpu;
    case 2:
      return common::TierPreference::kHost;
    case 3:
      return common::TierPreference::kAny;
    case 4:
      return common::TierPreference::kDisk;
    default:
      return std::nullopt;
  }
}

}  // namespace granary::proto
