#include <cstdint>
#include "pipeline/observe.h"

namespace stoker {

void SummarizeStages(const StageCounters (&sc)[kNumStages], const StageTopology& topo,
                     double wall_s, const ConsumerCounters& consumer, PipelineStats* st) {
  const int group_of[3] = {0, topo.fused ? 0 : 1, topo.fused ? 0 : 1};
  const int group_threads[2] = {topo.read_threads, topo.compute_threads};
  double g_busy[2] = {0, 0}, g_win[2] = {0, 0}, g_wout[2] = {0, 0};
  for (int s = 0; s < 3; ++s) {
    int g = group_of[s];
    g_busy[g] += sc[s].busy_ns * 1e-9;
    g_win[g] += sc[s].wait_in_ns * 1e-9;
    g_wout[g] += sc[s].wait_out_ns * 1e-9;
  }
  double best_util = -1, best_busy = -1;
  int best_group = 0;
  for (int g = 0; g < 2; ++g) {
    double total = g_busy[g] + g_win[g] + g_wout[g];
    double util = total > 0 ? g_busy[g] / total : 0;
    if (total > 0 && util > best_util) {
      best_util = util;
      best_group = g;
    }
  }
  st->stages.clear();
  for (int s = 0; s < kNumStages; ++s) {
    StageStats ss;
    ss.name = kStageNames[s];
    ss.items = sc[s].items;
    ss.bytes = sc[s].bytes;
    ss.busy_s = sc[s].busy_ns * 1e-9;
    ss.cpu_s = sc[s].cpu_ns * 1e-9;
    ss.wait_input_s = sc[s].wait_in_ns * 1e-9;
    ss.wait_output_s = sc[s].wait_out_ns * 1e-9;
    uint64_t fs = sc[s].fill_samples;
    ss.queue_fill = fs ? sc[s].fill_sum_permille / 1000.0 / fs : 0;
    if (s == kBatchStage) {
      if (wall_s > 0) ss.busy_frac = ss.busy_s / wall_s;
    } else {
      int g = group_of[s];
      ss.threads = group_threads[g];
      double total = g_busy[g] + g_win[g] + g_wout[g];
      if (total > 0) {
        ss.busy_frac = ss.busy_s / total;
        ss.wait_input_frac = g_win[g] / total;
        ss.wait_output_frac = g_wout[g] / total;
      }
      if (g == best_group && ss.busy_s > best_busy) {
        best_busy = ss.busy_s;
        st->bottleneck = ss.name;
      }
    }
    st->stages.push_back(ss);
  }
  st->threads = topo.read_threads + (topo.fused ? 0 : topo.compute_threads);
  st->consumer_wait_s = consumer.wait_ns * 1e-9;
  double consumer_total = (consumer.wait_ns + consumer.busy_ns) * 1e-9;
  st->consumer_wait_frac = consumer_total > 0 ? st->consumer_wait_s / consumer_total : 0;
  if (consumer_total > 0 && st->consumer_wait_frac < 0.05 && best_util < 0.6)
    st->bottleneck = "consumer";
}

TunerSampler::TunerSampler(const StageCounters (&sc)[kNumStages],
                           const ConsumerCounters& consumer, int64_t now_ns)
    : sc_(sc), consumer_(consumer), last_ns_(now_ns) {
  last_[0] = Group(0);
  last_[1] = Group(1);
  last_calls_ = consumer_.calls;
  last_starved_ = consumer_.starved;
  last_busy_ = consumer_.busy_ns;
}

TunerSampler::Totals TunerSampler::Group(int g) const {
  if (g == 0) return {sc_[kRead].cpu_ns, sc_[kRead].busy_ns, sc_[kRead].items};
  return {sc_[kDecode].cpu_ns + sc_[kAugment].cpu_ns, sc_[kDecode].busy_ns + sc_[kAugment].busy_ns,
          sc_[kDecode].items};
}

AutotuneSnapshot TunerSampler::Take(int64_t now_ns, int cpu_budget, int batch_size) {
  AutotuneSnapshot snap;
  snap.period_s = (now_ns - last_ns_) * 1e-9;
  last_ns_ = now_ns;
  snap.cpu_budget = cpu_budget;
  snap.batch_size = batch_size;
  for (int g = 0; g < 2; ++g) {
    Totals t = Group(g);
    StageObservation o;
    o.name = g == 0 ? "read" : "compute";
    o.io_stage = g == 0;
    o.items = t.items - last_[g].items;
    o.cpu_s = (t.cpu - last_[g].cpu) * 1e-9;
    o.wall_s = (t.wall - last_[g].wall) * 1e-9;
    last_[g] = t;
    snap.stages.push_back(o);
  }
  uint64_t calls = consumer_.calls, starved = consumer_.starved;
  int64_t busy = consumer_.busy_ns;
  snap.consumer_calls = calls - last_calls_;
  snap.consumer_starved_calls = starved - last_starved_;
  snap.consumer_busy_s = (busy - last_busy_) * 1e-9;
  last_calls_ = calls;
  last_starved_ = starved;
  last_busy_ = busy;
  return snap;
}

}  // namespace stoker
