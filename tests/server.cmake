# ddpd's unit tests and fuzz target (issue 2).
ddp_unit_test(NAME test_jobstate SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_jobstate.c
  LIBS ddpserver ddpcommon)
ddp_unit_test(NAME test_nodestate SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_nodestate.c
  LIBS ddpserver ddpcommon)
ddp_unit_test(NAME test_sched SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sched.c
  LIBS ddpserver ddpcommon)
ddp_unit_test(NAME test_validate SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_validate.c
  LIBS ddpserver ddpcommon)
ddp_unit_test(NAME test_store SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_store.c
  LIBS ddpserver ddpcommon)
ddp_unit_test(NAME test_coord SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_coord.c
  LIBS ddpserver ddpcommon)
ddp_unit_test(NAME test_http SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_http.c
  LIBS ddpserver ddpcommon)
ddp_unit_test(NAME test_gate SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_gate.c
  LIBS ddpserver ddpcommon)
ddp_unit_test(NAME test_dqwire SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dqwire.c
  LIBS ddpserver ddpcommon)
# The dqlite client against real dqlite nodes (1 and 3), which the test forks itself.
if(DQLITE_FOUND)
  ddp_unit_test(NAME test_dqclient SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_dqclient.c
    LIBS ddpserver ddpcommon PkgConfig::DQLITE TIMEOUT 120 LABELS dqlite)
else()
  # Said at every test run, not only at configure time: ctest lists it as skipped.
  add_test(NAME test_dqclient COMMAND sh -c
    "echo 'test_dqclient: skipped, libdqlite not found (apt-get install libdqlite-dev libraft-dev)'; exit 77")
  set_tests_properties(test_dqclient PROPERTIES SKIP_RETURN_CODE 77 LABELS "unit;dqlite")
endif()
ddp_unit_test(NAME test_common SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_common.c
  LIBS ddpcommon)
# systemd's readiness datagram (ddpd's Type=notify), to a path and an abstract socket.
ddp_unit_test(NAME test_sdnotify SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sdnotify.c
  LIBS ddpcommon TIMEOUT 30)
# The clients' list of ddpd addresses and the redirect rule (common/srvlist).
ddp_unit_test(NAME test_srvlist SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_srvlist.c
  LIBS ddpcommon)

if(DDP_FUZZ)
  add_executable(fuzz_request ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_request.c)
  target_compile_options(fuzz_request PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_request PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_request PRIVATE ddpserver ddpcommon)
  set_target_properties(fuzz_request PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # libFuzzer writes new inputs into the first corpus folder: give it a scratch copy so the
  # seed corpus in the source tree stays as committed.
  add_test(NAME fuzz_request
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
            sh -c "rm -rf fuzz_request_work && mkdir fuzz_request_work && exec $<TARGET_FILE:fuzz_request> -max_total_time=25 -timeout=10 -rss_limit_mb=1024 fuzz_request_work ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/request_corpus"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set_tests_properties(fuzz_request PROPERTIES TIMEOUT 120 LABELS "fuzz")

  add_executable(fuzz_dqwire ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_dqwire.c)
  target_compile_options(fuzz_dqwire PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_dqwire PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_dqwire PRIVATE ddpserver ddpcommon)
  set_target_properties(fuzz_dqwire PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME fuzz_dqwire
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
            sh -c "rm -rf fuzz_dqwire_work && mkdir fuzz_dqwire_work && exec $<TARGET_FILE:fuzz_dqwire> -max_total_time=25 -timeout=10 -rss_limit_mb=1024 fuzz_dqwire_work ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/dqwire_corpus"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set_tests_properties(fuzz_dqwire PROPERTIES TIMEOUT 120 LABELS "fuzz")
endif()
