#pragma once

#include <algorithm>
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

// Read leases are a count and one end time, lease_until_ms, which only grows while the object is
// complete. A lease is named by its own end: TakeLease returns it (a Get sends it to the client
// as GetResult::lease_token, a copy keeps it), and EndLease counts the lease off only while it
// has not run out. That makes a late end harmless: once the count may have been reset (a
// TakeLease after every lease ran out), each lease taken before the reset has ended (a reset
// needs lease_until_ms <= now, and lease_until_ms >= every earlier lease's end), so its
// EndLease comes at or past its end and changes nothing. A lease that runs out uncounted
// leaves the count high only until the newer leases' end, lease_until_ms, has passed too.

// Takes one more read lease, ending at `until` (or later, if another lease ends later).
inline int64_t TakeLease(Object& o, int64_t now, int64_t until) {
  if (o.lease_until_ms <= now) o.lease_count = 0;  // stale leases have run out
  ++o.lease_count;
  o.lease_until_ms = std::max(o.lease_until_ms, until);
  return until;
}

// Ends the lease TakeLease returned `until` for; nothing once it has run out (see above).
inline void EndLease(Object& o, int64_t now, int64_t until) {
  if (until > now && o.lease_count > 0) --o.lease_count;
}

// Whether a lease holds the object now.
inline bool Leased(const Object& o, int64_t now) {
  return o.lease_count > 0 && o.lease_until_ms > now;
}

}  // namespace granary::master
