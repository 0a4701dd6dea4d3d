// A one-line progress display on a terminal (stderr); silent when stderr is not a tty.
#pragma once

#include <cstdint>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace stoker::cli {

class Progress {
 public:
  Progress(std::string label, uint64_t total)
      : label_(std::move(label)), total_(total), tty_(::isatty(2) != 0),
        start_(std::chrono::steady_clock::now()) {}
  ~Progress() { Done(); }
  // Cheap to call often: redraws at most 10 times a second.
  void Update(uint64_t done, const std::string& extra = "") {
    if (!tty_) return;
    auto now = std::chrono::steady_clock::now();
    if (done < total_ && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    double el = std::chrono::duration<double>(now - start_).count();
    double rate = el > 0 ? done / el : 0;
    if (total_ > 0) {
      int width = 30;
      int filled = static_cast<int>(width * std::min<double>(1.0, double(done) / total_));
      std::fprintf(stderr, "\r%s [%s%s] %llu/%llu %.0f/s %s\033[K", label_.c_str(),
                   std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                   (unsigned long long)done, (unsigned long long)total_, rate, extra.c_str());
    } else {
      std::fprintf(stderr, "\r%s %llu %.0f/s %s\033[K", label_.c_str(),
                   (unsigned long long)done, rate, extra.c_str());
    }
    drawn_ = true;
  }
  void Done() {
    if (tty_ && drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  std::string label_;
  uint64_t total_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_{};
};

}  // namespace stoker::cli
