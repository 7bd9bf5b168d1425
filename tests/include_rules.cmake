# include_rules.cmake: every #include "..." of the project's sources stays
# within what its folder may use (the folders' READMEs; the CMake libraries
# link the same graph). Run as a test: cmake -DSOURCE_DIR=<repo> -P include_rules.cmake
# Fails listing each include that crosses a rule: "runtime/model/x.cc includes
# runtime/pipeline/y.h (runtime/model/ may include: ...)".

# Folder -> the project folders its files may include (itself included).
set(common_sets "common/")
set(common_allowed ${common_sets})
set(kernels_allowed kernels/ ${common_sets})
set(schema_allowed schema/ plan_generated.h ${common_sets})
# planner/: the top (front door, plan output, report) may include every planner
# folder; below it search -> cost -> job, schedule (planner/README.md).
set(planner_job_allowed planner/job/ ${schema_allowed})
set(planner_schedule_allowed planner/schedule/ ${schema_allowed})
set(planner_cost_allowed planner/cost/ ${planner_job_allowed} ${planner_schedule_allowed})
set(planner_search_allowed planner/search/ ${planner_cost_allowed})
set(planner_allowed planner/ ${schema_allowed})
set(runtime_comm_allowed runtime/comm/ runtime/testing/ ${kernels_allowed})
set(runtime_testing_allowed runtime/testing/ runtime/comm/ ${kernels_allowed})
set(runtime_model_allowed runtime/model/ ${runtime_comm_allowed} ${schema_allowed})
set(runtime_parallel_allowed runtime/parallel/ ${runtime_model_allowed})
set(runtime_data_allowed runtime/data/ runtime/testing/ ${common_sets})
set(runtime_tokenizer_allowed runtime/tokenizer/ ${runtime_data_allowed})
set(runtime_pipeline_allowed runtime/pipeline/ ${runtime_parallel_allowed} ${runtime_data_allowed})
set(runtime_checkpoint_allowed runtime/checkpoint/ ${runtime_parallel_allowed})
set(runtime_measure_allowed runtime/measure/ ${runtime_pipeline_allowed})
set(runtime_train_allowed runtime/train/ ${runtime_measure_allowed} ${runtime_checkpoint_allowed}
    ${runtime_tokenizer_allowed})
set(launcher_allowed launcher/ runtime/ planner/ ${schema_allowed} ${kernels_allowed})
set(fuzz_allowed fuzz/ ${launcher_allowed})

set(folders common kernels schema planner planner/job planner/schedule planner/cost
            planner/search runtime/comm runtime/testing runtime/model runtime/parallel
            runtime/data runtime/tokenizer runtime/pipeline runtime/checkpoint runtime/measure runtime/train
            launcher fuzz)
set(violations "")
set(checked 0)
foreach(folder ${folders})
  string(REPLACE "/" "_" key "${folder}")
  set(allowed ${${key}_allowed})
  list(REMOVE_DUPLICATES allowed)
  file(GLOB_RECURSE sources RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${folder}/*.h
       ${SOURCE_DIR}/${folder}/*.cc ${SOURCE_DIR}/${folder}/*.cu ${SOURCE_DIR}/${folder}/*.cuh)
  foreach(source ${sources})
    # Each file is checked under the deepest listed folder holding it: a deeper
    # folder with rules of its own (planner/cost/, runtime/model/) is skipped
    # here when its parent (planner/) is checked; an unlisted one (kernels/cuda/,
    # runtime/model/gpt/) takes the rules of the folder above it.
    get_filename_component(owner ${source} DIRECTORY)
    list(FIND folders "${owner}" listed)
    while(listed EQUAL -1 AND NOT owner STREQUAL "")
      get_filename_component(owner "${owner}" DIRECTORY)
      list(FIND folders "${owner}" listed)
    endwhile()
    if(NOT "${owner}" STREQUAL "${folder}")
      continue()
    endif()
    math(EXPR checked "${checked} + 1")
    file(STRINGS ${SOURCE_DIR}/${source} includes REGEX "^#include \"")
    foreach(line ${includes})
      string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" included "${line}")
      set(ok FALSE)
      foreach(prefix ${allowed})
        string(FIND "${included}" "${prefix}" at)
        if(at EQUAL 0)
          set(ok TRUE)
        endif()
      endforeach()
      # A file beside its includer ("cuda_attention.cuh" in kernels/cuda/).
      get_filename_component(directory ${source} DIRECTORY)
      if(NOT included MATCHES "/" AND EXISTS ${SOURCE_DIR}/${directory}/${included})
        set(ok TRUE)
      endif()
      if(NOT ok)
        string(REPLACE ";" " " allowed_text "${allowed}")
        list(APPEND violations "${source} includes ${included} (${folder}/ may include: ${allowed_text})")
      endif()
    endforeach()
  endforeach()
endforeach()

if(checked LESS 100)
  message(FATAL_ERROR "include rules: only ${checked} files found under ${SOURCE_DIR}")
endif()
list(LENGTH violations count)
if(count GREATER 0)
  string(REPLACE ";" "\n" text "${violations}")
  message(FATAL_ERROR "include rules: ${count} include(s) cross a folder's rules:\n${text}")
endif()
message(STATUS "include rules: ${checked} files, every include within its folder's rules")
