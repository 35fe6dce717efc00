# Fails when an #include "fsdp/<module>/..." runs against the module graph
# (cmake/module_graph.cmake), naming the file, the line and the forbidden edge:
#   src/obs/metrics.cpp:5: error: #include "fsdp/train/trainer.h": module obs may not include module train
# Run by the build before any module compiles (target fsdp_module_graph_check), as
#   cmake -DSOURCE_DIR=<repo> -DSTAMP=<file> -P cmake/check_module_graph.cmake
# Checks the product: src/ (the CUDA emulator aside, it is no module) and include/fsdp/.
cmake_minimum_required(VERSION 3.25)
include(${CMAKE_CURRENT_LIST_DIR}/module_graph.cmake)

foreach(m IN LISTS FSDP_MODULES)
  fsdp_module_reach(${m} FSDP_REACH_${m})
endforeach()

# The module a product file belongs to: src/<m>/..., include/fsdp/<m>/....
function(module_of rel out_var)
  if(rel MATCHES "^(src|include/fsdp)/([a-z_]+)/")
    set(${out_var} ${CMAKE_MATCH_2} PARENT_SCOPE)
  else()
    set(${out_var} "" PARENT_SCOPE)
  endif()
endfunction()

file(GLOB_RECURSE files RELATIVE ${SOURCE_DIR}
     ${SOURCE_DIR}/src/*.cpp ${SOURCE_DIR}/src/*.h ${SOURCE_DIR}/src/*.cu ${SOURCE_DIR}/src/*.cuh
     ${SOURCE_DIR}/include/fsdp/*.h)
list(FILTER files EXCLUDE REGEX "^src/cuda_emu/")
list(SORT files)

set(violations 0)
foreach(rel IN LISTS files)
  module_of(${rel} from)
  if(NOT from IN_LIST FSDP_MODULES)
    message("${rel}:1: error: not in a module of cmake/module_graph.cmake (src/<module>/ or include/fsdp/<module>/)")
    math(EXPR violations "${violations} + 1")
    continue()
  endif()
  file(READ ${SOURCE_DIR}/${rel} text)
  set(text "\n${text}")  # every #include at a line start follows a newline
  set(line 0)
  while(TRUE)
    string(FIND "${text}" "\n#include \"fsdp/" at)
    if(at EQUAL -1)
      break()
    endif()
    string(SUBSTRING "${text}" 0 ${at} before)
    string(REGEX MATCHALL "\n" newlines "${before}")
    list(LENGTH newlines n)
    math(EXPR line "${line} + ${n} + 1")
    math(EXPR at "${at} + 1")
    string(SUBSTRING "${text}" ${at} -1 text)
    string(REGEX MATCH "^#include \"fsdp/([a-z_]+)/[^\"]*\"" include "${text}")
    set(to ${CMAKE_MATCH_1})
    if(include AND NOT to IN_LIST FSDP_REACH_${from})
      message("${rel}:${line}: error: ${include}: module ${from} may not include module ${to}")
      math(EXPR violations "${violations} + 1")
    endif()
  endwhile()
endforeach()

if(violations GREATER 0)
  message(FATAL_ERROR "${violations} include(s) run against the module graph. The allowed edges are in "
                      "cmake/module_graph.cmake (docs/layout.md): move the code to the module that owns it, "
                      "or pass what it needs in from above.")
endif()
file(WRITE ${STAMP} "module graph ok\n")
