# GPU tests: built wherever CUDA/NCCL are found (CI builds them), run where a GPU is visible,
# and reported by ctest as skipped, with the reason printed, where none is.
if(DDP_HAVE_CUDA)
  ddp_unit_test(NAME test_gpu_model SOURCES ${PROJECT_SOURCE_DIR}/tests/unit/test_gpu_model.c
                LIBS ddp TIMEOUT 120 LABELS gpu)
  set_tests_properties(test_gpu_model PROPERTIES SKIP_RETURN_CODE 77)
endif()
