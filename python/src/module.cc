// granary._granary: the extension module under the `granary` package (python/granary/).

#include "bindings.h"

PYBIND11_MODULE(_granary, m) {
  m.doc() =
      "The compiled part of the granary package: Client, EmbeddedNode, KvKey and the result "
      "types. Import "
      "`granary`, not this module.";
  granary::python::BindTypes(m);
  granary::python::BindClient(m);
  granary::python::BindEmbedded(m);
  granary::python::BindEngineStreamHooks(m);
}
