# Run by cmake --install (install(CODE) of cmake/DdpInstall.cmake): writes deploy/systemd's
# units into DDP_UNIT_DIR with ExecStart and Documentation naming this install's sbin and doc
# folders. Set by the caller: DDP_UNIT_SRC, DDP_UNIT_DIR, DDP_SBINDIR, DDP_DOCDIR (each
# relative to the prefix, or absolute). CMAKE_INSTALL_PREFIX and DESTDIR are the install's.
foreach(var DDP_UNIT_DIR DDP_SBINDIR DDP_DOCDIR)
  if(IS_ABSOLUTE "${${var}}")
    set(${var}_FULL "${${var}}")
  else()
    set(${var}_FULL "${CMAKE_INSTALL_PREFIX}/${${var}}")
  endif()
endforeach()
foreach(unit ddpd ddp-agent)
  file(READ "${DDP_UNIT_SRC}/${unit}.service" text)
  string(REPLACE "/usr/local/bin/" "${DDP_SBINDIR_FULL}/" text "${text}")
  string(REPLACE "file:///usr/local/share/doc/ddp/" "file://${DDP_DOCDIR_FULL}/" text "${text}")
  set(dest "$ENV{DESTDIR}${DDP_UNIT_DIR_FULL}/${unit}.service")
  message(STATUS "Installing: ${dest}")
  file(WRITE "${dest}" "${text}")
endforeach()
