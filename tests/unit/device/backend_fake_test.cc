// The fake device backend: the shared backend bodies (backend_conformance.h), and what only the
// fake has: memory the CPU cannot touch, the delay knob, strict pinned mode, injected faults,
// exporter death, and the backend choice from the environment.

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/config.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "device/checksum.h"
#include "device/device.h"
#include "device/device_backend.h"
#include "device/driver_api.h"
#include "device/fake/fake_backend.h"
#include "tests/unit/device/backend_conformance.h"
#include "tests/unit/device/backend_pattern.h"

namespace granary::device {
namespace {

std::unique_ptr<FakeBackend> NewFake(const FakeOptions& options = {}) {
  absl::StatusOr<std::unique_ptr<FakeBackend>> fake = FakeBackend::Create(options);
  EXPECT_TRUE(fake.ok()) << fake.status();
  return fake.ok() ? std::move(*fake) : nullptr;
}

struct FakeTraits {
  static constexpr char kName[] = "fake";
  static DeviceBackend* Make(std::unique_ptr<DeviceBackend>* owned) {
    *owned = NewFake();
    return owned->get();
  }
};

INSTANTIATE_TYPED_TEST_SUITE_P(Fake, BackendTest, ::testing::Types<FakeTraits>);

// An exporter in another process: a helper that allocates, fills with Pattern(seed), exports and
// waits for commands on stdin.
struct Exporter {
  explicit Exporter(size_t bytes, uint8_t seed)
      : child({IpcHelper(), "export", "fake", std::to_string(bytes), std::to_string(seed)}) {
    std::string hex = child.ReadLine();
    EXPECT_TRUE(testing::FromHex(hex, &blob)) << "helper said: " << hex;
  }
  testing::Child child;
  std::string blob;
};

// The deliberately wrong path: a CPU memcpy out of a device pointer, which is what
// RmaEngine::CopyMapped would do with one. On a GPU it faults; the fake must fault too.
void CpuCopyFromDevicePointer(const void* device_ptr) {
  unsigned char host[64];
  std::memcpy(host, device_ptr, sizeof(host));
  // Keep the copy from being optimized away.
  asm volatile("" : : "r"(host) : "memory");
}

TEST(FakeBackendDeathTest, ACpuTouchOfDeviceMemoryCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::unique_ptr<FakeBackend> fake = NewFake();
  absl::StatusOr<void*> dev = fake->runtime().Alloc(0, 4096);
  ASSERT_TRUE(dev.ok()) << dev.status();
  // The backend itself reads it fine through its alias...
  std::vector<unsigned char> out(64);
  ASSERT_TRUE(fake->runtime().Copy(0, out.data(), *dev, 64, CopyKind::kDeviceToHost).ok());
  // ...and so does its checksum...
  uint64_t sum = 0;
  const ChecksumRegion region{*dev, 64};
  ASSERT_TRUE(fake->kernels().BatchChecksum(0, &region, 1, &sum, nullptr).ok());
  EXPECT_EQ(sum, ChecksumCpu(out.data(), 64));
  // ...and the CPU faults on the device pointer, a memcpy or the CPU checksum alike.
  const auto cpu_checksum = [p = *dev] {
    volatile uint64_t v = ChecksumCpu(p, 64);
    (void)v;
  };
#if defined(ABSL_HAVE_THREAD_SANITIZER) || defined(ABSL_HAVE_ADDRESS_SANITIZER)
  // The sanitizer catches the signal, reports it and exits.
  EXPECT_DEATH(CpuCopyFromDevicePointer(*dev), "SEGV");
  EXPECT_DEATH(cpu_checksum(), "SEGV");
#else
  EXPECT_EXIT(CpuCopyFromDevicePointer(*dev), ::testing::KilledBySignal(SIGSEGV), "");
  EXPECT_EXIT(cpu_checksum(), ::testing::KilledBySignal(SIGSEGV), "");
#endif
  fake->runtime().Free(0, *dev);
}

TEST(FakeBackend, TheDelayKnobKeepsAnEventPending) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  fake->SetOpDelay(absl::Milliseconds(200));
  absl::StatusOr<void*> dev = fake->runtime().Alloc(0, 4096);
  absl::StatusOr<void*> stream = fake->runtime().CreateStream(0);
  absl::StatusOr<void*> event = fake->runtime().CreateEvent(0);
  ASSERT_TRUE(dev.ok() && stream.ok() && event.ok());
  const std::vector<unsigned char> fresh = testing::Pattern(4096, 5);
  ASSERT_TRUE(fake->runtime().CopyAsync(*stream, *dev, fresh.data(), fresh.size()).ok());
  ASSERT_TRUE(fake->runtime().RecordEvent(*event, *stream).ok());
  absl::StatusOr<bool> done = fake->runtime().EventDone(*event);
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done) << "a 200 ms delay elapsed between two calls";
  ASSERT_TRUE(fake->runtime().WaitEvent(*event).ok());
  done = fake->runtime().EventDone(*event);
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  std::vector<unsigned char> back(4096);
  ASSERT_TRUE(
      fake->runtime().Copy(0, back.data(), *dev, back.size(), CopyKind::kDeviceToHost).ok());
  EXPECT_EQ(back, fresh);
  fake->runtime().DestroyEvent(*event);
  fake->runtime().DestroyStream(*stream);
  fake->runtime().Free(0, *dev);
}

// The engine stream (FakeBackend::CreateEngineStream): a write enqueued on it stays invisible
// until the stream is synchronized, an event recorded on it is waited for (by the host or by
// another stream), or its hold passes.
TEST(FakeBackend, AnEngineStreamsWritesLandOnlyWhenWaitedFor) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  absl::StatusOr<void*> dev = fake->runtime().Alloc(0, 4096);
  absl::StatusOr<void*> engine = fake->CreateEngineStream(0, absl::Seconds(60));
  absl::StatusOr<void*> ours = fake->runtime().CreateStream(0);
  absl::StatusOr<void*> event = fake->runtime().CreateEvent(0);
  ASSERT_TRUE(dev.ok() && engine.ok() && ours.ok() && event.ok());
  const std::vector<unsigned char> old(4096, 0x11);
  ASSERT_TRUE(fake->runtime().Copy(0, *dev, old.data(), old.size(), CopyKind::kHostToDevice).ok());
  std::vector<unsigned char> back(4096);
  const auto read = [&] {
    EXPECT_TRUE(
        fake->runtime().Copy(0, back.data(), *dev, back.size(), CopyKind::kDeviceToHost).ok());
    return back;
  };
  // Synchronizing the engine stream releases its write.
  const std::vector<unsigned char> one = testing::Pattern(4096, 1);
  ASSERT_TRUE(fake->runtime().CopyAsync(*engine, *dev, one.data(), one.size()).ok());
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(read(), old) << "a held write landed before anyone waited for it";
  ASSERT_TRUE(fake->runtime().SynchronizeStream(*engine).ok());
  EXPECT_EQ(read(), one);
  // Another stream waiting for an event recorded on it releases the write before its copy.
  const std::vector<unsigned char> two = testing::Pattern(4096, 2);
  ASSERT_TRUE(fake->runtime().CopyAsync(*engine, *dev, two.data(), two.size()).ok());
  ASSERT_TRUE(fake->runtime().RecordEvent(*event, *engine).ok());
  absl::StatusOr<bool> done = fake->runtime().EventDone(*event);
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done) << "querying the event must not release the engine's work";
  std::vector<unsigned char> seen(4096);
  ASSERT_TRUE(fake->runtime().StreamWaitEvent(*ours, *event).ok());
  ASSERT_TRUE(fake->runtime().CopyAsync(*ours, seen.data(), *dev, seen.size()).ok());
  ASSERT_TRUE(fake->runtime().SynchronizeStream(*ours).ok());
  EXPECT_EQ(seen, two);
  // A host wait for the event does the same.
  const std::vector<unsigned char> three = testing::Pattern(4096, 3);
  ASSERT_TRUE(fake->runtime().CopyAsync(*engine, *dev, three.data(), three.size()).ok());
  ASSERT_TRUE(fake->runtime().RecordEvent(*event, *engine).ok());
  ASSERT_TRUE(fake->runtime().WaitEvent(*event).ok());
  EXPECT_EQ(read(), three);
  fake->runtime().DestroyStream(*engine);
  // Unwaited, a write lands once its hold has passed.
  absl::StatusOr<void*> quick = fake->CreateEngineStream(0, absl::Milliseconds(100));
  ASSERT_TRUE(quick.ok());
  const std::vector<unsigned char> four = testing::Pattern(4096, 4);
  ASSERT_TRUE(fake->runtime().CopyAsync(*quick, *dev, four.data(), four.size()).ok());
  EXPECT_EQ(read(), three);
  absl::SleepFor(absl::Milliseconds(400));
  EXPECT_EQ(read(), four);
  EXPECT_FALSE(fake->CreateEngineStream(0, absl::Milliseconds(-1)).ok());
  fake->runtime().DestroyStream(*quick);
  fake->runtime().DestroyStream(*ours);
  fake->runtime().DestroyEvent(*event);
  fake->runtime().Free(0, *dev);
}

TEST(FakeBackend, StrictPinnedModeRefusesPageableMemoryOnStreams) {
  FakeOptions options;
  options.strict_pinned = true;
  std::unique_ptr<FakeBackend> fake = NewFake(options);
  absl::StatusOr<void*> dev = fake->runtime().Alloc(0, 4096);
  absl::StatusOr<void*> stream = fake->runtime().CreateStream(0);
  absl::StatusOr<void*> pinned = fake->runtime().HostAllocPinned(4096);
  ASSERT_TRUE(dev.ok() && stream.ok() && pinned.ok());
  std::vector<unsigned char> pageable(4096, 1);
  absl::Status refused = fake->runtime().CopyAsync(*stream, *dev, pageable.data(), 4096);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "pageable")) << refused;
  EXPECT_EQ(fake->runtime().CopyAsync(*stream, pageable.data(), *dev, 4096).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fake->runtime().CopyAsync(*stream, *dev, *pinned, 4096).ok());
  // Partly registered memory is still pageable where it matters.
  ASSERT_TRUE(fake->runtime().HostRegister(pageable.data(), 2048).ok());
  EXPECT_EQ(fake->runtime().CopyAsync(*stream, *dev, pageable.data(), 4096).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(fake->runtime().CopyAsync(*stream, *dev, pageable.data(), 2048).ok());
  ASSERT_TRUE(fake->runtime().HostUnregister(pageable.data()).ok());
  ASSERT_TRUE(fake->runtime().HostRegister(pageable.data(), pageable.size()).ok());
  EXPECT_TRUE(fake->runtime().CopyAsync(*stream, *dev, pageable.data(), 4096).ok());
  ASSERT_TRUE(fake->runtime().SynchronizeStream(*stream).ok());
  ASSERT_TRUE(fake->runtime().HostUnregister(pageable.data()).ok());
  // The synchronous setup copies keep accepting pageable memory.
  EXPECT_TRUE(fake->runtime().Copy(0, *dev, pageable.data(), 4096, CopyKind::kHostToDevice).ok());
  fake->SetStrictPinned(false);
  EXPECT_TRUE(fake->runtime().CopyAsync(*stream, *dev, pageable.data(), 4096).ok());
  ASSERT_TRUE(fake->runtime().SynchronizeStream(*stream).ok());
  fake->runtime().DestroyStream(*stream);
  fake->runtime().HostFreePinned(*pinned);
  fake->runtime().Free(0, *dev);
}

TEST(FakeBackend, TheNthAllocationFails) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  fake->FailNthAllocation(2);
  absl::StatusOr<void*> first = fake->runtime().Alloc(0, 64);
  absl::StatusOr<void*> second = fake->runtime().AllocManaged(0, 64);
  absl::StatusOr<void*> third = fake->runtime().Alloc(0, 64);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
  ASSERT_TRUE(third.ok()) << third.status();
  fake->runtime().Free(0, *first);
  fake->runtime().Free(0, *third);
}

TEST(FakeBackend, AStickyCopyErrorBreaksEveryLaterCopy) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  absl::StatusOr<void*> dev = fake->runtime().Alloc(0, 4096);
  absl::StatusOr<void*> stream = fake->runtime().CreateStream(0);
  ASSERT_TRUE(dev.ok() && stream.ok());
  std::vector<unsigned char> host(4096, 3);
  ASSERT_TRUE(fake->runtime().CopyAsync(*stream, *dev, host.data(), 4096).ok());
  ASSERT_TRUE(fake->runtime().SynchronizeStream(*stream).ok());
  fake->InjectStickyCopyError();
  // Like an illegal address: the enqueue succeeds, the error shows at the synchronize...
  ASSERT_TRUE(fake->runtime().CopyAsync(*stream, *dev, host.data(), 4096).ok());
  absl::Status sync = fake->runtime().SynchronizeStream(*stream);
  EXPECT_EQ(sync.code(), absl::StatusCode::kInternal) << sync;
  EXPECT_TRUE(absl::StrContains(sync.message(), "illegal memory access")) << sync;
  // ...and then everywhere, for good.
  EXPECT_EQ(fake->runtime().CopyAsync(*stream, *dev, host.data(), 4096).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(fake->runtime().Copy(0, host.data(), *dev, 4096, CopyKind::kDeviceToHost).code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(fake->runtime().SynchronizeStream(*stream).code(), absl::StatusCode::kInternal);
  const int32_t id = 0;
  PagedKvLayout l;
  l.num_blocks = l.block_size = l.num_heads = l.head_dim = l.elem_bytes = 1;
  EXPECT_EQ(fake->kernels()
                .GatherBlocks(0, l, *dev, *dev, &id, 1, static_cast<char*>(*dev) + 8, nullptr)
                .code(),
            absl::StatusCode::kInternal);
  fake->runtime().DestroyStream(*stream);
  fake->runtime().Free(0, *dev);
}

TEST(FakeBackend, AnInjectedIpcOpenFailureFailsOnce) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  Exporter exporter(5000, 40);
  ASSERT_FALSE(exporter.blob.empty());
  fake->FailNextIpcOpen();
  absl::StatusOr<void*> failed = fake->runtime().OpenIpc(0, exporter.blob);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal) << failed.status();
  EXPECT_TRUE(absl::StrContains(failed.status().message(), "injected")) << failed.status();
  absl::StatusOr<void*> mapped = fake->runtime().OpenIpc(0, exporter.blob);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_EQ(fake->runtime().Classify(*mapped).kind, MemoryKind::kDevice);
  std::vector<unsigned char> got(5000);
  ASSERT_TRUE(
      fake->runtime().Copy(0, got.data(), *mapped, got.size(), CopyKind::kDeviceToHost).ok());
  EXPECT_EQ(got, testing::Pattern(5000, 40));
  // Writes through the mapping reach the exporter.
  const std::vector<unsigned char> next = testing::Pattern(5000, 41);
  ASSERT_TRUE(
      fake->runtime().Copy(0, *mapped, next.data(), next.size(), CopyKind::kHostToDevice).ok());
  exporter.child.WriteLine("check 41");
  EXPECT_EQ(exporter.child.ReadLine(), "ok");
  ASSERT_TRUE(fake->runtime().CloseIpc(*mapped).ok());
  EXPECT_EQ(fake->runtime().CloseIpc(*mapped).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FakeBackend, OpeningTheHandleOfADeadExporterFails) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  std::string blob;
  {
    Exporter exporter(4096, 50);
    blob = exporter.blob;
    exporter.child.CloseStdin();
    ASSERT_EQ(exporter.child.Wait(), 0);
  }
  ASSERT_FALSE(blob.empty());
  absl::StatusOr<void*> mapped = fake->runtime().OpenIpc(0, blob);
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kUnavailable) << mapped.status();
  EXPECT_TRUE(absl::StrContains(mapped.status().message(), "has exited")) << mapped.status();
}

TEST(FakeBackend, OpeningTheHandleOfAFreedAllocationFails) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  Exporter exporter(4096, 60);
  ASSERT_FALSE(exporter.blob.empty());
  exporter.child.WriteLine("free");
  ASSERT_EQ(exporter.child.ReadLine(), "freed");
  absl::StatusOr<void*> mapped = fake->runtime().OpenIpc(0, exporter.blob);
  EXPECT_EQ(mapped.status().code(), absl::StatusCode::kUnavailable) << mapped.status();
  EXPECT_TRUE(absl::StrContains(mapped.status().message(), "freed")) << mapped.status();
}

TEST(FakeBackend, AProcessCannotOpenItsOwnExport) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  absl::StatusOr<void*> dev = fake->runtime().Alloc(0, 4096);
  ASSERT_TRUE(dev.ok());
  absl::StatusOr<std::string> blob = fake->runtime().ExportIpc(*dev);
  ASSERT_TRUE(blob.ok()) << blob.status();
  EXPECT_EQ(fake->runtime().OpenIpc(0, *blob).status().code(), absl::StatusCode::kInvalidArgument);
  fake->runtime().Free(0, *dev);
}

TEST(FakeBackend, DevicesHaveTheirOwnUuidsAndOptionsAreChecked) {
  FakeOptions options;
  options.device_count = 3;
  std::unique_ptr<FakeBackend> fake = NewFake(options);
  EXPECT_EQ(fake->runtime().DeviceCount(), 3);
  absl::StatusOr<DeviceUuid> a = fake->runtime().DeviceUuidOf(0);
  absl::StatusOr<DeviceUuid> c = fake->runtime().DeviceUuidOf(2);
  ASSERT_TRUE(a.ok() && c.ok());
  EXPECT_NE(*a, *c);
  absl::StatusOr<void*> on_two = fake->runtime().Alloc(2, 64);
  ASSERT_TRUE(on_two.ok());
  EXPECT_EQ(fake->runtime().Classify(*on_two).device, 2);
  fake->runtime().Free(2, *on_two);
  options.device_count = 0;
  absl::StatusOr<std::unique_ptr<FakeBackend>> bad = FakeBackend::Create(options);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "device_count")) << bad.status();
}

TEST(FakeBackend, TheFacadeRunsOnTheActiveBackend) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  DeviceBackend* previous = SetBackendForTesting(fake.get());
  EXPECT_EQ(ActiveBackendName(), "fake");
  EXPECT_TRUE(Available());
  {
    absl::StatusOr<DeviceBuffer> buf = DeviceBuffer::Create(0, 4096);
    ASSERT_TRUE(buf.ok()) << buf.status();
    EXPECT_TRUE(IsDevicePointer(buf->data()));
    const std::vector<unsigned char> fresh = testing::Pattern(4096, 7);
    ASSERT_TRUE(CopyHostToDevice(0, buf->data(), fresh.data(), fresh.size()).ok());
    std::vector<unsigned char> back(4096);
    ASSERT_TRUE(CopyDeviceToHost(0, back.data(), buf->data(), back.size()).ok());
    EXPECT_EQ(back, fresh);
    absl::StatusOr<Stream> stream = Stream::Create(0);
    ASSERT_TRUE(stream.ok()) << stream.status();
    const CopyRegion region{buf->data(), static_cast<char*>(buf->data()) + 2048, 2048};
    ASSERT_TRUE(BatchCopyGpu(0, &region, 1, stream->handle()).ok());
    ASSERT_TRUE(stream->Synchronize().ok());
    // A copy in the wrong direction is refused: dst of CopyHostToDevice must be device memory.
    EXPECT_EQ(CopyHostToDevice(0, back.data(), fresh.data(), 16).code(),
              absl::StatusCode::kInvalidArgument);
  }
  SetBackendForTesting(previous);
  EXPECT_NE(ActiveBackendName(), "fake");
}

// A poll of an unfinished event leaves nothing in the thread's last-error slot, where the next
// reader on that thread (another library checking its own kernel launch on the engine's thread)
// would take cudaErrorNotReady for its own failure.
TEST(FakeBackend, APollOfAnUnfinishedEventLeavesNoErrorBehind) {
  std::unique_ptr<FakeBackend> fake = NewFake();
  absl::StatusOr<void*> stream = fake->runtime().CreateStream(0);
  absl::StatusOr<void*> event = fake->runtime().CreateEvent(0);
  ASSERT_TRUE(stream.ok() && event.ok());
  granary::common::Notification open;
  ASSERT_TRUE(
      fake->runtime().LaunchHostFunc(*stream, [&open] { open.WaitForNotification(); }).ok());
  ASSERT_TRUE(fake->runtime().RecordEvent(*event, *stream).ok());
  absl::StatusOr<bool> done = fake->runtime().EventDone(*event);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_FALSE(*done);
  EXPECT_TRUE(FakeBackend::PeekAtLastError().ok()) << FakeBackend::PeekAtLastError();
  open.Notify();
  ASSERT_TRUE(fake->runtime().SynchronizeStream(*stream).ok());
  fake->runtime().DestroyEvent(*event);
  fake->runtime().DestroyStream(*stream);
}

TEST(BackendChoice, FollowsTheEnvironmentValue) {
  std::string detail;
  EXPECT_EQ(internal::ChooseBackend("fake", &detail).runtime().Name(), "fake");
  EXPECT_TRUE(absl::StrContains(detail, "GRANARY_DEVICE_BACKEND=fake")) << detail;
  EXPECT_EQ(internal::ChooseBackend("none", &detail).runtime().Name(), "none");
  // Without the driver, neither the default nor "cuda" is ever the fake.
  const bool cuda_usable = CudaBackend() != nullptr && internal::DriverPresent();
  EXPECT_EQ(internal::ChooseBackend(nullptr, &detail).runtime().Name(),
            cuda_usable ? "cuda" : "none")
      << detail;
  EXPECT_EQ(internal::ChooseBackend("", &detail).runtime().Name(), cuda_usable ? "cuda" : "none");
  DeviceBackend& cuda = internal::ChooseBackend("cuda", &detail);
  EXPECT_EQ(cuda.runtime().Name(), cuda_usable ? "cuda" : "none");
  if (!cuda_usable) {
    EXPECT_EQ(cuda.runtime().Alloc(0, 64).status().code(), absl::StatusCode::kFailedPrecondition);
  }

  DeviceBackend& refused = internal::ChooseBackend("gpu", &detail);
  EXPECT_TRUE(absl::StrContains(detail, "'gpu'")) << detail;
  absl::StatusOr<void*> p = refused.runtime().Alloc(0, 64);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << p.status();
  EXPECT_TRUE(absl::StrContains(p.status().message(), "GRANARY_DEVICE_BACKEND='gpu'"))
      << p.status();
  absl::StatusOr<void*> other = internal::ChooseBackend("Fake", &detail).runtime().Alloc(0, 64);
  EXPECT_TRUE(absl::StrContains(other.status().message(), "'Fake'")) << other.status();
}

// Choosing the backend and classifying host memory initialize nothing: no cuInit and no runtime,
// which would create a context on GPU 0 in every client process and make CUDA unusable in a child
// forked afterwards. A fresh process on a stand-in driver that logs every call asks it for
// pointer attributes at most.
TEST(BackendChoice, ChoosingAndClassifyingInitializeNoCuda) {
  const std::string log = absl::StrCat(::testing::TempDir(), "stub_libcuda_", getpid(), ".log");
  std::remove(log.c_str());
  testing::Child child({IpcHelper(), "classify"},
                       {absl::StrCat("LD_LIBRARY_PATH=", GRANARY_STUB_LIBCUDA_DIR),
                        absl::StrCat("GRANARY_STUB_LIBCUDA_LOG=", log)});
  ASSERT_TRUE(child.ok());
  const std::string name = child.ReadLine();
  const std::string stack = child.ReadLine();
  const std::string heap = child.ReadLine();
  ASSERT_EQ(child.Wait(), 0) << child.ReadStderr();
  EXPECT_EQ(stack, "host");
  EXPECT_EQ(heap, "host");
  std::ifstream in(log);
  std::string line, calls;
  while (std::getline(in, line)) {
    if (line != "cuPointerGetAttributes") calls += line + " ";
  }
  EXPECT_EQ(calls, "") << "the driver was initialized (backend " << name << ")";
  // With CUDA built in, the driver being there makes the default the cuda backend.
  EXPECT_EQ(name, BuiltWithCuda() ? "cuda" : "none");
  std::remove(log.c_str());
}

// The real thing, in fresh processes: the variable is read once, at first use, and logged (the
// default choice at debug level only).
TEST(BackendChoice, AFreshProcessReadsAndLogsTheVariable) {
  struct Case {
    std::vector<std::string> env;
    std::string name;
    std::string alloc;  // a substring of Alloc(0, 64)'s status
    std::string log;    // a substring of stderr
    std::string level = "info";
  };
  const bool cuda_usable = CudaBackend() != nullptr && CudaBackend()->runtime().DeviceCount() > 0;
  const std::vector<Case> cases = {
      {{"GRANARY_DEVICE_BACKEND=fake"}, "fake", "OK", "device backend: fake"},
      {{"GRANARY_DEVICE_BACKEND=bogus"},
       "none",
       "GRANARY_DEVICE_BACKEND='bogus'",
       "refused GRANARY_DEVICE_BACKEND='bogus'"},
      {{},
       cuda_usable ? "cuda" : "none",
       cuda_usable ? "OK" : "FAILED_PRECONDITION",
       "the default",
       "debug"},
      // Chosen without being asked, the choice is not printed into a user's program at info.
      {{}, cuda_usable ? "cuda" : "none", cuda_usable ? "OK" : "FAILED_PRECONDITION", ""},
  };
  for (const Case& c : cases) {
    std::vector<std::string> env = c.env;
    env.push_back("GRANARY_LOG_LEVEL=" + c.level);
    testing::Child child({IpcHelper(), "active"}, env);
    ASSERT_TRUE(child.ok());
    const std::string name = child.ReadLine();
    const std::string alloc = child.ReadLine();
    ASSERT_EQ(child.Wait(), 0);
    const std::string log = child.ReadStderr();
    SCOPED_TRACE((c.env.empty() ? "unset" : c.env[0]) + " at " + c.level);
    EXPECT_EQ(name, c.name);
    EXPECT_TRUE(absl::StrContains(alloc, c.alloc)) << alloc;
    if (c.log.empty()) {
      EXPECT_FALSE(absl::StrContains(log, "device backend")) << log;
    } else {
      EXPECT_TRUE(absl::StrContains(log, c.log)) << log;
    }
  }
}

}  // namespace
}  // namespace granary::device
