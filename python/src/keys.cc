#include "keys.h"

#include "absl/strings/str_cat.h"
#include "errors.h"
#include "granary/kv_key.h"

namespace py = pybind11;

namespace granary::python {

std::string KeyOf(py::handle key, const char* what) {
  PyObject* o = key.ptr();
  if (PyUnicode_Check(o)) {
    Py_ssize_t n = 0;
    const char* s = PyUnicode_AsUTF8AndSize(o, &n);
    if (s == nullptr) throw py::error_already_set();  // lone surrogates: UnicodeEncodeError
    return std::string(s, static_cast<size_t>(n));
  }
  if (PyBytes_Check(o)) return std::string(PyBytes_AS_STRING(o), PyBytes_GET_SIZE(o));
  if (py::isinstance<KvKey>(key)) {
    const KvKey& k = key.cast<const KvKey&>();
    Check(ValidateKvKey(k));
    return EncodeKvKey(k);
  }
  ThrowTypeError(absl::StrCat(what, " must be str, bytes or KvKey, not ", TypeName(key)));
}

std::vector<py::handle> ItemsOf(py::handle seq, const char* what, py::list* keep) {
  PyObject* o = seq.ptr();
  if (PyUnicode_Check(o) || PyBytes_Check(o) || !PySequence_Check(o)) {
    ThrowTypeError(absl::StrCat(what, " must be a list, not ", TypeName(seq)));
  }
  // A list holds its items alive while we look at them; any other sequence is copied into one.
  *keep = py::reinterpret_steal<py::list>(PySequence_List(o));
  if (!*keep) throw py::error_already_set();
  std::vector<py::handle> items;
  items.reserve(keep->size());
  for (py::handle h : *keep) items.push_back(h);
  return items;
}

std::vector<std::string> KeysOf(py::handle keys, const char* what) {
  py::list keep;
  std::vector<py::handle> items = ItemsOf(keys, what, &keep);
  std::vector<std::string> out;
  out.reserve(items.size());
  std::string item_what = absl::StrCat(what, " item");
  for (py::handle h : items) out.push_back(KeyOf(h, item_what.c_str()));
  return out;
}

py::object StrOrBytes(absl::string_view s) {
  PyObject* u = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), nullptr);
  if (u != nullptr) return py::reinterpret_steal<py::object>(u);
  PyErr_Clear();
  return py::bytes(s.data(), s.size());
}

}  // namespace granary::python
