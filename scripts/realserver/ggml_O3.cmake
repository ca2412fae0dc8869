# Included by CMake right after ggml's project() (CMAKE_PROJECT_ggml_INCLUDE, scripts/realserver/setup.sh): ggml's
# kernels keep the Release flags (-O3) while the rest of llama.cpp builds at -O1.
set(CMAKE_C_FLAGS_RELEASE "-O3 -DNDEBUG")
set(CMAKE_CXX_FLAGS_RELEASE "-O3 -DNDEBUG")
