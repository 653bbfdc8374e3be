# libFuzzer targets (fuzz/): each test builds the standalone fuzz project with clang++ (first run
# configures build-fuzz/, later runs are incremental) and fuzzes one target for
# GRANARY_FUZZ_SECONDS seconds from its committed seed corpus. Skipped (exit 77) when clang++ or
# the libFuzzer runtime (libclang-rt-14-dev) is missing. RUN_SERIAL keeps two tests from
# building the shared build-fuzz/ directory at once.
if(NOT DEFINED GRANARY_FUZZ_SECONDS)
  set(GRANARY_FUZZ_SECONDS 20)
endif()
foreach(_fuzz_target frame policy size admin_body kv_key handshake)
  add_test(NAME fuzz_${_fuzz_target}
    COMMAND bash ${PROJECT_SOURCE_DIR}/fuzz/run.sh ${_fuzz_target} ${GRANARY_FUZZ_SECONDS})
  set_tests_properties(fuzz_${_fuzz_target} PROPERTIES LABELS fuzz TIMEOUT 900
    SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
endforeach()
