// granary.Client: construction, close, and the single calls (which raise on failure).

#include "client.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "device_wait.h"
#include "errors.h"
#include "keys.h"

namespace py = pybind11;

namespace granary::python {
namespace {

// A dict config goes through the same reader as a file (ClientOptions::FromJsonFile, one table
// of keys): it is written as JSON to a private temporary file (mode 0600: it may hold the
// tenant token) that is removed at once. Messages name "<dict>" instead of the file.
absl::StatusOr<ClientOptions> OptionsFromDict(py::handle config) {
  std::string text = py::module_::import("json").attr("dumps")(config).cast<std::string>();
  const char* tmpdir = std::getenv("TMPDIR");
  std::string path = absl::StrCat(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp",
                                  "/granary_client_config.XXXXXX");
  int fd = mkstemp(path.data());
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot create a temporary file for the dict config"
                     " under ",
                     path, ": ", strerror(errno)));
  }
  bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  absl::StatusOr<ClientOptions> options =
      written ? ClientOptions::FromJsonFile(path)
              : absl::InternalError(absl::StrCat("cannot write ", path));
  unlink(path.c_str());
  if (!options.ok()) {
    return absl::Status(options.status().code(),
                        absl::StrReplaceAll(options.status().message(), {{path, "<dict>"}}));
  }
  return options;
}

ClientOptions OptionsFrom(py::handle config) {
  absl::StatusOr<ClientOptions> options;
  if (config.is_none()) {
    options = ClientOptions::FromEnvironment();
  } else if (PyDict_Check(config.ptr())) {
    options = OptionsFromDict(config);
  } else if (PyUnicode_Check(config.ptr()) || py::hasattr(config, "__fspath__")) {
    std::string path = py::module_::import("os").attr("fspath")(config).cast<std::string>();
    options = ClientOptions::FromJsonFile(path);
  } else {
    ThrowTypeError(
        absl::StrCat("config must be None, a path (str or os.PathLike) or a dict, "
                     "not ",
                     TypeName(config)));
  }
  Check(options.status());
  return *std::move(options);
}

// A keyword override: None leaves `field` as it is.
void Override(py::handle value, const char* name, std::string* field) {
  if (value.is_none()) return;
  if (!PyUnicode_Check(value.ptr())) {
    ThrowTypeError(absl::StrCat(name, " must be a str or None, not ", TypeName(value)));
  }
  *field = value.cast<std::string>();
}

}  // namespace

PyClient::PyClient(py::handle config, py::handle tenant_id, py::handle master) {
  ClientOptions options = OptionsFrom(config);
  Override(tenant_id, "tenant_id", &options.tenant_id);
  Override(master, "master", &options.master_server_address);
  // A library inside someone else's program logs warnings and errors only, as the CLI does,
  // unless the config or GRANARY_LOG_LEVEL asks for more.
  if (!options.log_level.has_value()) options.log_level = LogLevel::kWarning;
  Check(options.Validate());
  absl::StatusOr<std::unique_ptr<Client>> client;
  {
    py::gil_scoped_release release;
    client = Client::Create(options);
  }
  Check(client.status());
  tenant_id_ = options.tenant_id;
  master_ = options.master_server_address;
  cluster_id_ = options.cluster_id;
  absl::MutexLock lock(&mu_);
  client_ = std::move(*client);
}

PyClient::~PyClient() {
  // Destroyed from Python's dealloc, with the GIL. No call is in flight (each holds a reference
  // to this object), so this is the client's last reference; registered_ is released after it.
  std::shared_ptr<Client> c;
  {
    absl::MutexLock lock(&mu_);
    c = std::move(client_);
  }
  if (c != nullptr) {
    py::gil_scoped_release release;
    c.reset();
  }
}

void PyClient::Close() {
  std::shared_ptr<Client> c;
  {
    absl::MutexLock lock(&mu_);
    c = std::move(client_);
  }
  if (c != nullptr) {
    py::gil_scoped_release release;
    c.reset();  // destroys the client unless a call in flight still holds it
  }
}

bool PyClient::closed() const {
  absl::MutexLock lock(&mu_);
  return client_ == nullptr;
}

std::shared_ptr<Client> PyClient::Acquire() const {
  std::shared_ptr<Client> c;
  {
    absl::MutexLock lock(&mu_);
    c = client_;
  }
  if (c == nullptr) ThrowClosed();
  return c;
}

void PyClient::Put(py::handle key, py::handle data) {
  std::string k = KeyOf(key);
  BufferRef b = ToBuffer(data, std::nullopt, Access::kRead, /*allow_address=*/false, "data");
  Check(Run([&](Client& c) { return c.Put(k, b.view()); }));
}

py::bytes PyClient::Get(py::handle key) {
  std::string k = KeyOf(key);
  absl::StatusOr<std::string> v = Run([&](Client& c) { return c.Get(k); });
  Check(v.status());
  return py::bytes(*v);
}

void PyClient::PutFrom(py::handle key, py::handle buf, py::handle size, py::handle stream,
                       py::handle event) {
  std::string k = KeyOf(key);
  BufferRef b = ToBuffer(buf, SizeArg(size, "size"), Access::kRead, true, "buf");
  const DeviceWait wait = WaitOf(stream, event);
  Check(Run([&](Client& c) { return c.PutFrom(k, b.data(), b.size(), wait); }));
}

size_t PyClient::GetInto(py::handle key, py::handle buf, py::handle size) {
  std::string k = KeyOf(key);
  BufferRef b = ToBuffer(buf, SizeArg(size, "size"), Access::kWrite, true, "buf");
  absl::StatusOr<size_t> n = Run([&](Client& c) { return c.GetInto(k, b.data(), b.size()); });
  Check(n.status());
  return *n;
}

void PyClient::RegisterBuffer(py::handle buf, py::handle size) {
  BufferRef b = ToBuffer(buf, SizeArg(size, "size"), Access::kRead, true, "buf");
  Check(Run([&](Client& c) { return c.RegisterBuffer(b.data(), b.size()); }));
  registered_[reinterpret_cast<uintptr_t>(b.data())] = Registered{std::move(b), ++registrations_};
}

void PyClient::UnregisterBuffer(py::handle buf) {
  void* data;
  {
    // Only the address matters: an int needs no size here.
    BufferRef b = PyLong_Check(buf.ptr()) ? ToBuffer(buf, 0, Access::kRead, true, "buf")
                                          : ToBuffer(buf, std::nullopt, Access::kRead, true, "buf");
    data = b.data();
  }
  const uintptr_t addr = reinterpret_cast<uintptr_t>(data);
  auto before = registered_.find(addr);
  const uint64_t number = before == registered_.end() ? 0 : before->second.number;
  Check(Run([&](Client& c) { return c.UnregisterBuffer(data); }));
  // The GIL was released: another thread may have registered the address again meanwhile.
  auto after = registered_.find(addr);
  if (after != registered_.end() && after->second.number == number) registered_.erase(after);
}

bool PyClient::Exists(py::handle key) {
  std::string k = KeyOf(key);
  absl::StatusOr<bool> e = Run([&](Client& c) { return c.Exist(k); });
  Check(e.status());
  return *e;
}

void PyClient::Remove(py::handle key, bool force) {
  std::string k = KeyOf(key);
  Check(Run([&](Client& c) { return c.Remove(k, force); }));
}

ObjectInfo PyClient::Stat(py::handle key) {
  std::string k = KeyOf(key);
  absl::StatusOr<ObjectInfo> info = Run([&](Client& c) { return c.Stat(k); });
  Check(info.status());
  return *std::move(info);
}

ListResult PyClient::List(const std::string& prefix, size_t limit, const std::string& start_after) {
  absl::StatusOr<ListResult> r = Run([&](Client& c) { return c.List(prefix, limit, start_after); });
  Check(r.status());
  return *std::move(r);
}

std::vector<SegmentInfo> PyClient::Segments() {
  absl::StatusOr<std::vector<SegmentInfo>> r = Run([&](Client& c) { return c.Segments(); });
  Check(r.status());
  return *std::move(r);
}

PrefixLookup PyClient::LookupPrefix(const std::string& model, const std::string& hash_scheme,
                                    const std::optional<std::string>& adapter_id,
                                    py::handle prefix_hashes, bool lease) {
  std::vector<std::string> hashes = KeysOf(prefix_hashes, "prefix_hashes");
  absl::StatusOr<PrefixLookup> r =
      Run([&](Client& c) { return c.LookupPrefix(model, hash_scheme, adapter_id, hashes, lease); });
  Check(r.status());
  return *std::move(r);
}

std::string PyClient::MetricsText() {
  return Run([](Client& c) { return c.MetricsText(); });
}

}  // namespace granary::python
