// The doctor's internals: the analysis context every rule reads, the rule table, and the
// verdict selection. Not part of the public API (doctor.h is).
//
// Diagnose() runs in four steps:
//   1. per-input analyses (analyze.cc: AnalyzeTrace, AnalyzeGpuLog, AnalyzePipeline) and the
//      shared context (BuildAnalysis: breakdown over ranks, cross-rank straggler, the input
//      and communication scores);
//   2. the finding rules of rules.cc, in table order (trace rules, then each GPU log's rules,
//      then the pipeline's);
//   3. the verdict (verdict.cc): every cause's score against its threshold;
//   4. the rules that depend on the verdict, the sort by expected gain, the summary.
//
// Adding a finding: write `std::optional<Finding> MyRule(const Analysis& a, const
// GpuLogReport* log)` in rules.cc and add one row to Rules() (id, scope, condition with the
// thresholds it uses, source). The row is what `stoker doctor --list-rules` and the table in
// docs/doctor.md show.
#pragma once

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "doctor/doctor.h"

namespace stoker::doctor {

double Percentile(std::vector<double> v, double q);
double Median(std::vector<double> v);
void AddScaled(Fractions* acc, const Fractions& f, double w);

// What the rules and the verdict share: the inputs, the report as analysed so far, and the
// quantities several rules use.
struct Analysis {
  const DoctorInputs* in = nullptr;
  const Thresholds* th = nullptr;
  Report* rep = nullptr;  // ranks, breakdown, cross, gpu_logs, pipeline filled in

  const Fractions& B() const { return rep->breakdown; }
  bool has_trace() const { return rep->has_trace; }
  bool gpu() const { return rep->gpu; }
  double step_s() const { return rep->step_s; }

  // Traces.
  const RankReport* worst_data = nullptr;  // the rank whose input costs the most
  // TensorFlow's input time: waiting for input plus host-to-device transfer (GPU: idle in
  // data waits, exposed copies, idle in staged copy calls; CPU-only: the data wait).
  double input_score = 0;
  double comm_transfer = 0;  // exposed communication a rank would keep with balanced ranks
  int world_size = 0;        // the largest world_size of the traces
  // Cross-rank (two ranks or more).
  int straggler = -1;             // index into rep->ranks of the rank with the most work
  double straggler_work_s = 0;    // its step time outside exposed communication
  double imbalance = 0;           // its excess over the others' median / mean step
  double others_data_s = 0, others_compute_s = 0;  // medians of the other ranks, per step

  // GPU logs.
  double util_mean = NAN;  // the lowest mean utilization of the logs
  double throttled = 0;    // the largest throttled share of busy samples
  bool any_util = false;   // some log has GPU utilization samples

  // Any evidence about where the time goes: a trace with steps, GPU utilization samples,
  // pipeline metrics, or Ray Data stats with the iterator's breakdown.
  bool evidence() const {
    return (rep->has_trace && rep->steps > 0) || any_util || rep->pipeline.has_value() ||
           (rep->ray && rep->ray->iterator && !std::isnan(rep->ray->consumer_wait_frac));
  }
};

// Fills the report's cross-input fields and the context (step 1 above, after the
// per-input analyses).
void BuildAnalysis(Analysis* a);

// --- the rule table ---------------------------------------------------------------------

enum class RuleScope {
  kTrace,     // runs once when there is a trace
  kGpuLog,    // runs once per GPU log (`log` is that log)
  kPipeline,  // runs once when there are pipeline metrics
  kRay,       // runs once when there are Ray Data stats
  kVerdict,   // runs after the verdict is chosen
};

using RuleFn = std::optional<Finding> (*)(const Analysis& a, const GpuLogReport* log);

struct Rule {
  const char* id;
  RuleScope scope;
  // When it fires, naming thresholds as {field} of Thresholds (the listing fills in the
  // values in effect).
  const char* when;
  const char* gain;    // the time its expected speedup removes, or "" for none
  const char* source;  // where the threshold comes from
  RuleFn fn;
};

// Every finding rule, in the order their findings are made (ties in the final sort by
// expected gain and severity keep this order).
const std::vector<Rule>& Rules();

// "{input_warn}" -> "5%": the values in effect, for the listings.
std::string FillThresholds(const std::string& text, const Thresholds& th);

// The finding input.dataloader (also made by DiagnoseSteps).
Finding InputFinding(double data_frac, double idle_data_frac, double step_s, int steps,
                     const std::string& loader, bool gpu, int cpus, const Thresholds& th,
                     int rank);

// --- the verdict ------------------------------------------------------------------------

struct Candidate {
  Verdict v;
  double score, threshold;
  double norm() const { return threshold > 0 ? score / threshold : 0; }
};

// A cause that can be the verdict: its score against its threshold, when it applies.
struct Cause {
  Verdict verdict;
  const char* applies;    // the inputs it needs
  const char* score;      // what is scored (a fraction of the step unless said)
  const char* threshold;  // {field} of Thresholds, or an expression of one
  const char* source;
  std::optional<Candidate> (*fn)(const Analysis& a);
};

// The causes, in the order they compete (the first wins a tie).
const std::vector<Cause>& Causes();

// Chooses rep->primary and rep->confidence from the causes (step 3).
void SelectVerdict(const Analysis& a);
// rep->summary, from the verdict and the sorted findings (step 4).
void WriteSummary(const Analysis& a);
// What to record for a verdict, when the inputs have no evidence (the unknown verdict).
std::string RecordNext(const Analysis& a);
// The notes that depend on the inputs' kinds, before and after the verdict.
void AddInputNotes(const Analysis& a);
void AddVerdictNotes(const Analysis& a);

}  // namespace stoker::doctor
