// stoker doctor <trace/log/metrics files or folders> [--json F] [--html F] [--md F]
#include <unistd.h>

#include <cstdio>

#include "cli/commands.h"
#include "doctor/doctor.h"
#include "doctor/render.h"
#include "io/env.h"

namespace stoker::cli {

namespace {

struct DoctorFlags {
  std::vector<std::string> inputs;
  std::string json, html, md;
  int batch_size = 0;
  int cpus = 0;
  std::string time_unit = "auto";
  std::string steps_from = "auto";
  double interval = 1.0;
  bool no_color = false;
  bool quiet = false;
  int max_findings = 5;
  bool list_rules = false;
};

Status WriteOut(const std::string& path, const std::string& text) {
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::OK();
  }
  return Env::Default()->WriteFileAtomic(path, text.data(), text.size())
      .WithContext("writing " + path);
}

}  // namespace

int RunDoctor(const std::vector<std::string>& inputs, const doctor::DoctorOptions& dopts,
              const doctor::LoadOptions& lopts, const std::string& json, const std::string& html,
              const std::string& md, bool color, int max_findings, bool quiet) {
  // Every input problem (missing, truncated, malformed, unknown kind) is bad input: 2.
  auto in = doctor::LoadInputs(Env::Default(), inputs, lopts);
  if (!in.ok()) {
    Fail(in.status());
    return 2;
  }
  in->options = dopts;
  auto rep = doctor::Diagnose(*in);
  if (!rep.ok()) {
    Fail(rep.status());
    return 2;
  }
  if (!quiet) {
    doctor::TextOptions to;
    to.color = color;
    to.max_findings = max_findings;
    std::string text = doctor::RenderText(*rep, to);
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  for (auto [path, fn] : {std::pair{json, &doctor::RenderJson}, std::pair{md, &doctor::RenderMarkdown},
                          std::pair{html, &doctor::RenderHtml}}) {
    if (path.empty()) continue;
    Status st = WriteOut(path, fn(*rep));
    if (!st.ok()) return Fail(st);
  }
  return 0;
}

void RegisterWatchCommand(CLI::App& app);  // cmd_watch.cc

void RegisterDoctorCommands(CLI::App& app) {
  RegisterWatchCommand(app);
  auto f = std::make_shared<DoctorFlags>();
  CLI::App* c = app.add_subcommand(
      "doctor",
      "diagnose GPU starvation from PyTorch profiler traces (one per rank, or a folder), "
      "nvidia-smi/dcgmi logs, stoker watch samples, stoker pipeline metrics and Ray Data "
      "stats (ds.stats() text)");
  c->add_option("inputs", f->inputs, "trace/log/metrics/Ray stats files or folders");
  c->add_flag("--list-rules", f->list_rules,
              "print the verdict causes and finding rules with their thresholds and sources "
              "(Markdown) and exit");
  c->add_option("--json", f->json, "write the report as JSON (schema stoker.doctor/1; - = stdout)");
  c->add_option("--html", f->html, "write a self-contained HTML report with charts");
  c->add_option("--md", f->md, "write a Markdown report (for an issue tracker)");
  c->add_option("--batch-size", f->batch_size, "samples per step per rank, for samples/s");
  c->add_option("--cpus", f->cpus, "cores per GPU on the training machine (for the advice)");
  c->add_option("--time-unit", f->time_unit, "trace timestamps: auto, us or ns")
      ->check(CLI::IsMember({"auto", "us", "ns"}));
  c->add_option("--steps-from", f->steps_from,
                "what delimits iterations: auto (ProfilerStep#N, else inferred: annotation, "
                "optimizer, dataloader, gpu bursts, whole capture), or one of those")
      ->check(CLI::IsMember(
          {"auto", "profiler", "annotation", "optimizer", "dataloader", "gpu", "whole"}));
  c->add_option("--interval", f->interval,
                "seconds between samples of logs without timestamps (dmon, dcgmi)")
      ->check(CLI::PositiveNumber);
  c->add_option("--max-findings", f->max_findings, "findings shown in the terminal summary");
  c->add_flag("--no-color", f->no_color, "no ANSI colors");
  c->add_flag("-q,--quiet", f->quiet, "no terminal summary (only the files)");
  c->callback([f]() {
    SetAction([f]() {
      if (f->list_rules) {
        std::string t = doctor::RenderRulesMarkdown();
        std::fwrite(t.data(), 1, t.size(), stdout);
        return 0;
      }
      if (f->inputs.empty()) {
        Fail(InvalidArgument("stoker doctor: give a trace, GPU log or metrics file or folder "
                             "(or --list-rules)"));
        return 2;
      }
      doctor::DoctorOptions d;
      d.batch_size = f->batch_size;
      d.cpus = f->cpus;
      doctor::LoadOptions l;
      l.trace.unit = f->time_unit == "us"   ? telemetry::TraceReadOptions::Unit::kMicros
                     : f->time_unit == "ns" ? telemetry::TraceReadOptions::Unit::kNanos
                                            : telemetry::TraceReadOptions::Unit::kAuto;
      l.gpu_log.interval_s = f->interval;
      telemetry::ParseStepSource(f->steps_from, &l.trace.steps_from);  // checked above
      bool color = !f->no_color && ::isatty(1) != 0;
      bool quiet = f->quiet || f->json == "-" || f->md == "-" || f->html == "-";
      return RunDoctor(f->inputs, d, l, f->json, f->html, f->md, color, f->max_findings, quiet);
    });
  });
}

}  // namespace stoker::cli
