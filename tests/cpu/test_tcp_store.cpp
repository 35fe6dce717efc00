// The TCP store of a launch without MPI (fsdp/dist/tcp_store.h), its ranks as threads of this
// process: gathers and the store communicator's collectives, then every way the job ends —
// rank 0 gone, a rank that leaves, a rank that never arrives, a port in use, a wrong WORLD_SIZE,
// a taken RANK, another job or another service on the port — each as one line naming the rank,
// with its exit code, within the timeout. fsdp_train's own processes go through the same paths
// in tests/integration/store_launch.sh.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../../src/dist/detail.h"  // detail::make_store_communicator
#include "fsdp/dist/tcp_store.h"
#include "test_util.h"

namespace fsdp::dist {
namespace {

using Clock = std::chrono::steady_clock;

StoreIdentity id(int rank, int world, const std::string& job = "test-job") {
  return StoreIdentity{job, world, rank, "host" + std::to_string(rank), 1000 + rank};
}

// An abort handler that records instead of exiting.
struct Ended {
  std::mutex mu;
  int code = -1;
  std::string line;
  Clock::time_point when;
  TcpStoreClient::AbortHandler handler() {
    return [this](int c, const std::string& l) {
      std::lock_guard<std::mutex> lock(mu);
      if (code >= 0) return;
      code = c;
      line = l;
      when = Clock::now();
    };
  }
  bool wait(double seconds) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
      {
        std::lock_guard<std::mutex> lock(mu);
        if (code >= 0) return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
};

std::unique_ptr<TcpStoreClient> join(const TcpStoreServer& s, int rank, int world, Ended* ended = nullptr,
                                     double timeout = 10, const std::string& job = "test-job") {
  return std::make_unique<TcpStoreClient>("localhost", s.port(), id(rank, world, job), timeout,
                                          ended != nullptr ? ended->handler() : TcpStoreClient::AbortHandler(
                                                                                     [](int, const std::string&) {}));
}

TEST(TcpStore, GatherGivesEveryMemberAllBytesInRankOrderAndJoinGivesTheHosts) {
  TcpStoreServer server(0, id(0, 3), 10);
  std::vector<std::future<std::pair<std::vector<std::string>, std::vector<std::string>>>> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(std::async(std::launch::async, [&, r] {
      auto c = join(server, r, 3);
      auto hosts = c->join_all();
      auto got = c->gather_now("k", 3, r, std::string(size_t(r + 1), char('a' + r)));
      c->bye(10);
      return std::make_pair(hosts, got);
    }));
  }
  for (auto& f : ranks) {
    const auto [hosts, got] = f.get();
    EXPECT_EQ(hosts, (std::vector<std::string>{"host0", "host1", "host2"}));
    EXPECT_EQ(got, (std::vector<std::string>{"a", "bb", "ccc"}));
  }
  server.wait_for_byes(5);
}

Tensor iota(DType dtype, int64_t n, double start) {
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) t.set_flat(i, start + double(i));
  return t;
}

TEST(TcpStore, StoreCommunicatorCollectivesMatchTheirDefinitions) {
  constexpr int kRanks = 3;
  TcpStoreServer server(0, id(0, kRanks), 10);
  std::vector<std::shared_ptr<TcpStoreClient>> clients(kRanks);
  std::vector<std::unique_ptr<Communicator>> comms(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    clients[size_t(r)] = join(server, r, kRanks);
    comms[size_t(r)] = detail::make_store_communicator(clients[size_t(r)], "world", {0, 1, 2}, 0);
  }
  std::vector<std::future<void>> done;
  for (int r = 0; r < kRanks; ++r) {
    done.push_back(std::async(std::launch::async, [&, r] {
      Communicator& c = *comms[size_t(r)];
      EXPECT_EQ(c.rank(), r);
      EXPECT_EQ(c.size(), kRanks);
      // all_reduce: the sum of iota(r) over ranks, in rank order (float32 exact here).
      Tensor x = iota(DType::F32, 5, 10.0 * r);
      Tensor h = iota(DType::BF16, 4, r + 0.5);
      const Request a = c.all_reduce(x), b = c.all_reduce(h);  // two in flight at once
      c.wait(b);
      c.wait(a);
      for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(x.data<float>()[i], float(30 + 3 * i));
      for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(h.get_flat(i), 3 * (1.5 + double(i))) << i;
      // all_gather, reduce_scatter, broadcast.
      Tensor shard = iota(DType::F64, 2, 100.0 * r), full = Tensor::zeros({2 * kRanks}, DType::F64);
      c.wait(c.all_gather(shard, full));
      for (int k = 0; k < kRanks; ++k)
        for (int i = 0; i < 2; ++i) EXPECT_EQ(full.data<double>()[2 * k + i], 100.0 * k + i);
      Tensor big = iota(DType::F32, 2 * kRanks, r), mine = Tensor::zeros({2}, DType::F32);
      c.wait(c.reduce_scatter(big, mine));
      for (int i = 0; i < 2; ++i) EXPECT_EQ(mine.data<float>()[i], float(3 * (2 * r + i) + 3));
      Tensor y = iota(DType::F32, 3, r == 1 ? 7.0 : -1.0);
      c.wait(c.broadcast(y, 1));
      for (int i = 0; i < 3; ++i) EXPECT_EQ(y.data<float>()[i], float(7 + i));
      c.barrier();
      // Bytes counted as the ring algorithm sends them (communicator.h); a barrier sends none
      // and is not counted, as on MPI.
      EXPECT_EQ(c.stats().calls, 5u);
      EXPECT_EQ(c.stats().bytes_sent, detail::ring_bytes(detail::Collective::AllReduce, kRanks, r, 0, 20) +
                                          detail::ring_bytes(detail::Collective::AllReduce, kRanks, r, 0, 8) +
                                          detail::ring_bytes(detail::Collective::AllGather, kRanks, r, 0, 16) +
                                          detail::ring_bytes(detail::Collective::ReduceScatter, kRanks, r, 0, 8) +
                                          detail::ring_bytes(detail::Collective::Broadcast, kRanks, r, 1, 12));
    }));
  }
  for (auto& f : done) f.get();
  test::expect_error([&] { comms[0]->all_reduce(Tensor::zeros({2}, DType::I32)); },
                     {"all_reduce on group 'world' (rank 0 of 3)", "collectives take float32"});
}

TEST(TcpStore, ServerGoneEndsEveryRankNamingRankZero) {
  auto server = std::make_unique<TcpStoreServer>(0, id(0, 2), 10);
  Ended ended;
  auto zero = join(*server, 0, 2);
  auto one = join(*server, 1, 2, &ended);
  server.reset();  // rank 0's process died: its store with it
  ASSERT_TRUE(ended.wait(5)) << "rank 1 never noticed";
  EXPECT_EQ(ended.code, kStoreExitPeerFailure);
  EXPECT_NE(ended.line.find("world rank 0 (host localhost), which hosts the TCP store"), std::string::npos)
      << ended.line;
  EXPECT_NE(ended.line.find("is gone"), std::string::npos) << ended.line;
  test::expect_error([&] { one->gather("x", 2, 1, "y"); }, {"is gone"});
}

TEST(TcpStore, RankThatLeavesWithoutByeEndsTheJobForTheOthers) {
  TcpStoreServer server(0, id(0, 3), 10);
  Ended e0, e1;
  auto zero = join(server, 0, 3, &e0);
  auto one = join(server, 1, 3, &e1);
  auto two = join(server, 2, 3);
  two.reset();  // closes without a bye: killed
  ASSERT_TRUE(e0.wait(5));
  ASSERT_TRUE(e1.wait(5));
  for (Ended* e : {&e0, &e1}) {
    EXPECT_EQ(e->code, kStoreExitPeerFailure);
    EXPECT_NE(e->line.find("world rank 2 (host host2, pid 1002) left the job without finishing"), std::string::npos)
        << e->line;
  }
}

TEST(TcpStore, RankThatNeverArrivesIsNamedWithinTheTimeout) {
  const auto t0 = Clock::now();
  TcpStoreServer server(0, id(0, 3), 1.0);
  Ended e0, e1;
  auto zero = join(server, 0, 3, &e0);
  auto one = join(server, 1, 3, &e1);
  ASSERT_TRUE(e0.wait(5));
  ASSERT_TRUE(e1.wait(5));
  EXPECT_LT(std::chrono::duration<double>(e1.when - t0).count(), 2.5) << "the deadline is 1 s";
  EXPECT_EQ(e1.code, kStoreExitPeerFailure);
  EXPECT_EQ(e1.line, e0.line);
  EXPECT_NE(e1.line.find("world rank 2 never joined the TCP store on host host0 within 1 s (dist.timeout_s); 2 of 3 "
                         "did (on host0, host1)"),
            std::string::npos)
      << e1.line;
}

TEST(TcpStore, PortInUseIsRefusedNamingThePortAndMasterPort) {
  TcpStoreServer first(0, id(0, 2), 10);
  test::expect_error([&] { TcpStoreServer second(first.port(), id(0, 2), 10); },
                     {"cannot host the TCP store on port " + std::to_string(first.port()), "the port is in use",
                      "set MASTER_PORT to a free port"});
}

TEST(TcpStore, NoStoreAtTheAddressEndsTheRankWithinTheTimeout) {
  int port = 0;
  {
    TcpStoreServer probe(0, id(0, 2), 10);  // a port that was free a moment ago
    port = probe.port();
  }
  Ended e;
  const auto t0 = Clock::now();
  test::expect_error(
      [&] { TcpStoreClient c("localhost", port, id(1, 2), 1.0, e.handler()); },
      {"world rank 1 found no TCP store at localhost:" + std::to_string(port) + " within 1 s (dist.timeout_s)"});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 4.0);
  EXPECT_EQ(e.code, kStoreExitPeerFailure);
}

TEST(TcpStore, WrongWorldSizeEndsTheJobWithExitCode2NamingBothSizes) {
  TcpStoreServer server(0, id(0, 2), 10);
  Ended e0, e1;
  auto zero = join(server, 0, 2, &e0);
  test::expect_error([&] { join(server, 1, 3, &e1); },
                     {"world rank 1 (host host1, pid 1001) was started with WORLD_SIZE=3 but world rank 0 (host host0) "
                      "with WORLD_SIZE=2"});
  ASSERT_TRUE(e0.wait(5));
  EXPECT_EQ(e0.code, kStoreExitUsage);
  EXPECT_EQ(e1.code, kStoreExitUsage);
  EXPECT_NE(e0.line.find("WORLD_SIZE=3"), std::string::npos) << e0.line;
}

TEST(TcpStore, TakenRankAndForeignJobAreRefused) {
  TcpStoreServer server(0, id(0, 3), 10);
  Ended e0, other, dup;
  auto zero = join(server, 0, 3, &e0);
  test::expect_error([&] { join(server, 1, 3, &other, 10, "another-job"); },
                     {"of job 'another-job' reached the TCP store of job 'test-job'", "give each its own MASTER_PORT"});
  EXPECT_EQ(other.code, kStoreExitUsage);
  EXPECT_FALSE(e0.wait(0.3)) << "a stranger does not end this job: " << e0.line;
  test::expect_error([&] { join(server, 0, 3, &dup); }, {"world rank 0 joined twice: from host host0"});
  ASSERT_TRUE(e0.wait(5));
  EXPECT_EQ(e0.code, kStoreExitUsage);
}

TEST(TcpStore, AnotherServiceOnThePortIsNamed) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  std::thread service([fd] {  // answers anything with an HTTP error, as a web server would
    const int c = ::accept(fd, nullptr, nullptr);
    const std::string reply = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    (void)!::write(c, reply.data(), reply.size());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    ::close(c);
  });
  Ended e;
  test::expect_error([&] { TcpStoreClient c("127.0.0.1", ntohs(a.sin_port), id(1, 2), 5, e.handler()); },
                     {"does not speak fsdp_train's TCP store protocol", "set MASTER_PORT to a free port"});
  EXPECT_EQ(e.code, kStoreExitUsage);
  service.join();
  ::close(fd);
}

TEST(TcpStore, AbortTellsEveryRankWhoEndedTheJob) {
  TcpStoreServer server(0, id(0, 3), 10);
  Ended e[3];
  std::vector<std::unique_ptr<TcpStoreClient>> c;
  for (int r = 0; r < 3; ++r) c.push_back(join(server, r, 3, &e[r]));
  c[2]->abort(1, "");
  for (int r = 0; r < 3; ++r) ASSERT_TRUE(e[r].wait(5)) << r;
  EXPECT_EQ(e[0].code, 1);
  EXPECT_EQ(e[0].line, "world rank 2 (host host2) ended the job with exit code 1 (its log says why)");
  EXPECT_EQ(e[2].line, "") << "the rank that ended the job has said why already";
}

}  // namespace
}  // namespace fsdp::dist
