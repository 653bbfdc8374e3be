#pragma once

// Keys at the binding boundary. A key is a str (stored as its UTF-8 bytes), bytes, or a
// granary.KvKey (stored as its canonical encoding, granary/kv_key.h). Strings coming back
// (ObjectInfo.key, ...) are str when they are valid UTF-8 and bytes otherwise. Call with the GIL
// held.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "pybind11/pybind11.h"

namespace granary::python {

// One key; TypeError naming `what` for anything else, granary.InvalidArgument for an invalid
// KvKey.
std::string KeyOf(pybind11::handle key, const char* what = "key");

// A list (any sequence but str/bytes) of keys.
std::vector<std::string> KeysOf(pybind11::handle keys, const char* what = "keys");

// A sequence argument as a list of its items (TypeError for str, bytes or a non-sequence).
std::vector<pybind11::handle> ItemsOf(pybind11::handle seq, const char* what, pybind11::list* keep);

// `s` as str if it is valid UTF-8, else as bytes.
pybind11::object StrOrBytes(absl::string_view s);

}  // namespace granary::python
