// granary.Client batch calls: one entry per key in key order, the value or a granary.Error
// instance (returned, not raised). Bad arguments (types, list lengths, buffers) raise for the
// whole call before anything is sent.

#include <vector>

#include "absl/strings/str_cat.h"
#include "client.h"
#include "device_wait.h"
#include "errors.h"
#include "keys.h"

namespace py = pybind11;

namespace granary::python {
namespace {

void CheckLength(size_t keys, size_t n, const char* what) {
  if (keys != n) {
    ThrowInvalidArgument(absl::StrCat(what, " has ", n, " entries but keys has ", keys));
  }
}

// The buffers of a batch, with sizes None (whole buffers) or a list of int|None.
std::vector<BufferRef> BuffersOf(py::handle bufs, py::handle sizes, size_t keys, Access access) {
  py::list keep_bufs;
  std::vector<py::handle> items = ItemsOf(bufs, "bufs", &keep_bufs);
  CheckLength(keys, items.size(), "bufs");
  py::list keep_sizes;
  std::vector<py::handle> size_items;
  if (!sizes.is_none()) {
    size_items = ItemsOf(sizes, "sizes", &keep_sizes);
    CheckLength(keys, size_items.size(), "sizes");
  }
  std::vector<BufferRef> out;
  out.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    std::optional<size_t> size =
        size_items.empty() ? std::nullopt : SizeArg(size_items[i], "sizes item");
    out.push_back(ToBuffer(items[i], size, access, /*allow_address=*/true, "bufs item"));
  }
  return out;
}

py::list StatusList(const std::vector<absl::Status>& results) {
  py::list out(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    out[i] = results[i].ok() ? py::none() : ErrorObject(results[i]);
  }
  return out;
}

template <typename T, typename Convert>
py::list ValueList(const std::vector<absl::StatusOr<T>>& results, Convert convert) {
  py::list out(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    out[i] = results[i].ok() ? convert(*results[i]) : ErrorObject(results[i].status());
  }
  return out;
}

}  // namespace

namespace {

std::optional<StorageTier> TierOf(const std::optional<std::string>& tier) {
  if (!tier.has_value()) return std::nullopt;
  absl::StatusOr<StorageTier> t = ParseStorageTier(*tier);
  if (!t.ok()) throw py::value_error(std::string(t.status().message()));
  return *t;
}

PutOptions PutOptionsOf(const PyClient::PutArgs& a) {
  PutOptions options{.soft_pin = a.soft_pin, .hard_pin = a.hard_pin};
  if (std::optional<StorageTier> t = TierOf(a.tier)) options.tier = *t;
  options.wait = WaitOf(a.stream, a.event);
  return options;
}

GetOptions GetOptionsOf(const PyClient::GetArgs& a) {
  if (a.lease_ms < 0 || a.lease_ms > GetOptions::kMaxLeaseMs) {
    throw py::value_error(
        absl::StrCat("lease_ms=", a.lease_ms, " is not in [0, ", GetOptions::kMaxLeaseMs, "]"));
  }
  GetOptions options;
  options.lease_ms = static_cast<uint32_t>(a.lease_ms);
  if (std::optional<StorageTier> t = TierOf(a.tier)) options.tier = *t;
  return options;
}

}  // namespace

py::list PyClient::BatchPut(py::handle keys, py::handle values, const PutArgs& put) {
  const PutOptions options = PutOptionsOf(put);
  std::vector<std::string> k = KeysOf(keys);
  py::list keep;
  std::vector<py::handle> items = ItemsOf(values, "values", &keep);
  CheckLength(k.size(), items.size(), "values");
  std::vector<BufferRef> refs;
  std::vector<absl::string_view> views;
  refs.reserve(items.size());
  views.reserve(items.size());
  for (py::handle h : items) {
    refs.push_back(
        ToBuffer(h, std::nullopt, Access::kRead, /*allow_address=*/false, "values item"));
    views.push_back(refs.back().view());
  }
  return StatusList(Run([&](Client& c) { return c.BatchPutWith(k, views, options); }));
}

py::list PyClient::BatchGet(py::handle keys, const GetArgs& get) {
  const GetOptions options = GetOptionsOf(get);
  std::vector<std::string> k = KeysOf(keys);
  auto results = Run([&](Client& c) { return c.BatchGet(k, options); });
  return ValueList(results, [](const std::string& v) -> py::object { return py::bytes(v); });
}

py::list PyClient::BatchPutFrom(py::handle keys, py::handle bufs, py::handle sizes,
                                const PutArgs& put) {
  const PutOptions options = PutOptionsOf(put);
  std::vector<std::string> k = KeysOf(keys);
  std::vector<BufferRef> refs = BuffersOf(bufs, sizes, k.size(), Access::kRead);
  std::vector<const void*> data;
  std::vector<size_t> lens;
  for (const BufferRef& r : refs) {
    data.push_back(r.data());
    lens.push_back(r.size());
  }
  return StatusList(Run([&](Client& c) { return c.BatchPutFrom(k, data, lens, options); }));
}

py::list PyClient::BatchGetInto(py::handle keys, py::handle bufs, py::handle sizes,
                                const GetArgs& get) {
  const GetOptions options = GetOptionsOf(get);
  std::vector<std::string> k = KeysOf(keys);
  std::vector<BufferRef> refs = BuffersOf(bufs, sizes, k.size(), Access::kWrite);
  std::vector<void*> data;
  std::vector<size_t> lens;
  for (const BufferRef& r : refs) {
    data.push_back(r.data());
    lens.push_back(r.size());
  }
  auto results = Run([&](Client& c) { return c.BatchGetInto(k, data, lens, options); });
  return ValueList(results, [](size_t n) -> py::object { return py::int_(n); });
}

namespace {

// One list of integers per key (addresses or sizes); a value that is not a non-negative
// integer is named with its position.
std::vector<std::vector<uint64_t>> IntLists(py::handle lists, const char* what) {
  if (!py::isinstance<py::sequence>(lists) || py::isinstance<py::str>(lists)) {
    ThrowInvalidArgument(absl::StrCat(what, " must be a list of lists of integers"));
  }
  std::vector<std::vector<uint64_t>> out;
  size_t i = 0;
  for (py::handle inner : lists) {
    if (!py::isinstance<py::sequence>(inner) || py::isinstance<py::str>(inner)) {
      ThrowInvalidArgument(absl::StrCat(what, "[", i, "] must be a list of integers"));
    }
    std::vector<uint64_t>& row = out.emplace_back();
    size_t j = 0;
    for (py::handle v : inner) {
      unsigned long long x = 0;
      if (py::isinstance<py::int_>(v) || py::hasattr(v, "__index__")) {
        PyObject* n = PyNumber_Index(v.ptr());
        if (n != nullptr) {
          x = PyLong_AsUnsignedLongLong(n);
          Py_DECREF(n);
        }
        if (n == nullptr || PyErr_Occurred()) {
          PyErr_Clear();
          ThrowInvalidArgument(absl::StrCat(what, "[", i, "][", j,
                                            "] = ", py::str(v).cast<std::string>(),
                                            " is not a non-negative 64-bit integer"));
        }
      } else {
        ThrowInvalidArgument(absl::StrCat(what, "[", i, "][", j, "] is a ",
                                          py::str(py::type::of(v)).cast<std::string>(),
                                          ", not an integer"));
      }
      row.push_back(x);
      ++j;
    }
    ++i;
  }
  return out;
}

// Lists of address lists and size lists, one per key, as BufferRegion lists.
std::vector<std::vector<BufferRegion>> RegionsOf(py::handle ptr_lists, py::handle size_lists,
                                                 size_t n) {
  std::vector<std::vector<uint64_t>> ptrs = IntLists(ptr_lists, "ptr_lists");
  std::vector<std::vector<uint64_t>> sizes = IntLists(size_lists, "size_lists");
  CheckLength(n, ptrs.size(), "ptr_lists");
  CheckLength(n, sizes.size(), "size_lists");
  std::vector<std::vector<BufferRegion>> out(n);
  for (size_t i = 0; i < n; ++i) {
    if (ptrs[i].size() != sizes[i].size()) {
      ThrowInvalidArgument(absl::StrCat("key ", i, ": ", ptrs[i].size(), " addresses but ",
                                        sizes[i].size(), " sizes"));
    }
    for (size_t j = 0; j < ptrs[i].size(); ++j) {
      out[i].push_back({reinterpret_cast<void*>(static_cast<uintptr_t>(ptrs[i][j])),
                        static_cast<size_t>(sizes[i][j])});
    }
  }
  return out;
}

}  // namespace

py::list PyClient::BatchPutFromRegions(py::handle keys, py::handle ptr_lists, py::handle size_lists,
                                       const PutArgs& put) {
  const PutOptions options = PutOptionsOf(put);
  std::vector<std::string> k = KeysOf(keys);
  std::vector<std::vector<BufferRegion>> r = RegionsOf(ptr_lists, size_lists, k.size());
  return StatusList(Run([&](Client& c) { return c.BatchPutFromRegions(k, r, options); }));
}

py::list PyClient::BatchGetIntoRegions(py::handle keys, py::handle ptr_lists, py::handle size_lists,
                                       const GetArgs& get) {
  const GetOptions options = GetOptionsOf(get);
  std::vector<std::string> k = KeysOf(keys);
  std::vector<std::vector<BufferRegion>> r = RegionsOf(ptr_lists, size_lists, k.size());
  auto results = Run([&](Client& c) { return c.BatchGetIntoRegions(k, r, options); });
  return ValueList(results, [](size_t n) -> py::object { return py::int_(n); });
}

py::list PyClient::BatchExists(py::handle keys) {
  std::vector<std::string> k = KeysOf(keys);
  auto results = Run([&](Client& c) { return c.BatchExist(k); });
  return ValueList(results, [](bool e) -> py::object { return py::bool_(e); });
}

py::list PyClient::BatchRemove(py::handle keys, bool force) {
  std::vector<std::string> k = KeysOf(keys);
  return StatusList(Run([&](Client& c) { return c.BatchRemove(k, force); }));
}

}  // namespace granary::python
