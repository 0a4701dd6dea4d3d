// libFuzzer target for the streaming trace reader (plain and gzipped Chrome-trace JSON).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "doctor/doctor.h"
#include "doctor/render.h"
#include "telemetry/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view s(reinterpret_cast<const char*>(data), size);
  auto src = stoker::telemetry::MemoryByteSource(s, "fuzz.json");
  stoker::telemetry::TraceReadOptions o;
  o.chunk_bytes = 64;  // exercise the refill path
  auto t = stoker::telemetry::ReadTrace(src.get(), o);
  if (t.ok()) {
    stoker::doctor::DoctorInputs in;
    in.traces.push_back(std::move(*t));
    auto r = stoker::doctor::Diagnose(in);
    if (r.ok()) {  // every rendering of whatever the input made
      (void)stoker::doctor::RenderText(*r);
      (void)stoker::doctor::RenderJson(*r);
      (void)stoker::doctor::RenderMarkdown(*r);
      (void)stoker::doctor::RenderHtml(*r);
    }
  }
  return 0;
}
