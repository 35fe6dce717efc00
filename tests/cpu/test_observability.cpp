// What a single-process run writes besides metrics.jsonl (fsdp/obs/observability.h): the
// trace window of logging.profile_* (spans per step against the logged step time), the
// memory snapshot of logging.memory_snapshot_step (categories against the allocator and
// the engine's own byte counts), TensorBoard scalars (every metrics.jsonl scalar at every
// step, one curve across a resume) read back by tests/common/tfevents_reader.h, and the
// bad-input rules (a window past max_steps, unwritable directories, logging.strict).
// The multi-rank trace (collectives, clocks, trace-merge) is tests/mpi/test_trace.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "../common/tfevents_reader.h"
#include "../common/trace_checks.h"
#include "fsdp/obs/profiler.h"
#include "fsdp/obs/tensorboard.h"
#include "fsdp/obs/trace_merge.h"
#include "fsdp/train/exit_codes.h"
#include "fsdp/train/trainer.h"
#include "test_util.h"

namespace fsdp {
namespace {

namespace fs = std::filesystem;

fs::path fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("fsdp_test_obs_" + name);
  fs::remove_all(d);
  return d;
}

config::Config small(const fs::path& run_dir, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> o = {"model.preset=tiny",        "model.num_layers=2",   "train.seq_len=32",
                                "train.micro_batch_size=4", "train.max_steps=5",    "train.log_every=100",
                                "optim.warmup_steps=2",     "checkpoint.resume=none", "run.dir=" + run_dir.string()};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::load_config_string("data:\n  source: synthetic\n", "test", o);
}

int run(const config::Config& cfg) {
  dist::ProcessGroups groups = dist::local_process_groups();
  train::Trainer t(cfg, groups);
  return t.run();
}

std::vector<nlohmann::json> metrics_of(const fs::path& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream f(run_dir / "metrics.jsonl");
  for (std::string line; std::getline(f, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  EXPECT_TRUE(f.good()) << p;
  return nlohmann::json::parse(f);
}

// ---- the trace ----

TEST(Observability, TraceWindowHoldsTheActiveStepsWithTheirLoggedTimes) {
  const fs::path dir = fresh_dir("trace");
  ASSERT_EQ(run(small(dir, {"logging.profile_wait=1", "logging.profile_warmup=1", "logging.profile_active=2"})),
            train::kExitOk);
  const nlohmann::json t = read_json(dir / "traces" / "rank_0.trace.json");
  test::check_trace_well_formed(t);
  EXPECT_EQ(t["otherData"]["steps"], nlohmann::json({3, 4}));
  EXPECT_EQ(t["otherData"]["world_size"], 1);
  const auto metrics = metrics_of(dir);
  ASSERT_EQ(metrics.size(), 5u);
  const auto tracks = test::spans_by_track(t);
  ASSERT_TRUE(tracks.count("main (training loop)"));
  const auto& main = tracks.at("main (training loop)");
  std::vector<nlohmann::json> steps;
  for (const auto& e : main)
    if (e["name"] == "step") steps.push_back(e);
  ASSERT_EQ(steps.size(), 2u) << "the warmup step (2) is dropped, steps 3 and 4 kept";
  for (const auto& s : steps) {
    const int64_t step = s["args"]["step"];
    const double logged_ms = metrics[size_t(step - 1)]["step_ms"];
    const double span_ms = s["dur"].get<double>() / 1e3;
    EXPECT_NEAR(span_ms, logged_ms, 0.05 * logged_ms) << "step " << step;
    // The spans directly inside the step (micro-batches, the loss all-reduce, grad norm,
    // optimizer, ops between them) account for the logged time too.
    const double begin = s["ts"], end = test::span_end(s);
    double children = 0, last_end = begin;
    std::map<std::string, int> names;
    for (const auto& e : main) {
      const double ts = e["ts"];
      if (e["name"] == "step" || ts < begin || test::span_end(e) > end + test::kTraceRoundingUs || ts < last_end)
        continue;
      children += e["dur"].get<double>() / 1e3;
      last_end = test::span_end(e);
      ++names[e["name"]];
    }
    EXPECT_NEAR(children, logged_ms, 0.05 * logged_ms) << "step " << step;
    EXPECT_EQ(names["micro-batch"], 1);
    EXPECT_EQ(names["loss all-reduce"], 1);
    EXPECT_EQ(names["grad norm"], 1);
    EXPECT_EQ(names["optimizer step (AdamW on the shards)"], 1);
    // Inside: each unit's forward and backward (the FSDP engine's hooks, as NVTX names them).
    int units = 0;
    for (const auto& e : main)
      if (e["ts"].get<double>() >= begin && test::span_end(e) <= end && std::string(e["name"]).ends_with(" forward"))
        ++units;
    EXPECT_EQ(units, 4) << "embedding, 2 blocks, head";
  }
  bool memory_counter = false, data_wait = false;
  for (const auto& e : t["traceEvents"]) {
    memory_counter |= e["ph"] == "C" && e["name"] == "memory cpu";
    data_wait |= e["name"] == "data wait";
  }
  EXPECT_TRUE(memory_counter);
  EXPECT_TRUE(data_wait);
  fs::remove_all(dir);
}

TEST(Observability, TraceMergeWritesAProcessPerRankAndRefusesMixedRecordings) {
  const fs::path dir = fresh_dir("merge");
  ASSERT_EQ(run(small(dir, {"logging.profile_active=1"})), train::kExitOk);
  const fs::path traces = dir / "traces";
  fs::copy_file(traces / "rank_0.trace.json", traces / "rank_1.trace.json");
  const obs::MergedTraces m = obs::merge_traces(traces.string(), (traces / "trace.json").string());
  EXPECT_EQ(m.ranks, (std::vector<int>{0, 1}));
  const nlohmann::json merged = read_json(traces / "trace.json");
  std::set<int> pids;
  for (const auto& e : merged["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  // A stale file of another window.
  nlohmann::json other = read_json(traces / "rank_1.trace.json");
  other["otherData"]["steps"] = {7, 9};
  std::ofstream(traces / "rank_1.trace.json") << other.dump();
  test::expect_error([&] { obs::merge_traces(traces.string(), (traces / "t2.json").string()); },
                     {"rank_1.trace.json", "different recordings"});
  std::ofstream(traces / "rank_1.trace.json") << "{\"traceEvents\": [";
  test::expect_error([&] { obs::merge_traces(traces.string(), (traces / "t2.json").string()); },
                     {"rank_1.trace.json: not valid JSON (line 1, column", "(a trace cut short?)"});
  test::expect_error([&] { obs::merge_traces((dir / "nope").string(), "x"); }, {"nope", "not a directory"});
  fs::remove_all(dir);
}

// ---- the memory snapshot ----

TEST(Observability, MemorySnapshotCategoriesAddUpToTheAllocatorsBytes) {
  const fs::path dir = fresh_dir("memory");
  const config::Config cfg = small(dir, {"logging.memory_snapshot_step=3", "train.max_steps=3"});
  dist::ProcessGroups groups = dist::local_process_groups();
  train::Trainer trainer(cfg, groups);
  ASSERT_EQ(trainer.run(), train::kExitOk);
  const nlohmann::json snap = read_json(dir / "traces" / "rank_0.memory_step_3.json");
  EXPECT_EQ(snap["step"], 3);
  ASSERT_EQ(snap["allocators"].size(), 1u);
  const nlohmann::json& a = snap["allocators"][0];
  EXPECT_EQ(a["name"], "cpu");
  uint64_t categories = 0, groups_sum = 0;
  std::map<std::string, uint64_t> by_name;
  for (const auto& c : a["categories"]) {
    categories += c["bytes"].get<uint64_t>();
    by_name[c["name"]] = c["bytes"];
  }
  for (const auto& g : a["groups"]) groups_sum += g["bytes"].get<uint64_t>();
  EXPECT_EQ(categories, a["bytes_in_use"].get<uint64_t>());
  EXPECT_EQ(groups_sum, a["bytes_in_use"].get<uint64_t>());
  // Step 3 allocates nothing (tests/cpu/test_trainer.cpp), so its peak is what was held.
  const auto metrics = metrics_of(dir);
  EXPECT_EQ(a["bytes_in_use"].get<uint64_t>(), metrics[2]["peak_mem_bytes"].get<uint64_t>());
  EXPECT_EQ(metrics[2]["peak_mem_category"], a["groups"][0]["name"]) << "the step line names the largest group";
  // The engine's own counts: master + two moments are "sharded state", the gradient shards
  // "gradients" (one rank in float32: the master shard is the whole unit).
  const uint64_t persistent = trainer.engine().persistent_bytes();
  EXPECT_EQ(by_name["sharded state"], persistent / 4 * 3);
  EXPECT_EQ(by_name["gradients"], persistent / 4);
  EXPECT_GT(by_name["activations/layers.0"], 0u);
  EXPECT_EQ(by_name["activations/layers.0"], by_name["activations/layers.1"]) << "same shapes, same bytes";
  EXPECT_GT(by_name["activations/head"], 0u);
  EXPECT_GT(by_name["scratch/backward"], 0u);
  fs::remove_all(dir);
}

// ---- TensorBoard ----

std::vector<std::string> event_files(const fs::path& dir) {
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(e.path().string());
  std::sort(files.begin(), files.end());  // the order TensorBoard reads them in
  return files;
}

// Every scalar of every metrics.jsonl line, as TensorBoard's view holds it.
void expect_view_equals_metrics(const std::map<std::string, std::map<int64_t, float>>& view,
                                const std::vector<nlohmann::json>& metrics) {
  size_t checked = 0;
  for (const auto& line : metrics) {
    const int64_t step = line["step"];
    for (const auto& [field, value] : line.items()) {
      if (field == "step" || !(value.is_number() || value.is_boolean())) continue;
      bool found = false;
      for (const auto& [tag, steps] : view) {
        if (!tag.ends_with("/" + field)) continue;
        found = true;
        ASSERT_TRUE(steps.count(step)) << tag << " has no step " << step;
        const float expected = value.is_boolean() ? float(value.get<bool>()) : value.get<float>();
        EXPECT_EQ(steps.at(step), expected) << tag << " at step " << step;
        ++checked;
      }
      EXPECT_TRUE(found) << "no tag for metrics field " << field;
    }
  }
  EXPECT_GT(checked, metrics.size() * 15);
  for (const auto& [tag, steps] : view) {
    const std::string field = tag.substr(tag.find('/') + 1);
    size_t lines = 0;
    for (const auto& line : metrics) lines += line.contains(field);
    EXPECT_EQ(steps.size(), lines) << tag << ": one value per step that logged " << field;
  }
}

TEST(Observability, TensorBoardHoldsEveryMetricsScalarAndOneCurveAcrossAResume) {
  const fs::path dir = fresh_dir("tensorboard");
  ASSERT_EQ(run(small(dir, {"logging.tensorboard=true", "train.max_steps=6", "checkpoint.interval=3",
                            "checkpoint.resume=auto", "train.eval_every=3", "eval.batches=1"})),
            train::kExitOk);
  // A run killed after step 6 whose newest checkpoint is step 3: the resumed run trains
  // 4..8 again; TensorBoard must show its values for 4..6, not the first run's.
  fs::remove_all(dir / "checkpoints" / "step_6");
  ASSERT_EQ(run(small(dir, {"logging.tensorboard=true", "train.max_steps=8", "checkpoint.interval=3",
                            "checkpoint.resume=auto", "train.eval_every=3", "eval.batches=1"})),
            train::kExitOk);
  const std::vector<std::string> files = event_files(dir / "tensorboard");
  ASSERT_EQ(files.size(), 2u);
  const auto first = test::read_tfrecords(files[0]), second = test::read_tfrecords(files[1]);
  EXPECT_EQ(test::decode_event(first[0]).file_version, "brain.Event:2");
  EXPECT_TRUE(test::decode_event(first[1]).session_start);
  EXPECT_EQ(test::decode_event(first[1]).step, 1);
  EXPECT_EQ(first.size(), 2u + 6u);
  EXPECT_TRUE(test::decode_event(second[1]).session_start);
  EXPECT_EQ(test::decode_event(second[1]).step, 4) << "the resumed run's first step purges 4.. of the first file";
  EXPECT_EQ(second.size(), 2u + 5u);
  const auto metrics = metrics_of(dir);
  ASSERT_EQ(metrics.size(), 8u);
  const auto view = test::tensorboard_view(files);
  expect_view_equals_metrics(view, metrics);
  // Step 5's time is the resumed run's (the first run's differs in its timing fields).
  EXPECT_EQ(view.at("throughput/step_ms").at(5), metrics[4]["step_ms"].get<float>());
  EXPECT_TRUE(view.count("loss/val_loss") && view.at("loss/val_loss").size() == 3u) << "val_loss at 3, 6, 8";
  // A corrupted byte is caught by the CRC.
  {
    std::fstream f(files[1], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  EXPECT_THROW(test::read_tfrecords(files[1]), std::runtime_error);
  fs::remove_all(dir);
}

TEST(Observability, TensorBoardFilesOfRunsStartedInOneSecondSortInStartOrder) {
  const fs::path dir = fresh_dir("tb_names");
  std::vector<std::string> made;
  for (int i = 0; i < 3; ++i) made.push_back(obs::TensorBoardWriter(dir.string(), 1 + i).path());
  EXPECT_EQ(event_files(dir), made) << "three files, in the order they were opened";
  for (size_t i = 0; i < made.size(); ++i) EXPECT_EQ(test::decode_event(test::read_tfrecords(made[i])[1]).step, 1 + int(i));
  fs::remove_all(dir);
}

TEST(Observability, TensorBoardTagsOfAMixtureOfExperts) {
  obs::StepMetrics m;
  m.step = 4;
  m.loss = 2.5;
  m.ce_loss = 2.4;
  m.aux_loss = 5.0;
  m.expert_imbalance = {1.5, 1.25};
  m.expert_load = {{3, 5}, {4, 4}};
  m.skipped = true;
  std::map<std::string, float> tags;
  for (const auto& [tag, v] : obs::tensorboard_scalars(m)) tags[tag] = v;
  EXPECT_EQ(tags.at("loss/loss"), 2.5f);
  EXPECT_EQ(tags.at("loss/aux_loss"), 5.0f);
  EXPECT_EQ(tags.at("moe/expert_imbalance/layer_1"), 1.25f);
  EXPECT_EQ(tags.at("moe/expert_load/layer_0/expert_1"), 5.0f);
  EXPECT_EQ(tags.at("optim/skipped"), 1.0f);
  EXPECT_FALSE(tags.count("step"));
}

// The committed fixture: event files this writer produced, which tensorboard 2.18.0's own
// reader (EventAccumulator) read in tests/golden/tensorboard/generate.py into expected.json.
TEST(Observability, GoldenEventFilesReadAsTensorBoardReadThem) {
  const fs::path golden = test::source_path("tests/golden/tensorboard");
  const auto view = test::tensorboard_view(event_files(golden / "run" / "tensorboard"));
  const nlohmann::json expected = read_json(golden / "expected.json");
  ASSERT_EQ(view.size(), expected["scalars"].size());
  for (const auto& [tag, points] : expected["scalars"].items()) {
    ASSERT_TRUE(view.count(tag)) << tag;
    ASSERT_EQ(view.at(tag).size(), points.size()) << tag;
    for (const auto& p : points) EXPECT_EQ(view.at(tag).at(p[0].get<int64_t>()), p[1].get<float>()) << tag;
  }
  expect_view_equals_metrics(view, metrics_of(golden / "run"));
}

// ---- bad input ----

TEST(Observability, AWindowPastMaxStepsIsNamed) {
  const fs::path dir = fresh_dir("window");
  EXPECT_EQ(obs::profile_window_warning(small(dir, {"logging.profile_active=2"})), "");
  EXPECT_EQ(obs::profile_window_warning(small(dir, {"logging.profile_wait=3", "logging.profile_active=3"})),
            "logging.profile_wait 3 + logging.profile_warmup 1 + logging.profile_active 3 end the trace at step 7, "
            "past train.max_steps 5: the trace will hold steps 5-5 only");
  EXPECT_EQ(obs::profile_window_warning(small(dir, {"logging.profile_wait=5", "logging.profile_active=1"})),
            "logging.profile_wait 5 + logging.profile_warmup 1 put the first traced step at 7, past "
            "train.max_steps 5: no trace will be written");
  // The run writes what the window holds.
  ASSERT_EQ(run(small(dir, {"logging.profile_wait=3", "logging.profile_active=3"})), train::kExitOk);
  EXPECT_EQ(read_json(dir / "traces" / "rank_0.trace.json")["otherData"]["steps"], nlohmann::json({5, 5}));
  fs::remove_all(dir);
}

TEST(Observability, UnwritableOutputsAreReportedAndTrainingGoesOnUnlessStrict) {
  const fs::path dir = fresh_dir("unwritable");
  fs::create_directories(dir);
  std::ofstream(dir / "tensorboard") << "a file where the directory should be";
  const std::vector<std::string> bad = {"logging.profile_dir=/dev/null/traces", "logging.profile_active=1",
                                        "logging.memory_snapshot_step=2", "logging.tensorboard=true"};
  std::vector<std::string> lenient = bad;
  ASSERT_EQ(run(small(dir, lenient)), train::kExitOk);
  EXPECT_EQ(metrics_of(dir).size(), 5u) << "training went on";
  for (const std::string& key : {"logging.profile_dir=/dev/null/traces", "logging.tensorboard=true"}) {
    // checkpoint.overwrite: the lenient run's checkpoints are another run's (run ownership).
    std::vector<std::string> strict = {"logging.strict=true", key, "logging.profile_active=1",
                                       "checkpoint.overwrite=true"};
    test::expect_error([&] { run(small(dir, strict)); },
                       {key.substr(0, key.find('=')), "logging.strict is true: stopping"}, key.c_str());
  }
  test::expect_error([&] { run(small(dir, {"logging.strict=true", "logging.profile_dir=/dev/null/traces",
                                             "logging.memory_snapshot_step=1", "checkpoint.overwrite=true"})); },
                     {"logging.memory_snapshot_step", "/dev/null/traces"});
  fs::remove_all(dir);
}

// The messages as a user sees them: one line each, and the exit codes.
TEST(Observability, CommandLineMessagesAndExitCodes) {
  const fs::path dir = fresh_dir("cli");
  fs::create_directories(dir);
  const std::string train = std::string(FSDP_TRAIN_BIN) + " train --config " + test::source_path("configs/tiny.yaml") +
                            " --set data.source=synthetic --set model.num_layers=2 --set train.seq_len=32"
                            " --set train.micro_batch_size=4 --set train.max_steps=3 --set checkpoint.resume=none"
                            " --set checkpoint.overwrite=true --set run.dir=" + dir.string();
  auto r = test::run_command(train + " --set logging.profile_wait=4 --set logging.profile_active=2"
                                     " --set logging.profile_dir=/dev/null/t", (dir / "a.log").string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("logging.profile_wait 4 + logging.profile_warmup 1 put the first traced step at 6, past "
                       "train.max_steps 3"), std::string::npos) << r.out;
  r = test::run_command(train + " --set logging.profile_active=1 --set logging.profile_dir=/dev/null/t",
                        (dir / "b.log").string());
  EXPECT_EQ(r.code, 0) << r.out;
  size_t errors = 0;
  for (size_t p = 0; (p = r.out.find("[error]", p)) != std::string::npos; ++p) ++errors;
  EXPECT_EQ(errors, 1u) << r.out;
  EXPECT_NE(r.out.find("logging.profile_dir: cannot create /dev/null/t"), std::string::npos) << r.out;
  r = test::run_command(train + " --set logging.profile_active=1 --set logging.profile_dir=/dev/null/t "
                                "--set logging.strict=true", (dir / "c.log").string());
  EXPECT_EQ(r.code, 1) << r.out;
  r = test::run_command(std::string(FSDP_TRAIN_BIN) + " trace-merge", (dir / "d.log").string());
  EXPECT_EQ(r.code, 2) << r.out;
  r = test::run_command(std::string(FSDP_TRAIN_BIN) + " trace-merge " + dir.string(), (dir / "e.log").string());
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("no rank_<r>.trace.json in " + dir.string()), std::string::npos) << r.out;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace fsdp
