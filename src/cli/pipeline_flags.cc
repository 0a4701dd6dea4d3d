#include "cli/pipeline_flags.h"

#include <cstdint>
#include <cstdio>

namespace stoker::cli {

namespace {

std::string HelpText(const OptionSpec& s) {
  std::string h = s.doc;
  if (!s.auto_doc.empty()) h += "; auto: " + s.auto_doc;
  std::string range = s.range_text();
  if (!range.empty() && s.type != OptionType::kEnum) h += " (" + range + ")";
  if (!s.required) h += fmt::format(" [default: {}]", s.default_text.empty() ? "\"\"" : s.default_text);
  return h;
}

std::string TypeName(const OptionSpec& s) {
  std::string t;
  switch (s.type) {
    case OptionType::kInt: t = "INT"; break;
    case OptionType::kDouble: t = "FLOAT"; break;
    case OptionType::kBytes: t = "SIZE"; break;
    case OptionType::kFloats: t = "F,F,F"; break;
    case OptionType::kRange: t = "MIN,MAX"; break;
    case OptionType::kEnum: {
      for (const auto& c : s.choices) {
        if (!t.empty()) t += '|';
        t += c;
      }
      t = "{" + t + "}";
      break;
    }
    default: t = "TEXT";
  }
  return s.auto_doc.empty() ? t : "auto|" + t;
}

}  // namespace

void AddPipelineFlags(CLI::App* cmd, PipelineFlags* f, bool with_data) {
  for (const OptionSpec& s : PipelineOptionSchema()) {
    if (s.name == "data" && !with_data) continue;
    const std::string name = s.name;
    if (s.type == OptionType::kBool) {
      // --x sets true, --no-x false; the help line shows the one that changes the default.
      std::string flags = s.cli_flag() + ",!--no-" + s.cli_flag().substr(2);
      auto* opt = cmd->add_flag_function(
          flags,
          [f, name](int64_t count) { f->values.emplace_back(name, OptionValue::Bool(count > 0)); },
          HelpText(s));
      (void)opt;
      continue;
    }
    auto add = [&](const std::string& flag, const std::string& unit) {
      auto* opt = cmd->add_option_function<std::string>(
          flag,
          [f, name, unit](const std::string& text) {
            const OptionSpec* spec = FindOption(name);
            bool number = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos;
            auto v = ParseOptionText(*spec, unit.empty() || !number ? text : text + unit);
            OptionValue val = v.ok() ? *v : OptionValue::String(text);
            val.repr = fmt::format("'{}'", text);
            if (v.ok() && v->kind != OptionValue::Kind::kString) val.repr = text;
            f->values.emplace_back(name, std::move(val));
          },
          flag == s.cli_flag() ? HelpText(s)
                               : fmt::format("old spelling of {}{}", s.cli_flag(),
                                             unit.empty() ? "" : " (in " + unit + ")"));
      opt->type_name(unit.empty() ? TypeName(s) : "auto|" + unit);
      if (s.required && flag == s.cli_flag()) opt->required();
      return opt;
    };
    add(s.cli_flag(), "");
    for (const auto& a : s.aliases) add(a.flag, a.unit);
  }
}

Result<PipelineOptions> ToOptions(const PipelineFlags& f) {
  auto r = OptionsFromValues(f.values);
  if (!r.ok()) return r.status().WithContext("bad flag");
  // The CLI watches for stalls unless told otherwise (the library's default is off), and
  // prints the pipeline's warnings.
  bool stall_given = false;
  for (const auto& [name, v] : f.values) stall_given |= name == "stall_timeout";
  if (!stall_given) r->stall_timeout_s = 300;
  r->log = [](const std::string& m) { std::fprintf(stderr, "stoker: warning: %s\n", m.c_str()); };
  return r;
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
  if (!st.source_counters.empty()) {
    out += "  source:";
    for (const auto& [k, v] : st.source_counters) out += fmt::format(" {}={:g}", k, v);
    out += "\n";
  }
  for (const auto& n : st.source_notes) out += fmt::format("  note: {}\n", n);
  return out;
}

void RegisterOptionsCommand(CLI::App& app) {
  struct Args {
    bool markdown = false, json = false;
  };
  auto a = std::make_shared<Args>();
  auto* cmd = app.add_subcommand("options", "the pipeline's options: names, flags, defaults, ranges");
  cmd->add_flag("--markdown", a->markdown, "print docs/options.md (generated from the table)");
  cmd->add_flag("--json", a->json, "print the table as JSON");
  cmd->callback([a] {
    SetAction([a] {
      if (a->markdown) {
        std::fputs(OptionsMarkdown().c_str(), stdout);
      } else if (a->json) {
        std::printf("%s\n", OptionsJson().c_str());
      } else {
        std::string group;
        for (const auto& s : PipelineOptionSchema()) {
          if (s.group != group) {
            group = s.group;
            std::printf("%s%s:\n", group == PipelineOptionSchema().front().group ? "" : "\n",
                        group.c_str());
          }
          std::string flags = s.cli_flag();
          if (s.type == OptionType::kBool) flags += ", --no-" + flags.substr(2);
          for (const auto& al : s.aliases) flags += ", " + al.flag;
          std::printf("  %-18s %-36s %s\n", s.name.c_str(), flags.c_str(),
                      s.required ? "(required)"
                      : ("default " + (s.default_text.empty() ? "\"\"" : s.default_text)).c_str());
        }
        std::printf("\nstoker options --markdown: the full table (docs/options.md)\n");
      }
      return 0;
    });
  });
}

}  // namespace stoker::cli
