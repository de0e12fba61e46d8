# End-to-end fault scenarios of issue 6 (tests/faults/): real ddpd, agents as separate hosts
# in network namespaces (loopback fallback where they cannot be made), real ddp-worker jobs.
# One ctest per scenario; they share one lock so that two never load the machine at once.
# Labels: heavy (skipped in the ASan run) and faults (`ctest -L faults` runs the suite).
set(DDP_FAULTS_PY ${CMAKE_CURRENT_SOURCE_DIR}/faults/test_faults.py)
foreach(s agent_kill join worker_kill worker_stop max_restarts ddpd_restart link_cut
          cancel_restarting false_accuse fsdp_elastic)
  ddp_script_test(NAME faults_${s} COMMAND /usr/bin/python3 ${DDP_FAULTS_PY} ${s}
    TIMEOUT 240 LABELS "heavy;faults")
  set_tests_properties(faults_${s} PROPERTIES RESOURCE_LOCK ddp_faults SKIP_RETURN_CODE 77)
endforeach()

# The replicated coordinator (docs/ha.md): three ddpd --cluster replicas in namespaces, kill -9
# of the leader under submits, a cut link, a lost quorum, one training job through it all;
# one replica's disk full (a tmpfs), then that replica replaced; and the leader's disk full.
if(DQLITE_FOUND)
  foreach(s ha diskfull leaderfull leaderalone)
    ddp_script_test(NAME faults_${s} COMMAND /usr/bin/python3
      ${CMAKE_CURRENT_SOURCE_DIR}/faults/test_ha.py ${s} TIMEOUT 420 LABELS "heavy;faults;dqlite")
    set_tests_properties(faults_${s} PROPERTIES RESOURCE_LOCK ddp_faults SKIP_RETURN_CODE 77)
  endforeach()
else()
  foreach(s ha diskfull leaderfull leaderalone)
    add_test(NAME faults_${s} COMMAND sh -c
      "echo 'faults_${s}: skipped, libdqlite not found (apt-get install libdqlite-dev libraft-dev)'; exit 77")
    set_tests_properties(faults_${s} PROPERTIES SKIP_RETURN_CODE 77 LABELS "heavy;faults;dqlite")
  endforeach()
endif()
