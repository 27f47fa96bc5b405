// Timing helpers shared by the C++ benchmarks.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

namespace shardload::bench {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace shardload::bench
