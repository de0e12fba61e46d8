# Run at every build (cmake -P, from the ddp_version target of cmake/DdpVersion.cmake): writes
# OUT from TEMPLATE with DDP_VERSION and the short git commit of SRC ("unknown" when SRC is no
# git checkout or git is missing). configure_file rewrites OUT only when its text changes, so
# the binaries are relinked only when the commit moved.
set(DDP_COMMIT unknown)
find_program(DDP_GIT git)
if(DDP_GIT)
  # Only SRC's own checkout: a source tarball unpacked inside another git repository must not
  # report that repository's commit.
  execute_process(COMMAND ${DDP_GIT} -C ${SRC} rev-parse --show-toplevel
                  OUTPUT_VARIABLE top RESULT_VARIABLE rc ERROR_QUIET
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(rc EQUAL 0)
    get_filename_component(top "${top}" REALPATH)
    get_filename_component(src "${SRC}" REALPATH)
  endif()
  if(rc EQUAL 0 AND top STREQUAL src)
    execute_process(COMMAND ${DDP_GIT} -C ${SRC} rev-parse --short=7 HEAD
                    OUTPUT_VARIABLE out RESULT_VARIABLE rc ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0 AND out MATCHES "^[0-9a-f]+$")
      set(DDP_COMMIT ${out})
    endif()
  endif()
endif()
configure_file(${TEMPLATE} ${OUT} @ONLY)
