// Encoding throughput of a tokenizer (data/tokenizer.h) on a text file, one document per line,
// with N threads each taking every N-th line: MB of text per second and tokens per second.
// The peer, the `tokenizers` library on the same lines and threads, is
// bench/tokenizer_peer.py; bench/tokenizer_bench.sh prints the two as a ratio.
//   tokenizer_bench --tokenizer PATH --input FILE [--threads N] [--repeat R]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fsdp/core/cli_args.h"
#include "fsdp/core/error.h"
#include "fsdp/data/tokenizer.h"

int main(int argc, char** argv) {
  std::string tokenizer, input;
  int threads = 1, repeat = 3;
  try {
    fsdp::ArgCursor args(argc, argv);
    while (args.next()) {
      const std::string& a = args.arg();
      if (a == "--tokenizer") tokenizer = args.value();
      else if (a == "--input") input = args.value();
      else if (a == "--threads") threads = std::max(1, std::stoi(args.value()));
      else if (a == "--repeat") repeat = std::max(1, std::stoi(args.value()));
      else throw fsdp::UsageError{"unknown argument '" + args.raw() + "'"};
    }
    if (tokenizer.empty() || input.empty()) throw fsdp::UsageError{"--tokenizer and --input are required"};
  } catch (const fsdp::UsageError& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\nusage: tokenizer_bench --tokenizer PATH --input FILE [--threads N] [--repeat R]\n",
                 e.message.c_str());
    return 2;
  }
  try {
    const fsdp::data::Tokenizer tok(tokenizer);
    std::vector<std::string> lines;
    size_t bytes = 0;
    {
      std::ifstream f(input, std::ios::binary);
      FSDP_CHECK(f.good(), "cannot read {}", input);
      for (std::string line; std::getline(f, line);) {
        bytes += line.size();
        lines.push_back(std::move(line));
      }
    }
    double best = 1e300;
    int64_t tokens = 0;
    for (int r = 0; r < repeat; ++r) {
      std::atomic<int64_t> count{0};
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
          std::vector<int32_t> ids;
          int64_t mine = 0;
          for (size_t i = size_t(t); i < lines.size(); i += size_t(threads)) {
            ids.clear();
            tok.encode(lines[i], ids);
            mine += int64_t(ids.size());
          }
          count += mine;
        });
      for (auto& th : pool) th.join();
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      tokens = count.load();
    }
    std::printf("{\"threads\": %d, \"lines\": %zu, \"bytes\": %zu, \"tokens\": %lld, \"seconds\": %.4f, \"mb_per_s\": %.3f}\n",
                threads, lines.size(), bytes, (long long)tokens, best, double(bytes) / 1e6 / best);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
