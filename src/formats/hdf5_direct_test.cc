// HDF5 direct reads (FastCol in hdf5_dataset.cc) on layouts that stoker's writer does not
// produce but h5py users do: fixed-length strings, int32 labels, contiguous and chunked
// fixed-shape arrays, unfiltered and compressed vlen data. Every value must equal what
// libhdf5 wrote, whichever path reads it; and a damaged global heap is an error, not a
// crash.
#include <cstdint>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "formats/dataset.h"
#include "formats/hdf5_dataset.h"
#include "formats/writer.h"

#if STOKER_HAVE_HDF5
#include <hdf5.h>
#endif

namespace stoker {
namespace {

namespace fs = std::filesystem;

#if STOKER_HAVE_HDF5

std::string TempDir(const std::string& tag) {
  std::string d = fs::temp_directory_path() /
                  ("stoker_h5d_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

constexpr hsize_t kN = 40;

std::vector<uint8_t> VlenBytes(hsize_t i) {
  size_t len = i % 9 == 0 ? 0 : (i % 5 == 0 ? 70000 + 13 * i : 37 * i + 1);
  std::vector<uint8_t> v(len);
  for (size_t k = 0; k < len; ++k) v[k] = static_cast<uint8_t>(i * 7 + k * 13);
  return v;
}

hid_t Chunked(int rank, const hsize_t* chunk, bool deflate = false) {
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, rank, chunk);
  if (deflate) H5Pset_deflate(dcpl, 4);
  return dcpl;
}

// Writes the file with libhdf5 itself (as h5py would).
void WriteH5pyStyleFile(const std::string& path) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  // /key: fixed-length 12-byte NUL-terminated strings, contiguous.
  {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, 12);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    std::vector<char> buf(kN * 12, 0);
    for (hsize_t i = 0; i < kN; ++i)
      std::snprintf(&buf[i * 12], 12, "k-%03llu", static_cast<unsigned long long>(i));
    hsize_t dims[1] = {kN};
    hid_t sp = H5Screate_simple(1, dims, nullptr);
    hid_t d = H5Dcreate2(f, "key", t, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data());
    H5Dclose(d);
    H5Sclose(sp);
    H5Tclose(t);
  }
  // /label: int32, chunks of 4 rows.
  {
    std::vector<int32_t> v(kN);
    for (hsize_t i = 0; i < kN; ++i) v[i] = static_cast<int32_t>(i) - 5;  // some negative
    hsize_t dims[1] = {kN}, chunk[1] = {4};
    hid_t sp = H5Screate_simple(1, dims, nullptr);
    hid_t dcpl = Chunked(1, chunk);
    hid_t d = H5Dcreate2(f, "label", H5T_STD_I32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
  }
  // /image: uint8 N x 4 x 5 x 3, contiguous.
  {
    std::vector<uint8_t> v(kN * 60);
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<uint8_t>(k * 31);
    hsize_t dims[4] = {kN, 4, 5, 3};
    hid_t sp = H5Screate_simple(4, dims, nullptr);
    hid_t d = H5Dcreate2(f, "image", H5T_STD_U8LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Sclose(sp);
  }
  // /grid: uint16 N x 6, chunks of 3 rows (the last chunk partly beyond N).
  {
    std::vector<uint16_t> v(kN * 6);
    for (size_t k = 0; k < v.size(); ++k) v[k] = static_cast<uint16_t>(k * 1009);
    hsize_t dims[2] = {kN, 6}, chunk[2] = {3, 6};
    hid_t sp = H5Screate_simple(2, dims, nullptr);
    hid_t dcpl = Chunked(2, chunk);
    hid_t d = H5Dcreate2(f, "grid", H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
  }
  // /vl (unfiltered) and /gz (deflate: read through libhdf5): vlen uint8.
  for (bool deflate : {false, true}) {
    std::vector<std::vector<uint8_t>> rows(kN);
    std::vector<hvl_t> v(kN);
    for (hsize_t i = 0; i < kN; ++i) {
      rows[i] = VlenBytes(i + (deflate ? 3 : 0));
      v[i] = hvl_t{rows[i].size(), rows[i].empty() ? nullptr : rows[i].data()};
    }
    hid_t ft = H5Tvlen_create(H5T_STD_U8LE), mt = H5Tvlen_create(H5T_NATIVE_UINT8);
    hsize_t dims[1] = {kN}, chunk[1] = {8};
    hid_t sp = H5Screate_simple(1, dims, nullptr);
    hid_t dcpl = Chunked(1, chunk, deflate);
    hid_t d = H5Dcreate2(f, deflate ? "gz" : "vl", ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Dwrite(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(ft);
    H5Tclose(mt);
  }
  H5Fclose(f);
}

TEST(Hdf5Direct, H5pyStyleLayoutsReadTheSameBytesEitherPath) {
  std::string dir = TempDir("layouts");
  std::string path = dir + "/f.h5";
  WriteH5pyStyleFile(path);
  auto ds = OpenDataset(path);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  ASSERT_EQ((*ds)->size(), kN);
  // key, label, image, grid, vl direct; gz (deflate) through libhdf5.
  EXPECT_EQ(Hdf5DirectColumns(**ds), 5);
  std::vector<uint64_t> order(kN);
  std::iota(order.begin(), order.end(), 0);
  std::vector<uint64_t> shuffled = order;
  std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(4));
  order.insert(order.end(), shuffled.begin(), shuffled.end());
  Sample s;
  for (uint64_t i : order) {
    ASSERT_TRUE((*ds)->Read(i, &s).ok()) << i;
    char key[12];
    std::snprintf(key, sizeof key, "k-%03llu", static_cast<unsigned long long>(i));
    EXPECT_EQ(s.key, key);
    EXPECT_EQ(s.label, static_cast<int64_t>(i) - 5);
    const Field* image = s.Find("image");
    ASSERT_NE(image, nullptr);
    ASSERT_EQ(image->data.size(), 60u);
    for (size_t k = 0; k < 60; ++k)
      ASSERT_EQ(image->data[k], static_cast<uint8_t>((i * 60 + k) * 31)) << i;
    const Field* grid = s.Find("grid");
    ASSERT_NE(grid, nullptr);
    ASSERT_EQ(grid->data.size(), 12u);
    for (size_t k = 0; k < 6; ++k) {
      uint16_t v;
      std::memcpy(&v, grid->data.data() + 2 * k, 2);
      ASSERT_EQ(v, static_cast<uint16_t>((i * 6 + k) * 1009)) << i;
    }
    ASSERT_NE(s.Find("vl"), nullptr);
    EXPECT_TRUE(s.Find("vl")->data == VlenBytes(i)) << i;
    ASSERT_NE(s.Find("gz"), nullptr);
    EXPECT_TRUE(s.Find("gz")->data == VlenBytes(i + 3)) << i;
  }
  fs::remove_all(dir);
}

TEST(Hdf5Direct, DamagedGlobalHeapIsCorruptNotACrash) {
  std::string dir = TempDir("heap");
  std::string path = dir + "/d.h5";
  std::vector<std::vector<uint8_t>> want;
  {
    auto w = OpenDatasetWriter("hdf5:" + path);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    for (int i = 0; i < 12; ++i) {
      Sample s;
      s.key = "s" + std::to_string(i);
      want.push_back(VlenBytes(5 * i + 5));  // large (70 KB+): one collection each
      s.AddField("jpg")->data = want.back();
      ASSERT_TRUE((*w)->Write(s).ok());
    }
    ASSERT_TRUE((*w)->Close().ok());
  }
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // Break the signature of every large collection (the small one holds the keys).
  int broken = 0;
  for (size_t p = bytes.find("GCOL"); p != std::string::npos; p = bytes.find("GCOL", p + 4)) {
    uint64_t size = 0;
    std::memcpy(&size, bytes.data() + p + 8, 8);
    if (size > (64u << 10)) bytes[p] = 'X', ++broken;
  }
  ASSERT_GT(broken, 0);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto ds = OpenDataset("hdf5:" + path);
  ASSERT_TRUE(ds.ok()) << ds.status().ToString();
  Sample s;
  int corrupt = 0;
  for (uint64_t i = 0; i < want.size(); ++i) {
    Status st = (*ds)->Read(i, &s);
    if (st.ok()) {
      EXPECT_TRUE(s.Find("jpg")->data == want[i]) << i;
      continue;
    }
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.ToString();
    EXPECT_NE(st.message().find("record " + std::to_string(i)), std::string::npos)
        << st.ToString();
    EXPECT_NE(st.message().find("damaged file"), std::string::npos) << st.ToString();
    ++corrupt;
  }
  EXPECT_EQ(corrupt, broken);
  fs::remove_all(dir);
}

#endif  // STOKER_HAVE_HDF5

}  // namespace
}  // namespace stoker
