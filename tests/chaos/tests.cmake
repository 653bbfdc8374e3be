granary_test(NAME chaos_test LABELS chaos TIMEOUT 600
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/chaos_test.cc LIBS granary_test_cluster)
add_dependencies(chaos_test granary_master granary_node put_start_hang)
# The same run with HA: two masters on an etcd of the test's own, the master fault a kill -9 of
# the leader (the standby takes over; the killed one returns as the next standby). Shorter, to
# keep CI's time: each failover costs the 2 s lease and the post-takeover quarantine.
add_test(NAME chaos_ha_test COMMAND chaos_test)
set_tests_properties(chaos_ha_test PROPERTIES LABELS "chaos" TIMEOUT 600
  ENVIRONMENT "GRANARY_BIN_DIR=${CMAKE_BINARY_DIR}/bin;GRANARY_CHAOS_HA=1;GRANARY_CHAOS_SECONDS=75")
