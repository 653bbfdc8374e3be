// The Python surface of granary.Client: names, arguments, defaults and docstrings.

#include "bindings.h"
#include "client.h"
#include "pybind11/stl.h"

namespace py = pybind11;

namespace granary::python {
namespace {

constexpr const char* kClientDoc = R"doc(
A connection to a Granary cluster for one tenant.

Client(config=None, *, tenant_id=None, master=None)

config: None reads the environment (GRANARY_CONFIG_PATH names a JSON file, else the GRANARY_*
variables); a str or os.PathLike is a JSON client config file; a dict holds the same keys as
that file ("master_server_address", "tenant_id", "tenant_token", "replica_num",
"rpc_timeout_ms", "log_level", ...). tenant_id and master override what config gives. The
client logs to stderr at "warning" unless the config (or GRANARY_LOG_LEVEL) sets log_level.

Keys are str (UTF-8), bytes, or KvKey. A buffer ("buf") is an int address (size required), any
object with the buffer protocol (numpy arrays, memoryview, bytearray; bytes as a source only),
or an object with data_ptr() such as a torch CPU tensor. size=None means the whole buffer.

Single calls raise a granary.Error subclass on failure; batch calls return one entry per key,
the value or a granary.Error instance. Every method is thread-safe and releases the GIL while it
waits. A context manager: leaving the block closes the client. Calls after close() raise
granary.Closed.
)doc";

void BindSingle(py::class_<PyClient>& c) {
  c.def("put", &PyClient::Put, py::arg("key"), py::arg("data"),
        "put(key, data) -> None: store a bytes-like value. AlreadyExists if the key exists.")
      .def("get", &PyClient::Get, py::arg("key"),
           "get(key) -> bytes: the value. NotFound if absent.")
      .def("put_from", &PyClient::PutFrom, py::arg("key"), py::arg("buf"),
           py::arg("size") = py::none(), py::kw_only(), py::arg("stream") = py::none(),
           py::arg("event") = py::none(),
           "put_from(key, buf, size=None, *, stream=None, event=None) -> None: store `size` "
           "bytes of buf (zero-copy)."
           " stream, event: for device memory the engine is still writing, its stream or an event "
           "recorded after the writes (torch.cuda.Stream / torch.cuda.Event or a raw handle int); "
           "the put waits for it first. Without them, synchronize before the call.")
      .def("get_into", &PyClient::GetInto, py::arg("key"), py::arg("buf"),
           py::arg("size") = py::none(),
           "get_into(key, buf, size=None) -> int: read the value into buf (capacity `size`) and "
           "return its size. FailedPrecondition, with nothing written, if it does not fit; "
           "InvalidArgument for a read-only buf.")
      .def("register_buffer", &PyClient::RegisterBuffer, py::arg("buf"),
           py::arg("size") = py::none(),
           "register_buffer(buf, size=None) -> None: register memory with the transport once. "
           "The object stays exported (kept alive) until unregister_buffer. AlreadyExists if a "
           "buffer at that address is registered.")
      .def("unregister_buffer", &PyClient::UnregisterBuffer, py::arg("buf"),
           "unregister_buffer(buf) -> None: deregister the buffer starting at buf's address; "
           "waits for transfers using it. NotFound if none is registered there.")
      .def("exists", &PyClient::Exists, py::arg("key"),
           "exists(key) -> bool: whether a complete object exists (does not renew leases).")
      .def("remove", &PyClient::Remove, py::arg("key"), py::arg("force") = false,
           "remove(key, force=False) -> None: remove the key. NotFound if absent; HasLease while a "
           "read of it is in flight, unless force (the reader then sees a removed object, "
           "never wrong bytes).")
      .def("stat", &PyClient::Stat, py::arg("key"), "stat(key) -> ObjectInfo. NotFound if absent.")
      .def("list", &PyClient::List, py::arg("prefix") = "", py::arg("limit") = 1000,
           py::arg("start_after") = "",
           "list(prefix='', limit=1000, start_after='') -> ListResult: this tenant's objects "
           "whose key starts with prefix, in key order, after start_after.")
      .def("segments", &PyClient::Segments,
           "segments() -> list[SegmentInfo]: the mounted segments.")
      .def("lookup_prefix", &PyClient::LookupPrefix, py::arg("model"), py::arg("hash_scheme"),
           py::arg("adapter_id"), py::arg("prefix_hashes"), py::arg("lease") = false,
           "lookup_prefix(model, hash_scheme, adapter_id, prefix_hashes, lease=False) -> "
           "PrefixLookup: how many leading KvKey blocks of the chain are present, in one "
           "request. With lease=True they are leased for PrefixLookup.lease_ms.")
      .def("metrics_text", &PyClient::MetricsText,
           "metrics_text() -> str: this client's metrics in Prometheus text format.");
}

void BindBatch(py::class_<PyClient>& c) {
  // The keyword arguments of the put and get forms (PyClient::PutArgs, GetArgs).
  constexpr const char* kPutDoc =
      " soft_pin, hard_pin: pins (a hard-pinned object is never evicted). tier: None (the "
      "tenant's default_tier in the master's policy), 'host', 'gpu', 'any' (GPU while it has "
      "room, else host) or 'disk' (the nodes' disk tiers). stream, event: for device memory the "
      "engine is still writing, its "
      "stream or an event recorded after the writes (torch.cuda.Stream / torch.cuda.Event or a "
      "raw handle int); the put waits for it first. Without them, synchronize before the call.";
  constexpr const char* kGetDoc =
      " lease_ms: the read lease asked of the master while the bytes move (0: its default; at "
      "most 600000). tier: None, 'host', 'gpu' or 'any': replicas on that tier are read first "
      "(a hint).";
  using PutArgs = PyClient::PutArgs;
  using GetArgs = PyClient::GetArgs;
  using Tier = std::optional<std::string>;
  c.def(
       "batch_put",
       [](PyClient& self, py::handle keys, py::handle values, bool soft_pin, bool hard_pin,
          Tier tier, py::handle stream, py::handle event) {
         return self.BatchPut(keys, values, PutArgs{soft_pin, hard_pin, tier, stream, event});
       },
       py::arg("keys"), py::arg("values"), py::kw_only(), py::arg("soft_pin") = false,
       py::arg("hard_pin") = false, py::arg("tier") = py::none(), py::arg("stream") = py::none(),
       py::arg("event") = py::none(),
       absl::StrCat("batch_put(keys, values, *, soft_pin=False, hard_pin=False, tier=None, "
                    "stream=None, event=None) -> list[None | Error].",
                    kPutDoc)
           .c_str())
      .def(
          "batch_get",
          [](PyClient& self, py::handle keys, int64_t lease_ms, Tier tier) {
            return self.BatchGet(keys, GetArgs{lease_ms, tier});
          },
          py::arg("keys"), py::kw_only(), py::arg("lease_ms") = 0, py::arg("tier") = py::none(),
          absl::StrCat("batch_get(keys, *, lease_ms=0, tier=None) -> list[bytes | Error].", kGetDoc)
              .c_str())
      .def(
          "batch_put_from",
          [](PyClient& self, py::handle keys, py::handle bufs, py::handle sizes, bool soft_pin,
             bool hard_pin, Tier tier, py::handle stream, py::handle event) {
            return self.BatchPutFrom(keys, bufs, sizes,
                                     PutArgs{soft_pin, hard_pin, tier, stream, event});
          },
          py::arg("keys"), py::arg("bufs"), py::arg("sizes") = py::none(), py::kw_only(),
          py::arg("soft_pin") = false, py::arg("hard_pin") = false, py::arg("tier") = py::none(),
          py::arg("stream") = py::none(), py::arg("event") = py::none(),
          absl::StrCat("batch_put_from(keys, bufs, sizes=None, *, soft_pin=False, "
                       "hard_pin=False, tier=None, stream=None, event=None) -> "
                       "list[None | Error]: bufs are buffers or addresses, host or device memory.",
                       kPutDoc)
              .c_str())
      .def(
          "batch_get_into",
          [](PyClient& self, py::handle keys, py::handle bufs, py::handle sizes, int64_t lease_ms,
             Tier tier) {
            return self.BatchGetInto(keys, bufs, sizes, GetArgs{lease_ms, tier});
          },
          py::arg("keys"), py::arg("bufs"), py::arg("sizes") = py::none(), py::kw_only(),
          py::arg("lease_ms") = 0, py::arg("tier") = py::none(),
          absl::StrCat("batch_get_into(keys, bufs, sizes=None, *, lease_ms=0, tier=None) -> "
                       "list[int | Error]: bytes written per key.",
                       kGetDoc)
              .c_str())
      .def(
          "batch_put_from_regions",
          [](PyClient& self, py::handle keys, py::handle ptr_lists, py::handle size_lists,
             bool soft_pin, bool hard_pin, Tier tier, py::handle stream, py::handle event) {
            return self.BatchPutFromRegions(keys, ptr_lists, size_lists,
                                            PutArgs{soft_pin, hard_pin, tier, stream, event});
          },
          py::arg("keys"), py::arg("ptr_lists"), py::arg("size_lists"), py::kw_only(),
          py::arg("soft_pin") = false, py::arg("hard_pin") = false, py::arg("tier") = py::none(),
          py::arg("stream") = py::none(), py::arg("event") = py::none(),
          absl::StrCat("batch_put_from_regions(keys, ptr_lists, size_lists, *, soft_pin=False, "
                       "hard_pin=False, tier=None, stream=None, event=None) -> "
                       "list[None | Error]: object i is the concatenation of [ptr_lists[i][j], "
                       "+size_lists[i][j]) (host or device memory).",
                       kPutDoc)
              .c_str())
      .def(
          "batch_get_into_regions",
          [](PyClient& self, py::handle keys, py::handle ptr_lists, py::handle size_lists,
             int64_t lease_ms, Tier tier) {
            return self.BatchGetIntoRegions(keys, ptr_lists, size_lists, GetArgs{lease_ms, tier});
          },
          py::arg("keys"), py::arg("ptr_lists"), py::arg("size_lists"), py::kw_only(),
          py::arg("lease_ms") = 0, py::arg("tier") = py::none(),
          absl::StrCat("batch_get_into_regions(keys, ptr_lists, size_lists, *, lease_ms=0, "
                       "tier=None) -> list[int | Error]: object i scattered over its regions in "
                       "order; its size per key.",
                       kGetDoc)
              .c_str())
      .def("batch_exists", &PyClient::BatchExists, py::arg("keys"),
           "batch_exists(keys) -> list[bool | Error]")
      .def("batch_remove", &PyClient::BatchRemove, py::arg("keys"), py::arg("force") = false,
           "batch_remove(keys, force=False) -> list[None | Error]: as remove, per key.");
}

}  // namespace

void BindClient(py::module_& m) {
  py::class_<PyClient> c(m, "Client", kClientDoc);
  c.def(py::init<py::handle, py::handle, py::handle>(), py::arg("config") = py::none(),
        py::kw_only(), py::arg("tenant_id") = py::none(), py::arg("master") = py::none())
      .def("close", &PyClient::Close,
           "close() -> None: disconnect. Idempotent; calls in flight on other threads finish "
           "first, calls that start later raise Closed.")
      .def_property_readonly("closed", &PyClient::closed, "True after close().")
      .def_property_readonly("tenant_id", &PyClient::tenant_id, "The tenant of every key.")
      .def_property_readonly(
          "master", &PyClient::master,
          "The master address as given: host:port, or etcd://h1:2379;h2:2379 (HA).")
      .def_property_readonly("cluster_id", &PyClient::cluster_id,
                             "With an etcd:// master: the HA cluster whose active master this "
                             "client follows (config key cluster_id, GRANARY_CLUSTER_ID).")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& self, py::args) { self.Close(); })
      .def("__repr__", [](const PyClient& self) {
        return "Client(master=" + self.master() + ", tenant_id=" + self.tenant_id() +
               (self.closed() ? ", closed" : "") + ")";
      });
  BindSingle(c);
  BindBatch(c);
}

}  // namespace granary::python
