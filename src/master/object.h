#pragma once

#include <cstdint>

#include "master/segment_registry.h"
#include "proto/messages.h"

namespace granary::master {

using SessionId = uint64_t;

// The object state and the pin flags are the wire contract's (proto/messages.h); these
// using-declarations add no names, they let the table code read them unqualified.
using proto::kPutFlagHardPin;
using proto::kPutFlagSoftPin;
using proto::ObjectState;
inline constexpr uint8_t kPinNone = 0, kPinSoft = 1, kPinHard = 2;

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
