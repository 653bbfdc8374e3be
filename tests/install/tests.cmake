# The installed package: install into a temporary prefix, build a consumer with
# find_package(granary), and put/get through it against the installed daemons.
add_test(NAME install_consumer_test
  COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/install_test.sh ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR})
set_tests_properties(install_consumer_test PROPERTIES LABELS "install" TIMEOUT 300)
