// libFuzzer: the hand-written tf.train.Example decoder and the Sample mapping.
#include <cstddef>
#include <cstdint>

#include "formats/example.h"
#include "formats/tfrecord.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<stoker::ExampleFeature> feats;
  if (!stoker::DecodeExample(data, size, &feats).ok()) return 0;
  for (const auto& f : feats)
    for (const auto& [off, len] : f.bytes)
      if (off > size || len > size - off) __builtin_trap();
  stoker::Sample s;
  stoker::ExampleToSample(data, feats, false, &s).IgnoreError();
  // Re-encoding the bytes features and decoding again must succeed.
  stoker::ExampleBuilder b;
  for (const auto& f : feats)
    if (f.kind == stoker::ExampleFeature::Kind::kBytes && !f.bytes.empty())
      b.AddBytes(f.name, data + f.bytes[0].first, f.bytes[0].second);
    else if (f.kind == stoker::ExampleFeature::Kind::kInt64)
      b.AddInt64(f.name, f.ints);
    else if (f.kind == stoker::ExampleFeature::Kind::kFloat)
      b.AddFloat(f.name, f.floats);
  std::vector<uint8_t> ser;
  b.SerializeTo(&ser);
  std::vector<stoker::ExampleFeature> again;
  if (!stoker::DecodeExample(ser.data(), ser.size(), &again).ok()) __builtin_trap();
  return 0;
}
