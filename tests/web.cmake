# The web dashboard (issue 8): server/web/ is embedded into ddpd (server/embed.cmake); this
# browser test drives Debian's chromium headless over the DevTools protocol against a live
# ddpd with simulated agents. It installs chromium with apt-get if missing and reports
# "SKIPPED: ..." with exit code 77 (a ctest skip) only when that is impossible.
# Screenshots: <build>/test-artifacts/dashboard-*.png.
ddp_script_test(NAME web_dashboard
  COMMAND /usr/bin/python3 ${PROJECT_SOURCE_DIR}/tests/integration/test_dashboard.py
  TIMEOUT 900 LABELS "web;heavy")
set_tests_properties(web_dashboard PROPERTIES SKIP_RETURN_CODE 77)
