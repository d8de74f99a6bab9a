// Data loading: CSV (plain/gzip), .npy, the seeded split and the synthetic generator.
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <sstream>

#include "common/error.hpp"
#include "tests/support/temp_dir.hpp"
#include "trainer/data_loaders.hpp"

using namespace ddp::trainer;
using Catch::Matchers::Contains;
using ddp::test::TempDir;

namespace {

std::string write_gz(const TempDir& dir, const std::string& name, const std::string& text) {
  const std::string path = dir.file(name);
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  return path;
}

// A version-1 .npy file of `dtype` ("<f4", "<i8", ...) holding raw `data`.
std::string write_npy(const TempDir& dir, const std::string& name, const std::string& dtype,
                      const std::string& shape, const std::string& data) {
  std::string header =
      "{'descr': '" + dtype + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  return dir.write(name, bytes + header + data);
}

template <class T>
std::string raw(const std::vector<T>& v) {
  std::string s(v.size() * sizeof(T), '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}

}  // namespace

TEST_CASE("CSV rows become features and labels, header and blank lines are skipped", "[data]") {
  TempDir dir;
  const auto path = dir.write("a.csv", "f1,f2,label\n1.5,2,0\n\n-3,4e1,2\r\n");
  const Dataset d = load_csv(path);
  REQUIRE(d.rows() == 2);
  CHECK(d.num_features == 2);
  CHECK(d.num_classes == 3);
  CHECK(d.features == std::vector<float>{1.5F, 2.0F, -3.0F, 40.0F});
  CHECK(d.labels == std::vector<int32_t>{0, 2});
}

TEST_CASE("gzipped CSV reads the same as plain, and the label column is selectable", "[data]") {
  TempDir dir;
  const auto path = write_gz(dir, "a.csv.gz", "1,7,8\n0,9,10\n");
  const Dataset d = load_dataset(path, LoadOptions{0});
  CHECK(d.labels == std::vector<int32_t>{1, 0});
  CHECK(d.features == std::vector<float>{7, 8, 9, 10});
}

TEST_CASE("bad CSV rows are refused with file, line and reason", "[data]") {
  TempDir dir;
  SECTION("missing file") {
    CHECK_THROWS_WITH(load_csv(dir.file("nope.csv")),
                      Contains("nope.csv") && Contains("No such file"));
  }
  SECTION("wrong column count") {
    const auto p = dir.write("b.csv", "1,2,0\n3,4,1\n5,1\n");
    CHECK_THROWS_AS(load_csv(p), ddp::DataError);
    CHECK_THROWS_WITH(load_csv(p), Contains("b.csv:3") && Contains("found 2 columns, expected 3"));
  }
  SECTION("not a number") {
    const auto p = dir.write("c.csv", "1,2,0\n3,abc,1\n");
    CHECK_THROWS_WITH(load_csv(p), Contains("c.csv:2") && Contains("column 2 is 'abc'"));
  }
  SECTION("fractional label") {
    const auto p = dir.write("d.csv", "1,2,0.5\n");
    CHECK_THROWS_WITH(load_csv(p), Contains("d.csv:1") && Contains("expected an integer"));
  }
  SECTION("negative label") {
    const auto p = dir.write("e.csv", "1,2,0\n1,2,-1\n");
    CHECK_THROWS_WITH(load_csv(p), Contains("e.csv:2") && Contains("'-1'"));
  }
  SECTION("nan feature") {
    const auto p = dir.write("f.csv", "nan,2,0\n");
    CHECK_THROWS_WITH(load_csv(p), Contains("expected a finite number"));
  }
  SECTION("header only") {
    const auto p = dir.write("g.csv", "a,b,label\n");
    CHECK_THROWS_WITH(load_csv(p), Contains("no data rows"));
  }
  SECTION("truncated gzip") {
    const auto good = write_gz(dir, "h.csv.gz", std::string(5000, '1') + ",0\n");
    std::ifstream in(good, std::ios::binary);
    std::ostringstream all;
    all << in.rdbuf();
    const std::string bytes = all.str();
    const auto p = dir.write("i.csv.gz", bytes.substr(0, bytes.size() / 2));
    CHECK_THROWS_AS(load_csv(p), ddp::DataError);
  }
}

TEST_CASE(".npy arrays load in C order with the label column last", "[data]") {
  TempDir dir;
  const auto p = write_npy(dir, "a.npy", "<f4", "(2, 3)", raw<float>({1, 2, 0, 3, 4, 1}));
  const Dataset d = load_dataset(p);
  CHECK(d.features == std::vector<float>{1, 2, 3, 4});
  CHECK(d.labels == std::vector<int32_t>{0, 1});
  const auto q = write_npy(dir, "b.npy", "<i8", "(1, 2)", raw<int64_t>({5, 3}));
  CHECK(load_npy(q).labels == std::vector<int32_t>{3});
}

TEST_CASE("bad .npy files are refused with the reason", "[data]") {
  TempDir dir;
  CHECK_THROWS_WITH(load_npy(dir.write("x.npy", "hello world")), Contains("not a .npy file"));
  CHECK_THROWS_WITH(load_npy(write_npy(dir, "b.npy", ">f4", "(1, 2)", raw<float>({1, 0}))),
                    Contains("'>f4' is not supported"));
  CHECK_THROWS_WITH(load_npy(write_npy(dir, "c.npy", "<f4", "(2, 2)", raw<float>({1, 0}))),
                    Contains("data is 8 bytes, expected 16"));
  CHECK_THROWS_WITH(load_npy(write_npy(dir, "d.npy", "<f4", "(4,)", raw<float>({1, 0, 1, 0}))),
                    Contains("1 dimensions, expected 2"));
}

TEST_CASE("the split is a seeded partition of the rows", "[data]") {
  SyntheticOptions s;
  s.rows = 100;
  s.num_features = 3;
  const Dataset all = make_synthetic(s);
  const Split a = split_by_seed(all, 0.25, 7);
  const Split b = split_by_seed(all, 0.25, 7);
  const Split c = split_by_seed(all, 0.25, 8);
  CHECK(a.train.rows() == 75);
  CHECK(a.validation.rows() == 25);
  CHECK(a.train.features == b.train.features);
  CHECK(a.train.features != c.train.features);
  // Every row lands in exactly one part: the multiset of first features is preserved.
  std::vector<float> firsts;
  for (const Dataset* d : {&a.train, &a.validation}) {
    for (std::size_t i = 0; i < d->rows(); ++i) firsts.push_back(d->row(i)[0]);
  }
  std::vector<float> expected;
  for (std::size_t i = 0; i < all.rows(); ++i) expected.push_back(all.row(i)[0]);
  std::sort(firsts.begin(), firsts.end());
  std::sort(expected.begin(), expected.end());
  CHECK(firsts == expected);
  CHECK_THROWS_AS(split_by_seed(all, 1.0, 1), ddp::ConfigError);
}

TEST_CASE("synthetic data is fixed by its seed", "[data]") {
  SyntheticOptions s;
  s.rows = 50;
  const Dataset a = make_synthetic(s);
  const Dataset b = make_synthetic(s);
  s.seed = 2;
  const Dataset c = make_synthetic(s);
  CHECK(a.features == b.features);
  CHECK(a.labels == b.labels);
  CHECK(a.features != c.features);
  CHECK(a.num_classes == 10);
}

TEST_CASE("standardizing uses the fitted set's statistics", "[data]") {
  Dataset d;
  d.num_features = 2;
  d.num_classes = 1;
  d.features = {1, 5, 3, 5};
  d.labels = {0, 0};
  const Standardizer s = Standardizer::fit(d);
  s.apply(d);
  CHECK(d.features == std::vector<float>{-1, 0, 1, 0});  // constant column only centred
}
