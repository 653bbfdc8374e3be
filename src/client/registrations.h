#pragma once

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "proto/messages.h"
#include "transport/context.h"
#include "transport/memory.h"

namespace granary::client {

// One registered buffer. Its fields but in_use and closing are immutable once registered.
struct Registration {
  std::unique_ptr<transport::MemoryRegion> region;
  uint64_t id = 0;   // never reused in one client
  std::string rkey;  // packed, for nodes that push into it
  // Guarded by the owning Registrations' mu_ (not annotated: the lock is another class's).
  int in_use = 0;        // pins held by batches
  bool closing = false;  // Unregister waits for in_use == 0; lookups skip it
};

// What a transfer needs of the registered buffer holding a range. All empty (memh null, id 0)
// when no registered buffer holds it; UCX then registers the memory itself.
struct RegisteredRange {
  ucp_mem_h memh = nullptr;
  uint64_t id = 0;  // the registration's id, never reused in one client; 0 = none
  // The registration itself, for PushTarget. Valid while the Pins that returned it live.
  const Registration* registration = nullptr;
  bool registered() const { return id != 0; }
};

// The buffers a client registered with UCX (Client::RegisterBuffer), and which of them
// transfers are using right now.
//
// Owned by the client; lives as long as it and must be destroyed before the transport Context.
// Thread-safe. Lookups pin the registration they find into a Pins object (one per batch); the
// pins are dropped together when it is destroyed, and Unregister waits until no pin holds the
// buffer. Cost per lookup: one lock and a map search (as before pins existed); per batch that
// found a registered buffer, one more lock to drop the pins. No allocation unless one batch
// uses more than four registered buffers.
class Registrations {
 public:
  // The registrations one batch is using. Not thread-safe: one batch, one thread.
  class Pins {
   public:
    explicit Pins(Registrations* owner) : owner_(owner) {}
    ~Pins() { Release(); }
    Pins(const Pins&) = delete;
    Pins& operator=(const Pins&) = delete;
    // Drops every pin now (the destructor does it too).
    void Release();

   private:
    friend class Registrations;
    Registrations* owner_;
    // Each registration once, with how many lookups pinned it.
    absl::InlinedVector<std::pair<Registration*, int>, 4> held_;
  };

  // push_name and worker_address: this client as a node's RmaEngine names it when it pushes
  // (PushTarget).
  Registrations(transport::Context* ctx, std::string push_name, std::string worker_address)
      : ctx_(ctx), push_name_(std::move(push_name)), worker_address_(std::move(worker_address)) {}
  ~Registrations();
  Registrations(const Registrations&) = delete;
  Registrations& operator=(const Registrations&) = delete;

  // ALREADY_EXISTS when a buffer starting at `data` is registered.
  [[nodiscard]] absl::Status Register(void* data, size_t size);
  // Waits until no batch uses the buffer (lookups made after the call began no longer find
  // it), then deregisters it. NOT_FOUND when no buffer starting at `data` is registered.
  [[nodiscard]] absl::Status Unregister(void* data);

  // The registered buffer holding [p, p + n), pinned into *pins; or an empty range.
  RegisteredRange Lookup(const void* p, size_t n, Pins* pins);
  // That buffer as a node sees it for a Push (its id, rkey and range, this client's worker).
  // `range` must be registered and its pins alive. No lock.
  proto::SegmentInfo PushTarget(const RegisteredRange& range) const;

 private:
  void Unpin(Pins* pins);

  transport::Context* const ctx_;
  const std::string push_name_;
  const std::string worker_address_;
  granary::common::Mutex mu_;
  std::map<uintptr_t, Registration> registered_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
};

}  // namespace granary::client
