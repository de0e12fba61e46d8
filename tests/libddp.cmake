# libddp (the runtime): environment, rendezvous store, CPU ring and shared-memory all-reduce,
# sampler, checkpoint, resume, reducer.
ddp_unit_test(NAME test_sampler SOURCES unit/test_sampler.c LIBS ddp TIMEOUT 60)
ddp_unit_test(NAME test_shard SOURCES unit/test_shard.c LIBS ddp TIMEOUT 30)
ddp_unit_test(NAME test_ckpt SOURCES unit/test_ckpt.c LIBS ddp TIMEOUT 60)
ddp_unit_test(NAME test_ckpt_shard SOURCES unit/test_ckpt_shard.c LIBS ddp TIMEOUT 60)
ddp_unit_test(NAME test_reducer SOURCES unit/test_reducer.c unit/testutil.c LIBS ddp TIMEOUT 120)
# The resume protocol: ranks as forked processes on loopback, a checkpoint folder each.
ddp_unit_test(NAME test_resume SOURCES unit/test_resume.c unit/testutil.c LIBS ddp TIMEOUT 120)
ddp_unit_test(NAME test_env SOURCES unit/test_env.c LIBS ddp TIMEOUT 30)
ddp_unit_test(NAME test_rdzv SOURCES unit/test_rdzv.c unit/testutil.c LIBS ddp TIMEOUT 60)
add_test(NAME test_rdzv_heavy COMMAND test_rdzv heavy)
set_tests_properties(test_rdzv_heavy PROPERTIES TIMEOUT 180 LABELS "unit;heavy")
ddp_unit_test(NAME test_comm_cpu SOURCES unit/test_comm_cpu.c unit/testutil.c LIBS ddp TIMEOUT 180)
# The same binary's long cases (10^7 elements, killed and stopped peer processes).
add_test(NAME test_comm_cpu_heavy COMMAND test_comm_cpu heavy)
set_tests_properties(test_comm_cpu_heavy PROPERTIES TIMEOUT 300 LABELS "unit;heavy")
# The shared-memory and hierarchical transports (ranks as forked processes).
ddp_unit_test(NAME test_comm_shm SOURCES unit/test_comm_shm.c unit/testutil.c LIBS ddp TIMEOUT 300)

if(DDP_FUZZ)
  # The rendezvous server's parser, through a real loopback socket (see fuzz_rdzv.c).
  add_executable(fuzz_rdzv ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_rdzv.c
    ${PROJECT_SOURCE_DIR}/libddp/rdzv.c ${PROJECT_SOURCE_DIR}/libddp/rdzv_server.c
    ${PROJECT_SOURCE_DIR}/libddp/rdzv_wire.c ${PROJECT_SOURCE_DIR}/libddp/net.c)
  target_include_directories(fuzz_rdzv PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/libddp/include)
  target_compile_options(fuzz_rdzv PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_rdzv PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_rdzv PRIVATE ddpcommon Threads::Threads)
  set_target_properties(fuzz_rdzv PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # libFuzzer writes new inputs into its first corpus folder: a scratch copy keeps the
  # committed seed corpus as it is.
  add_test(NAME fuzz_rdzv
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
            sh -c "rm -rf fuzz_rdzv_work && mkdir fuzz_rdzv_work && exec $<TARGET_FILE:fuzz_rdzv> -max_total_time=25 -runs=15000 -timeout=10 -rss_limit_mb=2048 fuzz_rdzv_work ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/rdzv_corpus"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set_tests_properties(fuzz_rdzv PROPERTIES TIMEOUT 120 LABELS "fuzz")
endif()
