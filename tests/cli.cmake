# Unit tests of ddpctl's helpers, and integration tests of ddpctl (issue 3): the real binary against a real ddpd, agents simulated
# by the tests with register/heartbeat (tests/integration/api_sim.py); see test_cli_*.py.
ddp_unit_test(NAME test_cli SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_cli.c LIBS ddpcli
  TIMEOUT 30)
set(DDP_CLI_PY ${PROJECT_SOURCE_DIR}/tests/integration)
ddp_script_test(NAME cli_commands
  COMMAND /usr/bin/python3 ${DDP_CLI_PY}/test_cli_commands.py TIMEOUT 180 LABELS cli)
ddp_script_test(NAME cli_follow
  COMMAND /usr/bin/python3 ${DDP_CLI_PY}/test_cli_follow.py TIMEOUT 180 LABELS cli)
# logs --tail N (with --rank, -o json, -f) and its usage errors.
ddp_script_test(NAME cli_logtail
  COMMAND /usr/bin/python3 ${DDP_CLI_PY}/test_cli_logtail.py TIMEOUT 120 LABELS cli)
# Several ddpd addresses: fake replicas (tests/integration/front.py) that redirect, refuse or
# close, before the real ddpd in the --server list.
ddp_script_test(NAME cli_multiserver
  COMMAND /usr/bin/python3 ${DDP_CLI_PY}/test_cli_multiserver.py TIMEOUT 180 LABELS cli)
# ddpctl cluster status|add|remove against real ddpd --cluster replicas (dqlite) on loopback.
if(DQLITE_FOUND)
  ddp_script_test(NAME cli_cluster
    COMMAND /usr/bin/python3 ${DDP_CLI_PY}/test_cli_cluster.py TIMEOUT 180 LABELS "cli;dqlite")
else()
  add_test(NAME cli_cluster COMMAND sh -c
    "echo 'cli_cluster: skipped, libdqlite not found (apt-get install libdqlite-dev libraft-dev)'; exit 77")
  set_tests_properties(cli_cluster PROPERTIES SKIP_RETURN_CODE 77 LABELS "integration;cli;dqlite")
endif()
# Real processes end to end: ddpd and two real ddp-agent processes, jobs of small shell programs.
ddp_script_test(NAME cli_agents
  COMMAND /usr/bin/python3 ${DDP_CLI_PY}/test_cli_agents.py TIMEOUT 240 LABELS cli)
# deploy/: up.sh and down.sh run for real (two runs of the main job), the other recipes checked
# for syntax. Heavy: it runs real training; skipped under ASan.
ddp_script_test(NAME cli_deploy
  COMMAND /usr/bin/python3 ${DDP_CLI_PY}/test_cli_deploy.py TIMEOUT 900 LABELS "cli;heavy")
