# ddp-agent: unit tests of its modules and integration tests against a real ddpd.
ddp_unit_test(NAME test_recon SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_recon.c LIBS ddpagent)
ddp_unit_test(NAME test_logship SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_logship.c
              LIBS ddpagent)
ddp_unit_test(NAME test_assign SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_assign.c
              LIBS ddpagent)
ddp_unit_test(NAME test_spawn SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_spawn.c LIBS ddpagent)

set(DDP_AGENT_PY ${PROJECT_SOURCE_DIR}/tests/integration)
foreach(t env cancel kill reconnect)
  ddp_script_test(NAME agent_${t}
    COMMAND /usr/bin/python3 ${DDP_AGENT_PY}/test_agent_${t}.py TIMEOUT 240 LABELS agent)
endforeach()
