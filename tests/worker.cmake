# ddp-worker and libddp's training side: model, data, sampler, checkpoint, reducer (unit),
# and the multi-process tests of ddp-worker (integration). Fuzz targets for the IDX and
# checkpoint loaders when DDP_FUZZ is on.
ddp_unit_test(NAME test_model SOURCES unit/test_model.c LIBS ddp TIMEOUT 60)
ddp_unit_test(NAME test_data SOURCES unit/test_data.c LIBS ddp TIMEOUT 120)
ddp_unit_test(NAME test_sampler SOURCES unit/test_sampler.c LIBS ddp TIMEOUT 60)
ddp_unit_test(NAME test_ckpt SOURCES unit/test_ckpt.c LIBS ddp TIMEOUT 60)
ddp_unit_test(NAME test_reducer SOURCES unit/test_reducer.c LIBS ddp TIMEOUT 120)

set(DDP_WORKER_PY ${CMAKE_CURRENT_SOURCE_DIR}/integration)
ddp_script_test(NAME worker_equivalence
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_equivalence.py TIMEOUT 300 LABELS worker)
ddp_script_test(NAME worker_overlap
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_overlap.py TIMEOUT 180 LABELS worker)
ddp_script_test(NAME worker_resume
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_resume.py TIMEOUT 400 LABELS worker)
ddp_script_test(NAME worker_failure
  COMMAND /usr/bin/python3 ${DDP_WORKER_PY}/test_worker_failure.py TIMEOUT 240 LABELS worker)
