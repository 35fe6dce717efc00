/* A stand-in for libnccl.so.2 that only says its version (2.99.7); see fake_cublaslt.c. */
int ncclGetVersion(int* version) {
  *version = 29907;
  return 0;
}
