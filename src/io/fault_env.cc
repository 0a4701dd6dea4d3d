#include "io/fault_env.h"

#include <cstdint>
#include <chrono>
#include <thread>

namespace stoker {
namespace {

class FaultyFile final : public RandomAccessFile {
 public:
  FaultyFile(std::unique_ptr<RandomAccessFile> base, FaultRule rule, FaultInjectionEnv* env)
      : base_(std::move(base)), rule_(std::move(rule)), env_(env) {}
  Result<size_t> ReadAt(uint64_t offset, size_t n, uint8_t* dst) const override {
    env_->reads++;
    if (rule_.read_latency_us > 0)
      std::this_thread::sleep_for(std::chrono::microseconds(rule_.read_latency_us));
    if (rule_.block) env_->BlockRead();
    if (rule_.fail_read) return IOError("read {} at offset {}: injected EIO", path(), offset);
    uint64_t sz = size();
    if (offset >= sz) return size_t{0};
    if (offset + n > sz) n = static_cast<size_t>(sz - offset);
    auto r = base_->ReadAt(offset, n, dst);
    if (r.ok()) env_->bytes_read += static_cast<int64_t>(*r);
    if (r.ok() && rule_.bandwidth_bytes_per_s > 0) env_->UseLink(*r, rule_.bandwidth_bytes_per_s);
    return r;
  }
  uint64_t size() const override {
    if (rule_.truncate_to >= 0 && static_cast<uint64_t>(rule_.truncate_to) < base_->size())
      return static_cast<uint64_t>(rule_.truncate_to);
    return base_->size();
  }
  const std::string& path() const override { return base_->path(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  FaultRule rule_;
  FaultInjectionEnv* env_;
};

}  // namespace

int FaultInjectionEnv::blocked() const {
  std::lock_guard<std::mutex> lk(block_mu_);
  return blocked_;
}

bool FaultInjectionEnv::WaitUntilBlocked(int n, double max_wait_s) {
  std::unique_lock<std::mutex> lk(block_mu_);
  return block_cv_.wait_for(lk, std::chrono::duration<double>(max_wait_s),
                            [&] { return blocked_ >= n; });
}

void FaultInjectionEnv::ReleaseBlocked() {
  std::lock_guard<std::mutex> lk(block_mu_);
  released_ = true;
  block_cv_.notify_all();
}

void FaultInjectionEnv::BlockRead() const {
  std::unique_lock<std::mutex> lk(block_mu_);
  ++blocked_;
  block_cv_.notify_all();
  block_cv_.wait(lk, [&] { return released_; });
  --blocked_;
}

void FaultInjectionEnv::UseLink(size_t n, int64_t bytes_per_s) const {
  using namespace std::chrono;
  auto cost = duration_cast<steady_clock::duration>(
      duration<double>(static_cast<double>(n) / static_cast<double>(bytes_per_s)));
  steady_clock::time_point done;
  {
    std::lock_guard<std::mutex> lk(link_mu_);
    auto start = std::max(steady_clock::now(), link_free_);
    done = start + cost;
    link_free_ = done;
  }
  std::this_thread::sleep_until(done);
}

Result<std::unique_ptr<RandomAccessFile>> FaultInjectionEnv::NewRandomAccessFile(
    const std::string& path, const OpenOptions& opts) {
  opens++;
  FaultRule match;
  bool found = false;
  {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& r : rules_)
      if (path.find(r.path_contains) != std::string::npos) {
        match = r;
        found = true;
      }
  }
  if (found && match.fail_open) return IOError("open {}: injected EIO", path);
  STOKER_ASSIGN_OR_RETURN(auto base, target()->NewRandomAccessFile(path, opts));
  return std::unique_ptr<RandomAccessFile>(new FaultyFile(std::move(base), match, this));
}

}  // namespace stoker
