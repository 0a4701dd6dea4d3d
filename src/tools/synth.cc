#include "tools/synth.h"

#include <cstdint>
#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "codec/image.h"
#include "core/random.h"
#include "core/thread_pool.h"
#include "formats/writer.h"

namespace stoker {

void SynthPixels(uint64_t seed, uint64_t index, int classes, std::vector<uint8_t>* rgb, int* width,
                 int* height) {
  Rng rng(seed, 0, index, /*stream=*/0x1a6e);
  int w = static_cast<int>(rng.Int(400, 640));
  double aspect = rng.Uniform(0.6, 1.4);
  int h = std::clamp(static_cast<int>(std::lround(w / aspect)), 64, 4096);
  *width = w;
  *height = h;
  rgb->resize(static_cast<size_t>(w) * h * 3);
  uint8_t* px = rgb->data();
  int cls = classes > 0 ? static_cast<int>(index % static_cast<uint64_t>(classes)) : 0;
  // Class tint: a hue per class so classes differ a little, as real ones do.
  double hue = classes > 0 ? 6.2831853 * cls / classes : 0.0;
  double tint[3] = {std::cos(hue), std::cos(hue - 2.094), std::cos(hue + 2.094)};
  double corner[4][3];
  for (auto& c : corner)
    for (int k = 0; k < 3; ++k) c[k] = std::clamp(rng.Uniform(30, 225) + 25 * tint[k], 0.0, 255.0);
  for (int y = 0; y < h; ++y) {
    double fy = h > 1 ? double(y) / (h - 1) : 0;
    uint8_t* row = px + static_cast<size_t>(y) * w * 3;
    for (int x = 0; x < w; ++x) {
      double fx = w > 1 ? double(x) / (w - 1) : 0;
      for (int k = 0; k < 3; ++k) {
        double top = corner[0][k] * (1 - fx) + corner[1][k] * fx;
        double bot = corner[2][k] * (1 - fx) + corner[3][k] * fx;
        row[3 * x + k] = static_cast<uint8_t>(top * (1 - fy) + bot * fy);
      }
    }
  }
  int shapes = static_cast<int>(rng.Int(3, 9));
  for (int s = 0; s < shapes; ++s) {
    int kind = static_cast<int>(rng.Below(3));
    int cx = static_cast<int>(rng.Below(w)), cy = static_cast<int>(rng.Below(h));
    int r = static_cast<int>(rng.Int(std::min(w, h) / 16, std::min(w, h) / 3));
    int rw = static_cast<int>(rng.Int(r / 2 + 1, r * 2 + 1)), rh = static_cast<int>(rng.Int(r / 2 + 1, r * 2 + 1));
    uint8_t col[3];
    for (auto& c : col) c = static_cast<uint8_t>(rng.Below(256));
    int alpha = static_cast<int>(rng.Int(128, 255));
    int x0 = std::max(0, cx - std::max(r, rw)), x1 = std::min(w - 1, cx + std::max(r, rw));
    int y0 = std::max(0, cy - std::max(r, rh)), y1 = std::min(h - 1, cy + std::max(r, rh));
    for (int y = y0; y <= y1; ++y)
      for (int x = x0; x <= x1; ++x) {
        int dx = x - cx, dy = y - cy;
        bool in;
        if (kind == 0) {
          in = dx * dx + dy * dy <= r * r;
        } else if (kind == 1) {
          in = std::abs(dx) <= rw && std::abs(dy) <= rh;
        } else {
          int d2 = dx * dx + dy * dy;
          in = d2 <= r * r && d2 >= (r * 2 / 3) * (r * 2 / 3);
        }
        if (!in) continue;
        uint8_t* p = px + (static_cast<size_t>(y) * w + x) * 3;
        for (int k = 0; k < 3; ++k) p[k] = static_cast<uint8_t>((p[k] * (255 - alpha) + col[k] * alpha) / 255);
      }
  }
  // Per-pixel noise: a SplitMix stream per row, amplitude varied per image (12-20 gives
  // ~95 KB per image at quality 90, close to ImageNet's ~110 KB mean file size).
  int amp = static_cast<int>(rng.Int(12, 20));
  for (int y = 0; y < h; ++y) {
    Rng nr(MixKey(seed, 1, index, static_cast<uint64_t>(y)));
    uint8_t* row = px + static_cast<size_t>(y) * w * 3;
    int n = w * 3;
    for (int i = 0; i < n;) {
      uint64_t bits = nr.Next();
      for (int b = 0; b < 8 && i < n; ++b, ++i) {
        int v = static_cast<int>((bits >> (8 * b)) & 0xff) % (2 * amp + 1) - amp;
        row[i] = static_cast<uint8_t>(std::clamp(row[i] + v, 0, 255));
      }
    }
  }
}

Status SynthJpeg(uint64_t seed, uint64_t index, int classes, int quality,
                 std::vector<uint8_t>* jpeg) {
  thread_local std::vector<uint8_t> rgb;
  int w, h;
  SynthPixels(seed, index, classes, &rgb, &w, &h);
  return EncodeJpeg(rgb.data(), w, h, quality, jpeg);
}

namespace {

nlohmann::json GenParams(const SynthOptions& o) {
  return {{"generator", "stoker gen images"}, {"version", kSynthVersion},       {"seed", o.seed},
          {"count", o.count},                 {"format", o.format}, {"classes", o.classes},
          {"shard_samples", o.format == "wds" ? o.shard_samples : 0}, {"quality", o.quality}};
}

}  // namespace

Result<SynthResult> GenerateImages(const SynthOptions& opts_in) {
  SynthOptions o = opts_in;
  Env* env = o.env ? o.env : Env::Default();
  if (o.out.empty()) return InvalidArgument("gen images: --out is required");
  if (o.format != "folder" && o.format != "wds")
    return InvalidArgument("gen images: --format must be folder or wds, not '{}'", o.format);
  if (o.classes < 1 || o.classes > 100000)
    return InvalidArgument("gen images: --classes must be in 1..100000");
  if (o.quality < 1 || o.quality > 100) return InvalidArgument("gen images: quality in 1..100");
  if (o.format == "wds" && o.shard_samples == 0)
    return InvalidArgument("gen images: --shard-samples must be > 0");
  SynthResult res;
  res.manifest = JoinPath(o.out, "stoker-gen.json");
  nlohmann::json want = GenParams(o);
  if (env->FileExists(res.manifest)) {
    std::vector<uint8_t> bytes;
    STOKER_RETURN_IF_ERROR(env->ReadFile(res.manifest, &bytes));
    auto have = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
    if (!have.is_discarded() && have.is_object()) {
      nlohmann::json params = have;
      params.erase("complete");
      params.erase("bytes");
      if (params == want && have.value("complete", false)) {
        res.cached = true;
        res.images = o.count;
        return res;
      }
    }
    return InvalidArgument(
        "{} describes a different generated dataset ({}); use another --out or remove it",
        res.manifest, have.is_discarded() ? "unreadable" : have.dump());
  }
  STOKER_RETURN_IF_ERROR(env->CreateDirs(o.out));
  std::unique_ptr<DatasetWriter> writer;
  if (o.format == "wds") {
    WriterOptions wo;
    wo.env = env;
    wo.samples_per_shard = o.shard_samples;
    wo.shard_bytes = ~0ull;
    STOKER_ASSIGN_OR_RETURN(writer, OpenDatasetWriter("wds:" + JoinPath(o.out, "train-%06d.tar"), wo));
  } else {
    for (int c = 0; c < o.classes; ++c)
      STOKER_RETURN_IF_ERROR(env->CreateDirs(JoinPath(o.out, fmt::format("class_{:04d}", c))));
  }
  int threads = o.threads > 0 ? o.threads : std::max(1, AvailableCpus());
  ThreadPool pool(threads, "stoker-gen");
  const uint64_t batch = static_cast<uint64_t>(threads) * 8;
  std::vector<std::vector<uint8_t>> jpegs(batch);
  std::vector<Status> errs(batch);
  Sample sample;
  for (uint64_t begin = 0; begin < o.count; begin += batch) {
    uint64_t end = std::min(o.count, begin + batch);
    for (uint64_t i = begin; i < end; ++i) {
      pool.Schedule([&, i] {
        size_t k = i - begin;
        errs[k] = SynthJpeg(o.seed, i, o.classes, o.quality, &jpegs[k]);
        if (errs[k].ok() && !writer) {
          std::string path = JoinPath(
              o.out, fmt::format("class_{:04d}/img_{:08d}.jpg", i % o.classes, i));
          errs[k] = env->WriteFileAtomic(path, jpegs[k].data(), jpegs[k].size());
        }
      });
    }
    pool.Wait();
    for (uint64_t i = begin; i < end; ++i) {
      size_t k = i - begin;
      if (!errs[k].ok()) return errs[k].WithContext(fmt::format("image {}", i));
      res.bytes += jpegs[k].size();
      if (writer) {
        sample.Clear();
        sample.key = fmt::format("img_{:08d}", i);
        sample.label = static_cast<int64_t>(i % o.classes);
        sample.AddField("jpg")->data.swap(jpegs[k]);
        STOKER_RETURN_IF_ERROR(writer->Write(sample));
        sample.fields[0].data.swap(jpegs[k]);
      }
    }
    res.images = end;
    if (o.progress) o.progress(end, o.count);
  }
  if (writer) STOKER_RETURN_IF_ERROR(writer->Close());
  nlohmann::json done = want;
  done["complete"] = true;
  done["bytes"] = res.bytes;
  std::string text = done.dump(2) + "\n";
  STOKER_RETURN_IF_ERROR(env->WriteFileAtomic(res.manifest, text.data(), text.size()));
  return res;
}

}  // namespace stoker
