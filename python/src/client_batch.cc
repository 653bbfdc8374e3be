// granary.Client batch calls: one entry per key in key order, the value or a granary.Error
// instance (returned, not raised). Bad arguments (types, list lengths, buffers) raise for the
// whole call before anything is sent.

#include <vector>

#include "absl/strings/str_cat.h"
#include "client.h"
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

py::list PyClient::BatchPut(py::handle keys, py::handle values, bool soft_pin, bool hard_pin) {
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
  PutOptions options{.soft_pin = soft_pin, .hard_pin = hard_pin};
  return StatusList(Run([&](Client& c) { return c.BatchPutWith(k, views, options); }));
}

py::list PyClient::BatchGet(py::handle keys) {
  std::vector<std::string> k = KeysOf(keys);
  auto results = Run([&](Client& c) { return c.BatchGet(k); });
  return ValueList(results, [](const std::string& v) -> py::object { return py::bytes(v); });
}

py::list PyClient::BatchPutFrom(py::handle keys, py::handle bufs, py::handle sizes) {
  std::vector<std::string> k = KeysOf(keys);
  std::vector<BufferRef> refs = BuffersOf(bufs, sizes, k.size(), Access::kRead);
  std::vector<const void*> data;
  std::vector<size_t> lens;
  for (const BufferRef& r : refs) {
    data.push_back(r.data());
    lens.push_back(r.size());
  }
  return StatusList(Run([&](Client& c) { return c.BatchPutFrom(k, data, lens); }));
}

py::list PyClient::BatchGetInto(py::handle keys, py::handle bufs, py::handle sizes) {
  std::vector<std::string> k = KeysOf(keys);
  std::vector<BufferRef> refs = BuffersOf(bufs, sizes, k.size(), Access::kWrite);
  std::vector<void*> data;
  std::vector<size_t> lens;
  for (const BufferRef& r : refs) {
    data.push_back(r.data());
    lens.push_back(r.size());
  }
  auto results = Run([&](Client& c) { return c.BatchGetInto(k, data, lens); });
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
