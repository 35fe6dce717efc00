// The one error layer (fsdp/core/error.h): a user-facing error is one line naming what is
// wrong; where it was raised (the failed check, file:line) is kept apart, in where(), for
// the debug log. Library-call failures (CUDA, cuBLAS, NCCL, MPI) all go through fail_call
// and read alike.
#include <gtest/gtest.h>

#include <string>

#include "fsdp/core/error.h"
#include "test_util.h"

namespace fsdp {
namespace {

Error caught(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no fsdp::Error thrown";
  return Error("");
}

TEST(ErrorLayer, CheckMessageIsOneLineAndItsPlaceGoesToWhere) {
  const int shards = 0;
  const Error e = caught([&] { FSDP_CHECK(shards > 0, "no token shards in '{}'", "data/x"); });
  EXPECT_STREQ(e.what(), "no token shards in 'data/x'");
  EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  EXPECT_NE(e.where().find("check `shards > 0` failed at tests/cpu/test_error.cpp:"), std::string::npos)
      << e.where();
}

TEST(ErrorLayer, FailKeepsOnlyThePlace) {
  const Error e = caught([] { FSDP_FAIL("bad {}", 7); });
  EXPECT_STREQ(e.what(), "bad 7");
  EXPECT_EQ(e.where().rfind("at tests/cpu/test_error.cpp:", 0), 0u) << e.where();
}

TEST(ErrorLayer, FailedCallsNameCallWhoErrorAndDetail) {
  const Error e = caught([] {
    fail_call({"MPI_Barrier(comm)", "group 'world' (rank 1 of 2, host n01)", "Message truncated", "; more", "f.cpp", 9});
  });
  EXPECT_STREQ(e.what(), "MPI_Barrier(comm) failed on group 'world' (rank 1 of 2, host n01): Message truncated; more");
  EXPECT_EQ(e.where(), "at f.cpp:9");
}

TEST(ErrorLayer, HostNameIsKnown) { EXPECT_FALSE(host_name().empty()); }

}  // namespace
}  // namespace fsdp
