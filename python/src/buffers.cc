#include "buffers.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "errors.h"

namespace py = pybind11;

namespace granary::python {

void BufferRef::Release::operator()(Py_buffer* b) const {
  PyBuffer_Release(b);
  delete b;
}

std::optional<size_t> SizeArg(py::handle size, const char* what) {
  if (size.is_none()) return std::nullopt;
  if (!PyLong_Check(size.ptr()) || PyBool_Check(size.ptr())) {
    ThrowTypeError(absl::StrCat(what, " must be an int or None, not ", TypeName(size)));
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(size.ptr(), &overflow);
  if (overflow != 0 || v < 0) {
    ThrowInvalidArgument(absl::StrCat(what, " ", py::str(size).cast<std::string>(),
                                      " is not a valid size: a size is a whole number of bytes "
                                      "from 0 to the buffer's length (None: the whole buffer)"));
  }
  return static_cast<size_t>(v);
}

namespace {

// A size must fit inside the object it refers to.
size_t FitSize(std::optional<size_t> size, size_t available, const char* what) {
  if (!size.has_value()) return available;
  if (*size > available) {
    ThrowInvalidArgument(
        absl::StrCat("size ", *size, " is larger than the ", what, " (", available, " bytes)"));
  }
  return *size;
}

uintptr_t AddressOf(py::handle obj, const char* what) {
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
  if (overflow != 0 || v <= 0) {
    // Addresses above 2^63 are not user-space addresses on any platform Granary runs on.
    ThrowInvalidArgument(absl::StrCat(what, " address ", py::str(obj).cast<std::string>(),
                                      " is not a valid address"));
  }
  return static_cast<uintptr_t>(v);
}

// The byte size of a torch-like object: nbytes, or element_size() * numel().
size_t TensorBytes(py::handle obj) {
  if (py::hasattr(obj, "nbytes")) return obj.attr("nbytes").cast<size_t>();
  return obj.attr("element_size")().cast<size_t>() * obj.attr("numel")().cast<size_t>();
}

// A torch-like object must be contiguous host memory.
void CheckTensor(py::handle obj, uintptr_t ptr, const char* what) {
  if (py::hasattr(obj, "is_cuda") && py::bool_(obj.attr("is_cuda"))) {
    ThrowError("INVALID_ARGUMENT", "DEVICE_POINTER",
               absl::StrCat(what, " at 0x", absl::Hex(ptr),
                            " is CUDA device memory: Granary has no GPU path for it yet, and "
                            "never copies device memory on the CPU"));
  }
  if (py::hasattr(obj, "device")) {
    py::object device = obj.attr("device");
    if (py::hasattr(device, "type") && device.attr("type").cast<std::string>() != "cpu") {
      ThrowInvalidArgument(absl::StrCat(
          what, " is on device '", py::str(device).cast<std::string>(), "', not in host memory"));
    }
  }
  if (py::hasattr(obj, "is_contiguous") && !py::bool_(obj.attr("is_contiguous")())) {
    ThrowInvalidArgument(absl::StrCat(what, " is not contiguous (call .contiguous() first)"));
  }
}

}  // namespace

BufferRef ToBuffer(py::handle obj, std::optional<size_t> size, Access access, bool allow_address,
                   const char* what) {
  BufferRef ref;
  PyObject* o = obj.ptr();
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    if (!allow_address) {
      ThrowTypeError(absl::StrCat(what, " must be a bytes-like object, not int"));
    }
    if (!size.has_value()) {
      ThrowTypeError(absl::StrCat("size is required when ", what, " is an int address"));
    }
    ref.data_ = reinterpret_cast<void*>(AddressOf(obj, what));
    ref.size_ = *size;
    return ref;
  }
  if (PyObject_CheckBuffer(o)) {
    std::unique_ptr<Py_buffer, BufferRef::Release> view(new Py_buffer);
    if (PyObject_GetBuffer(o, view.get(), PyBUF_ANY_CONTIGUOUS) != 0) {
      delete view.release();
      py::error_already_set e;  // BufferError: not contiguous, or the like
      ThrowInvalidArgument(absl::StrCat(what, ": ", e.what()));
    }
    if (access == Access::kWrite && view->readonly) {
      ThrowInvalidArgument(
          absl::StrCat(what, " (", TypeName(obj), ") is read-only and cannot be a destination"));
    }
    ref.data_ = view->buf;
    ref.size_ = FitSize(size, static_cast<size_t>(view->len), what);
    ref.view_ = std::move(view);
    return ref;
  }
  if (py::hasattr(obj, "data_ptr")) {
    uintptr_t ptr = obj.attr("data_ptr")().cast<uintptr_t>();
    CheckTensor(obj, ptr, what);
    ref.data_ = reinterpret_cast<void*>(ptr);
    ref.size_ = FitSize(size, TensorBytes(obj), what);
    ref.owner_ = py::reinterpret_borrow<py::object>(obj);
    return ref;
  }
  ThrowTypeError(absl::StrCat(what, " must be ", allow_address ? "an int address, " : "",
                              "a buffer-protocol object or a tensor, not ", TypeName(obj)));
}

}  // namespace granary::python
