# Private headers, per target. The headers under src/ (included as "module/file.h") are private
# to this tree, and no target passes their folder on to whoever links it: each library and
# program that includes them says so itself (granary_private_headers, PRIVATE), so linking
# granary::client gives a consumer include/granary/ and nothing else. Tests and benchmarks,
# which reach into the modules on purpose, link granary::internal instead: the include roots
# of src/, include/ and the project root (for the shared test helpers, "tests/...").

# granary_private_headers(TARGET): TARGET's own sources include "module/file.h" from src/ and
# "granary/file.h" from include/.
function(granary_private_headers target)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src
    ${PROJECT_SOURCE_DIR}/include)
endfunction()

# For tests and benchmarks only; nothing that is installed or linked into the Python module
# links it.
add_library(granary_internal INTERFACE)
add_library(granary::internal ALIAS granary_internal)
target_include_directories(granary_internal INTERFACE ${PROJECT_SOURCE_DIR}/src
  ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR})
