# engine/core/version.h is regenerated on every build, but only rewritten when the git revision changes.
set(QVL_VERSION_HEADER "${CMAKE_BINARY_DIR}/generated/qvl/version.h")
add_custom_target(qvl_version_header
  COMMAND ${CMAKE_COMMAND} -DSRC=${CMAKE_SOURCE_DIR} -DOUT=${QVL_VERSION_HEADER} -DVERSION=${PROJECT_VERSION}
          -P ${CMAKE_SOURCE_DIR}/cmake/WriteVersion.cmake
  BYPRODUCTS ${QVL_VERSION_HEADER}
  COMMENT "" VERBATIM)
