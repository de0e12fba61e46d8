# Test helpers shared by every part's tests/*.cmake file.
#
# ddp_unit_test(NAME <test_x> SOURCES <files...> [LIBS <targets...>] [TIMEOUT <s>] [LABELS <l...>])
#   builds a cmocka binary from tests/unit and registers it with ctest under a timeout.
# ddp_script_test(NAME <name> COMMAND <cmd...> [TIMEOUT <s>] [LABELS <l...>])
#   registers an integration test (a script driving real processes) with ctest.
#   Scripts get DDP_BIN (the folder with our binaries) and DDP_SRC (the source tree).
function(ddp_unit_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  if(NOT CMOCKA_FOUND)
    message(FATAL_ERROR "cmocka is needed for the unit tests (apt-get install libcmocka-dev)")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 60)
  endif()
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} PkgConfig::CMOCKA)
  target_include_directories(${T_NAME} PRIVATE ${PROJECT_SOURCE_DIR})
  set_target_properties(${T_NAME} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME})
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "unit;${T_LABELS}")
endfunction()

function(ddp_script_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  add_test(NAME ${T_NAME} COMMAND ${T_COMMAND})
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "integration;${T_LABELS}"
    ENVIRONMENT "DDP_BIN=${CMAKE_BINARY_DIR}/bin;DDP_SRC=${PROJECT_SOURCE_DIR};DDP_BUILD=${CMAKE_BINARY_DIR}")
endfunction()
