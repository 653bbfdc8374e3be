// One put's wait for the engine (engine_order.h).

#include "client/engine_order.h"

#include "absl/strings/str_cat.h"

namespace granary::client {

absl::StatusOr<std::unique_ptr<EngineOrder>> EngineOrder::Create(const DeviceWait& wait,
                                                                 int device) {
  std::unique_ptr<EngineOrder> order(new EngineOrder(&device::ActiveRuntime()));
  order->caller_event_ = wait.event;
  if (wait.stream == nullptr) return order;
  if (device >= 0) {
    absl::StatusOr<void*> event = order->backend_->CreateEvent(device);
    if (event.ok()) {
      if (order->backend_->RecordEvent(*event, wait.stream).ok()) {
        order->own_event_ = *event;
        return order;
      }
      order->backend_->DestroyEvent(*event);
    }
  }
  order->sync_stream_ = wait.stream;
  return order;
}

EngineOrder::~EngineOrder() {
  if (own_event_ != nullptr) backend_->DestroyEvent(own_event_);
}

absl::Status EngineOrder::Named(const absl::Status& st, const char* what) const {
  if (st.ok()) return st;
  return absl::Status(st.code(),
                      absl::StrCat("waiting for the engine's ", what, " (DeviceWait) on the ",
                                   backend_->Name(), " backend: ", st.message()));
}

absl::Status EngineOrder::Before(void* stream) {
  if (done_) return absl::OkStatus();
  if (stream == nullptr || sync_stream_ != nullptr) return OnHost();
  for (void* event : {own_event_, caller_event_}) {
    if (event == nullptr) continue;
    absl::Status st = Named(backend_->StreamWaitEvent(stream, event), "event");
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status EngineOrder::OnHost() {
  if (done_) return absl::OkStatus();
  if (sync_stream_ != nullptr) {
    if (absl::Status st = Named(backend_->SynchronizeStream(sync_stream_), "stream"); !st.ok()) {
      return st;
    }
  }
  for (void* event : {own_event_, caller_event_}) {
    if (event == nullptr) continue;
    if (absl::Status st = Named(backend_->WaitEvent(event), "event"); !st.ok()) return st;
  }
  done_ = true;
  return absl::OkStatus();
}

}  // namespace granary::client
