// The second process of the device backend tests (backend_conformance.h): IPC needs two real
// processes, and the backend choice from the environment needs a fresh one.
//
//   backend_ipc_helper open   BACKEND DEVICE BLOB_HEX BYTES SEED
//       OpenIpc the blob, check that its BYTES bytes are Pattern(SEED), overwrite them with
//       Pattern(SEED + 1), CloseIpc. Exit 0 when all of that worked.
//   backend_ipc_helper export BACKEND BYTES SEED
//       Alloc BYTES on device 0, fill with Pattern(SEED), print the ExportIpc blob in hex and a
//       newline, then obey stdin lines: "check SEED2" (print "ok" or "bad" for whether the
//       allocation now holds Pattern(SEED2)), "free" (free it, print "freed"); exit at EOF.
//   backend_ipc_helper active
//       Print ActiveBackendName() and then the status of Alloc(0, 64) on the active backend.
//   backend_ipc_helper classify
//       Print ActiveBackendName() and then the kinds the active backend gives a stack and a heap
//       address (MemoryKindName), one per line; allocates nothing on the backend.
// Failures print one line to stderr and exit 1; bad usage exits 2.

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "device/device_backend.h"
#include "device/fake/fake_backend.h"
#include "tests/unit/device/backend_pattern.h"

namespace granary::device {
namespace {

int Fail(const std::string& what, const absl::Status& status) {
  std::cerr << what << ": " << status << "\n";
  return 1;
}

DeviceBackend* MakeBackend(const std::string& name, std::unique_ptr<FakeBackend>* owned) {
  if (name == "cuda") return CudaBackend();
  absl::StatusOr<std::unique_ptr<FakeBackend>> fake = FakeBackend::Create(FakeOptions{});
  if (!fake.ok()) return nullptr;
  *owned = std::move(*fake);
  return owned->get();
}

int Open(DeviceBackend& backend, int device, const std::string& blob_hex, size_t bytes,
         uint8_t seed) {
  std::string blob;
  if (!testing::FromHex(blob_hex, &blob)) {
    return Fail("open", absl::InvalidArgumentError("blob is not hex"));
  }
  absl::StatusOr<void*> mapped = backend.runtime().OpenIpc(device, blob);
  if (!mapped.ok()) return Fail("OpenIpc", mapped.status());
  std::vector<unsigned char> got(bytes);
  if (absl::Status s =
          backend.runtime().Copy(device, got.data(), *mapped, bytes, CopyKind::kDeviceToHost);
      !s.ok()) {
    return Fail("copy out of the mapping", s);
  }
  if (got != testing::Pattern(bytes, seed)) {
    return Fail("open", absl::DataLossError("the mapping does not hold the exported bytes"));
  }
  const std::vector<unsigned char> next = testing::Pattern(bytes, seed + 1);
  if (absl::Status s =
          backend.runtime().Copy(device, *mapped, next.data(), bytes, CopyKind::kHostToDevice);
      !s.ok()) {
    return Fail("copy into the mapping", s);
  }
  if (absl::Status s = backend.runtime().CloseIpc(*mapped); !s.ok()) return Fail("CloseIpc", s);
  return 0;
}

int Export(DeviceBackend& backend, size_t bytes, uint8_t seed) {
  absl::StatusOr<void*> p = backend.runtime().Alloc(0, bytes);
  if (!p.ok()) return Fail("Alloc", p.status());
  const std::vector<unsigned char> pattern = testing::Pattern(bytes, seed);
  if (absl::Status s =
          backend.runtime().Copy(0, *p, pattern.data(), bytes, CopyKind::kHostToDevice);
      !s.ok()) {
    return Fail("fill", s);
  }
  absl::StatusOr<std::string> blob = backend.runtime().ExportIpc(*p);
  if (!blob.ok()) return Fail("ExportIpc", blob.status());
  std::cout << absl::BytesToHexString(*blob) << std::endl;
  std::string command;
  while (std::cin >> command) {
    if (command == "check") {
      int seed2 = 0;
      std::cin >> seed2;
      std::vector<unsigned char> got(bytes);
      const bool ok =
          backend.runtime().Copy(0, got.data(), *p, bytes, CopyKind::kDeviceToHost).ok() &&
          got == testing::Pattern(bytes, static_cast<uint8_t>(seed2));
      std::cout << (ok ? "ok" : "bad") << std::endl;
    } else if (command == "free") {
      backend.runtime().Free(0, *p);
      std::cout << "freed" << std::endl;
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && args[0] == "active") {
    std::cout << ActiveBackendName() << "\n"
              << ActiveBackend().runtime().Alloc(0, 64).status() << std::endl;
    return 0;
  }
  if (args.size() == 1 && args[0] == "classify") {
    int on_stack = 0;
    const std::vector<unsigned char> heap(4096);
    std::cout << ActiveBackendName() << "\n"
              << MemoryKindName(ActiveBackend().runtime().Classify(&on_stack).kind) << "\n"
              << MemoryKindName(ActiveBackend().runtime().Classify(heap.data()).kind) << std::endl;
    return 0;
  }
  std::unique_ptr<FakeBackend> owned;
  DeviceBackend* backend = args.size() >= 2 ? MakeBackend(args[1], &owned) : nullptr;
  if (backend == nullptr) {
    std::cerr << "usage: see the comment at the top of backend_ipc_helper.cc\n";
    return 2;
  }
  if (args[0] == "open" && args.size() == 6) {
    return Open(*backend, std::atoi(args[2].c_str()), args[3],
                std::strtoull(args[4].c_str(), nullptr, 10),
                static_cast<uint8_t>(std::atoi(args[5].c_str())));
  }
  if (args[0] == "export" && args.size() == 4) {
    return Export(*backend, std::strtoull(args[2].c_str(), nullptr, 10),
                  static_cast<uint8_t>(std::atoi(args[3].c_str())));
  }
  std::cerr << "usage: see the comment at the top of backend_ipc_helper.cc\n";
  return 2;
}

}  // namespace
}  // namespace granary::device

int main(int argc, char** argv) { return granary::device::Main(argc, argv); }
