// Discovers the dataset in argv[1] with the installed shardload and prints its shape and dtype:
// "shape (10, 3) float32".
#include <cstdio>
#include <string>

#include "shardload/layout.hpp"
#include "shardload/source.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer DIRECTORY\n");
    return 2;
  }
  auto layout = shardload::try_discover(shardload::Source::directory(argv[1]));
  if (!layout) {
    std::fprintf(stderr, "consumer: %s\n", layout.status().message().c_str());
    return 1;
  }
  std::printf("shape %s %s\n", shardload::shape_string(layout->shape()).c_str(),
              layout->dtype.name().c_str());
  return 0;
}
