# ddp-worker (trainer/): model, data, train loop (unit), and the multi-process tests of
# ddp-worker (integration). Fuzz targets for the IDX and checkpoint loaders (whole and sharded)
# when DDP_FUZZ is on.
# Registered only where trainer/ is built (tests/layering.sh builds libddp without it).
if(NOT TARGET ddptrainer)
  return()
endif()
ddp_unit_test(NAME test_model SOURCES unit/test_model.c LIBS ddptrainer TIMEOUT 60)
ddp_unit_test(NAME test_data SOURCES unit/test_data.c LIBS ddptrainer TIMEOUT 120)
ddp_unit_test(NAME test_layers SOURCES unit/test_layers.c unit/torchref.c LIBS ddptrainer TIMEOUT 120)
# The PyTorch reference of the layers: the test runs this script with the system's python3.
target_compile_definitions(test_layers PRIVATE TEST_PYTHON="/usr/bin/python3"
  TEST_LAYERS_TORCH_PY="${CMAKE_CURRENT_SOURCE_DIR}/unit/layers_torch.py")
ddp_unit_test(NAME test_layers_gpt SOURCES unit/test_layers_gpt.c unit/torchref.c LIBS ddptrainer
  TIMEOUT 120)
target_compile_definitions(test_layers_gpt PRIVATE TEST_PYTHON="/usr/bin/python3"
  TEST_LAYERS_TORCH_PY="${CMAKE_CURRENT_SOURCE_DIR}/unit/layers_torch.py")
ddp_unit_test(NAME test_model_gpt SOURCES unit/test_model_gpt.c unit/torchref.c LIBS ddptrainer
  TIMEOUT 180)
target_compile_definitions(test_model_gpt PRIVATE TEST_PYTHON="/usr/bin/python3"
  TEST_MODEL_GPT_TORCH_PY="${CMAKE_CURRENT_SOURCE_DIR}/unit/model_gpt_torch.py")
ddp_unit_test(NAME test_model_cnn SOURCES unit/test_model_cnn.c unit/torchref.c LIBS ddptrainer
  TIMEOUT 120)
target_compile_definitions(test_model_cnn PRIVATE TEST_PYTHON="/usr/bin/python3"
  TEST_MODEL_CNN_TORCH_PY="${CMAKE_CURRENT_SOURCE_DIR}/unit/model_cnn_torch.py")
ddp_unit_test(NAME test_train SOURCES unit/test_train.c LIBS ddptrainer TIMEOUT 60)
# The vectorized exp at the trainer's own optimization (-O3, tests/unit/test_vexp.c's loop).
ddp_unit_test(NAME test_vexp SOURCES unit/test_vexp.c LIBS ddptrainer TIMEOUT 60)
target_compile_options(test_vexp PRIVATE $<$<CONFIG:Release,RelWithDebInfo>:-O3>
  -fno-trapping-math -fno-math-errno)

set(DDP_WORKER_PY ${CMAKE_CURRENT_SOURCE_DIR}/integration)
ddp_script_test(NAME worker_equivalence
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_equivalence.py TIMEOUT 300 LABELS worker)
ddp_script_test(NAME worker_cnn
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_cnn.py TIMEOUT 300 LABELS worker)
ddp_script_test(NAME worker_gpt
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_gpt.py TIMEOUT 400 LABELS worker)
# Two trainings of 960 steps side by side, ~2 minutes on 2 cores: heavy (not under ASan).
ddp_script_test(NAME worker_gpt_torch
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_gpt_torch.py TIMEOUT 900
  LABELS "worker;heavy")
# The vectorized kernels' clones in the binary (objdump): no FMA, vectorized at -O3.
ddp_script_test(NAME simd_clones
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_simd_clones.py ${CMAKE_C_COMPILER_ID}
  "${CMAKE_BUILD_TYPE}" TIMEOUT 120 LABELS worker)
ddp_script_test(NAME worker_sharding
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_sharding.py TIMEOUT 400 LABELS worker)
# ~45 trainings, 2.5 minutes under ASan: started first (ctest runs the costliest first on a
# fresh build, which has no timings yet), so that it does not run alone at the end.
set_tests_properties(worker_sharding PROPERTIES COST 1000)
# Memory cgroups capping each rank (root; skips where none can be made); not under ASan,
# whose shadow memory would be charged to the caps.
ddp_script_test(NAME worker_memcap
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_memcap.py TIMEOUT 400
  LABELS "worker;heavy")
ddp_script_test(NAME worker_shard_ckpt
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_shard_ckpt.py TIMEOUT 300 LABELS worker)
ddp_script_test(NAME worker_overlap
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_overlap.py TIMEOUT 180 LABELS worker)
ddp_script_test(NAME worker_resume
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_resume.py TIMEOUT 400 LABELS worker)
ddp_script_test(NAME worker_preempt
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_preempt.py TIMEOUT 300 LABELS worker)
ddp_script_test(NAME worker_failure
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_failure.py TIMEOUT 240 LABELS worker)

# Fuzz targets: the loaders are compiled into the target itself so that they carry the
# fuzzer's coverage and ASan/UBSan instrumentation (libddp in this build does not).
if(DDP_FUZZ)
  foreach(t idx ckpt)
    add_executable(fuzz_${t} ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_${t}.c
      ${PROJECT_SOURCE_DIR}/trainer/data.c ${PROJECT_SOURCE_DIR}/libddp/ckpt.c
      ${PROJECT_SOURCE_DIR}/libddp/rng.c)
    target_include_directories(fuzz_${t} PRIVATE ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/libddp/include)
    target_compile_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(fuzz_${t} PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_${t} PRIVATE ddpcommon PkgConfig::ZLIB m)
    set_target_properties(fuzz_${t} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    # libFuzzer writes new inputs into its first corpus folder: a scratch copy keeps the
    # committed seed corpus as it is.
    add_test(NAME fuzz_${t}
      COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
              sh -c "rm -rf fuzz_${t}_work && mkdir fuzz_${t}_work && exec $<TARGET_FILE:fuzz_${t}> -max_total_time=25 -timeout=10 -rss_limit_mb=1024 fuzz_${t}_work ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/${t}_corpus"
      WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
    set_tests_properties(fuzz_${t} PROPERTIES TIMEOUT 120 LABELS "fuzz")
  endforeach()
  # The sharded checkpoint loader (libddp/ckpt_shard.c), compiled in the same way.
  add_executable(fuzz_ckpt_shard ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_ckpt_shard.c
    ${PROJECT_SOURCE_DIR}/libddp/ckpt_shard.c ${PROJECT_SOURCE_DIR}/libddp/ckpt.c
    ${PROJECT_SOURCE_DIR}/libddp/shard.c ${PROJECT_SOURCE_DIR}/libddp/rng.c)
  target_include_directories(fuzz_ckpt_shard PRIVATE ${PROJECT_SOURCE_DIR}
    ${PROJECT_SOURCE_DIR}/libddp/include)
  target_compile_options(fuzz_ckpt_shard PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_ckpt_shard PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_ckpt_shard PRIVATE ddpcommon PkgConfig::ZLIB m)
  set_target_properties(fuzz_ckpt_shard PROPERTIES RUNTIME_OUTPUT_DIRECTORY
    ${CMAKE_BINARY_DIR}/tests)
  add_test(NAME fuzz_ckpt_shard
    COMMAND ${CMAKE_COMMAND} -E env ASAN_OPTIONS=detect_leaks=1
            sh -c "rm -rf fuzz_ckpt_shard_work && mkdir fuzz_ckpt_shard_work && exec $<TARGET_FILE:fuzz_ckpt_shard> -max_total_time=25 -timeout=10 -rss_limit_mb=1024 fuzz_ckpt_shard_work ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/ckpt_shard_corpus"
    WORKING_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  set_tests_properties(fuzz_ckpt_shard PROPERTIES TIMEOUT 120 LABELS "fuzz")
endif()
ddp_script_test(NAME worker_accuracy
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_accuracy.py TIMEOUT 1800
  LABELS "worker;heavy")
# The CNN's 10 epochs on Fashion-MNIST take ~12 minutes on 2 cores: label long, which the
# default test command leaves out (DDP_TEST_LONG=1 bash tests/run.sh runs it; docs/worker.md
# has the measured result).
ddp_script_test(NAME worker_accuracy_cnn
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_accuracy_cnn.py TIMEOUT 3600
  LABELS "worker;heavy;long")
