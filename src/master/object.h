#pragma once

#include <cstdint>

#include "master/segment_registry.h"

namespace granary::master {

using SessionId = uint64_t;

enum class ObjectState : uint8_t { kProcessing = 0, kComplete = 1 };
inline constexpr uint8_t kPinNone = 0, kPinSoft = 1, kPinHard = 2;
// PutStartRequest.flags bits.
inline constexpr uint32_t kPutFlagSoftPin = 1u << 0;
inline constexpr uint32_t kPutFlagHardPin = 1u << 1;

// One object version in the table, one per stored key: 88 bytes with one replica (fields
// ordered to leave no padding).
struct Object {
  uint64_t size = 0;
  uint64_t generation = 0;
  // The writer's session while kProcessing; the end of the read leases (ms) once kComplete.
  // PutEnd switches from one to the other; nothing reads a member of the other state.
  union {
    SessionId writer = 0;
    int64_t lease_until_ms;
  };
  int64_t created_ms = 0;    // PutStart time; its deadline is created_ms + put_start_timeout_ms
  uint64_t last_access = 0;  // an ordinal from the access clock: strict LRU order, no ties
  uint32_t lease_count = 0;  // read leases (kComplete only)
  ObjectState state = ObjectState::kProcessing;
  uint8_t pin = 0;  // kPinNone, kPinSoft (evicted last), kPinHard (never evicted)
  Placements replicas;
};
static_assert(sizeof(Object) <= 88, "Object grew: it is the master's per-key memory");

}  // namespace granary::master
