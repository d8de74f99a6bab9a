#include "store_load.hpp"

#include <algorithm>
#include <cmath>

#include "closed_loop.hpp"

namespace ddp::bench {

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const auto idx = static_cast<size_t>(std::lround(p / 100.0 * static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(idx), v.end());
  return v[idx];
}

}  // namespace

double LoadResult::percentile_us(double p) const {
  return percentile(round_trip_us, p);
}

double LoadResult::connect_percentile_us(double p) const {
  return percentile(connect_us, p);
}

LoadResult run_load(const LoadOptions& options) {
  ClosedLoop loop(options);
  if (options.io == LoadIo::kIoUring) {
    run_uring(loop);
  } else {
    run_epoll(loop);
  }
  return loop.finish();
}

}  // namespace ddp::bench
