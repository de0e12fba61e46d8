# ddp-agent: unit tests of its modules and integration tests against a real ddpd.
ddp_unit_test(NAME test_recon SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_recon.c LIBS ddpagent)
ddp_unit_test(NAME test_logship SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_logship.c
              LIBS ddpagent)
ddp_unit_test(NAME test_assign SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_assign.c
              LIBS ddpagent)
ddp_unit_test(NAME test_spawn SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_spawn.c LIBS ddpagent)
ddp_unit_test(NAME test_errfile SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_errfile.c LIBS ddpagent)
ddp_unit_test(NAME test_cgroup SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_cgroup.c
              LIBS ddpagent)
ddp_unit_test(NAME test_usermap SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_usermap.c
              LIBS ddpagent)

set(DDP_AGENT_PY ${PROJECT_SOURCE_DIR}/tests/integration)
foreach(t env cancel kill reconnect orphan preempt dupname flags multiserver)
  ddp_script_test(NAME agent_${t}
    COMMAND /usr/bin/python3 ${DDP_AGENT_PY}/test_agent_${t}.py TIMEOUT 240 LABELS agent)
endforeach()
# Job cgroups, for each writable hierarchy (skipped, exit 77, when not root or none is).
ddp_script_test(NAME agent_cgroup
  COMMAND /usr/bin/python3 ${DDP_AGENT_PY}/test_agent_cgroup.py TIMEOUT 240 LABELS agent)
set_tests_properties(agent_cgroup PROPERTIES SKIP_RETURN_CODE 77)
# Jobs run as their owners' local accounts (skipped, exit 77, when not root or the accounts
# nobody and daemon are missing).
ddp_script_test(NAME agent_runas
  COMMAND /usr/bin/python3 ${DDP_AGENT_PY}/test_agent_runas.py TIMEOUT 240 LABELS agent)
set_tests_properties(agent_runas PROPERTIES SKIP_RETURN_CODE 77)

# Fuzz target: the agent's parsers compiled into the target for coverage and sanitizers.
if(DDP_FUZZ)
  add_executable(fuzz_agent ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_agent.c
    ${PROJECT_SOURCE_DIR}/agent/assign.c ${PROJECT_SOURCE_DIR}/agent/logship.c)
  target_include_directories(fuzz_agent PRIVATE ${PROJECT_SOURCE_DIR})
  target_compile_options(fuzz_agent PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_agent PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_agent PRIVATE ddpcommon)
  set_target_properties(fuzz_agent PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # libFuzzer writes new inputs into its first corpus folder: a scratch copy keeps the
  # committed seed corpus as it is.
  add_test(NAME fuzz_agent
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
            sh -c "rm -rf fuzz_agent_work && mkdir fuzz_agent_work && exec $<TARGET_FILE:fuzz_agent> -max_total_time=25 -timeout=10 -rss_limit_mb=1024 fuzz_agent_work ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/agent_corpus"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set_tests_properties(fuzz_agent PROPERTIES TIMEOUT 120 LABELS "fuzz")
endif()

# An unmodified PyTorch DDP script under the agents (skipped where PyTorch is missing).
ddp_script_test(NAME agent_torch
  COMMAND /usr/bin/python3 ${DDP_AGENT_PY}/test_agent_torch.py TIMEOUT 400 LABELS "agent;heavy")
set_tests_properties(agent_torch PROPERTIES SKIP_RETURN_CODE 77)
# deploy/slurm/ddp.sbatch on a real Slurm (slurm-wlm and munge on loopback: slurmctld and two
# slurmd): success, failure, scancel, requeue (skipped, exit 77, where Slurm is missing or
# not root). About 25 s, in the plain pass; heavy, so not under ASan: what it tests is the
# shell script and Slurm, and the agents' code runs under ASan in the agent_* tests.
ddp_script_test(NAME slurm_recipe
  COMMAND /usr/bin/python3 ${DDP_AGENT_PY}/test_slurm_recipe.py TIMEOUT 240
  LABELS "agent;slurm;heavy")
set_tests_properties(slurm_recipe PROPERTIES SKIP_RETURN_CODE 77)
