# The package as installed (cmake --install into a temporary prefix): layout, pkg-config with a
# C program against the shared and the static libddp, man pages, completion, --version,
# systemd units and RUNPATH. See tests/integration/test_install.py.
ddp_script_test(NAME install
  COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/integration/test_install.py TIMEOUT 300
  LABELS install)
