# libddp's communication layer: environment, rendezvous store, CPU ring all-reduce.
ddp_unit_test(NAME test_env SOURCES unit/test_env.c LIBS ddp TIMEOUT 30)
ddp_unit_test(NAME test_rdzv SOURCES unit/test_rdzv.c LIBS ddp TIMEOUT 60)
add_test(NAME test_rdzv_heavy COMMAND test_rdzv heavy)
set_tests_properties(test_rdzv_heavy PROPERTIES TIMEOUT 180 LABELS "unit;heavy")
ddp_unit_test(NAME test_comm_cpu SOURCES unit/test_comm_cpu.c LIBS ddp TIMEOUT 180)
# The same binary's long cases (10^7 elements, killed and stopped peer processes).
add_test(NAME test_comm_cpu_heavy COMMAND test_comm_cpu heavy)
set_tests_properties(test_comm_cpu_heavy PROPERTIES TIMEOUT 300 LABELS "unit;heavy")
