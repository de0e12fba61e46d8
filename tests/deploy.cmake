# deploy/: the systemd units, the replica template's too (systemd-analyze verify and security
# scores, ddpd's READY=1), the container image's .dockerignore and Containerfile, the
# Kubernetes manifests, the three replicas' too, against the vendored JSON schemas and the Pod
# Security rules, the replicas' start script and the agent's drain hooks against stand-ins and
# a real ddpd. Skipped (77) without python3-yaml or python3-jsonschema.
ddp_script_test(NAME deploy_recipes
  COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/integration/test_deploy_recipes.py
  TIMEOUT 180 LABELS deploy)
set_tests_properties(deploy_recipes PROPERTIES SKIP_RETURN_CODE 77)
