#pragma once

#include <cstdint>

#include "absl/status/status.h"

namespace granary {

// Why a call failed, beyond its absl::StatusCode: a typed sub-code that the master attaches to
// an error and that travels with it to the client (and into the admin API's error "code"). Ask
// it with ErrorReasonOf; never parse a status message (its text is for people and may change).
//
// The values are part of the wire protocol: never renumber one, only add at the end.
enum class ErrorReason : uint8_t {
  kNone = 0,  // no specific reason: the status code says it all (also for OK)
  // RESOURCE_EXHAUSTED: the put would take the tenant past its effective quota, or the tenant
  // is over quota (its quota was lowered below what it holds). Free space or raise the quota.
  kQuotaExceeded = 1,
  // RESOURCE_EXHAUSTED: strict multi-tenant mode and the tenant has no quota policy.
  kTenantNotRegistered = 2,
  // RESOURCE_EXHAUSTED: the tenant was removed from the policy; reads and removes still work.
  kAdmissionClosed = 3,
  // FAILED_PRECONDITION: a tenant call on a master without multi-tenant quota.
  kUnavailableInCurrentMode = 4,
  // NOT_FOUND: the tenant has no quota policy (admin API).
  kTenantNotFound = 5,
  // FAILED_PRECONDITION: the tenant still owns objects or charged bytes (admin API delete).
  kTenantNotEmpty = 6,
  // UNAVAILABLE: this master is a standby; ask the active one (admin API).
  kNotActive = 7,
  // INVALID_ARGUMENT: a tenant id that is not a valid name (admin API).
  kInvalidTenantId = 8,
  // FAILED_PRECONDITION: a read of the key is in flight (a read lease is held), so a Remove
  // without force is refused. Retry after the read, or remove with force (the reader then sees
  // a removed object, never wrong bytes: reads are fenced by allocation headers).
  kHasLease = 9,
  // INVALID_ARGUMENT: CUDA device (or managed) memory that this process's device backend
  // cannot copy (the `none` backend, or a buffer whose first and last bytes lie in different
  // memory), given to RegisterBuffer, PutFrom, GetInto, the region calls or their batch forms.
  // No byte of it was touched.
  kDevicePointer = 10,
  // UNAVAILABLE: this master does not lead (a standby, or a leader that fenced itself); the
  // message names the active master's RPC address when it is known. Connect there and retry.
  kNotLeader = 11,
};

// The reason `status` carries; kNone for OK and for an error without one.
ErrorReason ErrorReasonOf(const absl::Status& status);

// The reason's name, as the admin API shows it in an error's "code": "QUOTA_EXCEEDED",
// "TENANT_NOT_REGISTERED", ...; "NONE" for kNone and "UNKNOWN" for a value not listed above.
const char* ErrorReasonName(ErrorReason reason);

}  // namespace granary
