# Included by CMake right after ggml's project() (CMAKE_PROJECT_ggml_INCLUDE, scripts/realserver/setup.sh): ggml's
# kernels keep the compiler's own Release flags (GCC: -O3 -DNDEBUG) while the rest of llama.cpp builds at -O1.
set(CMAKE_C_FLAGS_RELEASE "${CMAKE_C_FLAGS_RELEASE_INIT}")
set(CMAKE_CXX_FLAGS_RELEASE "${CMAKE_CXX_FLAGS_RELEASE_INIT}")
