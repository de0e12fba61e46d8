# GPU tests: built wherever CUDA/NCCL are found (CI builds them), run where a GPU is visible,
# and reported by ctest as skipped, with the reason printed, where none is.
if(DDP_HAVE_CUDA)
  ddp_unit_test(NAME test_gpu_model SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_gpu_model.c
                LIBS ddptrainer TIMEOUT 120 LABELS gpu)
  set_tests_properties(test_gpu_model PROPERTIES SKIP_RETURN_CODE 77)
endif()
if(DDP_HAVE_CUDA)
  ddp_script_test(NAME gpu_worker COMMAND /usr/bin/python3
                  ${PROJECT_SOURCE_DIR}/tests/integration/test_gpu_worker.py
                  TIMEOUT 300 LABELS gpu)
  set_tests_properties(gpu_worker PROPERTIES SKIP_RETURN_CODE 77)
endif()
if(DDP_HAVE_CUDA)
  # libddpgpu.so and libddptrainergpu.so take libddp's functions from the program that loads
  # them.
  set_target_properties(test_gpu_model PROPERTIES ENABLE_EXPORTS ON)
endif()
