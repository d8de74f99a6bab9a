// SLURM hostlist expressions: the one grammar the launcher and the worker runtime share.
#include "common/hostlist.hpp"

#include <catch2/catch.hpp>

#include "common/error.hpp"

using namespace ddp;
using Hosts = std::vector<std::string>;

TEST_CASE("hostlist: expansion table", "[hostlist]") {
  struct Row {
    std::string text;
    Hosts hosts;
  };
  const std::vector<Row> table{
      {"node1", {"node1"}},
      {"a,b,c", {"a", "b", "c"}},
      {"gpu[01-04,07],cpu-a[1-2]",
       {"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "cpu-a1", "cpu-a2"}},
      {"n[8-11]", {"n8", "n9", "n10", "n11"}},
      {"n[08-11]", {"n08", "n09", "n10", "n11"}},
      {"n[098-101]", {"n098", "n099", "n100", "n101"}},
      {"n[007]", {"n007"}},
      {"r[1-2]n[1-2]", {"r1n1", "r1n2", "r2n1", "r2n2"}},
      {"n[3]-ib", {"n3-ib"}},
      {"[1-2]", {"1", "2"}},
      {"host-1.example.com,h[2-3].example.com",
       {"host-1.example.com", "h2.example.com", "h3.example.com"}},
      // IPv6 addresses: bracketed ones are addresses, not ranges; bare ones are left alone.
      {"[fd00::1],[fd00::2]", {"fd00::1", "fd00::2"}},
      {"[::1],n[1-2]", {"::1", "n1", "n2"}},
      {"fd00::1,fd00::2", {"fd00::1", "fd00::2"}},
  };
  for (const auto& row : table) {
    INFO(row.text);
    CHECK(expand_hostlist(row.text) == row.hosts);
  }
  CHECK(first_host("gpu[01-04,07],cpu-a[1-2]") == "gpu01");
  CHECK(first_host("r[1-2]n[1-2]") == "r1n1");
  CHECK(first_host("n[08-10]") == "n08");
}

TEST_CASE("hostlist: malformed expressions name the text, position and expectation", "[hostlist]") {
  struct Row {
    std::string text;
    std::string says;
  };
  const std::vector<Row> table{
      {"", "non-empty"},
      {"a,,b", "empty item"},
      {"a,", "after ','"},
      {"n[1-2", "']' closing"},
      {"n1-2]", "'[' before ']'"},
      {"n[]", "a number at position 2"},
      {"n[a-b]", "a number"},
      {"n[5-3]", "upper bound >= 5 (got 3)"},
      {"n[1-]", "upper bound of a range"},
      {"n[1-2;3]", "',', '-' or ']'"},
      {"n[1-99999999]", "more than"},
      {"a[1-1024]b[1-1024]c[1-2]", "more than"},
      {"[fd00::1]x", "',' after the IPv6 address"},
  };
  for (const auto& row : table) {
    INFO(row.text);
    CHECK_THROWS_AS(expand_hostlist(row.text), ddp::ConfigError);
    CHECK_THROWS_WITH(expand_hostlist(row.text),
                      Catch::Contains(row.says) && Catch::Contains("'" + row.text + "'"));
  }
}
