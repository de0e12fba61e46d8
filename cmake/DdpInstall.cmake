# install(): ddp as a package (cmake --install build --prefix P, or DESTDIR=... for a staging
# tree). Included by the top-level CMakeLists.txt after every part, so the targets exist.
#
#   sbin/ddpd, sbin/ddp-agent           the daemons
#   bin/ddpctl, bin/ddp-worker          the command line and the training program
#   lib/libddp.so.*, lib/libddp.a       libddp, shared and static (libddpcommon's objects in
#                                       both: the public headers use common/err.h)
#   lib/libddpgpu.so, libddptrainergpu.so  the GPU parts, where CUDA was found (see below)
#   lib/pkgconfig/ddp.pc                pkg-config (--static for the static library)
#   include/ddp/*.h                     the public headers, with include/ddp/common/{err,
#                                       exitcodes}.h, which they include as "common/x.h"
#   share/man/man{1,8}                  ddpctl(1), ddp-worker(1), ddpd(8), ddp-agent(8)
#   share/bash-completion/completions/ddpctl, share/zsh/site-functions/_ddpctl
#   lib/systemd/system/*.service        deploy/systemd's units, ExecStart set to this prefix
#   share/doc/ddp                       README.md and docs/
#
# The GPU parts are not linked but loaded with dlopen at run time (libddp/gpu/gpu_load.c,
# trainer/gpu/model_gpu_load.c): by name, through the loader's search path. So every installed
# binary and libddp.so carry a RUNPATH to the installed library folder, relative to themselves
# ($ORIGIN/../lib), and the prefix can move as a whole. ("lib" is CMAKE_INSTALL_LIBDIR: lib64 or
# lib/<multiarch> on some systems.)
include(GNUInstallDirs)

set(DDP_SYSTEMD_UNIT_DIR "lib/systemd/system" CACHE STRING
    "Where the systemd units go, relative to the install prefix (or absolute)")

# The library folder as seen from a folder of binaries, for $ORIGIN.
function(ddp_origin_rpath out from_dir)
  file(RELATIVE_PATH rel ${CMAKE_INSTALL_PREFIX}/${from_dir} ${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR})
  set(${out} "$ORIGIN/${rel}" PARENT_SCOPE)
endfunction()
ddp_origin_rpath(DDP_RPATH_BIN ${CMAKE_INSTALL_BINDIR})
ddp_origin_rpath(DDP_RPATH_SBIN ${CMAKE_INSTALL_SBINDIR})

# ---- libddp, shared and static ----------------------------------------------------------
set(DDP_DIST_OBJECTS $<TARGET_OBJECTS:ddpobj> $<TARGET_OBJECTS:ddpcommonobj>)
set(DDP_DIST_LIBS PkgConfig::OPENBLAS PkgConfig::ZLIB PkgConfig::JANSSON PkgConfig::CURL
    Threads::Threads m rt ${CMAKE_DL_LIBS})
add_library(ddp_shared SHARED ${DDP_DIST_OBJECTS})
target_link_libraries(ddp_shared PRIVATE ${DDP_DIST_LIBS})
set_target_properties(ddp_shared PROPERTIES OUTPUT_NAME ddp VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR} INSTALL_RPATH "$ORIGIN")
# The static one is libddp.a too: built in a folder of its own, beside the in-tree libddp.a
# (which holds libddp's objects only; our programs link libddpcommon.a apart).
add_library(ddp_static STATIC ${DDP_DIST_OBJECTS})
set_target_properties(ddp_static PROPERTIES OUTPUT_NAME ddp
                      ARCHIVE_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib/dist)

# Each only where its part is in the tree (tests/layering.sh builds libddp without trainer/).
foreach(exe ddpd ddp-agent ddpctl ddp-worker)
  if(NOT TARGET ${exe})
    continue()
  endif()
  if(exe MATCHES "^(ddpd|ddp-agent)$")
    install(TARGETS ${exe} RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR})
    set_target_properties(${exe} PROPERTIES INSTALL_RPATH "${DDP_RPATH_SBIN}")
  else()
    install(TARGETS ${exe} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
    set_target_properties(${exe} PROPERTIES INSTALL_RPATH "${DDP_RPATH_BIN}")
  endif()
endforeach()
install(TARGETS ddp_shared ddp_static
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET ddpgpu)
  install(TARGETS ddpgpu LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
if(TARGET ddptrainergpu)
  install(TARGETS ddptrainergpu LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

file(GLOB DDP_PUBLIC_HEADERS ${PROJECT_SOURCE_DIR}/libddp/include/ddp/*.h)
install(FILES ${DDP_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ddp)
install(FILES ${PROJECT_SOURCE_DIR}/common/err.h ${PROJECT_SOURCE_DIR}/common/exitcodes.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/ddp/common)

# ddp.pc: the prefix found from the file's own place (${pcfiledir}), so that it is right for
# the --prefix given to cmake --install (not only the configured one) and a moved prefix.
if(IS_ABSOLUTE ${CMAKE_INSTALL_LIBDIR})
  set(DDP_PC_PREFIX ${CMAKE_INSTALL_PREFIX})
else()
  file(RELATIVE_PATH rel /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
  string(REGEX REPLACE "/$" "" rel "${rel}")
  set(DDP_PC_PREFIX "\${pcfiledir}/${rel}")
endif()
foreach(kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE ${CMAKE_INSTALL_${kind}})
    set(DDP_PC_${kind} ${CMAKE_INSTALL_${kind}})
  else()
    set(DDP_PC_${kind} "\${prefix}/${CMAKE_INSTALL_${kind}}")
  endif()
endforeach()
set(DDP_PC_CFLAGS "")
set(DDP_PC_LIBS_PRIVATE "")
if(DDP_HAVE_CUDA)
  set(DDP_PC_CFLAGS " -DDDP_HAVE_CUDA")
endif()
if(CMAKE_DL_LIBS)
  set(DDP_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")
endif()
configure_file(${PROJECT_SOURCE_DIR}/cmake/ddp.pc.in ${CMAKE_BINARY_DIR}/ddp.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/ddp.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# ---- man pages, completion, units, docs -------------------------------------------------
install(FILES ${PROJECT_SOURCE_DIR}/man/ddpctl.1 ${PROJECT_SOURCE_DIR}/man/ddp-worker.1
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_SOURCE_DIR}/man/ddpd.8 ${PROJECT_SOURCE_DIR}/man/ddp-agent.8
        DESTINATION ${CMAKE_INSTALL_MANDIR}/man8)
install(FILES ${PROJECT_SOURCE_DIR}/cli/completion/ddpctl.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME ddpctl)
install(FILES ${PROJECT_SOURCE_DIR}/cli/completion/_ddpctl
        DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/site-functions)

# deploy/systemd names /usr/local/bin (its README copies the binaries there by hand); the
# installed units name where this install put them, which is known only at install time
# (cmake --install --prefix P): cmake/DdpInstallUnits.cmake writes them then.
install(CODE "set(DDP_UNIT_SRC \"${PROJECT_SOURCE_DIR}/deploy/systemd\")
set(DDP_UNIT_DIR \"${DDP_SYSTEMD_UNIT_DIR}\")
set(DDP_SBINDIR \"${CMAKE_INSTALL_SBINDIR}\")
set(DDP_DOCDIR \"${CMAKE_INSTALL_DOCDIR}\")
include(\"${PROJECT_SOURCE_DIR}/cmake/DdpInstallUnits.cmake\")")

file(GLOB DDP_DOCS ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${DDP_DOCS} DESTINATION ${CMAKE_INSTALL_DOCDIR})
