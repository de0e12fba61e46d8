# Integration tests of ddpd's REST API and agent protocol (issue 2): each drives a real ddpd on
# a real SQLite file over HTTP, simulating agents with register/heartbeat calls, and checks
# every answer against schema/openapi.json. See tests/integration/api_sim.py.
set(DDP_API_PY ${PROJECT_SOURCE_DIR}/tests/integration)
ddp_script_test(NAME api_openapi
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_openapi.py TIMEOUT 120 LABELS api)
