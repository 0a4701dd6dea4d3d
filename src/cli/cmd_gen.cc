#include <cstdint>
#include <cstdio>

#include "cli/commands.h"
#include "cli/progress.h"
#include "tools/synth.h"

namespace stoker::cli {

void RegisterGenCommands(CLI::App& app) {
  auto* gen = app.add_subcommand("gen", "generate synthetic datasets");
  gen->require_subcommand(1);
  auto* img = gen->add_subcommand(
      "images", "a deterministic ImageNet-like JPEG dataset (ImageFolder layout or wds shards)");
  auto o = std::make_shared<SynthOptions>();
  img->add_option("--out", o->out, "output directory")->required();
  img->add_option("--count", o->count, "number of images")->required();
  img->add_option("--seed", o->seed, "seed (image i is a pure function of seed and i)");
  img->add_option("--format", o->format, "folder (class_XXXX/img_XXXXXXXX.jpg) or wds")
      ->check(CLI::IsMember({"folder", "wds"}));
  img->add_option("--classes", o->classes, "number of classes (image i is class i % K)");
  img->add_option("--shard-samples", o->shard_samples, "samples per wds shard");
  img->add_option("--quality", o->quality, "JPEG quality");
  img->add_option("--threads", o->threads, "encoder threads (default: all CPUs)");
  img->callback([o] {
    SetAction([o]() -> int {
      Progress bar("gen images", o->count);
      SynthOptions opts = *o;
      opts.progress = [&bar](uint64_t done, uint64_t) { bar.Update(done); };
      auto r = GenerateImages(opts);
      bar.Done();
      if (!r.ok()) return Fail(r.status());
      if (r->cached) {
        std::printf("%s: already generated (%llu images, same arguments); nothing to do\n",
                    o->out.c_str(), (unsigned long long)r->images);
      } else {
        std::printf("%s: %llu images, %.1f MB of JPEG (%.0f KB average), manifest %s\n",
                    o->out.c_str(), (unsigned long long)r->images, r->bytes / 1e6,
                    r->images ? r->bytes / 1e3 / r->images : 0.0, r->manifest.c_str());
      }
      return 0;
    });
  });
}

}  // namespace stoker::cli
