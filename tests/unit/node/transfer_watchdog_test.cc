#include "node/transfer_watchdog.h"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace granary::node {
namespace {

// What the watchdog did, in order: "hold:<peer>" and "answer:<status code>".
class Journal {
 public:
  void Add(std::string e) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(e));
  }
  std::vector<std::string> events() {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  absl::Mutex mu_;
  std::vector<std::string> events_;
};

struct Answered {
  std::shared_ptr<std::promise<absl::Status>> promise =
      std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> future = promise->get_future();
  TransferWatchdog::Answer Callback(Journal* j) {
    return [p = promise, j](const absl::Status& st) {
      j->Add(absl::StrCat("answer:", absl::StatusCodeToString(st.code())));
      p->set_value(st);  // a second answer would throw std::future_error
    };
  }
};

TransferWatchdog::HoldOff Hold(Journal* j) {
  return [j](const std::vector<std::string>& peers) {
    for (const auto& p : peers) j->Add("hold:" + p);
  };
}

TEST(TransferWatchdog, TransferFinishedInTimeIsAnsweredOnceWithItsStatusAndNobodyIsHeldOff) {
  Journal j;
  TransferWatchdog w(Hold(&j));
  Answered a;
  const uint64_t t = w.Start("push", "client/1", 60'000, a.Callback(&j));
  EXPECT_EQ(w.pending(), 1u);
  EXPECT_TRUE(w.Finish(t, absl::OkStatus()));
  ASSERT_EQ(a.future.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_TRUE(a.future.get().ok());
  EXPECT_FALSE(w.Finish(t, absl::InternalError("again")));  // answered once
  EXPECT_EQ(w.pending(), 0u);
  EXPECT_EQ(w.expired(), 0u);
  EXPECT_EQ(j.events(), (std::vector<std::string>{"answer:OK"}));
}

TEST(TransferWatchdog, OverdueTransferIsHeldOffThenAnsweredDeadlineExceededAndNeverBefore) {
  Journal j;
  TransferWatchdog w(Hold(&j));
  Answered a;
  const auto start = std::chrono::steady_clock::now();
  const uint64_t t = w.Start("push", "client/7", 200, a.Callback(&j));
  ASSERT_EQ(a.future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, std::chrono::milliseconds(200));  // not before its deadline
  const absl::Status st = a.future.get();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_EQ(st.message(),
            "push to client/7 did not finish within 200 ms: the node closed its endpoint to it "
            "and holds it off for a back-off");
  // The peer was closed and held off before the answer went out.
  EXPECT_EQ(j.events(), (std::vector<std::string>{"hold:client/7", "answer:DEADLINE_EXCEEDED"}));
  // The transfer completing late changes nothing: it was answered.
  EXPECT_FALSE(w.Finish(t, absl::OkStatus()));
  EXPECT_EQ(w.pending(), 0u);
  EXPECT_EQ(w.expired(), 1u);
}

TEST(TransferWatchdog, AnEarlierDeadlineStartedLaterFiresFirst) {
  Journal j;
  TransferWatchdog w(Hold(&j));
  Answered slow, fast;
  const uint64_t ts = w.Start("fetch", "node-a", 3'600'000, slow.Callback(&j));
  w.Start("fetch", "node-b", 50, fast.Callback(&j));
  ASSERT_EQ(fast.future.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(fast.future.get().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(slow.future.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  EXPECT_EQ(w.pending(), 1u);
  EXPECT_TRUE(w.Finish(ts, absl::UnavailableError("refused")));
  EXPECT_EQ(slow.future.get().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(j.events(), (std::vector<std::string>{"hold:node-b", "answer:DEADLINE_EXCEEDED",
                                                  "answer:UNAVAILABLE"}));
}

TEST(TransferWatchdog, AfterStopNothingExpiresButFinishStillAnswers) {
  Journal j;
  TransferWatchdog w(Hold(&j));
  Answered a;
  const uint64_t t = w.Start("push", "client/9", 1, a.Callback(&j));
  w.Stop();
  // Whether the 1 ms deadline fired before Stop depends on scheduling; after Stop the transfer
  // is answered exactly once either way.
  const bool answered_by_finish = w.Finish(t, absl::OkStatus());
  ASSERT_EQ(a.future.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(a.future.get().ok(), answered_by_finish);
  w.Stop();  // idempotent
  Answered later;
  const uint64_t t2 = w.Start("push", "client/9", 1, later.Callback(&j));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(later.future.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  EXPECT_TRUE(w.Finish(t2, absl::OkStatus()));
  EXPECT_TRUE(later.future.get().ok());
}

}  // namespace
}  // namespace granary::node
