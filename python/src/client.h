#pragma once

// granary.Client: one granary::Client behind a Python object.
//
// Thread safety: every method may be called from any number of Python threads at once. The
// C++ client is held in a shared_ptr; each call takes its own reference under mu_ (Acquire) and
// releases the GIL around the C++ call, so close() on one thread while calls run on others
// never frees the client under them: close() drops this object's reference and the client is
// destroyed (without the GIL) when the last call in flight drops its own. Calls that start
// after close() raise granary.Closed.
//
// Python arguments (keys, buffers, lists) are converted to C++ values with the GIL held, before
// the release; BufferRefs keep the caller's memory exported until the call returns. Buffers
// passed to register_buffer stay exported (a bytearray cannot resize, a tensor is not freed)
// until unregister_buffer, or until this object is destroyed (after the C++ client is).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "buffers.h"
#include "granary/client.h"
#include "pybind11/pybind11.h"

namespace granary::python {

class PyClient {
 public:
  // config: None (the environment), a str/os.PathLike JSON file path, or a dict of the JSON
  // file's keys; tenant_id / master (None or str) override what it gives.
  PyClient(pybind11::handle config, pybind11::handle tenant_id, pybind11::handle master);
  ~PyClient();
  PyClient(const PyClient&) = delete;
  PyClient& operator=(const PyClient&) = delete;

  void Close();
  bool closed() const;
  const std::string& tenant_id() const { return tenant_id_; }
  const std::string& master() const { return master_; }
  const std::string& cluster_id() const { return cluster_id_; }

  // Single calls: raise granary.Error on failure (client.cc).
  void Put(pybind11::handle key, pybind11::handle data);
  pybind11::bytes Get(pybind11::handle key);
  // stream, event: what the put waits for before it reads device memory (device_wait.h).
  void PutFrom(pybind11::handle key, pybind11::handle buf, pybind11::handle size,
               pybind11::handle stream, pybind11::handle event);
  size_t GetInto(pybind11::handle key, pybind11::handle buf, pybind11::handle size);
  void RegisterBuffer(pybind11::handle buf, pybind11::handle size);
  void UnregisterBuffer(pybind11::handle buf);
  bool Exists(pybind11::handle key);
  void Remove(pybind11::handle key, bool force);
  ObjectInfo Stat(pybind11::handle key);
  ListResult List(const std::string& prefix, size_t limit, const std::string& start_after);
  std::vector<SegmentInfo> Segments();
  PrefixLookup LookupPrefix(const std::string& model, const std::string& hash_scheme,
                            const std::optional<std::string>& adapter_id,
                            pybind11::handle prefix_hashes, bool lease);
  std::string MetricsText();

  // Batch calls: one entry per key, the value or a granary.Error instance (client_batch.cc).
  // Puts: soft_pin, hard_pin, tier (None: the tenant's default_tier, or "host", "gpu", "any",
  // "disk"; ValueError otherwise) and stream/event (DeviceWait) as PutOptions. Gets: lease_ms (0:
  // the master's default) and tier (None, "host", "gpu" or "any": the replica tier read first) as
  // GetOptions.
  struct PutArgs {
    bool soft_pin = false;
    bool hard_pin = false;
    std::optional<std::string> tier;
    pybind11::handle stream;
    pybind11::handle event;
  };
  struct GetArgs {
    int64_t lease_ms = 0;
    std::optional<std::string> tier;
  };
  pybind11::list BatchPut(pybind11::handle keys, pybind11::handle values, const PutArgs& put);
  pybind11::list BatchGet(pybind11::handle keys, const GetArgs& get);
  pybind11::list BatchPutFrom(pybind11::handle keys, pybind11::handle bufs, pybind11::handle sizes,
                              const PutArgs& put);
  pybind11::list BatchGetInto(pybind11::handle keys, pybind11::handle bufs, pybind11::handle sizes,
                              const GetArgs& get);
  // Scatter lists of addresses (host memory, or device memory of the device backend).
  pybind11::list BatchPutFromRegions(pybind11::handle keys, pybind11::handle ptr_lists,
                                     pybind11::handle size_lists, const PutArgs& put);
  pybind11::list BatchGetIntoRegions(pybind11::handle keys, pybind11::handle ptr_lists,
                                     pybind11::handle size_lists, const GetArgs& get);
  pybind11::list BatchExists(pybind11::handle keys);
  pybind11::list BatchRemove(pybind11::handle keys, bool force);

 private:
  // This object's reference to the C++ client; granary.Closed after close().
  std::shared_ptr<Client> Acquire() const;

  // f(Client&) with the GIL released; the call's client reference is dropped before the GIL is
  // taken back, so a client closed meanwhile is destroyed without it.
  template <typename F>
  auto Run(F&& f) const {
    std::shared_ptr<Client> c = Acquire();
    pybind11::gil_scoped_release release;
    auto result = f(*c);
    c.reset();
    return result;
  }

  mutable absl::Mutex mu_;
  std::shared_ptr<Client> client_ ABSL_GUARDED_BY(mu_);
  std::string tenant_id_;
  std::string master_;
  std::string cluster_id_;
  // Exports of registered buffers by address, each with the number of its registration (so an
  // unregister_buffer that races with a new register_buffer of the same address never drops the
  // new one's export). Touched only with the GIL held.
  struct Registered {
    BufferRef ref;
    uint64_t number = 0;
  };
  std::map<uintptr_t, Registered> registered_;
  uint64_t registrations_ = 0;
};

}  // namespace granary::python
