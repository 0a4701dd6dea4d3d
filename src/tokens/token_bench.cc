#include "tokens/token_bench.h"

#include <cstdint>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "core/random.h"

namespace stoker::tokens {

namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double CpuNow() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}
}  // namespace

int64_t PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;
}

Result<TokenBenchResult> RunTokenBench(const TokenBenchOptions& o) {
  TokenBenchResult r;
  r.peak_rss_before = PeakRssBytes();
  double t0 = Now();
  STOKER_ASSIGN_OR_RETURN(auto p, TokenPipeline::Create(o.pipeline));
  r.open_s = Now() - t0;
  r.peak_rss_after_index = PeakRssBytes();
  TokenPipelineStats st = p->stats();
  r.index_build_s = st.index_build_s;
  r.index_build_cpu_s = st.index_build_cpu_s;
  r.index_bytes = st.index_bytes;
  r.index_from_cache = st.indices_built == 0;
  for (size_t d = 0; d < p->num_corpora(); ++d) {
    r.documents += p->store(d).num_documents();
    r.tokens += p->store(d).num_tokens();
  }
  r.samples_per_epoch = p->samples_per_epoch();
  if (o.index_only) return r;

  for (uint64_t i = 0; i < o.warmup; ++i) STOKER_RETURN_IF_ERROR(p->Next().status());
  // The memcpy limit: as many bytes as a batch's token arrays hold (window layout: B * (S + 1)
  // * 4 for int32), row by row, from random places of corpus 0's mapping (page cache) into
  // one buffer of that size. A row's bytes come from one document where it is long enough,
  // else from several. Measured in rounds interleaved with the delivery (kRounds of each,
  // steps / kRounds batches a round), so that both see the same machine: on a shared one
  // the load changes within a second. ratio_to_memcpy is the median of the rounds' ratios.
  const TokenStore& s = p->store(0);
  const size_t isz = TokenDTypeSize(s.dtype());
  const uint64_t B = static_cast<uint64_t>(o.pipeline.batch_size);
  std::vector<uint8_t> dst;
  Rng rng(1);
  const uint64_t nd = s.num_documents();
  double mem_bytes = 0, mem_s = 0;
  uint64_t mem_rows = 0;
  auto copy_rows = [&](uint64_t rows, uint64_t row_bytes) {
    if (dst.size() != row_bytes * B) dst.assign(row_bytes * B, 0);
    for (uint64_t done = 0; done < rows;) {
      for (uint64_t b = 0; b < B && done < rows; ++b, ++done) {
        uint64_t want = row_bytes;
        uint8_t* out = dst.data() + b * row_bytes;
        while (want > 0) {
          TokenSpan sp = s.Document(rng.Below(nd));
          const uint64_t have = sp.length * isz;
          uint64_t n = std::min<uint64_t>(want, have);
          uint64_t off = have > n ? rng.Below(sp.length - n / isz) * isz : 0;
          std::memcpy(out, sp.data + off, n);
          out += n;
          want -= n;
          mem_bytes += static_cast<double>(n);
        }
      }
      asm volatile("" : : "r"(dst.data()) : "memory");
    }
  };
  constexpr uint64_t kRounds = 10;
  const uint64_t rounds = o.memcpy_limit ? std::max<uint64_t>(1, std::min(kRounds, o.steps)) : 1;
  std::vector<double> ratios;
  uint64_t batch_bytes = 0;
  for (uint64_t round = 0; round < rounds; ++round) {
    const uint64_t n = o.steps / rounds + (round < o.steps % rounds ? 1 : 0);
    const double c0 = CpuNow(), t0 = Now();
    for (uint64_t i = 0; i < n; ++i) {
      STOKER_ASSIGN_OR_RETURN(TokenBatchPtr b, p->Next());
      ++r.batches;
      r.delivered_tokens += b->tokens;
      r.pad_tokens += b->pad_tokens;
      batch_bytes = b->token_bytes();
    }
    const double dt = Now() - t0;
    r.wall_s += dt;
    r.cpu_s += CpuNow() - c0;
    if (o.memcpy_limit && batch_bytes > 0 && n > 0) {
      const double m0 = Now();
      copy_rows(n * B, batch_bytes / B);
      const double dm = Now() - m0;
      mem_s += dm;
      mem_rows += n * B;
      ratios.push_back(dm / dt);  // the same positions: delivery rate / memcpy rate
    }
  }
  const double positions = static_cast<double>(r.batches) * o.pipeline.batch_size *
                           static_cast<double>(o.pipeline.index.seq_len);
  r.tokens_per_s = positions / r.wall_s;
  r.tokens_per_cpu_s = r.cpu_s > 0 ? positions / r.cpu_s : 0;
  r.out_bytes_per_token = static_cast<double>(batch_bytes) /
                          (static_cast<double>(o.pipeline.batch_size) *
                           static_cast<double>(o.pipeline.index.seq_len));
  r.out_bytes_per_s = r.tokens_per_s * r.out_bytes_per_token;
  if (mem_s > 0) {
    r.memcpy_bytes_per_s = mem_bytes / mem_s;
    r.memcpy_tokens_per_s = static_cast<double>(mem_rows) *
                            static_cast<double>(o.pipeline.index.seq_len) / mem_s;
    std::sort(ratios.begin(), ratios.end());
    const size_t m = ratios.size();
    r.ratio_to_memcpy = m % 2 ? ratios[m / 2] : (ratios[m / 2 - 1] + ratios[m / 2]) / 2;
  }
  return r;
}

}  // namespace stoker::tokens
