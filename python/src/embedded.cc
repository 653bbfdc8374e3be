// granary.EmbeddedNode (a storage node inside this process, granary/embedded_node.h) and the
// test hooks of the device-pointer check (granary/device_pointer.h).

#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "bindings.h"
#include "device/device_backend.h"
#include "errors.h"
#include "granary/device_pointer.h"
#include "granary/embedded_node.h"
#include "pybind11/stl.h"

namespace py = pybind11;

namespace granary::python {
namespace {

// Owns one EmbeddedNode. close() (or the destructor) stops it, without the GIL; both are
// idempotent and may race with each other from any threads. address/segment_name stay readable
// after close.
class PyEmbeddedNode {
 public:
  PyEmbeddedNode(const std::string& master, uint64_t segment_size, const std::string& hostname,
                 uint16_t port, const std::optional<std::string>& cluster_id) {
    EmbeddedNodeOptions options;
    options.master = master;
    if (cluster_id.has_value()) options.cluster_id = *cluster_id;
    options.segment_size = segment_size;
    options.hostname = hostname;
    options.port = port;
    options.log_level = LogLevel::kWarning;  // as the Client: a library logs warnings only
    absl::StatusOr<std::unique_ptr<EmbeddedNode>> node;
    {
      py::gil_scoped_release release;
      node = EmbeddedNode::Start(options);
    }
    Check(node.status());
    address_ = (*node)->address();
    segment_name_ = (*node)->segment_name();
    absl::MutexLock lock(&mu_);
    node_ = std::move(*node);
  }
  ~PyEmbeddedNode() { Close(); }
  PyEmbeddedNode(const PyEmbeddedNode&) = delete;
  PyEmbeddedNode& operator=(const PyEmbeddedNode&) = delete;

  void Close() {
    std::unique_ptr<EmbeddedNode> node;
    {
      absl::MutexLock lock(&mu_);
      node = std::move(node_);
    }
    if (node == nullptr) return;
    py::gil_scoped_release release;
    node->Stop();
    node.reset();
  }

  bool closed() const {
    absl::MutexLock lock(&mu_);
    return node_ == nullptr;
  }
  const std::string& address() const { return address_; }
  const std::string& segment_name() const { return segment_name_; }

 private:
  mutable absl::Mutex mu_;
  std::unique_ptr<EmbeddedNode> node_ ABSL_GUARDED_BY(mu_);
  std::string address_;
  std::string segment_name_;
};

constexpr const char* kEmbeddedNodeDoc = R"doc(
A storage node inside this process (Mooncake's embedded mode).

EmbeddedNode(master, segment_size, hostname="127.0.0.1", port=0, cluster_id=None)

Allocates a host segment of segment_size bytes (at least 1 MiB), serves clients' one-sided
reads and writes from it, and waits until the master at `master` (host:port) has mounted it.
An etcd://h1:2379;h2:2379 master follows the active master of HA cluster `cluster_id` (None:
"granary_cluster", a granary_node's default), re-mounting at a new leader after a failover.
port 0 draws a free port from 12300-14300. Raises InvalidArgument for a bad option (and a
segment_size larger than the machine's physical memory), ResourceExhausted for a segment_size
larger than the memory available now (both before anything is allocated), and Unavailable when
the master does not mount it in time. close() unmounts the segment (the master
drops the objects on it) and frees it; idempotent, and run by the destructor and by leaving a
`with` block. It runs on threads of its own and changes no process-wide setting.
)doc";

}  // namespace

void BindEmbedded(py::module_& m) {
  py::class_<PyEmbeddedNode>(m, "EmbeddedNode", kEmbeddedNodeDoc)
      .def(py::init<const std::string&, uint64_t, const std::string&, uint16_t,
                    const std::optional<std::string>&>(),
           py::arg("master"), py::arg("segment_size"), py::arg("hostname") = "127.0.0.1",
           py::arg("port") = 0, py::arg("cluster_id") = py::none())
      .def_property_readonly("address", &PyEmbeddedNode::address,
                             "\"host:port\": where clients reach the node (SegmentInfo."
                             "node_address).")
      .def_property_readonly("segment_name", &PyEmbeddedNode::segment_name,
                             "The segment's name at the master.")
      .def_property_readonly("closed", &PyEmbeddedNode::closed, "True after close().")
      .def("close", &PyEmbeddedNode::Close,
           "close() -> None: unmount the segment and stop the node. Idempotent.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyEmbeddedNode& self, py::args) { self.Close(); })
      .def("__repr__", [](const PyEmbeddedNode& self) {
        return "EmbeddedNode(address=" + self.address() + (self.closed() ? ", closed" : "") + ")";
      });

  m.def(
      "_testing_add_fake_device_range",
      [](uintptr_t addr, size_t size) {
        testing::AddFakeDeviceRange(reinterpret_cast<const void*>(addr), size);
      },
      py::arg("addr"), py::arg("size"),
      "Test hook: make the device-pointer check treat [addr, addr + size) as CUDA device "
      "memory, so the refusal paths can be tested without a GPU. The memory is never touched.");
  m.def(
      "_is_device_pointer",
      [](uintptr_t addr, size_t size) {
        return IsDevicePointer(reinterpret_cast<const void*>(addr), size);
      },
      py::arg("addr"), py::arg("size"),
      "True when [addr, addr + size) touches CUDA device or managed memory (the client's own "
      "check: the CUDA driver when loaded, and the test hook's fake ranges). For layers above "
      "the client that copy with the CPU themselves.");
  m.def(
      "_device_backend", [] { return std::string(device::ActiveBackendName()); },
      "The device backend this process uses: cuda, none or fake (GRANARY_DEVICE_BACKEND).");
  m.def(
      "_testing_device_alloc",
      [](size_t size) {
        absl::StatusOr<void*> p = device::ActiveRuntime().Alloc(0, size);
        if (!p.ok()) throw py::value_error(std::string(p.status().message()));
        return reinterpret_cast<uintptr_t>(*p);
      },
      py::arg("size"),
      "Test hook: device memory of the active backend on device 0 (fake device memory under "
      "GRANARY_DEVICE_BACKEND=fake, which the CPU cannot touch), as an address.");
  m.def(
      "_testing_device_free",
      [](uintptr_t addr) { device::ActiveRuntime().Free(0, reinterpret_cast<void*>(addr)); },
      py::arg("addr"), "Test hook: frees what _testing_device_alloc returned.");
  m.def(
      "_testing_device_copy",
      [](uintptr_t dst, uintptr_t src, size_t size) {
        absl::Status st = device::ActiveRuntime().Copy(0, reinterpret_cast<void*>(dst),
                                                       reinterpret_cast<const void*>(src), size,
                                                       device::CopyKind::kDefault);
        if (!st.ok()) throw py::value_error(std::string(st.message()));
      },
      py::arg("dst"), py::arg("src"), py::arg("size"),
      "Test hook: a synchronous copy through the active device backend (either side device or "
      "host memory).");
  m.def("_testing_clear_fake_device_ranges", &testing::ClearFakeDeviceRanges,
        "Test hook: forget every range _testing_add_fake_device_range added.");
}

}  // namespace granary::python
