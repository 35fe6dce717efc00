/* A stand-in for libcublasLt.so.13 that only says its version (99.1.2): what
 * tests/cpu/test_cuda_libraries.cpp and the package's self-containment test
 * (tests/integration/package_selfcontained.sh) find and load instead of the 500 MB library. */
#include <stddef.h>

size_t cublasLtGetVersion(void) { return 990102; }
