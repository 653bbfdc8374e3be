// KvKey and the plain read-only result classes (ObjectInfo, SegmentInfo, PrefixBlock,
// PrefixLookup, ListResult): copies of the C++ structs of include/granary/, with __repr__.

#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bindings.h"
#include "errors.h"
#include "granary/client.h"
#include "granary/kv_key.h"
#include "keys.h"
#include "pybind11/stl.h"

namespace py = pybind11;

namespace granary::python {
namespace {

std::string Repr(absl::string_view s) { return py::repr(StrOrBytes(s)).cast<std::string>(); }

std::string KvKeyRepr(const KvKey& k) {
  return absl::StrCat("KvKey(model=", Repr(k.model), ", hash_scheme=", Repr(k.hash_scheme),
                      ", prefix_hash=", Repr(k.prefix_hash),
                      ", adapter_id=", k.adapter_id ? Repr(*k.adapter_id) : "None", ")");
}

void BindKvKey(py::module_& m) {
  py::class_<KvKey>(m, "KvKey", R"doc(
A structured KV-cache key: (model, hash_scheme, adapter_id, prefix_hash), as inference engines
key KV blocks. `encode()` gives the canonical Granary key (format "kv1/...", see
include/granary/kv_key.h); every Client method that takes a key also takes a KvKey and encodes
it. Immutable and hashable. Fields are str (or bytes, when not valid UTF-8).
)doc")
      .def(py::init([](std::string model, std::string hash_scheme, std::string prefix_hash,
                       std::optional<std::string> adapter_id) {
             return KvKey{std::move(model), std::move(hash_scheme), std::move(adapter_id),
                          std::move(prefix_hash)};
           }),
           py::arg("model"), py::arg("hash_scheme"), py::arg("prefix_hash"),
           py::arg("adapter_id") = py::none(),
           "KvKey(model, hash_scheme, prefix_hash, adapter_id=None). Each field is str or bytes; "
           "adapter_id None is the base model. Validated by encode().")
      .def_property_readonly(
          "model", [](const KvKey& k) { return StrOrBytes(k.model); }, "The model name.")
      .def_property_readonly(
          "hash_scheme", [](const KvKey& k) { return StrOrBytes(k.hash_scheme); },
          "How prefix_hash was computed (\"sha256\", ...).")
      .def_property_readonly(
          "prefix_hash", [](const KvKey& k) { return StrOrBytes(k.prefix_hash); },
          "The hash of the token prefix this block ends.")
      .def_property_readonly(
          "adapter_id",
          [](const KvKey& k) -> py::object {
            return k.adapter_id ? StrOrBytes(*k.adapter_id) : py::none();
          },
          "The LoRA adapter, or None for the base model.")
      .def(
          "encode",
          [](const KvKey& k) {
            Check(ValidateKvKey(k));
            return StrOrBytes(EncodeKvKey(k));
          },
          "The canonical Granary key (str; bytes if a field is not UTF-8). Raises "
          "InvalidArgument for an invalid key (an empty field, a field over 1024 bytes).")
      .def_static(
          "decode",
          [](py::handle encoded) {
            absl::StatusOr<KvKey> k = DecodeKvKey(KeyOf(encoded, "encoded"));
            Check(k.status());
            return *k;
          },
          py::arg("encoded"),
          "The KvKey an encoded key stands for; InvalidArgument if it is not one.")
      .def_static(
          "prefix",
          [](std::string model, std::string hash_scheme, std::optional<std::string> adapter_id) {
            return StrOrBytes(KvKeyPrefix(model, hash_scheme, adapter_id));
          },
          py::arg("model"), py::arg("hash_scheme"), py::arg("adapter_id") = py::none(),
          "The common prefix of every encoded key of (model, hash_scheme, adapter_id): "
          "Client.list(prefix) finds exactly that triple's blocks.")
      .def("__eq__", [](const KvKey& a, const KvKey& b) { return a == b; })
      .def("__hash__", [](const KvKey& k) { return py::hash(py::bytes(EncodeKvKey(k))); })
      .def("__repr__", &KvKeyRepr);
}

std::string ObjectInfoRepr(const ObjectInfo& o) {
  return absl::StrCat(
      "ObjectInfo(key=", Repr(o.key), ", size=", o.size, ", generation=", o.generation,
      ", complete=", o.complete ? "True" : "False", ", replicas=", o.replicas,
      ", age_ms=", o.age_ms,
      ", replica_addresses=", py::repr(py::cast(o.replica_addresses)).cast<std::string>(),
      ", replica_tiers=", py::repr(py::cast(o.replica_tiers)).cast<std::string>(), ")");
}

void BindObjectInfo(py::module_& m) {
  py::class_<ObjectInfo>(m, "ObjectInfo", "One object as the master describes it (read-only).")
      .def_property_readonly(
          "key", [](const ObjectInfo& o) { return StrOrBytes(o.key); },
          "The key (str, or bytes when not valid UTF-8).")
      .def_readonly("size", &ObjectInfo::size, "Value size in bytes.")
      .def_readonly("generation", &ObjectInfo::generation,
                    "Changes whenever the key's value is replaced.")
      .def_readonly("complete", &ObjectInfo::complete,
                    "True once a replica is fully written and readable.")
      .def_readonly("replicas", &ObjectInfo::replicas, "Number of complete replicas.")
      .def_readonly("age_ms", &ObjectInfo::age_ms, "Milliseconds since the object was written.")
      .def_readonly("replica_addresses", &ObjectInfo::replica_addresses,
                    "list[str]: the node address (host:port) of each complete replica; filled "
                    "by stat(), empty in list() results.")
      .def_readonly("replica_tiers", &ObjectInfo::replica_tiers,
                    "list[str]: the tier of each of those replicas ('host', 'gpu' or 'disk').")
      .def("__repr__", &ObjectInfoRepr);
}

std::string SegmentInfoRepr(const SegmentInfo& s) {
  return absl::StrCat("SegmentInfo(segment_id=", s.segment_id, ", name=", Repr(s.name),
                      ", node_id=", Repr(s.node_id), ", node_address=", Repr(s.node_address),
                      ", tier=", Repr(s.tier), ", pool=", Repr(s.pool), ", size=", s.size,
                      ", used=", s.used, ")");
}

void BindSegmentInfo(py::module_& m) {
  py::class_<SegmentInfo>(m, "SegmentInfo", "One mounted segment (read-only).")
      .def_readonly("segment_id", &SegmentInfo::segment_id, "The master's id for it.")
      .def_readonly("name", &SegmentInfo::name, "Its name (\"host0\", ...).")
      .def_readonly("node_id", &SegmentInfo::node_id, "The node that serves it.")
      .def_readonly("node_address", &SegmentInfo::node_address, "host:port of that node.")
      .def_readonly("tier", &SegmentInfo::tier, "\"host\" or \"gpu\".")
      .def_readonly("pool", &SegmentInfo::pool, "The tenant of a dedicated pool, or \"\".")
      .def_readonly("size", &SegmentInfo::size, "Capacity in bytes.")
      .def_readonly("used", &SegmentInfo::used, "Bytes allocated.")
      .def("__repr__", &SegmentInfoRepr);
}

void BindPrefixLookup(py::module_& m) {
  using Block = PrefixLookup::Block;
  py::class_<Block>(m, "PrefixBlock", "One present block of a prefix chain (read-only).")
      .def_property_readonly(
          "key", [](const Block& b) { return StrOrBytes(b.key); },
          "The encoded KvKey: pass it to get/get_into.")
      .def_readonly("size", &Block::size, "Value size in bytes.")
      .def_readonly("node_address", &Block::node_address,
                    "A location hint: the node of its first complete replica.")
      .def("__repr__", [](const Block& b) {
        return absl::StrCat("PrefixBlock(key=", Repr(b.key), ", size=", b.size,
                            ", node_address=", Repr(b.node_address), ")");
      });
  py::class_<PrefixLookup>(m, "PrefixLookup",
                           "How many leading blocks of a prefix chain are present (read-only).")
      .def_readonly("present", &PrefixLookup::present,
                    "The number of leading blocks present and complete.")
      .def_readonly("blocks", &PrefixLookup::blocks,
                    "list[PrefixBlock]: the `present` leading blocks, in chain order.")
      .def_readonly("lease_ms", &PrefixLookup::lease_ms,
                    "With lease=True: the blocks are leased this long (ms); else 0.")
      .def("__repr__", [](const PrefixLookup& p) {
        return absl::StrCat("PrefixLookup(present=", p.present, ", blocks=[", p.blocks.size(),
                            " blocks], lease_ms=", p.lease_ms, ")");
      });
}

void BindListResult(py::module_& m) {
  py::class_<ListResult>(m, "ListResult", "One page of Client.list (read-only).")
      .def_readonly("objects", &ListResult::objects, "list[ObjectInfo], in key order.")
      .def_readonly("more", &ListResult::more,
                    "True when more keys follow: call again with start_after = the last key.")
      .def("__repr__", [](const ListResult& r) {
        return absl::StrCat("ListResult(objects=[", r.objects.size(),
                            " objects], more=", r.more ? "True" : "False", ")");
      });
}

}  // namespace

void BindTypes(py::module_& m) {
  BindKvKey(m);
  BindObjectInfo(m);
  BindSegmentInfo(m);
  BindPrefixLookup(m);
  BindListResult(m);
}

}  // namespace granary::python
