// tf.train.Example encode/decode by hand (protobuf wire format, no protobuf library).
//
//   Example  { Features features = 1; }
//   Features { map<string, Feature> feature = 1; }      // entries: key = 1, value = 2
//   Feature  { oneof { BytesList bytes_list = 1; FloatList float_list = 2;
//                      Int64List int64_list = 3; } }
//   BytesList { repeated bytes value = 1; }
//   FloatList { repeated float value = 1 [packed]; }     // packed and unpacked accepted
//   Int64List { repeated int64 value = 1 [packed]; }     // packed and unpacked accepted
//
// Unknown fields are skipped; a map key given twice keeps the last value, as protobuf does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace stoker {

struct ExampleFeature {
  enum class Kind { kNone, kBytes, kFloat, kInt64 };
  std::string name;
  Kind kind = Kind::kNone;
  // Bytes values as (offset, length) into the decoded buffer: no copies.
  std::vector<std::pair<size_t, size_t>> bytes;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

// Decodes one serialized Example; features in wire order. kCorrupt with the byte offset of
// the problem inside the message.
Status DecodeExample(const uint8_t* data, size_t n, std::vector<ExampleFeature>* out);

// Builds a serialized Example. Bytes values are referenced, not copied, until Serialize.
class ExampleBuilder {
 public:
  void AddBytes(const std::string& name, const uint8_t* p, size_t n);
  void AddInt64(const std::string& name, std::vector<int64_t> v);
  void AddFloat(const std::string& name, std::vector<float> v);
  // Appends the serialized Example to `out`.
  void SerializeTo(std::vector<uint8_t>* out) const;
  void Clear() { items_.clear(); }

 private:
  struct Item {
    std::string name;
    ExampleFeature::Kind kind;
    const uint8_t* p = nullptr;
    size_t n = 0;
    std::vector<int64_t> ints;
    std::vector<float> floats;
  };
  std::vector<Item> items_;
};

}  // namespace stoker
