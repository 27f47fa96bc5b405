// Discovers the dataset in argv[1] through shardload/legate.hpp and prints its shape and dtype
// like main.cc. Discovery needs no Legate runtime; errors are the typed exceptions.
#include <cstdio>
#include <exception>
#include <string>

#include "shardload/legate.hpp"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: consumer_legate DIRECTORY\n");
    return 2;
  }
  try {
    shardload::Layout layout = shardload::discover(std::string(argv[1]));
    std::printf("shape %s %s\n", shardload::shape_string(layout.shape()).c_str(),
                layout.dtype.name().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_legate: %s\n", e.what());
    return 1;
  }
  return 0;
}
