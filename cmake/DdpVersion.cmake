# The version every binary prints with --version: project(VERSION) and the git commit, baked
# into a generated header (<build>/generated/ddp_version.h) by cmake/DdpVersionGen.cmake at
# every build, not only at configure time, so a new commit shows without a new configure.
#
# ddp_version_use(<target>) lets the target include "ddp_version.h" and builds the header
# before it.
set(DDP_VERSION_DIR ${CMAKE_BINARY_DIR}/generated)
set(DDP_VERSION_H ${DDP_VERSION_DIR}/ddp_version.h)
add_custom_target(ddp_version
  COMMAND ${CMAKE_COMMAND} -DSRC=${PROJECT_SOURCE_DIR} -DOUT=${DDP_VERSION_H}
          -DDDP_VERSION=${PROJECT_VERSION}
          -DTEMPLATE=${PROJECT_SOURCE_DIR}/cmake/ddp_version.h.in
          -P ${PROJECT_SOURCE_DIR}/cmake/DdpVersionGen.cmake
  BYPRODUCTS ${DDP_VERSION_H}
  COMMENT "Writing ddp_version.h (version and git commit)"
  VERBATIM)

function(ddp_version_use target)
  add_dependencies(${target} ddp_version)
  target_include_directories(${target} PRIVATE ${DDP_VERSION_DIR})
endfunction()
