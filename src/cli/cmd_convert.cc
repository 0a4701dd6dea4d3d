// stoker convert SRC DST, stoker verify DST, stoker dump SRC.
#include <cstdint>
#include <zlib.h>

#include <cctype>
#include <cstdio>

#include "cli/commands.h"
#include "cli/progress.h"
#include "cli/python_side.h"
#include "formats/checksum.h"
#include "tools/convert.h"

namespace stoker::cli {
namespace {

// "256MB", "1G", "4096", "64KiB" → bytes (K/M/G/T are powers of 1024).
Result<uint64_t> ParseSize(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
  if (i == 0 || i > 18) return InvalidArgument("bad size '{}' (e.g. 256MB)", s);
  uint64_t v = std::stoull(s.substr(0, i));
  std::string unit = s.substr(i);
  for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  int shift = 0;
  if (unit.empty() || unit == "B") shift = 0;
  else if (unit == "K" || unit == "KB" || unit == "KIB") shift = 10;
  else if (unit == "M" || unit == "MB" || unit == "MIB") shift = 20;
  else if (unit == "G" || unit == "GB" || unit == "GIB") shift = 30;
  else if (unit == "T" || unit == "TB" || unit == "TIB") shift = 40;
  else return InvalidArgument("bad size unit in '{}' (use K, M, G, T)", s);
  return v << shift;
}

std::string JsonEscape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      o += fmt::format("\\u{:04x}", c);
    } else {
      o += static_cast<char>(c);
    }
  }
  return o;
}

}  // namespace

void RegisterConvertCommands(CLI::App& app) {
  {
    auto* c = app.add_subcommand(
        "convert", "convert a dataset to another format (wds, tfrecord, lmdb, ...) with a "
                   "manifest for verify and --resume");
    struct Args {
      std::string src, dst, shard_size = "256MB";
      uint64_t samples_per_shard = 0;
      int threads = 0;
      bool resume = false, gzip = false, no_index = false, skip_bad = false;
    };
    auto a = std::make_shared<Args>();
    c->add_option("SRC", a->src, "source dataset (folder, x.tar, wds:..., tfrecord:..., ...)")
        ->required();
    c->add_option("DST", a->dst, "destination writer spec, e.g. wds:out/train-%06d.tar")
        ->required();
    c->add_option("--shard-size", a->shard_size, "start a new shard after this size");
    c->add_option("--samples-per-shard", a->samples_per_shard, "cap samples per shard");
    c->add_option("--threads", a->threads, "reader threads (default: all CPUs)");
    c->add_flag("--resume", a->resume, "continue an interrupted conversion");
    c->add_flag("--gzip", a->gzip, "compress shards (tfrecord)");
    c->add_flag("--no-index", a->no_index, "do not write .idx files");
    c->add_flag("--skip-bad-shards", a->skip_bad, "keep the readable part of damaged shards");
    c->callback([a] {
      SetAction([a]() -> int {
        if (a->src.rfind("text:", 0) == 0 && a->dst.rfind("tokens:", 0) == 0)  // docs/tokens.md
          return ForwardToPython({"tokenize"}, {"--threads=" + std::to_string(a->threads),
                                                a->resume ? "--resume" : "--", a->src, a->dst});
        ConvertOptions o;
        auto sz = ParseSize(a->shard_size);
        if (!sz.ok()) return Fail(sz.status());
        o.writer.shard_bytes = *sz;
        o.writer.samples_per_shard = a->samples_per_shard;
        o.writer.gzip = a->gzip;
        o.writer.write_index = !a->no_index;
        o.read.skip_bad_shards = a->skip_bad;
        o.threads = a->threads;
        o.resume = a->resume;
        Progress bar("convert", 0);
        uint64_t last_total = 0;
        o.progress = [&](uint64_t done, uint64_t total) {
          if (total != last_total) {
            bar = Progress("convert", total);
            last_total = total;
          }
          bar.Update(done);
        };
        auto r = Convert(a->src, a->dst, o);
        bar.Done();
        if (!r.ok()) {
          int rc = Fail(r.status());
          auto colon = a->dst.find(':');
          bool topic = a->dst.rfind("kafka:", 0) == 0;
          std::string manifest = topic ? "" : ManifestPathFor(Env::Default(), a->dst);
          if (colon != std::string::npos && !topic && Env::Default()->FileExists(manifest))
            std::fprintf(stderr,
                         "stoker: %s records the incomplete conversion; fix the cause and run "
                         "the same command with --resume\n",
                         manifest.c_str());
          return rc;
        }
        if (r->already_complete) {
          std::printf("%s: already complete\n", r->manifest_path.c_str());
        } else if (r->resumed_from > 0) {
          std::printf("resumed at sample %llu\n", (unsigned long long)r->resumed_from);
        }
        if (r->manifest_path.empty()) {  // a topic: messages per partition
          std::printf("%llu samples as messages in %zu partitions, %.1f MB, checksum %s\n",
                      (unsigned long long)r->samples, r->shards.size(), r->bytes / 1e6,
                      HashHex(r->checksum).c_str());
          for (const auto& s : r->shards)
            std::printf("  %s: %llu messages\n", s.path.c_str(), (unsigned long long)s.samples);
          return 0;
        }
        std::printf("%llu samples in %zu shards, %.1f MB, checksum %s, manifest %s\n",
                    (unsigned long long)r->samples, r->shards.size(), r->bytes / 1e6,
                    HashHex(r->checksum).c_str(), r->manifest_path.c_str());
        return 0;
      });
    });
  }
  {
    auto* v = app.add_subcommand("verify", "re-read a converted dataset and check its manifest");
    auto dst = std::make_shared<std::string>();
    auto threads = std::make_shared<int>(0);
    v->add_option("DST", *dst, "destination directory, manifest or writer spec")->required();
    v->add_option("--threads", *threads, "reader threads");
    v->callback([dst, threads] {
      SetAction([dst, threads]() -> int {
        if (dst->rfind("tokens:", 0) == 0 ||  // a tokenized corpus (docs/tokens.md)
            Env::Default()->FileExists(JoinPath(*dst, "stoker-token-manifest.json")))
          return ForwardToPython({"verify-tokens"}, {*dst});
        Progress bar("verify", 0);
        uint64_t last_total = 0;
        auto r = Verify(*dst, nullptr, *threads, [&](uint64_t done, uint64_t total) {
          if (total != last_total) {
            bar = Progress("verify", total);
            last_total = total;
          }
          bar.Update(done);
        });
        bar.Done();
        if (!r.ok()) return Fail(r.status());
        if (!r->ok) {
          for (const auto& p : r->problems) std::fprintf(stderr, "stoker: verify: %s\n", p.c_str());
          return 1;
        }
        std::printf("ok: %llu samples, checksum %s\n", (unsigned long long)r->samples,
                    HashHex(r->checksum).c_str());
        return 0;
      });
    });
  }
  {
    auto* d = app.add_subcommand(
        "dump", "print each sample as a JSON line: key, label, fields with size and crc32");
    struct Args {
      std::string src;
      uint64_t limit = 0, start = 0;
      bool hex = false, skip_bad = false;
    };
    auto a = std::make_shared<Args>();
    d->add_option("SRC", a->src, "dataset spec")->required();
    d->add_option("--limit", a->limit, "at most N samples (0 = all)");
    d->add_option("--start", a->start, "first sample index");
    d->add_flag("--hex", a->hex, "also print every field's bytes in hex");
    d->add_flag("--skip-bad-shards", a->skip_bad, "index damaged shards partially");
    d->callback([a] {
      SetAction([a]() -> int {
        DatasetOptions o;
        o.skip_bad_shards = a->skip_bad;
        auto ds = OpenDataset(a->src, o);
        if (!ds.ok()) return Fail(ds.status());
        for (const auto& e : (*ds)->index_errors())
          std::fprintf(stderr, "stoker: index: %s\n", e.c_str());
        uint64_t n = (*ds)->size();
        uint64_t end = a->limit ? std::min(n, a->start + a->limit) : n;
        Sample s;
        std::string line;
        for (uint64_t i = a->start; i < end; ++i) {
          Status st = (*ds)->Read(i, &s);
          if (!st.ok()) return Fail(st);
          line = fmt::format("{{\"index\": {}, \"key\": \"{}\", \"label\": {}, \"fields\": [", i,
                             JsonEscape(s.key), s.label);
          for (size_t k = 0; k < s.num_fields; ++k) {
            const Field& f = s.fields[k];
            uint32_t crc = static_cast<uint32_t>(
                crc32(0, f.data.data(), static_cast<uInt>(f.data.size())));
            line += fmt::format("{}{{\"name\": \"{}\", \"size\": {}, \"crc32\": {}", k ? ", " : "",
                                JsonEscape(f.name), f.data.size(), crc);
            if (a->hex) {
              line += ", \"hex\": \"";
              static const char* kHex = "0123456789abcdef";
              for (uint8_t b : f.data) {
                line += kHex[b >> 4];
                line += kHex[b & 15];
              }
              line += '"';
            }
            line += '}';
          }
          line += "]}\n";
          std::fwrite(line.data(), 1, line.size(), stdout);
        }
        return 0;
      });
    });
  }
}

}  // namespace stoker::cli
