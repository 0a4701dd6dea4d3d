// stoker bench decode --data DIR: the decode-only limit. Loads every JPEG under DIR into
// memory, then decodes them with N threads, side by side:
//   turbojpeg  tjDecompress2 to RGB (the reference rate a pipeline cannot beat)
//   stoker     DecodeImage (libjpeg API, what the pipeline uses)
// --scale full: full-size decode; half: 1/2 DCT scale; auto: the training path, a
// RandomResizedCrop rect per image decoded with region decode + automatic DCT scale, then
// resized/flipped/normalized to 224x224 float CHW (stoker only; reports the ops cost).
#include <cstdint>
#include <time.h>
#include <turbojpeg.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "codec/image.h"
#include "core/thread_pool.h"
#include "io/env.h"
#include "ops/image_ops.h"

namespace stoker::cli {
namespace {

struct BenchDecodeArgs {
  std::string data;
  int threads = 0;
  std::string scale = "full";
  std::string decoder = "both";
  double seconds = 3.0;
  int max_images = 0;
  bool fast_dct = false, fast_upsample = false;
  std::string json;
};

struct LoadedImage {
  std::string path;
  std::vector<uint8_t> bytes;
  int width = 0, height = 0;
};

Status ListFiles(Env* env, const std::string& dir, std::vector<std::string>* out) {
  STOKER_ASSIGN_OR_RETURN(auto entries, env->ListDir(dir));
  for (const auto& e : entries) {
    const std::string p = JoinPath(dir, e.name);
    if (e.is_dir) {
      STOKER_RETURN_IF_ERROR(ListFiles(env, p, out));
    } else {
      out->push_back(p);
    }
  }
  return Status::OK();
}

Result<std::vector<LoadedImage>> LoadJpegs(const std::string& dir, int max_images,
                                           size_t* skipped) {
  Env* env = Env::Default();
  std::vector<std::string> files;
  STOKER_RETURN_IF_ERROR(ListFiles(env, dir, &files).WithContext("listing " + dir));
  std::vector<LoadedImage> images;
  for (const auto& f : files) {
    if (max_images > 0 && static_cast<int>(images.size()) >= max_images) break;
    LoadedImage img;
    img.path = f;
    STOKER_RETURN_IF_ERROR(env->ReadFile(f, &img.bytes));
    if (DetectImageFormat(img.bytes.data(), img.bytes.size()) != ImageFormat::kJpeg) {
      ++*skipped;
      continue;
    }
    auto info = ReadImageInfo(img.bytes.data(), img.bytes.size());
    if (!info.ok()) {
      ++*skipped;
      continue;
    }
    img.width = info->width;
    img.height = info->height;
    images.push_back(std::move(img));
  }
  if (images.empty()) return InvalidArgument("no decodable JPEG files under {}", dir);
  return images;
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct RunResult {
  double images_per_s = 0;
  uint64_t images = 0;
  uint64_t errors = 0;
  double decode_us = 0, ops_us = 0;  // per image, summed over threads (auto mode)
  double cpu_us = 0;  // thread CPU time per image (immune to other processes' load)
  std::string first_error;
};

// Runs `work(thread, image_index)` on `threads` threads until `seconds` have passed
// (at least one full pass over the images).
template <typename MakeWorker>
RunResult TimeIt(const std::vector<LoadedImage>& images, int threads, double seconds,
                 MakeWorker make_worker) {
  using Clock = std::chrono::steady_clock;
  std::atomic<uint64_t> next{0}, errors{0};
  std::atomic<int64_t> decode_ns{0}, ops_ns{0}, cpu_ns{0};
  std::atomic<bool> stop{false};
  const uint64_t n = images.size();
  std::string first_error;
  std::mutex err_mu;
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      auto worker = make_worker(t);
      int64_t dn = 0, on = 0;
      const double cpu0 = ThreadCpuSeconds();
      for (;;) {
        const uint64_t i = next.fetch_add(1, std::memory_order_relaxed);
        if (i >= n && (stop.load(std::memory_order_relaxed) ||
                       std::chrono::duration<double>(Clock::now() - start).count() >= seconds)) {
          stop = true;
          next.fetch_sub(1, std::memory_order_relaxed);
          break;
        }
        Status st = worker(i % n, i, &dn, &on);
        if (!st.ok()) {
          if (errors.fetch_add(1) == 0) {
            std::lock_guard<std::mutex> l(err_mu);
            first_error = images[i % n].path + ": " + st.message();
          }
        }
      }
      decode_ns += dn;
      ops_ns += on;
      cpu_ns += static_cast<int64_t>((ThreadCpuSeconds() - cpu0) * 1e9);
    });
  }
  for (auto& th : pool) th.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  RunResult r;
  r.images = next.load();
  r.errors = errors.load();
  r.images_per_s = r.images / elapsed;
  r.decode_us = r.images ? decode_ns.load() / 1e3 / r.images : 0;
  r.ops_us = r.images ? ops_ns.load() / 1e3 / r.images : 0;
  r.cpu_us = r.images ? cpu_ns.load() / 1e3 / r.images : 0;
  r.first_error = first_error;
  return r;
}

struct TjHandle {
  tjhandle h = tjInitDecompress();
  ~TjHandle() {
    if (h) tjDestroy(h);
  }
};

int RunBenchDecode(const BenchDecodeArgs& a) {
  size_t skipped = 0;
  auto loaded = LoadJpegs(a.data, a.max_images, &skipped);
  if (!loaded.ok()) return Fail(loaded.status());
  const std::vector<LoadedImage>& images = *loaded;
  const int threads = a.threads > 0 ? a.threads : AvailableCpus();
  uint64_t bytes = 0, pixels = 0;
  for (const auto& im : images) {
    bytes += im.bytes.size();
    pixels += static_cast<uint64_t>(im.width) * im.height;
  }
  std::printf("decode: %zu JPEG images in memory (%.1f MB, %.0f KB and %.2f MP on average)%s, "
              "%d threads, scale %s%s%s\n",
              images.size(), bytes / 1e6, bytes / 1e3 / images.size(),
              pixels / 1e6 / images.size(),
              skipped ? fmt::format(", {} other files skipped", skipped).c_str() : "", threads,
              a.scale.c_str(), a.fast_dct ? ", fast DCT" : "",
              a.fast_upsample ? ", fast upsampling" : "");

  const bool half = a.scale == "half", autoscale = a.scale == "auto";
  nlohmann::json results = nlohmann::json::object();
  double tj_rate = 0, stoker_rate = 0, tj_cpu = 0;

  if ((a.decoder == "turbojpeg" || a.decoder == "both") && !autoscale) {
    const int flags = (a.fast_dct ? TJFLAG_FASTDCT : 0) | (a.fast_upsample ? TJFLAG_FASTUPSAMPLE : 0);
    RunResult r = TimeIt(images, threads, a.seconds, [&](int) {
      auto tj = std::make_shared<TjHandle>();
      auto buf = std::make_shared<std::vector<uint8_t>>();
      return [&, tj, buf](uint64_t i, uint64_t, int64_t*, int64_t*) -> Status {
        const LoadedImage& im = images[i];
        const int w = half ? (im.width + 1) / 2 : im.width;
        const int h = half ? (im.height + 1) / 2 : im.height;
        buf->resize(static_cast<size_t>(w) * h * 3);
        if (tjDecompress2(tj->h, im.bytes.data(), static_cast<unsigned long>(im.bytes.size()),
                          buf->data(), w, 0, h, TJPF_RGB, flags) != 0) {
          return Corrupt("tjDecompress2: {}", tjGetErrorStr2(tj->h));
        }
        return Status::OK();
      };
    });
    tj_rate = r.images_per_s;
    std::printf("  turbojpeg tjDecompress2   %9.1f images/s  %7.0f us CPU/image  (%llu decodes, "
                "%llu errors)\n",
                r.images_per_s, r.cpu_us, (unsigned long long)r.images,
                (unsigned long long)r.errors);
    tj_cpu = r.cpu_us;
    if (r.errors) std::printf("    first error: %s\n", r.first_error.c_str());
    results["turbojpeg"] = {{"images_per_s", r.images_per_s}, {"cpu_us_per_image", r.cpu_us},
                            {"errors", r.errors}};
  }

  if (a.decoder == "stoker" || a.decoder == "both" || autoscale) {
    OutputSpec spec;  // 224x224 float CHW
    RandomResizedCropParams rrc;
    RunResult r = TimeIt(images, threads, a.seconds, [&](int) {
      auto img = std::make_shared<DecodedImage>();
      auto scratch = std::make_shared<ResizeScratch>();
      auto out = std::make_shared<std::vector<float>>(spec.bytes() / sizeof(float));
      return [&, img, scratch, out](uint64_t i, uint64_t seq, int64_t* dn,
                                    int64_t* on) -> Status {
        const LoadedImage& im = images[i];
        DecodeRequest req;
        req.fast_dct = a.fast_dct;
        req.fast_upsampling = a.fast_upsample;
        if (half) {
          req.target_w = im.width / 2;  // ChooseDctScale then picks 4/8
          req.target_h = im.height / 2;
        }
        if (!autoscale) return DecodeImage(im.bytes.data(), im.bytes.size(), req, img.get());
        Rng rng(1234, 0, seq);
        const CropRect crop = RandomResizedCropRect(im.width, im.height, rrc, rng);
        DecodeRequest creq = CropDecodeRequest(crop, spec);
        creq.fast_dct = a.fast_dct;
        creq.fast_upsampling = a.fast_upsample;
        const double t0 = ThreadCpuSeconds();
        STOKER_RETURN_IF_ERROR(DecodeImage(im.bytes.data(), im.bytes.size(), creq, img.get()));
        const double t1 = ThreadCpuSeconds();
        ResizeCropToOutput(*img, crop, rng.Next() & 1, spec, out->data(), scratch.get());
        const double t2 = ThreadCpuSeconds();
        *dn += static_cast<int64_t>((t1 - t0) * 1e9);
        *on += static_cast<int64_t>((t2 - t1) * 1e9);
        return Status::OK();
      };
    });
    stoker_rate = r.images_per_s;
    std::printf("  stoker DecodeImage%s %9.1f images/s  %7.0f us CPU/image  (%llu decodes, "
                "%llu errors)",
                autoscale ? "+RRC+ops" : "        ", r.images_per_s, r.cpu_us,
                (unsigned long long)r.images, (unsigned long long)r.errors);
    if (tj_rate > 0) {
      std::printf("  = %.2fx turbojpeg (%.2fx by CPU time)", r.images_per_s / tj_rate,
                  r.cpu_us > 0 ? tj_cpu / r.cpu_us : 0.0);
    }
    std::printf("\n");
    if (autoscale) {
      std::printf("    per sample (thread CPU time): decode %.0f us, RRC resize+flip+normalize "
                  "to 224x224 float %.0f us\n",
                  r.decode_us, r.ops_us);
    }
    if (r.errors) std::printf("    first error: %s\n", r.first_error.c_str());
    results["stoker"] = {{"images_per_s", r.images_per_s}, {"cpu_us_per_image", r.cpu_us},
                         {"errors", r.errors}};
    if (autoscale) {
      results["stoker"]["decode_us_per_sample"] = r.decode_us;
      results["stoker"]["ops_us_per_sample"] = r.ops_us;
    }
  }

  if (!a.json.empty()) {
    nlohmann::json j = {{"images", images.size()},
                        {"threads", threads},
                        {"scale", a.scale},
                        {"bytes", bytes},
                        {"fast_dct", a.fast_dct},
                        {"fast_upsample", a.fast_upsample},
                        {"images_per_s", tj_rate > 0 ? tj_rate : stoker_rate},
                        {"decoders", results}};
    if (tj_rate > 0 && stoker_rate > 0) j["stoker_vs_turbojpeg"] = stoker_rate / tj_rate;
    const std::string text = j.dump(2) + "\n";
    Status st = Env::Default()->WriteFileAtomic(a.json, text.data(), text.size());
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

}  // namespace

void RegisterBenchDecodeCommand(CLI::App& bench) {
  auto* cmd = bench.add_subcommand(
      "decode", "decode-only limit: every JPEG under DIR decoded from memory (TurboJPEG vs stoker)");
  auto a = std::make_shared<BenchDecodeArgs>();
  cmd->add_option("--data", a->data, "directory of JPEG files (searched recursively)")
      ->required();
  cmd->add_option("--threads", a->threads, "decoder threads (default: one per CPU)");
  cmd->add_option("--scale", a->scale,
                  "full | half (1/2 DCT scale) | auto (RandomResizedCrop + region decode + "
                  "DCT scale + resize/normalize to 224, stoker only)")
      ->check(CLI::IsMember({"full", "half", "auto"}));
  cmd->add_option("--decoder", a->decoder, "turbojpeg | stoker | both")
      ->check(CLI::IsMember({"turbojpeg", "stoker", "both"}));
  cmd->add_option("--seconds", a->seconds, "minimum time per decoder (at least one pass)");
  cmd->add_option("--max-images", a->max_images, "load at most this many files");
  cmd->add_flag("--fast-dct", a->fast_dct, "JDCT_IFAST / TJFLAG_FASTDCT");
  cmd->add_flag("--fast-upsample", a->fast_upsample, "no fancy upsampling");
  cmd->add_option("--json", a->json, "also write the results as JSON");
  cmd->callback([a] { SetAction([a] { return RunBenchDecode(*a); }); });
}

}  // namespace stoker::cli
