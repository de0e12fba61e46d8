# Integration tests of ddpd's REST API and agent protocol (issue 2): each drives a real ddpd on
# a real SQLite file over HTTP, simulating agents with register/heartbeat calls itself, and
# checks every answer against schema/openapi.json (tests/integration/api_sim.py,
# tests/integration/openapi_check.py).
set(DDP_API_PY ${PROJECT_SOURCE_DIR}/tests/integration)
ddp_script_test(NAME api_openapi
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_openapi.py TIMEOUT 120 LABELS api)
ddp_script_test(NAME api_errors
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_errors.py TIMEOUT 240 LABELS api)
ddp_script_test(NAME api_auth
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_auth.py TIMEOUT 120 LABELS api)
ddp_script_test(NAME api_jobs
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_jobs.py TIMEOUT 300 LABELS api)
ddp_script_test(NAME api_metrics
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_metrics.py TIMEOUT 300 LABELS api)
# deploy/prometheus: rules and dashboard name only ddpd's series; promtool check rules and
# test rules (skipped, 77, without promtool).
ddp_script_test(NAME prometheus_rules
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_prometheus_deploy.py TIMEOUT 120 LABELS api)
set_tests_properties(prometheus_rules PROPERTIES SKIP_RETURN_CODE 77)
ddp_script_test(NAME api_nodes
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_nodes.py TIMEOUT 300 LABELS api)
ddp_script_test(NAME api_durability
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_durability.py TIMEOUT 300 LABELS api)
# 100500 log lines through 101 beats: skipped under ASan (label heavy).
ddp_script_test(NAME api_logcap
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_logcap.py TIMEOUT 300 LABELS api heavy)
# tail=N: the last N lines of 12000 (all ranks, one rank), bad values, following on after.
ddp_script_test(NAME api_logtail
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_logtail.py TIMEOUT 120 LABELS api)
ddp_script_test(NAME api_users
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_users.py TIMEOUT 240 LABELS api)
# Deleting finished jobs (roles, ids never reused across a restart, --job-ttl), the whole log as
# gzip, ddpctl delete and logs --download.
ddp_script_test(NAME api_retention
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_retention.py TIMEOUT 240 LABELS api)
# The database's disk (a tmpfs the test mounts) full for a while under a real agent's job:
# /readyz and the store metrics, then recovery without a restart. Needs root to mount;
# skipped (77) without.
ddp_script_test(NAME api_storefull
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_storefull.py TIMEOUT 180 LABELS api)
set_tests_properties(api_storefull PROPERTIES SKIP_RETURN_CODE 77)
# 10,000 idle connections held while fresh clients are answered; the per-address cap and the
# idle timeout. Skipped (77) where this process cannot open 10,300 files; not under ASan
# (label heavy: 10,000 threads with sanitizer stacks).
ddp_script_test(NAME api_flood
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_flood.py TIMEOUT 180 LABELS api heavy)
set_tests_properties(api_flood PROPERTIES SKIP_RETURN_CODE 77)
ddp_script_test(NAME api_sched
  COMMAND /usr/bin/python3 ${DDP_API_PY}/test_api_sched.py TIMEOUT 240 LABELS api)
