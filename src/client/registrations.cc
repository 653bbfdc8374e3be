#include "client/registrations.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "transport/rma.h"

namespace granary::client {

Registrations::~Registrations() {
  granary::common::MutexLock lock(&mu_);
  registered_.clear();
}

absl::Status Registrations::Register(void* data, size_t size) {
  GRANARY_ASSIGN_OR_RETURN(auto region, transport::MemoryRegion::Create(ctx_, data, size));
  granary::common::MutexLock lock(&mu_);
  auto key = reinterpret_cast<uintptr_t>(data);
  if (registered_.contains(key)) {
    return absl::AlreadyExistsError(
        absl::StrCat("buffer at 0x", absl::Hex(key), " is already registered"));
  }
  GRANARY_ASSIGN_OR_RETURN(std::string rkey, region->PackRkey());
  Registration& r = registered_[key];
  r.region = std::move(region);
  r.id = next_id_++;
  r.rkey = std::move(rkey);
  return absl::OkStatus();
}

absl::Status Registrations::Unregister(void* data) {
  granary::common::MutexLock lock(&mu_);
  auto key = reinterpret_cast<uintptr_t>(data);
  auto it = registered_.find(key);
  if (it == registered_.end() || it->second.closing) {
    return absl::NotFoundError(absl::StrCat("buffer at 0x", absl::Hex(key), " is not registered"));
  }
  Registration* r = &it->second;
  r->closing = true;
  // Released while it waits; Unpin's unlock re-evaluates the condition.
  mu_.AwaitWithTimeout(absl::Condition(
                           +[](Registration* reg) { return reg->in_use == 0; }, r),
                       absl::InfiniteDuration());
  registered_.erase(key);
  return absl::OkStatus();
}

RegisteredRange Registrations::Lookup(const void* p, size_t n, Pins* pins) {
  granary::common::MutexLock lock(&mu_);
  auto it = registered_.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == registered_.begin()) return {};
  --it;
  Registration& r = it->second;
  if (r.closing || !r.region->Contains(p, n)) return {};
  ++r.in_use;
  auto held = std::find_if(pins->held_.begin(), pins->held_.end(),
                           [&](const auto& h) { return h.first == &r; });
  if (held != pins->held_.end()) {
    ++held->second;
  } else {
    pins->held_.emplace_back(&r, 1);
  }
  return {r.region->memh(), r.id, &r};
}

proto::SegmentInfo Registrations::PushTarget(const RegisteredRange& range) const {
  const Registration* r = range.registration;
  proto::SegmentInfo dest;
  dest.segment_id = r->id;
  dest.node_address = push_name_;
  dest.base = reinterpret_cast<uint64_t>(r->region->addr());
  dest.size = r->region->length();
  dest.rkey = r->rkey;
  dest.worker_address = worker_address_;
  dest.host_id = transport::LocalHostId();
  return dest;
}

void Registrations::Unpin(Pins* pins) {
  granary::common::MutexLock lock(&mu_);
  for (auto& [r, count] : pins->held_) r->in_use -= count;
}

void Registrations::Pins::Release() {
  if (held_.empty()) return;
  owner_->Unpin(this);
  held_.clear();
}

}  // namespace granary::client
