granary_test(NAME device_checksum_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/checksum_test.cc LIBS granary::device)
# The `gpu` tests' TIMEOUTs are also bench/gpu_check.sh's limits on a lent GPU machine, whose
# whole check must stay under 8 minutes: keep them tight.
granary_test(NAME device_kv_layout_test LABELS unit gpu TIMEOUT 60
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/kv_layout_test.cc LIBS granary::device granary::device_fake)
# The same binary with the facade on the fake backend: the GPU half runs on CPU-only machines.
add_test(NAME device_kv_layout_fake_test COMMAND device_kv_layout_test)
set_tests_properties(device_kv_layout_fake_test PROPERTIES LABELS "unit" TIMEOUT 300
  ENVIRONMENT "GRANARY_DEVICE_BACKEND=fake")

# The second process of the backend tests (IPC, the backend choice from the environment).
add_executable(device_backend_ipc_helper ${CMAKE_CURRENT_LIST_DIR}/backend_ipc_helper.cc)
target_link_libraries(device_backend_ipc_helper PRIVATE granary::device granary::device_fake
  granary::internal absl::strings)
set_target_properties(device_backend_ipc_helper PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)

# The backend bodies on the fake (everywhere; its streams are threads, so also under TSan) and on
# the CUDA runtime (label gpu; skips without a device).
foreach(_backend fake cuda)
  if(_backend STREQUAL "fake")
    set(_labels unit tsan)
    set(_libs granary::device_fake)
  else()
    set(_labels gpu)
    set(_libs "")
  endif()
  granary_test(NAME device_backend_${_backend}_test LABELS ${_labels}
    SOURCES ${CMAKE_CURRENT_LIST_DIR}/backend_${_backend}_test.cc
    LIBS granary::device ${_libs} granary::common absl::strings)
  target_compile_definitions(device_backend_${_backend}_test PRIVATE
    GRANARY_BACKEND_IPC_HELPER="$<TARGET_FILE:device_backend_ipc_helper>")
  add_dependencies(device_backend_${_backend}_test device_backend_ipc_helper)
endforeach()
set_tests_properties(device_backend_cuda_test PROPERTIES TIMEOUT 60)

# A stand-in driver (libcuda.so.1 in a folder of its own) that logs every call: the fake backend
# test runs the helper on it to see that choosing a backend and classifying memory initialize
# nothing.
add_library(granary_stub_libcuda SHARED ${CMAKE_CURRENT_LIST_DIR}/stub_libcuda.cc)
set_target_properties(granary_stub_libcuda PROPERTIES OUTPUT_NAME cuda SUFFIX .so.1
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests/stub_libcuda)
add_dependencies(device_backend_fake_test granary_stub_libcuda)
target_compile_definitions(device_backend_fake_test PRIVATE
  GRANARY_STUB_LIBCUDA_DIR="${CMAKE_BINARY_DIR}/tests/stub_libcuda")

# The backend choice in a binary without the fake: GRANARY_DEVICE_BACKEND=fake is refused, naming
# the value and the build option that links it in.
granary_test(NAME device_backend_choice_test LABELS unit
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/backend_choice_test.cc LIBS granary::device)

# The fake is test code: never in libgranary.so, and in granary_node (and the Python module) only
# with GRANARY_DEVICE_FAKE.
set(_granary_fake_linkage $<TARGET_FILE:granary_client_shared> never
  $<TARGET_FILE:granary_node> $<IF:$<BOOL:${GRANARY_DEVICE_FAKE}>,always,never>)
if(TARGET granary_python)
  list(APPEND _granary_fake_linkage $<TARGET_FILE:granary_python>
    $<IF:$<BOOL:${GRANARY_DEVICE_FAKE}>,always,never>)
endif()
add_test(NAME device_fake_linkage_test
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/fake_linkage_test.sh ${_granary_fake_linkage})
set_tests_properties(device_fake_linkage_test PROPERTIES LABELS "unit" TIMEOUT 60)
