// libFuzzer: stoker's sample encoding of Kafka message values (value=stoker) on arbitrary
// bytes. A value that decodes must re-encode to the same bytes (key from "__key__", the
// other fields in order); a value that does not must fail with kCorrupt, never read past
// its end (ASan).
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/kafka_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  stoker::Sample out;
  stoker::Status st = stoker::DecodeStokerSample(data, size, "fuzz", &out);
  if (!st.ok()) {
    if (st.code() != stoker::StatusCode::kCorrupt) __builtin_trap();
    return 0;
  }
  stoker::Sample again;
  for (size_t i = 0; i < out.num_fields; ++i) {
    const auto& f = out.fields[i];
    if (f.name == "__key__") {
      again.key.assign(f.data.begin(), f.data.end());
    } else {
      again.AddField(f.name)->data = f.data;
    }
  }
  again.label = out.label;
  std::string enc = stoker::EncodeStokerSample(again);
  if (enc.size() != size || enc.compare(0, size, reinterpret_cast<const char*>(data), size) != 0)
    __builtin_trap();
  return 0;
}
