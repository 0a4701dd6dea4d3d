#include "cli/pipeline_flags.h"

#include <nlohmann/json.hpp>

namespace stoker::cli {

void AddPipelineFlags(CLI::App* cmd, PipelineFlags* f, bool with_data) {
  if (with_data)
    cmd->add_option("--data", f->data,
                    "dataset: a folder (ImageFolder), shards (train-{000..099}.tar), or fmt:path")
        ->required();
  cmd->add_option("--batch", f->batch, "batch size")->capture_default_str();
  cmd->add_option("--threads", f->threads, "worker threads: auto or N")->capture_default_str();
  cmd->add_option("--prefetch", f->prefetch, "ready batches buffered: auto or N")
      ->capture_default_str();
  cmd->add_option("--rank", f->rank, "this process's rank (default: RANK, OMPI_*, SLURM_*)");
  cmd->add_option("--world-size", f->world_size, "number of ranks");
  cmd->add_option("--seed", f->seed, "shuffle and augmentation seed")->capture_default_str();
  cmd->add_option("--on-error", f->on_error, "bad samples: fail (stop, name it) or skip (count)")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  cmd->add_option("--mode", f->mode,
                  "train (RandomResizedCrop+flip), val (Resize+CenterCrop), raw (bytes only)")
      ->check(CLI::IsMember({"train", "val", "raw"}))
      ->capture_default_str();
  cmd->add_option("--layout", f->layout, "output: float (normalized CHW) or uint8 (HWC)")
      ->check(CLI::IsMember({"float", "uint8"}))
      ->capture_default_str();
  cmd->add_option("--balance", f->balance, "equal batches per rank by: pad or drop")
      ->check(CLI::IsMember({"pad", "drop"}))
      ->capture_default_str();
  cmd->add_option("--image-size", f->image_size, "output height and width")->capture_default_str();
  cmd->add_flag("--no-shuffle", f->no_shuffle, "deliver samples in dataset order");
  cmd->add_option("--shuffle-buffer", f->shuffle_buffer, "shuffle buffer (sharded formats)")
      ->capture_default_str();
  cmd->add_flag("--drop-last", f->drop_last, "drop the final partial batch");
  cmd->add_flag("--fused", f->fused, "each thread runs all stages for its sample");
  cmd->add_flag("--no-dct-scale", f->no_dct, "always decode JPEGs at full size");
  cmd->add_flag("--exif-orientation", f->exif_orientation,
                "decode JPEGs in their EXIF orientation (off: as torchvision's PIL loader)");
  cmd->add_flag("--no-region-decode", f->no_region, "decode whole JPEGs, not just the crop");
  cmd->add_option("--memory-budget-mb", f->memory_mb, "batch + sample buffer budget (0 = auto)");
  cmd->add_option("--cpu-budget", f->cpu_budget, "cores the pipeline may use (0 = all)");
}

static Result<int> ParseAuto(const std::string& s, const char* what) {
  if (s == "auto") return 0;
  try {
    size_t used = 0;
    int v = std::stoi(s, &used);
    if (used != s.size() || v < 1) throw std::invalid_argument(s);
    return v;
  } catch (...) {
    return InvalidArgument("--{} must be 'auto' or a positive integer, got '{}'", what, s);
  }
}

Result<PipelineOptions> ToOptions(const PipelineFlags& f) {
  PipelineOptions o;
  o.data = f.data;
  o.batch_size = f.batch;
  STOKER_ASSIGN_OR_RETURN(o.threads, ParseAuto(f.threads, "threads"));
  STOKER_ASSIGN_OR_RETURN(o.prefetch, ParseAuto(f.prefetch, "prefetch"));
  o.rank = f.rank;
  o.world_size = f.world_size;
  o.seed = f.seed;
  o.on_error = f.on_error == "skip" ? ErrorPolicy::kSkip : ErrorPolicy::kFail;
  o.mode = f.mode == "val" ? DecodeMode::kVal : f.mode == "raw" ? DecodeMode::kRaw : DecodeMode::kTrain;
  o.output.layout = f.layout == "uint8" ? OutputLayout::kUint8HWC : OutputLayout::kFloatCHW;
  o.balance = f.balance == "drop" ? RankBalance::kDrop : RankBalance::kPad;
  o.image_size = f.image_size;
  o.shuffle = !f.no_shuffle;
  o.shuffle_buffer = f.shuffle_buffer;
  o.drop_last = f.drop_last;
  o.fused = f.fused;
  o.dct_scale = !f.no_dct;
  o.region_decode = !f.no_region;
  o.exif_orientation = f.exif_orientation;
  o.memory_budget = static_cast<int64_t>(f.memory_mb * 1e6);
  o.cpu_budget = f.cpu_budget;
  if (o.on_error == ErrorPolicy::kSkip) o.dataset.skip_bad_shards = true;
  return o;
}

std::string FormatStats(const PipelineStats& st) {
  std::string out = fmt::format("  {:<8} {:>7} {:>9} {:>8} {:>8} {:>9} {:>9} {:>7}\n", "stage",
                                "threads", "items", "ms/item", "busy", "wait-in", "wait-out",
                                "queue");
  for (const auto& s : st.stages) {
    double ms = s.items ? s.busy_s / s.items * 1e3 : 0;
    out += fmt::format("  {:<8} {:>7} {:>9} {:>8.3f} {:>7.0f}% {:>8.0f}% {:>8.0f}% {:>6.0f}%\n",
                       s.name, s.name == "batch" ? std::string("-") : std::to_string(s.threads),
                       s.items, ms, s.busy_frac * 100, s.wait_input_frac * 100,
                       s.wait_output_frac * 100, s.queue_fill * 100);
  }
  out += fmt::format("  bottleneck: {}\n", st.bottleneck);
  return out;
}

std::string StatsJson(const PipelineStats& st, const PipelineOptions& o, int epochs) {
  nlohmann::json j;
  j["samples_per_s"] = st.samples_per_s;
  j["mb_per_s"] = st.mb_per_s;
  j["samples"] = st.samples;
  j["batches"] = st.batches;
  j["epochs"] = epochs;
  j["wall_s"] = st.wall_s;
  j["batch_size"] = o.batch_size;
  j["bottleneck"] = st.bottleneck;
  j["threads"] = st.threads;
  j["prefetch"] = st.prefetch;
  j["autotune"] = st.autotune;
  j["memory_budget_bytes"] = st.memory_budget;
  j["buffer_bytes"] = st.buffer_bytes;
  j["consumer_wait_s"] = st.consumer_wait_s;
  j["consumer_wait_frac"] = st.consumer_wait_frac;
  j["rank"] = st.rank.rank;
  j["world_size"] = st.rank.world_size;
  j["skipped"] = st.skipped;
  j["skipped_items"] = st.skipped_items;
  j["data"] = o.data;
  auto& stages = j["stages"] = nlohmann::json::array();
  for (const auto& s : st.stages) {
    stages.push_back({{"name", s.name},
                      {"threads", s.threads},
                      {"items", s.items},
                      {"bytes", s.bytes},
                      {"busy_s", s.busy_s},
                      {"cpu_s", s.cpu_s},
                      {"busy_frac", s.busy_frac},
                      {"wait_input_frac", s.wait_input_frac},
                      {"wait_output_frac", s.wait_output_frac},
                      {"queue_fill", s.queue_fill}});
  }
  auto& tuning = j["tuning"] = nlohmann::json::array();
  for (const auto& t : st.tuning) tuning.push_back({{"t_s", t.t_s}, {"what", t.what}});
  return j.dump(2);
}

}  // namespace stoker::cli
