# attention_bench_smoke.cmake: the CTest checks of attention_bench (cmake -P).
#   CHECK=cpu_smoke: runs it on the CPU backend at a tiny shape (batch 1, seq 64,
#     heads 2, head-dim 16, 2 iterations), bf16 with 2 KV heads and fp32 with
#     1, and checks that each run exits 0 and writes its JSON with the shape
#     echoed, finite positive times and TFLOP/s, a positive output checksum
#     and no NaN in out or dqkv.
#   CHECK=bad_flag: an unknown --dtype exits 2 naming the flag and its values;
#     so do an unknown --attention and --attention with --backend cpu.
# BENCH: the program; WORK_DIR: a folder for its JSON.
cmake_minimum_required(VERSION 3.25)

function(run_bench json)
  file(REMOVE "${json}")
  execute_process(COMMAND "${BENCH}" ${ARGN} --json "${json}" RESULT_VARIABLE status
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "attention_bench ${ARGN} exited with '${status}'")
  endif()
  if(NOT EXISTS "${json}")
    message(FATAL_ERROR "attention_bench ${ARGN} wrote no ${json}")
  endif()
endfunction()

# Fails unless key is a number greater than 0 (NaN and null fail: every
# comparison with them is false).
function(expect_positive text key)
  string(JSON value ERROR_VARIABLE error GET "${text}" ${key})
  if(NOT error)
    set(error "")
  endif()
  if(error OR NOT value GREATER 0)
    message(FATAL_ERROR "${key} is '${value}', expected a number > 0 ${error}")
  endif()
endfunction()

function(expect_equal text key expected)
  string(JSON value ERROR_VARIABLE error GET "${text}" ${key})
  if(NOT error)
    set(error "")
  endif()
  if(error OR NOT value STREQUAL "${expected}")
    message(FATAL_ERROR "${key} is '${value}', expected '${expected}' ${error}")
  endif()
endfunction()

file(MAKE_DIRECTORY "${WORK_DIR}")
if(CHECK STREQUAL "cpu_smoke")
  foreach(config IN ITEMS "bfloat16;2" "float32;1")
    list(GET config 0 dtype)
    list(GET config 1 kv_heads)
    set(json "${WORK_DIR}/${dtype}.json")
    run_bench("${json}" --backend cpu --dtype ${dtype} --batch 1 --seq 64 --heads 2
              --kv-heads ${kv_heads} --head-dim 16 --iterations 2 --warmup 1)
    file(READ "${json}" text)
    expect_equal("${text}" backend cpu)
    expect_equal("${text}" dtype ${dtype})
    expect_equal("${text}" batch 1)
    expect_equal("${text}" seq 64)
    expect_equal("${text}" heads 2)
    expect_equal("${text}" kv_heads ${kv_heads})
    expect_equal("${text}" head_dim 16)
    foreach(key IN ITEMS forward_ms backward_ms forward_backward_ms forward_tflops
                         forward_backward_tflops output_abs_sum dqkv_abs_sum)
      expect_positive("${text}" ${key})
    endforeach()
    expect_equal("${text}" output_nan_count 0)
    expect_equal("${text}" dqkv_nan_count 0)
    string(JSON implementation GET "${text}" implementation)
    if(NOT implementation MATCHES "^cpu ")
      message(FATAL_ERROR "implementation is '${implementation}'")
    endif()
  endforeach()
elseif(CHECK STREQUAL "bad_flag")
  execute_process(COMMAND "${BENCH}" --backend cpu --dtype float16 RESULT_VARIABLE status
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT status EQUAL 2 OR NOT err MATCHES "--dtype: 'float16' is not one of float32, bfloat16")
    message(FATAL_ERROR "--dtype float16 exited with '${status}', expected 2 and the message")
  endif()
  execute_process(COMMAND "${BENCH}" --backend cuda --attention fastest RESULT_VARIABLE status
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT status EQUAL 2 OR NOT err MATCHES "--attention: 'fastest' is not one of auto, own, fma, cudnn, compare")
    message(FATAL_ERROR "--attention fastest exited with '${status}', expected 2 and the message")
  endif()
  execute_process(COMMAND "${BENCH}" --backend cpu --attention compare RESULT_VARIABLE status
                  OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message("${out}${err}")
  if(NOT status EQUAL 2 OR NOT err MATCHES "--attention: chooses among the CUDA backend's")
    message(FATAL_ERROR "--attention with --backend cpu exited with '${status}', expected 2")
  endif()
else()
  message(FATAL_ERROR "CHECK must be cpu_smoke or bad_flag, not '${CHECK}'")
endif()
