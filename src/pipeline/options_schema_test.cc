#include "pipeline/options_schema.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

namespace stoker {
namespace {

using Values = std::vector<std::pair<std::string, OptionValue>>;

std::string Error(const Status& s) { return s.ok() ? "ok" : s.message(); }

const OptionSpec& Row(const std::string& name) {
  const OptionSpec* s = FindOption(name);
  EXPECT_NE(s, nullptr) << name;
  return *s;
}

TEST(OptionsSchema, DocsPageIsGeneratedFromTheTable) {
  std::ifstream f(std::string(STOKER_SOURCE_DIR) + "/docs/options.md");
  ASSERT_TRUE(f) << "docs/options.md is missing";
  std::stringstream page;
  page << f.rdbuf();
  EXPECT_EQ(page.str(), OptionsMarkdown())
      << "docs/options.md and the options table differ; regenerate it with\n"
         "  build/stoker options --markdown > docs/options.md";
}

TEST(OptionsSchema, NamesAndFlagsAreUnique) {
  std::set<std::string> seen;
  for (const auto& s : PipelineOptionSchema()) {
    EXPECT_TRUE(seen.insert(s.name).second) << s.name;
    EXPECT_TRUE(seen.insert(s.cli_flag()).second) << s.cli_flag();
    for (const auto& a : s.aliases) EXPECT_TRUE(seen.insert(a.flag).second) << a.flag;
    EXPECT_FALSE(s.doc.empty()) << s.name;
    EXPECT_TRUE(s.set && s.get) << s.name;
  }
}

// The documented default is what PipelineOptions holds when nothing is set, and giving it
// explicitly changes nothing (so the struct, the table, the CLI and Python agree).
TEST(OptionsSchema, DefaultsAreTheStructsDefaults) {
  const PipelineOptions def;
  for (const auto& s : PipelineOptionSchema()) {
    if (s.required) continue;
    auto parsed = ParseOptionText(s, s.default_text);
    ASSERT_TRUE(parsed.ok()) << s.name;
    auto checked = CheckOption(s, *parsed);
    ASSERT_TRUE(checked.ok()) << s.name << ": " << Error(checked.status());
    PipelineOptions o;
    s.set(o, *checked);
    EXPECT_EQ(s.get(o), s.get(def)) << s.name << " default " << s.default_text;
    if (s.type == OptionType::kFloats) {
      for (int i = 0; i < 3; ++i) {  // bit-identical, not just close
        EXPECT_EQ(o.output.mean[i], def.output.mean[i]) << s.name;
        EXPECT_EQ(o.output.std[i], def.output.std[i]) << s.name;
      }
    }
  }
}

TEST(OptionsSchema, EveryRowSetsItsField) {
  Values v = {{"data", OptionValue::String("d")},
              {"decode", OptionValue::String("val")},
              {"image_size", OptionValue::Int(96)},
              {"val_resize", OptionValue::Int(110)},
              {"layout", OptionValue::String("uint8")},
              {"mean", OptionValue::List({0.5, 0.5, 0.5})},
              {"std", OptionValue::List({0.25, 0.25, 0.25})},
              {"scale", OptionValue::List({0.2, 0.9})},
              {"ratio", OptionValue::List({0.5, 2.0})},
              {"flip_prob", OptionValue::Double(0.25)},
              {"dct_scale", OptionValue::Bool(false)},
              {"region_decode", OptionValue::Bool(false)},
              {"exif_orientation", OptionValue::Bool(true)},
              {"raw_field", OptionValue::String("cls")},
              {"batch_size", OptionValue::Int(7)},
              {"drop_last", OptionValue::Bool(true)},
              {"shuffle", OptionValue::Bool(false)},
              {"seed", OptionValue::Int(42)},
              {"shuffle_buffer", OptionValue::Int(100)},
              {"shuffle_buffer_mb", OptionValue::Int(16)},
              {"interleave", OptionValue::Int(32)},
              {"interleave_cycle", OptionValue::Int(3)},
              {"rank", OptionValue::Int(1)},
              {"world_size", OptionValue::Int(3)},
              {"balance", OptionValue::String("drop")},
              {"threads", OptionValue::Int(3)},
              {"fused", OptionValue::Bool(true)},
              {"prefetch", OptionValue::Int(5)},
              {"memory_budget", OptionValue::String("1.5GB")},
              {"cpu_budget", OptionValue::Int(2)},
              {"cache_dir", OptionValue::String("/tmp/c")},
              {"cache_limit", OptionValue::String("2GB")},
              {"on_error", OptionValue::String("skip")},
              {"skip_bad_shards", OptionValue::Bool(false)},
              {"stall_timeout", OptionValue::Double(12.5)},
              {"on_stall", OptionValue::String("warn")},
              {"device", OptionValue::String("cuda")},
              {"gpu_decode", OptionValue::String("on")},
              {"gpu_hybrid_threshold", OptionValue::Int(4096)}};
  // The list covers the table: a new row must be added here too.
  ASSERT_EQ(v.size(), PipelineOptionSchema().size());
  auto r = OptionsFromValues(v);
  ASSERT_TRUE(r.ok()) << Error(r.status());
  const PipelineOptions& o = *r;
  EXPECT_EQ(o.data, "d");
  EXPECT_EQ(o.cache_dir, "/tmp/c");
  EXPECT_EQ(o.shuffle_buffer_mb, 16u);
  EXPECT_EQ(o.interleave, 32);
  EXPECT_EQ(o.interleave_cycle, 3);
  EXPECT_EQ(o.cache_limit, 2000000000);
  EXPECT_EQ(o.mode, DecodeMode::kVal);
  EXPECT_EQ(o.image_size, 96);
  EXPECT_EQ(o.val_resize, 110);
  EXPECT_EQ(o.output.layout, OutputLayout::kUint8HWC);
  EXPECT_FLOAT_EQ(o.output.mean[1], 127.5f);
  EXPECT_FLOAT_EQ(o.output.std[2], 63.75f);
  EXPECT_DOUBLE_EQ(o.rrc.scale_min, 0.2);
  EXPECT_DOUBLE_EQ(o.rrc.ratio_max, 2.0);
  EXPECT_DOUBLE_EQ(o.flip_prob, 0.25);
  EXPECT_FALSE(o.dct_scale);
  EXPECT_FALSE(o.region_decode);
  EXPECT_DOUBLE_EQ(o.stall_timeout_s, 12.5);
  EXPECT_EQ(o.on_stall, StallAction::kWarn);
  EXPECT_EQ(o.device, ComputeDevice::kCuda);
  EXPECT_EQ(o.gpu_decode, GpuDecode::kOn);
  EXPECT_EQ(o.gpu_hybrid_threshold, 4096);
  EXPECT_TRUE(o.exif_orientation);
  EXPECT_EQ(o.raw_field, "cls");
  EXPECT_EQ(o.batch_size, 7);
  EXPECT_TRUE(o.drop_last);
  EXPECT_FALSE(o.shuffle);
  EXPECT_EQ(o.seed, 42u);
  EXPECT_EQ(o.shuffle_buffer, 100u);
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.world_size, 3);
  EXPECT_EQ(o.balance, RankBalance::kDrop);
  EXPECT_EQ(o.threads, 3);
  EXPECT_TRUE(o.fused);
  EXPECT_EQ(o.prefetch, 5);
  EXPECT_EQ(o.memory_budget, 1500000000);
  EXPECT_EQ(o.cpu_budget, 2);
  EXPECT_EQ(o.on_error, ErrorPolicy::kSkip);
  EXPECT_FALSE(o.dataset.skip_bad_shards);  // explicit false wins over on_error=skip
  // And every value reads back as given.
  for (const auto& [name, value] : v) {
    auto back = Row(name).get(o);
    if (name == "memory_budget") {
      EXPECT_EQ(back, OptionValue::Int(1500000000));
    } else if (name == "cache_limit") {
      EXPECT_EQ(back, OptionValue::Int(2000000000));
    } else if (value.kind == OptionValue::Kind::kList) {
      ASSERT_EQ(back.list.size(), value.list.size()) << name;
      for (size_t i = 0; i < value.list.size(); ++i)
        EXPECT_DOUBLE_EQ(back.list[i], value.list[i]) << name;
    } else {
      EXPECT_EQ(back, value) << name;
    }
  }
  EXPECT_TRUE(ValidatePipelineOptions(o).ok());
}

TEST(OptionsSchema, MessagesNameTheOption) {
  struct Case {
    const char* name;
    OptionValue value;
    const char* message;
  };
  OptionValue fancy = OptionValue::String("fancy");
  fancy.repr = "'fancy'";
  const Case cases[] = {
      {"batch_size", OptionValue::Int(0), "batch_size must be >= 1, got 0"},
      {"batch_size", OptionValue::Double(2.5), "batch_size must be an integer, got 2.5"},
      {"image_size", OptionValue::Int(4), "image_size must be in [8, 8192], got 4"},
      {"decode", fancy, "decode='fancy' is not one of 'train', 'val', 'raw'"},
      {"threads", OptionValue::Int(-1), "threads must be 'auto' or an integer >= 1, got -1"},
      {"prefetch", OptionValue::Int(65), "prefetch must be 'auto' or an integer in [1, 64], got 65"},
      {"seed", OptionValue::Int(-1), "seed must be a non-negative integer, got -1"},
      {"mean", OptionValue::List({123.7, 116.3, 103.5}), "mean values must be in [0.0, 1.0]"},
      {"std", OptionValue::List({0.2, 0.2}), "std must be 3 numbers, got 2"},
      {"std", OptionValue::List({0.2, 0.0, 0.2}), "std values must be in (0.0, 1.0]"},
      {"scale", OptionValue::List({0.9, 0.1}), "scale must be (min, max)"},
      {"flip_prob", OptionValue::Double(1.5), "flip_prob must be in [0.0, 1.0], got 1.5"},
      {"shuffle", OptionValue::Int(1), "shuffle must be True or False, got 1"},
      {"memory_budget", OptionValue::String("lots"), "memory_budget must be 'auto', a byte count"},
      {"batch_size", OptionValue::Auto(), "batch_size must be an integer, got auto"},
      {"on_error", OptionValue::Other("{}"), "on_error={} is not one of 'fail', 'skip'"},
  };
  for (const auto& c : cases) {
    PipelineOptions o;
    Status st = SetOption(&o, c.name, c.value);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(st.message().find(c.message), std::string::npos)
        << c.name << ": got \"" << st.message() << "\", want \"" << c.message << "\"";
  }
  PipelineOptions o;
  EXPECT_EQ(Error(SetOption(&o, "bogus", OptionValue::Int(1))), "unknown pipeline option 'bogus'");
  auto r = OptionsFromValues({{"batchsize", OptionValue::Int(1)}});
  EXPECT_EQ(Error(r.status()), "unknown pipeline option 'batchsize'");
}

TEST(OptionsSchema, AutoZeroAndText) {
  PipelineOptions o;
  o.threads = 4;
  ASSERT_TRUE(SetOption(&o, "threads", OptionValue::String("auto")).ok());
  EXPECT_EQ(o.threads, 0);
  o.threads = 4;
  ASSERT_TRUE(SetOption(&o, "threads", OptionValue::Int(0)).ok());  // 0 also means auto
  EXPECT_EQ(o.threads, 0);
  ASSERT_TRUE(SetOption(&o, "rank", OptionValue::Auto()).ok());
  EXPECT_EQ(o.rank, -1);
  // rank 0 is a rank, not auto.
  ASSERT_TRUE(SetOption(&o, "rank", OptionValue::Int(0)).ok());
  EXPECT_EQ(o.rank, 0);

  const OptionSpec& mem = Row("memory_budget");
  for (auto [text, bytes] : std::vector<std::pair<const char*, int64_t>>{
           {"4096", 4096}, {"512MB", 512000000}, {"8GiB", int64_t(8) << 30},
           {"1.5 g", 1500000000}, {"2kib", 2048}}) {
    auto v = ParseOptionText(mem, text);
    ASSERT_TRUE(v.ok());
    auto c = CheckOption(mem, *v);
    ASSERT_TRUE(c.ok()) << text << ": " << Error(c.status());
    EXPECT_EQ(c->i, bytes) << text;
  }
  EXPECT_FALSE(CheckOption(mem, *ParseOptionText(mem, "-1GB")).ok());
  EXPECT_FALSE(CheckOption(mem, *ParseOptionText(mem, "8 parsecs")).ok());

  auto scale = ParseOptionText(Row("scale"), "0.5,1");
  ASSERT_TRUE(scale.ok());
  EXPECT_EQ(*scale, OptionValue::List({0.5, 1.0}));
  EXPECT_EQ(ParseOptionText(Row("scale"), "0.5,").value().kind, OptionValue::Kind::kString);
  EXPECT_EQ(ParseOptionText(Row("shuffle"), "no").value(), OptionValue::Bool(false));
  EXPECT_EQ(ParseOptionText(Row("batch_size"), "16").value(), OptionValue::Int(16));
  auto many = ParseOptionText(Row("threads"), "many").value();
  EXPECT_EQ(Error(CheckOption(Row("threads"), many).status()),
            "threads must be 'auto' or an integer >= 1, got 'many'");
}

TEST(OptionsSchema, OldCliSpellingsAreAliases) {
  EXPECT_EQ(FindOption("--mode")->name, "decode");
  EXPECT_EQ(FindOption("--batch")->name, "batch_size");
  EXPECT_EQ(FindOption("--batch-size")->name, "batch_size");
  const OptionSpec* mem = FindOption("--memory-budget-mb");
  ASSERT_NE(mem, nullptr);
  EXPECT_EQ(mem->name, "memory_budget");
  ASSERT_EQ(mem->aliases.size(), 1u);
  EXPECT_EQ(mem->aliases[0].unit, "MB");
  EXPECT_EQ(FindOption("--no-such-flag"), nullptr);
}

TEST(OptionsSchema, SkipBadShardsFollowsOnErrorUnlessGiven) {
  auto skip = OptionsFromValues({{"on_error", OptionValue::String("skip")}});
  ASSERT_TRUE(skip.ok());
  EXPECT_TRUE(skip->dataset.skip_bad_shards);
  auto fail = OptionsFromValues({});
  ASSERT_TRUE(fail.ok());
  EXPECT_FALSE(fail->dataset.skip_bad_shards);
  // Given before on_error in the input: the table's order still applies.
  auto given = OptionsFromValues({{"skip_bad_shards", OptionValue::Bool(true)},
                                  {"on_error", OptionValue::String("fail")}});
  ASSERT_TRUE(given.ok());
  EXPECT_TRUE(given->dataset.skip_bad_shards);
}

TEST(OptionsSchema, ValidateRunsTheTableOnCppOptions) {
  PipelineOptions o;
  o.data = "x";
  EXPECT_TRUE(ValidatePipelineOptions(o).ok());
  o.flip_prob = 2;
  EXPECT_EQ(Error(ValidatePipelineOptions(o)), "flip_prob must be in [0.0, 1.0], got 2");
  o = PipelineOptions{};
  EXPECT_EQ(Error(ValidatePipelineOptions(o)), "data must be given");
  o.data = "x";
  o.rrc.scale_min = 0.9;
  o.rrc.scale_max = 0.1;
  EXPECT_NE(Error(ValidatePipelineOptions(o)).find("scale must be (min, max)"), std::string::npos);
}

TEST(OptionsSchema, JsonListsEveryRow) {
  std::string j = OptionsJson();
  for (const auto& s : PipelineOptionSchema())
    EXPECT_NE(j.find("\"name\": \"" + s.name + "\""), std::string::npos) << s.name;
}

}  // namespace
}  // namespace stoker
