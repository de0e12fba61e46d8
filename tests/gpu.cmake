# GPU tests: built wherever CUDA/NCCL are found, run where a GPU is visible, and reported by
# ctest as skipped, with the reason printed, where none is. Where the build has no CUDA
# (no toolkit, or DDP_CUDA=OFF) the same two tests are still registered and report
# themselves skipped with that reason, so a CPU-only run says out loud what it did not test.
if(NOT TARGET ddptrainer)
  return()
endif()
if(DDP_HAVE_CUDA)
  ddp_unit_test(NAME test_gpu_model SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_gpu_model.c
                LIBS ddptrainer TIMEOUT 120 LABELS gpu)
  set_tests_properties(test_gpu_model PROPERTIES SKIP_RETURN_CODE 77)
  # libddpgpu.so and libddptrainergpu.so take libddp's functions from the program that loads
  # them.
  set_target_properties(test_gpu_model PROPERTIES ENABLE_EXPORTS ON)
  ddp_script_test(NAME gpu_worker COMMAND /usr/bin/python3
                  ${PROJECT_SOURCE_DIR}/tests/integration/test_gpu_worker.py
                  TIMEOUT 300 LABELS gpu)
  set_tests_properties(gpu_worker PROPERTIES SKIP_RETURN_CODE 77)
else()
  foreach(t test_gpu_model gpu_worker)
    add_test(NAME ${t} COMMAND sh -c "echo 'SKIPPED: ${t} was not built: this build has no CUDA/NCCL (DDP_CUDA=${DDP_CUDA}; the toolkit is looked for in /usr/local/cuda)'; exit 77")
    set_tests_properties(${t} PROPERTIES SKIP_RETURN_CODE 77 LABELS "gpu" TIMEOUT 10)
  endforeach()
endif()
