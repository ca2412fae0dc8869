# Included by CMake right after llama.cpp's top-level project() (CMAKE_PROJECT_llama.cpp_INCLUDE,
# scripts/realserver/setup.sh). Precompiles the C++ standard library headers once per library for llama (src/),
# llama-common (common/) and mtmd (tools/mtmd/, which llama-server links): their many small files spend much of their
# compile time parsing those headers again (docs/measurements.md, "CI, cold on a fresh machine"). Not the server's
# own files (no gain there) nor ggml's kernels (their time is code generation). llama.cpp's sources are not patched.
# cmake_language(DEFER) needs 3.19. A version check, not cmake_minimum_required: that would reset llama.cpp's policies.
if(CMAKE_VERSION VERSION_LESS 3.19)
  message(FATAL_ERROR "scripts/realserver/std_pch.cmake needs CMake 3.19 or newer (cmake_language(DEFER))")
endif()

function(loadshape_precompile_std_headers)
  set(headers)
  foreach(header algorithm array cmath cstdint cstring functional map memory sstream fstream string unordered_map
    unordered_set vector mutex thread)
    # C++ files only: the same libraries have C files.
    list(APPEND headers "$<$<COMPILE_LANGUAGE:CXX>:<${header}>>")
  endforeach()
  foreach(target llama llama-common mtmd)
    if(TARGET ${target})
      target_precompile_headers(${target} PRIVATE ${headers})
    endif()
  endforeach()
endfunction()

# At the end of the top-level CMakeLists.txt, once the libraries exist.
cmake_language(DEFER CALL loadshape_precompile_std_headers)
