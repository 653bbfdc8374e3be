# Installation and the exported CMake package.
#
#   find_package(granary REQUIRED)
#   target_link_libraries(app PRIVATE granary::client)
#
# granary::client is libgranary.so: the client library with everything under src/ (transport,
# proto, common) and UCX linked into it privately. Its interface is include/granary/ alone, plus
# the abseil status types those headers use (found again by the package's config file). The
# daemons (granary_master, granary_node) and the CLI (granary) install to bin/.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

add_library(granary_client_shared SHARED $<TARGET_OBJECTS:granary_client>)
set_target_properties(granary_client_shared PROPERTIES
  OUTPUT_NAME granary
  EXPORT_NAME client
  VERSION ${PROJECT_VERSION}
  SOVERSION ${PROJECT_VERSION_MAJOR}
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
# The internal libraries are static and position-independent: they are linked into the shared
# library and are not part of its interface.
target_link_libraries(granary_client_shared
  PRIVATE granary::link granary::transport granary::proto granary::common granary::etcd
  granary::device
  nlohmann_json::nlohmann_json
  ${CMAKE_DL_LIBS}
  PUBLIC absl::status absl::statusor absl::strings)
target_include_directories(granary_client_shared PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
add_library(granary::client_shared ALIAS granary_client_shared)

install(TARGETS granary_client_shared EXPORT granaryTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# embedded_node.h stays out: EmbeddedNode lives in granary_embedded (the node, linked into the
# Python module), not in libgranary.so.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/granary DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
  PATTERN "embedded_node.h" EXCLUDE)
install(TARGETS granary_master granary_node granary RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT granaryTargets NAMESPACE granary:: FILE granaryTargets.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/granary)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/granaryConfig.cmake.in
  ${CMAKE_BINARY_DIR}/granaryConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/granary)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/granaryConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/granaryConfig.cmake ${CMAKE_BINARY_DIR}/granaryConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/granary)
