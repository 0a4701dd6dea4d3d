#include "doctor_binding.h"

#include <pybind11/stl.h>

#include <cmath>
#include <string>
#include <vector>

#include "doctor/doctor.h"
#include "doctor/render.h"
#include "telemetry/ray_stats.h"
#include "errors.h"

namespace stoker::py {
namespace pyb = pybind11;
using namespace pybind11::literals;

namespace {

// wait_s[i]: time blocked in next(); compute_s[i]: the rest of iteration i.
pyb::dict DiagnoseStepsPy(const std::vector<double>& wait_s, const std::vector<double>& compute_s,
                          int batch_size, int cpus) {
  if (wait_s.size() != compute_s.size()) {
    throw StatusError(InvalidArgument("diagnose_steps: {} waits but {} steps", wait_s.size(),
                                      compute_s.size()));
  }
  std::vector<doctor::StepTiming> steps;
  steps.reserve(wait_s.size());
  for (size_t i = 0; i < wait_s.size(); ++i) {
    steps.push_back({wait_s[i], wait_s[i] + compute_s[i]});
  }
  doctor::DoctorOptions opts;
  opts.batch_size = batch_size;
  opts.cpus = cpus;
  doctor::Report r;
  std::string text;
  {
    pyb::gil_scoped_release nogil;
    r = ValueOrThrow(doctor::DiagnoseSteps(steps, opts));
    text = doctor::RenderText(r);
  }
  pyb::list findings, evidence, fixes;
  for (const auto& f : r.findings) {
    findings.append(pyb::dict("id"_a = f.id, "severity"_a = f.severity, "title"_a = f.title,
                              "evidence"_a = f.evidence, "fix"_a = f.fix,
                              "expected_speedup"_a = f.expected_speedup.value_or(0.0)));
    if (!f.evidence.empty()) evidence.append(f.evidence);
    if (!f.fix.empty()) fixes.append(f.fix);
  }
  return pyb::dict("kind"_a = doctor::VerdictName(r.primary), "headline"_a = r.summary,
                   "confidence"_a = r.confidence, "input_frac"_a = r.breakdown.data_wait,
                   "samples_per_s"_a = r.samples_per_s, "steps_per_s"_a = r.steps_per_s,
                   "evidence"_a = evidence, "fixes"_a = fixes, "findings"_a = findings,
                   "notes"_a = r.notes, "text"_a = text);
}

// Ray Data's stats text (ds.stats(), or the summary with the iterator's breakdown) through
// the doctor: the same parse, rules and renderings as `stoker doctor STATS.txt`.
pyb::dict DiagnoseRayStatsPy(const std::string& text, const std::string& name) {
  doctor::Report r;
  std::string rendered, json;
  {
    pyb::gil_scoped_release nogil;
    auto st = ValueOrThrow(telemetry::ParseRayDataStats(text, name));
    doctor::DoctorInputs in;
    in.ray_stats.push_back(std::move(st));
    r = ValueOrThrow(doctor::Diagnose(in));
    rendered = doctor::RenderText(r);
    json = doctor::RenderJson(r);
  }
  pyb::list findings, evidence, fixes;
  for (const auto& f : r.findings) {
    findings.append(pyb::dict("id"_a = f.id, "severity"_a = f.severity, "title"_a = f.title,
                              "evidence"_a = f.evidence, "fix"_a = f.fix,
                              "expected_speedup"_a = f.expected_speedup.value_or(0.0)));
    if (!f.evidence.empty()) evidence.append(f.evidence);
    if (!f.fix.empty()) fixes.append(f.fix);
  }
  double wait = r.ray ? r.ray->consumer_wait_frac : NAN;
  return pyb::dict("kind"_a = doctor::VerdictName(r.primary), "headline"_a = r.summary,
                   "confidence"_a = r.confidence, "input_frac"_a = wait,
                   "evidence"_a = evidence, "fixes"_a = fixes, "findings"_a = findings,
                   "notes"_a = r.notes, "text"_a = rendered, "json"_a = json);
}

}  // namespace

void RegisterDoctor(pyb::module_& m) {
  m.def("diagnose_ray_stats", &DiagnoseRayStatsPy, "text"_a, "name"_a = "<ray stats>",
        "The doctor's verdict on Ray Data's stats text (telemetry::ParseRayDataStats, then "
        "doctor::Diagnose).");
  m.def("diagnose_steps", &DiagnoseStepsPy, "wait_s"_a, "compute_s"_a, "batch_size"_a = 0,
        "cpus"_a = 0,
        "The doctor's verdict on per-step timings (doctor::DiagnoseSteps): wait_s[i] spent in "
        "next(), compute_s[i] in the rest of the step.");
}

}  // namespace stoker::py
