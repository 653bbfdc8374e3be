# The device check without a device: bench/gpu_check.sh --dry-run on the fake backend, from a
# bundle of what this build already has (it builds nothing), so the script, the bundle, the test
# list and the timing harness cannot rot where CI has no GPU. Its binaries must carry the fake
# (GRANARY_DEVICE_FAKE).
if(TARGET granary_gpu_check AND GRANARY_DEVICE_FAKE)
  add_test(NAME gpu_check_dry_run
    COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/dry_run.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(gpu_check_dry_run PROPERTIES LABELS "gpu_check" TIMEOUT 180)
endif()
