#include "client/registrations.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "transport/context.h"

namespace granary::client {
namespace {

class RegistrationsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto ctx = transport::Context::Create("registrations_test");
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    ctx_ = std::move(*ctx);
    regs_ = std::make_unique<Registrations>(ctx_.get(), "client/test", "worker-address");
  }
  void TearDown() override {
    regs_.reset();
    ctx_.reset();
  }
  std::unique_ptr<transport::Context> ctx_;
  std::unique_ptr<Registrations> regs_;
  std::vector<char> buffer_ = std::vector<char>(1 << 16);
};

TEST_F(RegistrationsTest, LookupFindsTheBufferHoldingARange) {
  ASSERT_TRUE(regs_->Register(buffer_.data(), buffer_.size()).ok());
  EXPECT_EQ(regs_->Register(buffer_.data(), buffer_.size()).code(),
            absl::StatusCode::kAlreadyExists);
  Registrations::Pins pins(regs_.get());
  RegisteredRange inside = regs_->Lookup(buffer_.data() + 100, 4096, &pins);
  ASSERT_TRUE(inside.registered());
  EXPECT_NE(inside.memh, nullptr);
  RegisteredRange past = regs_->Lookup(buffer_.data() + buffer_.size() - 10, 4096, &pins);
  EXPECT_FALSE(past.registered());
  EXPECT_EQ(past.memh, nullptr);
  char other[64];
  EXPECT_FALSE(regs_->Lookup(other, sizeof(other), &pins).registered());

  proto::SegmentInfo target = regs_->PushTarget(inside);
  EXPECT_EQ(target.segment_id, inside.id);
  EXPECT_EQ(target.node_address, "client/test");
  EXPECT_EQ(target.worker_address, "worker-address");
  EXPECT_EQ(target.base, reinterpret_cast<uint64_t>(buffer_.data()));
  EXPECT_EQ(target.size, buffer_.size());
  EXPECT_FALSE(target.rkey.empty());
  pins.Release();
  EXPECT_TRUE(regs_->Unregister(buffer_.data()).ok());
  EXPECT_EQ(regs_->Unregister(buffer_.data()).code(), absl::StatusCode::kNotFound);
}

TEST_F(RegistrationsTest, IdsAreNeverReused) {
  ASSERT_TRUE(regs_->Register(buffer_.data(), buffer_.size()).ok());
  Registrations::Pins pins(regs_.get());
  uint64_t first = regs_->Lookup(buffer_.data(), 1, &pins).id;
  pins.Release();
  ASSERT_TRUE(regs_->Unregister(buffer_.data()).ok());
  ASSERT_TRUE(regs_->Register(buffer_.data(), buffer_.size()).ok());
  EXPECT_NE(regs_->Lookup(buffer_.data(), 1, &pins).id, first);
}

// Fails without in-use tracking: Unregister then returns (and unmaps the buffer) while a
// transfer still holds it.
TEST_F(RegistrationsTest, UnregisterWaitsForTheTransfersUsingTheBuffer) {
  ASSERT_TRUE(regs_->Register(buffer_.data(), buffer_.size()).ok());
  auto pins = std::make_unique<Registrations::Pins>(regs_.get());
  ASSERT_TRUE(regs_->Lookup(buffer_.data(), 4096, pins.get()).registered());
  ASSERT_TRUE(regs_->Lookup(buffer_.data() + 4096, 4096, pins.get()).registered());

  std::atomic<bool> returned{false};
  std::thread unregister([&] {
    EXPECT_TRUE(regs_->Unregister(buffer_.data()).ok());
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(returned.load()) << "Unregister returned while the buffer was in use";
  // A lookup made while it waits no longer finds the buffer: new transfers go unregistered.
  Registrations::Pins later(regs_.get());
  EXPECT_FALSE(regs_->Lookup(buffer_.data(), 4096, &later).registered());
  pins.reset();  // the batch ends
  unregister.join();
  EXPECT_TRUE(returned.load());
  EXPECT_EQ(regs_->Unregister(buffer_.data()).code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace granary::client
