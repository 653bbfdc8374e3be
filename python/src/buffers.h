#pragma once

// Caller memory for one call ("buf" in the Python API): an int address with a size, any object
// with the buffer protocol (numpy arrays, memoryview, bytearray; bytes as a source), or an
// object with data_ptr() (torch tensors; size = nbytes, or element_size() * numel()).
//
// A BufferRef is made with the GIL held, and keeps the memory valid until it is destroyed: it
// holds the Py_buffer export (which also stops a bytearray from resizing) or a reference to
// the tensor. Its data()/size() may be used with the GIL released; it must be destroyed with
// the GIL held. Move-only.

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "pybind11/pybind11.h"

namespace granary::python {

enum class Access {
  kRead,   // a source: read-only memory is fine
  kWrite,  // a destination: read-only memory is refused (InvalidArgument)
};

class BufferRef {
 public:
  BufferRef() = default;
  BufferRef(BufferRef&&) = default;
  BufferRef& operator=(BufferRef&&) = default;

  void* data() const { return data_; }
  size_t size() const { return size_; }
  absl::string_view view() const { return {static_cast<const char*>(data_), size_}; }

 private:
  friend BufferRef ToBuffer(pybind11::handle, std::optional<size_t>, Access, bool, const char*);
  struct Release {
    void operator()(Py_buffer* b) const;
  };

  void* data_ = nullptr;
  size_t size_ = 0;
  std::unique_ptr<Py_buffer, Release> view_;  // a buffer-protocol export, or null
  pybind11::object owner_;                    // a data_ptr() object, or null
};

// The memory `obj` names, `size` bytes of it (nullopt: all of it). `allow_address`: an int is
// an address (and then `size` is required). `what` names the argument in error messages.
// Raises TypeError for an object that is none of the kinds above, granary.InvalidArgument for a
// size past the object's end, a non-contiguous object or a read-only destination, and
// granary.DevicePointer for a tensor that is not in host memory.
BufferRef ToBuffer(pybind11::handle obj, std::optional<size_t> size, Access access,
                   bool allow_address, const char* what);

// A size argument: None -> nullopt, a non-negative int -> its value; otherwise TypeError (not
// an int) or granary.InvalidArgument (negative).
std::optional<size_t> SizeArg(pybind11::handle size, const char* what);

}  // namespace granary::python
