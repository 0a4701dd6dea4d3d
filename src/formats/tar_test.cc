#include "formats/tar.h"

#include <cstdint>
#include <gtest/gtest.h>

#include <cstring>

#include "io/memory_file.h"

namespace stoker {
namespace {

// An independent ustar header builder (not TarWriter), so tests check the reader against
// bytes laid out by hand.
std::vector<uint8_t> Header(const std::string& name, uint64_t size, char type,
                            const std::string& prefix = "") {
  std::vector<uint8_t> h(512, 0);
  std::memcpy(h.data(), name.data(), std::min<size_t>(name.size(), 100));
  std::snprintf(reinterpret_cast<char*>(&h[100]), 8, "%07o", 0644);
  std::snprintf(reinterpret_cast<char*>(&h[108]), 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(&h[116]), 8, "%07o", 0);
  std::snprintf(reinterpret_cast<char*>(&h[124]), 12, "%011llo", (unsigned long long)size);
  std::snprintf(reinterpret_cast<char*>(&h[136]), 12, "%011o", 0);
  h[156] = static_cast<uint8_t>(type);
  std::memcpy(&h[257], "ustar", 6);
  std::memcpy(&h[263], "00", 2);
  std::memcpy(&h[345], prefix.data(), prefix.size());
  std::memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (uint8_t b : h) sum += b;
  std::snprintf(reinterpret_cast<char*>(&h[148]), 8, "%06o", sum);
  h[155] = ' ';
  return h;
}

void Append(std::vector<uint8_t>* tar, const std::vector<uint8_t>& hdr, const std::string& data) {
  tar->insert(tar->end(), hdr.begin(), hdr.end());
  tar->insert(tar->end(), data.begin(), data.end());
  tar->resize((tar->size() + 511) / 512 * 512, 0);
}

void Member(std::vector<uint8_t>* tar, const std::string& name, const std::string& data,
            char type = '0') {
  Append(tar, Header(name, data.size(), type), data);
}

void End(std::vector<uint8_t>* tar) { tar->resize(tar->size() + 1024, 0); }

std::string Pax(const std::string& key, const std::string& value) {
  std::string body = " " + key + "=" + value + "\n";
  size_t len = body.size() + 1;
  while (std::to_string(len).size() + body.size() != len) ++len;
  return std::to_string(len) + body;
}

struct Case {
  const char* name;
  std::function<std::vector<uint8_t>()> build;
  std::vector<std::string> members;  // names expected, in order
  bool error;
  const char* error_contains;
  uint64_t error_offset;
};

TEST(TarScan, TableOfEdgeCases) {
  const std::string long_dir(120, 'd');
  const std::string long_flat(230, 'f');
  std::vector<Case> cases = {
      {"empty archive", [] { std::vector<uint8_t> t; End(&t); return t; }, {}, false, "", 0},
      {"zero-length file", [] { return std::vector<uint8_t>(); }, {}, false, "", 0},
      {"no end marker",
       [] {
         std::vector<uint8_t> t;
         Member(&t, "a.jpg", "xyz");
         return t;
       },
       {"a.jpg"}, false, "", 0},
      {"regular, dir, symlink, empty file",
       [] {
         std::vector<uint8_t> t;
         Member(&t, "d/", "", '5');
         Member(&t, "d/a.jpg", std::string(700, 'a'));
         Member(&t, "d/link", "", '2');
         Member(&t, "d/empty.txt", "");
         End(&t);
         return t;
       },
       {"d/a.jpg", "d/empty.txt"}, false, "", 0},
      {"ustar prefix",
       [&] {
         std::vector<uint8_t> t;
         Append(&t, Header("x.jpg", 2, '0', long_dir), "hi");
         End(&t);
         return t;
       },
       {long_dir + "/x.jpg"}, false, "", 0},
      {"GNU long name",
       [&] {
         std::vector<uint8_t> t;
         Member(&t, "././@LongLink", long_flat + ".jpg" + std::string(1, '\0'), 'L');
         Member(&t, long_flat.substr(0, 100), "payload");
         End(&t);
         return t;
       },
       {long_flat + ".jpg"}, false, "", 0},
      {"pax path",
       [&] {
         std::vector<uint8_t> t;
         Member(&t, "PaxHeader/x", Pax("path", long_flat + ".png") + Pax("mtime", "1.5"), 'x');
         Member(&t, "truncated-name", "png!");
         Member(&t, "b.cls", "3");
         End(&t);
         return t;
       },
       {long_flat + ".png", "b.cls"}, false, "", 0},
      {"truncated header",
       [] {
         std::vector<uint8_t> t;
         Member(&t, "a.jpg", std::string(10, 'a'));
         auto h = Header("b.jpg", 10, '0');
         t.insert(t.end(), h.begin(), h.begin() + 100);
         return t;
       },
       {"a.jpg"}, true, "truncated tar header at offset 1024", 1024},
      {"truncated member",
       [] {
         std::vector<uint8_t> t;
         Member(&t, "a.jpg", std::string(10, 'a'));
         auto h = Header("b.jpg", 5000, '0');
         t.insert(t.end(), h.begin(), h.end());
         t.resize(t.size() + 1000, 'b');
         return t;
       },
       {"a.jpg"}, true, "member 'b.jpg' at offset 1024 is truncated", 1024},
      {"bad checksum",
       [] {
         std::vector<uint8_t> t;
         Member(&t, "a.jpg", "aa");
         Member(&t, "b.jpg", "bb");
         t[1024 + 3] ^= 0x40;  // corrupt the second header's name
         End(&t);
         return t;
       },
       {"a.jpg"}, true, "bad tar header checksum at offset 1024", 1024},
      {"bad size field",
       [] {
         std::vector<uint8_t> t;
         auto h = Header("a.jpg", 2, '0');
         h[124] = 'z';
         std::memset(&h[148], ' ', 8);
         unsigned sum = 0;
         for (uint8_t b : h) sum += b;
         std::snprintf(reinterpret_cast<char*>(&h[148]), 8, "%06o", sum);
         Append(&t, h, "aa");
         return t;
       },
       {}, true, "bad size field", 0},
      {"malformed pax",
       [] {
         std::vector<uint8_t> t;
         Member(&t, "PaxHeader/x", "99 path=a\n", 'x');
         Member(&t, "a.jpg", "a");
         return t;
       },
       {}, true, "malformed pax record", 0},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    MemoryFile f("case.tar", c.build());
    TarScan s = ScanTar(f);
    std::vector<std::string> names;
    for (const auto& m : s.members) names.push_back(m.name);
    EXPECT_EQ(names, c.members);
    EXPECT_EQ(!s.error.ok(), c.error) << s.error.ToString();
    if (c.error) {
      EXPECT_EQ(s.error.code(), StatusCode::kCorrupt);
      EXPECT_NE(s.error.message().find(c.error_contains), std::string::npos) << s.error.message();
      EXPECT_NE(s.error.message().find("case.tar"), std::string::npos);
      EXPECT_EQ(s.error_offset, c.error_offset);
    }
  }
}

TEST(TarScan, PayloadOffsetsPointAtTheBytes) {
  std::vector<uint8_t> t;
  Member(&t, "a.bin", std::string(513, 'x'));
  Member(&t, "b.bin", "hello");
  End(&t);
  MemoryFile f("t.tar", t);
  TarScan s = ScanTar(f);
  ASSERT_TRUE(s.error.ok());
  ASSERT_EQ(s.members.size(), 2u);
  EXPECT_EQ(s.members[0].data_offset, 512u);
  EXPECT_EQ(s.members[0].size, 513u);
  EXPECT_EQ(s.members[1].header_offset, 512u + 1024u);
  EXPECT_EQ(std::string(t.begin() + s.members[1].data_offset,
                        t.begin() + s.members[1].data_offset + 5),
            "hello");
}

class VectorFile final : public WritableFile {
 public:
  Status Append(const void* d, size_t n) override {
    auto p = static_cast<const uint8_t*>(d);
    bytes.insert(bytes.end(), p, p + n);
    return Status::OK();
  }
  Status Flush() override { return Status::OK(); }
  Status Sync() override { return Status::OK(); }
  Status Close() override { return Status::OK(); }
  uint64_t bytes_written() const override { return bytes.size(); }
  const std::string& path() const override { return path_; }
  std::vector<uint8_t> bytes;
  std::string path_ = "mem.tar";
};

TEST(TarWriter, RoundTripsNamesAndBytesReproducibly) {
  std::vector<std::pair<std::string, std::string>> members = {
      {"short.jpg", "abc"},
      {std::string(130, 'p') + "/leaf.txt", std::string(1000, 'q')},  // ustar prefix
      {std::string(300, 'n') + ".json", "{}"},                         // pax path
      {"empty.cls", ""},
  };
  auto write = [&] {
    VectorFile out;
    TarWriter w(&out);
    for (const auto& [n, d] : members) EXPECT_TRUE(w.Add(n, d.data(), d.size()).ok());
    EXPECT_TRUE(w.Finish().ok());
    EXPECT_EQ(w.offset(), out.bytes.size());
    return out.bytes;
  };
  auto a = write(), b = write();
  EXPECT_EQ(a, b);  // fixed metadata → identical bytes
  EXPECT_EQ(a.size() % 512, 0u);
  MemoryFile f("w.tar", a);
  TarScan s = ScanTar(f);
  ASSERT_TRUE(s.error.ok()) << s.error.ToString();
  ASSERT_EQ(s.members.size(), members.size());
  for (size_t i = 0; i < members.size(); ++i) {
    EXPECT_EQ(s.members[i].name, members[i].first);
    EXPECT_EQ(std::string(a.begin() + s.members[i].data_offset,
                          a.begin() + s.members[i].data_offset + s.members[i].size),
              members[i].second);
  }
}

}  // namespace
}  // namespace stoker
