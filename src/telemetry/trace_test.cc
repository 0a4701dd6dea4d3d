#include "telemetry/trace.h"

#include <cstdint>
#include <gtest/gtest.h>
#include <zlib.h>

#include <random>

#include "telemetry/interval.h"
#include "telemetry/json_scan.h"

namespace stoker::telemetry {
namespace {

// A small Kineto-style trace: two steps of 1000 µs; DataLoader 300 µs at the start of
// each; kernels (compute) and one nccl kernel; a pageable and a pinned copy; a sync.
std::string KinetoTrace(bool old_cats = false) {
  std::string k = old_cats ? "Kernel" : "kernel";
  std::string op = old_cats ? "Operator" : "user_annotation";
  std::string rt = old_cats ? "Runtime" : "cuda_runtime";
  std::string mc = old_cats ? "Memcpy" : "gpu_memcpy";
  return R"J({"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "Test GPU", "totalGlobalMem": 1000, "computeMajor": 8, "computeMinor": 0, "numSms": 10}],
  "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 8},
  "traceEvents": [
  {"ph": "X", "cat": ")J" + op + R"J(", "name": "ProfilerStep#7", "pid": 10, "tid": 10, "ts": 1000, "dur": 1000, "args": {"External id": 1}},
  {"ph": "X", "cat": ")J" + op + R"J(", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "pid": 10, "tid": 10, "ts": 1000, "dur": 300},
  {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10, "ts": 1300, "dur": 100, "args": {"Input Dims": [[2, 3], [3, 4]], "Call stack": "a\"b\\c\u00e9"}},
  {"ph": "X", "cat": ")J" + k + R"J(", "name": "ampere_sgemm_128x64", "pid": 0, "tid": 7, "ts": 1350, "dur": 500, "args": {"device": 0, "stream": 7, "correlation": 5, "grid": [1, 2, 3]}},
  {"ph": "X", "cat": ")J" + k + R"J(", "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)", "pid": 0, "tid": 20, "ts": 1800, "dur": 150, "args": {"device": 0, "stream": 20}},
  {"ph": "X", "cat": ")J" + mc + R"J(", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7, "ts": 1310, "dur": 20, "args": {"device": 0, "bytes": 4096}},
  {"ph": "X", "cat": ")J" + rt + R"J(", "name": "cudaStreamSynchronize", "pid": 10, "tid": 10, "ts": 1900, "dur": 60, "args": {"cbid": 131}},
  {"ph": "X", "cat": ")J" + rt + R"J(", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 1340, "dur": 8},
  {"ph": "X", "cat": ")J" + op + R"J(", "name": "ProfilerStep#8", "pid": 10, "tid": 10, "ts": 2000, "dur": 1000},
  {"ph": "X", "cat": ")J" + op + R"J(", "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "pid": 10, "tid": 10, "ts": 2000, "dur": 300},
  {"ph": "X", "cat": ")J" + k + R"J(", "name": "ampere_sgemm_128x64", "pid": 0, "tid": 7, "ts": 2350, "dur": 500, "args": {"device": 0, "stream": 7}},
  {"ph": "X", "cat": ")J" + mc + R"J(", "name": "Memcpy HtoD (Pinned -> Device)", "pid": 0, "tid": 7, "ts": 2310, "dur": 20, "args": {"device": 0, "bytes": 1024}},
  {"ph": "X", "cat": ")J" + op + R"J(", "name": "Optimizer.step#SGD.step", "pid": 10, "tid": 10, "ts": 2900, "dur": 50},
  {"ph": "f", "id": 5, "pid": 10, "tid": 10, "ts": 1340, "cat": "ac2g", "name": "async_gpu", "bp": "e"},
  {"ph": "i", "name": "[memory]", "pid": 10, "tid": 10, "ts": 1500, "s": "t", "args": {"Total Allocated": 800, "Bytes": 8}},
  {"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7 "}}
  ],
  "traceName": "x", "displayTimeUnit": "ms"})J";
}

Result<TraceSummary> Parse(const std::string& s, size_t chunk = 4 << 20) {
  auto src = MemoryByteSource(s, "mem.json");
  TraceReadOptions o;
  o.chunk_bytes = chunk;
  return ReadTrace(src.get(), o);
}

std::string Gzip(const std::string& s) {
  z_stream zs{};
  deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(compressBound(s.size()) + 64, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  zs.avail_in = static_cast<uInt>(s.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

TEST(TraceReader, ReadsKinetoTrace) {
  auto r = Parse(KinetoTrace());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const TraceSummary& t = *r;
  EXPECT_EQ(t.format, "kineto");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 8);
  EXPECT_EQ(t.backend, "nccl");
  ASSERT_EQ(t.devices.size(), 1u);
  EXPECT_EQ(t.devices[0].compute_major, 8);
  ASSERT_EQ(t.steps.size(), 2u);
  EXPECT_EQ(t.steps[0].number, 7);
  EXPECT_EQ(t.steps[0].begin, 0);  // times are relative to the first timestamp, in ns
  EXPECT_EQ(t.steps[0].end, 1'000'000);
  EXPECT_EQ(t.steps[1].begin, 1'000'000);
  EXPECT_EQ(t.data_wait.Total(), 600'000);
  EXPECT_EQ(t.dataloader_iter, "_MultiProcessingDataLoaderIter");
  EXPECT_EQ(t.optimizer.Total(), 50'000);
  EXPECT_EQ(t.sync.Total(), 60'000);
  EXPECT_EQ(t.sync_calls, 1u);
  EXPECT_EQ(t.launches, 1u);
  ASSERT_EQ(t.gpus.size(), 1u);
  const GpuActivity& g = t.gpus[0];
  EXPECT_EQ(g.kernels, 3u);
  EXPECT_EQ(g.comm_kernels, 1u);
  EXPECT_EQ(g.compute.Total(), 1'000'000);
  EXPECT_EQ(g.comm.Total(), 150'000);
  EXPECT_EQ(g.h2d_pageable_count, 1u);
  EXPECT_EQ(g.h2d_pageable_bytes, 4096);
  EXPECT_EQ(g.h2d_pinned_count, 1u);
  EXPECT_EQ(t.peak_mem_bytes, 800);
  EXPECT_GT(t.gemm_kernel_ns, 0);
  EXPECT_EQ(t.tc_kernel_ns, 0);
  const HostThread* main = t.FindThread(t.main_thread);
  ASSERT_NE(main, nullptr);
  EXPECT_EQ(main->ops.Total(), 100'000 + 50'000);  // aten::mm + optimizer
}

TEST(TraceReader, OldCategoryNamesGiveTheSameSummary) {
  auto a = Parse(KinetoTrace(false));
  auto b = Parse(KinetoTrace(true));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(b->format, "kineto (old categories)");
  EXPECT_EQ(a->gpus[0].compute.Total(), b->gpus[0].compute.Total());
  EXPECT_EQ(a->data_wait.Total(), b->data_wait.Total());
  EXPECT_EQ(a->sync.Total(), b->sync.Total());
  EXPECT_EQ(a->gpus[0].h2d_pageable_count, b->gpus[0].h2d_pageable_count);
}

TEST(TraceReader, TinyChunksAndGzipGiveTheSameSummary) {
  std::string s = KinetoTrace();
  auto whole = Parse(s);
  ASSERT_TRUE(whole.ok());
  for (size_t chunk : {size_t{1}, size_t{7}, size_t{64}, size_t{333}}) {
    auto r = Parse(s, chunk);
    ASSERT_TRUE(r.ok()) << chunk << ": " << r.status().ToString();
    EXPECT_EQ(r->events, whole->events);
    EXPECT_EQ(r->gpus[0].compute.Total(), whole->gpus[0].compute.Total());
    EXPECT_EQ(r->data_wait.Total(), whole->data_wait.Total());
    EXPECT_EQ(r->steps.size(), whole->steps.size());
  }
  std::string gz = Gzip(s);
  auto z = Parse(gz, 13);
  ASSERT_TRUE(z.ok()) << z.status().ToString();
  EXPECT_EQ(z->events, whole->events);
  EXPECT_EQ(z->gpus[0].comm.Total(), whole->gpus[0].comm.Total());
  // Two gzip members back to back are one stream (the second copy makes the JSON invalid).
  auto two = Parse(gz + gz);
  EXPECT_FALSE(two.ok());
  EXPECT_NE(two.status().message().find("after the end"), std::string::npos);
}

// A language model's token embedding: [batch, sequence] ids in "Input Dims"; the position
// embedding ([1, S]) and other shapes do not count; two micro-batches in one step add up.
TEST(TraceReader, TokensPerStepFromEmbeddingInputDims) {
  std::string t = R"J({"traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0, "dur": 1000},
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 1, "tid": 1, "ts": 10, "dur": 5, "args": {"Input Dims": [[8, 2048], [50257, 768], [], [], []], "External id": 3}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 1, "tid": 1, "ts": 20, "dur": 5, "args": {"Input Dims": [[1, 2048], [2048, 768], [], [], []]}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 1, "tid": 1, "ts": 500, "dur": 5, "args": {"Input Dims": [[8, 2048], [50257, 768], [], [], []]}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding_backward", "pid": 1, "tid": 1, "ts": 700, "dur": 5, "args": {"Input Dims": [[8, 2048, 768], [8, 2048]]}},
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 1000, "dur": 1000},
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 1, "tid": 1, "ts": 1010, "dur": 5, "args": {"Input Dims": [[8, 2048], [50257, 768]]}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 1, "tid": 1, "ts": 1500, "dur": 5, "args": {"Input Dims": [[8, 2048], [50257, 768]]}},
  {"ph": "X", "cat": "cpu_op", "name": "aten::embedding", "pid": 1, "tid": 1, "ts": 1600, "dur": 5, "args": {"Input Dims": [[8.5, 2], "x", 3]}}
  ]})J";
  for (size_t chunk : {size_t{3}, size_t{4} << 20}) {
    auto r = Parse(t, chunk);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->embedding_inputs.size(), 5u);  // the [1, 2048] one too; not backward, not 8.5
    EXPECT_DOUBLE_EQ(r->TokensPerStep(), 2.0 * 8 * 2048);
  }
  // No embedding: no token count.
  auto none = Parse(KinetoTrace());
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->TokensPerStep(), 0);
}

TEST(TraceReader, LightningDataLoaderFetchIsADataWait) {
  std::string s = R"({"traceEvents": [
  {"name": "ProfilerStep#1", "ph": "X", "cat": "user_annotation", "ts": 100, "dur": 1000, "pid": 1, "tid": 1},
  {"name": "[_TrainingEpochLoop].train_dataloader_next", "ph": "X", "cat": "user_annotation", "ts": 100, "dur": 300, "pid": 1, "tid": 1},
  {"name": "[Strategy]SingleDeviceStrategy.training_step", "ph": "X", "cat": "user_annotation", "ts": 400, "dur": 500, "pid": 1, "tid": 1}]})";
  auto r = Parse(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data_wait.Total(), 300'000);
  EXPECT_EQ(r->dataloader_calls, 1u);
  EXPECT_EQ(r->dataloader_iter, "");  // the loader class is unknown
}

TEST(TraceReader, BareEventArrayFromOlderProfiler) {
  std::string s = R"([{"name": "ProfilerStep#4", "ph": "X", "ts": 122, "dur": 671, "tid": 1, "pid": "CPU functions", "args": {}},
  {"name": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", "ph": "X", "ts": 137, "dur": 145, "tid": 1, "pid": "CPU functions", "args": {}},
  {"name": "aten::linear", "ph": "X", "ts": 300, "dur": 200, "tid": 1, "pid": "CPU functions", "args": {}},
  {"name": "aten::addmm", "ph": "X", "ts": 310, "dur": 150, "tid": 1, "pid": "CPU functions", "args": {}}])";
  auto r = Parse(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->format, "chrome event array");
  EXPECT_FALSE(r->has_gpu());
  ASSERT_EQ(r->steps.size(), 1u);
  EXPECT_EQ(r->steps[0].end - r->steps[0].begin, 671'000);
  EXPECT_EQ(r->data_wait.Total(), 145'000);
  EXPECT_EQ(r->dataloader_iter, "_SingleProcessDataLoaderIter");
  const HostThread* main = r->FindThread(r->main_thread);
  ASSERT_NE(main, nullptr);
  EXPECT_EQ(main->ops.Total(), 200'000);  // nested addmm merges into linear
}

TEST(TraceReader, StokerPipelineWaitIsDataWait) {
  // python/stoker/pipeline.py wraps each wait for a batch as "stoker.Pipeline.__next__".
  std::string s = R"([{"name": "ProfilerStep#1", "ph": "X", "ts": 0, "dur": 1000, "tid": 1, "pid": 1, "args": {}},
  {"name": "stoker.Pipeline.__next__", "ph": "X", "ts": 10, "dur": 700, "tid": 1, "pid": 1, "args": {}},
  {"name": "stoker.Pipeline.__next__x", "ph": "X", "ts": 800, "dur": 50, "tid": 1, "pid": 1, "args": {}},
  {"name": "aten::addmm", "ph": "X", "ts": 720, "dur": 200, "tid": 1, "pid": 1, "args": {}}])";
  auto r = Parse(s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->data_wait.Total(), 700'000);  // the exact name only
  EXPECT_EQ(r->dataloader_calls, 1u);
  EXPECT_EQ(r->dataloader_iter, "stoker.Pipeline");
}

TEST(TraceReader, FractionalAndNanosecondTimestamps) {
  std::string us = R"({"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 100.5, "dur": 10.25}], "displayTimeUnit": "ns"})";
  auto a = Parse(us);
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->ns_input);  // fractional µs, as ns-resolution Kineto traces write them
  EXPECT_EQ(a->steps[0].end - a->steps[0].begin, 10'250);
  std::string ns = R"({"displayTimeUnit": "ns", "traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": 1680000000000000000, "dur": 5000000}]})";
  auto b = Parse(ns);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->ns_input);
  EXPECT_EQ(b->steps[0].end - b->steps[0].begin, 5'000'000);
  auto src = MemoryByteSource(ns, "x");
  TraceReadOptions o;
  o.unit = TraceReadOptions::Unit::kMicros;
  auto c = ReadTrace(src.get(), o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->steps[0].end - c->steps[0].begin, 5'000'000'000);
}

// A category-less (torch.autograd.profiler) event array without ProfilerStep: `iters`
// iterations of 10 ms, each a DataLoader call (2 ms), a "train_step" annotation (7 ms) and
// the optimizer step at its end.
std::string StepLessTrace(int iters, bool annotate, bool optimizer, bool loader) {
  std::string s = "[";
  auto ev = [&](const std::string& name, int ts, int dur) {
    s += fmt::format("{}{{\"ph\": \"X\", \"name\": \"{}\", \"pid\": \"CPU functions\", "
                     "\"tid\": 1, \"ts\": {}, \"dur\": {}}}",
                     s.size() > 1 ? ", " : "", name, ts, dur);
  };
  for (int i = 0; i < iters; ++i) {
    int t = 1000 + i * 10'000;
    if (loader) ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, 2000);
    if (annotate) ev("train_step", t + 2000, 7000);
    ev("aten::mm", t + 2100, 5000);
    ev("detach", t + 7200, 10);
    if (optimizer) ev("Optimizer.step#SGD.step", t + 8000, 900);
  }
  return s + "]";
}

Result<TraceSummary> ParseWith(const std::string& text, const TraceReadOptions& o) {
  auto src = MemoryByteSource(text, "mem.json");
  return ReadTrace(src.get(), o);
}

TEST(TraceReader, StepLessTracesGetIterationsFromWhatRepeats) {
  struct Case {
    bool annotate, optimizer, loader;
    std::string from;
    size_t windows;
    int64_t first_begin_us;
  } cases[] = {
      {true, true, true, "annotation 'train_step'", 5, 3000},  // a user annotation first
      {false, true, true, "Optimizer.step", 5, 9900},          // iterations end at opt.step
      {false, false, true, "DataLoader.__next__", 5, 1000},    // iterations start at next()
      {false, false, false, "whole capture", 1, 1000},
  };
  for (const auto& c : cases) {
    auto t = ParseWith(StepLessTrace(6, c.annotate, c.optimizer, c.loader), {});
    ASSERT_TRUE(t.ok()) << c.from << ": " << t.status().ToString();
    EXPECT_EQ(t->steps_from, c.from);
    ASSERT_EQ(t->steps.size(), c.windows) << c.from;
    EXPECT_EQ(t->steps[0].begin, (c.first_begin_us - 1000) * 1000) << c.from;
    if (c.windows > 1) {
      for (const auto& w : t->steps) EXPECT_EQ(w.end - w.begin, 10'000'000) << c.from;
    }
    EXPECT_FALSE(t->steps_note.empty());
  }
  // Too few repeats are no iterations: two optimizer steps fall back to the whole capture.
  auto few = ParseWith(StepLessTrace(2, false, true, false), {});
  ASSERT_TRUE(few.ok());
  EXPECT_EQ(few->steps_from, "whole capture");
  // A forced source: optimizer steps instead of the annotation; one that is absent fails.
  TraceReadOptions o;
  o.steps_from = StepSource::kOptimizer;
  auto forced = ParseWith(StepLessTrace(6, true, true, true), o);
  ASSERT_TRUE(forced.ok());
  EXPECT_EQ(forced->steps_from, "Optimizer.step");
  auto absent = ParseWith(StepLessTrace(6, true, false, true), o);
  ASSERT_FALSE(absent.ok());
  EXPECT_NE(absent.status().message().find("Optimizer.step"), std::string::npos);
  // ProfilerStep#N wins in auto mode and can be overridden.
  auto stepped = ParseWith(KinetoTrace(), {});
  ASSERT_TRUE(stepped.ok());
  EXPECT_EQ(stepped->steps_from, "ProfilerStep#N");
  EXPECT_TRUE(stepped->steps_note.empty());
}

TEST(TraceReader, StepLessGpuTraceSplitsAtTheIdleGaps) {
  // Kernel bursts of 6 ms every 10 ms (4 ms idle), 1 µs gaps inside a burst; no host marker.
  std::string s = "{\"traceEvents\": [";
  for (int i = 0; i < 5; ++i) {
    for (int k = 0; k < 6; ++k) {
      s += fmt::format("{}{{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"sgemm\", "
                       "\"pid\": 0, \"tid\": 7, \"ts\": {}, \"dur\": 999, "
                       "\"args\": {{\"device\": 0}}}}",
                       i + k == 0 ? "" : ", ", 1000 + i * 10'000 + k * 1000);
    }
  }
  s += "]}";
  auto t = ParseWith(s, {});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->steps_from, "GPU kernel bursts");
  ASSERT_EQ(t->steps.size(), 4u);
  for (const auto& w : t->steps) EXPECT_EQ(w.end - w.begin, 10'000'000);
}

TEST(TraceReader, BadInputIsAnErrorNamingTheFile) {
  struct Case {
    std::string text, expect;
  } cases[] = {
      {"", "empty file"},
      {"   \n", "empty file"},
      {"{\"traceEvents\": []}", "no events"},
      {"{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"aten::mm\", \"ts\": 1}]}",
       "no ProfilerStep"},
      {"{\"schemaVersion\": 1}", "without \"traceEvents\""},
      {"{\"traceEvents\": [{\"ph\": \"X\" \"ts\": 1}]}", "invalid JSON"},
      {"{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1,}]}", "invalid JSON"},
      {"{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1e}]}", "invalid JSON"},
      {"hello", "not a JSON trace"},
      {"{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1}]} trailing", "after the end"},
      {"{\"traceEvents\": 5}", "not an array"},
      {"{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"ProfilerStep#1\", \"ts\": 1, \"dur\": -5}]}",
       "no duration"},
      {"{\"traceEvents\": [{\"ph\": \"X\", \"name\": \"ProfilerStep#1\", \"ts\": 1}]}",
       "no duration"},
  };
  for (const auto& c : cases) {
    auto r = Parse(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find("mem.json"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.text << " -> " << r.status().message();
  }
}

TEST(TraceReader, EveryTruncationIsACleanError) {
  std::string s = KinetoTrace();
  for (size_t cut = 0; cut + 1 < s.size(); cut += 7) {
    auto r = Parse(s.substr(0, cut), 64);
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_TRUE(r.status().code() == StatusCode::kCorrupt ||
                r.status().code() == StatusCode::kInvalidArgument)
        << r.status().ToString();
  }
  std::string gz = Gzip(s);
  for (size_t cut = 10; cut + 1 < gz.size(); cut += 97) {
    auto r = Parse(gz.substr(0, cut));
    ASSERT_FALSE(r.ok()) << cut;
  }
}

TEST(JsonScan, SkipsNestedValuesAndRejectsMismatchedBrackets) {
  const char* err = nullptr;
  std::string ok = R"({"a": [1, 2.5e3, -0.1, {"b": [true, false, null, "x\"]"]}], "c": {}} tail)";
  const char* p = ok.data();
  EXPECT_EQ(json::SkipValue(p, ok.data() + ok.size(), &err), json::Scan::kOk);
  EXPECT_EQ(std::string(p), "tail");  // trailing whitespace is consumed
  for (std::string bad : {"[1, 2}", "{\"a\" 1}", "{\"a\": [1,, 2]}", "[tru]", "{1: 2}"}) {
    p = bad.data();
    EXPECT_EQ(json::SkipValue(p, bad.data() + bad.size(), &err), json::Scan::kError) << bad;
  }
  std::string open = "[1, [2, {\"a\": ";
  p = open.data();
  EXPECT_EQ(json::SkipValue(p, open.data() + open.size(), &err), json::Scan::kNeedMore);
  std::string deep(1000, '[');
  p = deep.data();
  EXPECT_EQ(json::SkipValue(p, deep.data() + deep.size(), &err), json::Scan::kError);
  EXPECT_EQ(json::Unescape(R"(a\"b\\c\u00e9\ud83d\ude00\n)"), "a\"b\\c\xc3\xa9\xf0\x9f\x98\x80\n");
}

// Interval algebra against a brute-force bitmap.
TEST(IntervalSet, AlgebraMatchesBruteForce) {
  std::mt19937 rng(42);
  for (int round = 0; round < 200; ++round) {
    const int N = 300;
    std::vector<bool> a(N), b(N);
    IntervalSet A, B;
    for (int k = 0; k < 8; ++k) {
      int s = rng() % N, l = rng() % 40;
      A.Add(s, std::min(N, s + l));
      for (int i = s; i < std::min(N, s + l); ++i) a[i] = true;
      s = rng() % N, l = rng() % 40;
      B.Add(s, std::min(N, s + l));
      for (int i = s; i < std::min(N, s + l); ++i) b[i] = true;
    }
    A.Compact();
    B.Compact();
    auto count = [&](auto pred) {
      int c = 0;
      for (int i = 0; i < N; ++i) c += pred(i) ? 1 : 0;
      return c;
    };
    EXPECT_EQ(A.Total(), count([&](int i) { return a[i]; }));
    EXPECT_EQ(Union(A, B).Total(), count([&](int i) { return a[i] || b[i]; }));
    EXPECT_EQ(Intersect(A, B).Total(), count([&](int i) { return a[i] && b[i]; }));
    EXPECT_EQ(Subtract(A, B).Total(), count([&](int i) { return a[i] && !b[i]; }));
    int lo = rng() % N, hi = lo + rng() % (N - lo + 1);
    EXPECT_EQ(MeasureIn(A, lo, hi), count([&](int i) { return a[i] && i >= lo && i < hi; }));
  }
}

}  // namespace
}  // namespace stoker::telemetry
