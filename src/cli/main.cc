// The `shardload` command line: write a demo dataset, inspect a layout, and
// (with Legate) read a dataset into a distributed array. Every command's
// arguments, --help included, are handled before Legate starts.
#include <cstdlib>
#include <exception>
#include <iostream>
#include <sstream>
#include <streambuf>
#include <string>

#include "cli/commands.hpp"
#include "cli/progress.hpp"
#include "shardload/interrupt.hpp"
#ifdef SHARDLOAD_WITH_LEGATE
#include "cli/legate_start.hpp"
#include "shardload/legate.hpp"
#endif

#ifndef SHARDLOAD_VERSION
#define SHARDLOAD_VERSION "unknown"
#endif

namespace {

#ifndef SHARDLOAD_WITH_LEGATE
// The program without Legate: an install without the legate extra, or a build configured
// without it.
constexpr const char* kNoLegate =
    "this command runs under Legate, which this installation does not have (pip install "
    "'shardload[legate]', or configure the build with SHARDLOAD_WITH_LEGATE)";
#endif

void usage(std::ostream& o) {
  o << "usage: shardload [--version] [--help] COMMAND [options]\n\ncommands:\n";
  for (const auto& c : shardload::cli::commands()) {
    const std::string name = c.name;
    o << "  " << name << std::string(10 - name.size(), ' ') << c.brief << "\n";
  }
  o << "\n'shardload COMMAND --help' lists the options of a command; 'shardload --version'\n"
       "prints the version.\n";
}

// inspect (and index, in one process or a build without Legate) starts no Legate, so it
// cannot ask which rank it is; under a launcher (mpirun, srun, the legate driver) every rank
// runs it, and only the first may print, as read, verify and write do. The launchers' rank
// variables tell.
bool first_rank() {
  for (const char* name :
       {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "MV2_COMM_WORLD_RANK"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      return std::string(v) == "0";
    }
  }
  return true;
}

#ifdef SHARDLOAD_WITH_LEGATE
// Whether a launcher started this process as one of several ranks (its size variables).
bool several_ranks() {
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "MV2_COMM_WORLD_SIZE"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      return std::string(v) != "0" && std::string(v) != "1";
    }
  }
  return false;
}
#endif

// Takes whatever is written to it and drops it.
class NullBuffer : public std::streambuf {
 protected:
  int overflow(int c) override { return traits_type::not_eof(c); }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

#ifdef SHARDLOAD_WITH_LEGATE
// The line of Legate's start-up report that says what went wrong: the bottom-most exception of
// its "Exception stack" without the C++ type, else the report's first line that is not banner.
std::string legate_first_line(const std::string& report) {
  std::istringstream in(report);
  std::string line;
  std::string fallback;
  const std::string prefix = "LEGATE ERROR:";
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) line.erase(0, prefix.size());
    line.erase(0, line.find_first_not_of(' '));
    if (line.rfind("#0 ", 0) == 0) {
      if (const auto colon = line.find(": "); colon != std::string::npos) {
        return line.substr(colon + 2);
      }
    }
    bool banner = line.empty() || line.find_first_not_of("=-") == std::string::npos;
    for (const char* head : {"System:", "Legate version:", "Legion version:", "Configure options:",
                             "LEGATE_CONFIG:", "Exception stack", "Stack trace"}) {
      banner = banner || line.rfind(head, 0) == 0;
    }
    if (fallback.empty() && !banner) fallback = line;
  }
  return fallback.empty() ? "no reason given" : fallback;
}

// Runs a command that starts Legate. A start that fails throws an exception whose what() is
// Legate's whole report (a hundred lines and more), which std::terminate would print before
// aborting; the user gets Legate's first line, the configuration and the fix instead.
template <typename F>
int with_legate(const std::string& cmd, F&& run) {
  try {
    return run();
  } catch (const std::exception& e) {
    if (legate::has_started()) throw;
    std::cerr << shardload::cli::start_failure(cmd, legate_first_line(e.what()));
    return 1;
  }
}
#endif

}  // namespace

namespace {

// How long a command may go on after a Ctrl-C: its requests end within about a second.
constexpr unsigned kInterruptGraceSeconds = 3;

int run_command(int argc, char** argv) {
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string cmd = argv[1];
  const shardload::cli::Args args(argv + 2, argv + argc);
  if (cmd == "-h" || cmd == "--help") {
    usage(std::cout);
    return 0;
  }
  if (cmd == "--version" || cmd == "-V") {
    if (!args.empty()) {
      std::cerr << "shardload: " << cmd << " takes no argument, found '"
                << shardload::printable_redacted(args[0]) << "'; see 'shardload --help'\n";
      return 2;
    }
    std::cout << "shardload " << SHARDLOAD_VERSION << "\n";
    return 0;
  }
  if (cmd == "help") {
    if (args.empty()) {
      usage(std::cout);
      return 0;
    }
    if (args.size() > 1) {
      std::cerr << "shardload help: expected at most one COMMAND, found '"
                << shardload::printable_redacted(args[1]) << "' after '"
                << shardload::printable_redacted(args[0]) << "'; see 'shardload --help'\n";
      return 2;
    }
    if (const auto* spec = shardload::cli::find_command(args[0])) {
      shardload::cli::print_help(*spec, std::cout);
      return 0;
    }
    std::cerr << "shardload help: unknown command '" << shardload::printable_redacted(args[0])
              << "'; see 'shardload --help'\n";
    return 2;
  }
  if (cmd == "write") {
#ifdef SHARDLOAD_WITH_LEGATE
    shardload::cli::WriteArgs write;
    if (auto rc = shardload::cli::parse_write_args(args, &write)) return *rc;
    return with_legate(cmd, [&] { return shardload::cli::cmd_write_legate(write); });
#else
    return shardload::cli::cmd_write(args);
#endif
  }
#ifdef SHARDLOAD_WITH_LEGATE
  if (cmd == "index" && several_ranks()) {
    return with_legate(cmd, [&] { return shardload::cli::cmd_index_legate(args); });
  }
#endif
  if (cmd == "inspect" || cmd == "index") {
    // Every rank does the work (index without Legate: each writes the same manifest
    // atomically) and exits with the same status; the others' output is dropped.
    NullBuffer null;
    const bool quiet = !first_rank();
    if (quiet) shardload::cli::silence_progress();
    std::streambuf* const out = quiet ? std::cout.rdbuf(&null) : nullptr;
    std::streambuf* const err = quiet ? std::cerr.rdbuf(&null) : nullptr;
    const int rc =
        cmd == "inspect" ? shardload::cli::cmd_inspect(args) : shardload::cli::cmd_index(args);
    if (quiet) {  // before `null` goes
      std::cout.rdbuf(out);
      std::cerr.rdbuf(err);
    }
    return rc;
  }
  if (cmd == "verify") {
#ifdef SHARDLOAD_WITH_LEGATE
    return with_legate(cmd, [&] { return shardload::cli::cmd_verify(args); });
#else
    std::cerr << "shardload verify: " << kNoLegate << "\n";
    return 2;
#endif
  }
  if (cmd == "read") {
    shardload::cli::ReadArgs read;
    if (auto rc = shardload::cli::parse_read_args(args, &read)) return *rc;
#ifdef SHARDLOAD_WITH_LEGATE
    return with_legate(cmd, [&] { return shardload::cli::cmd_read(read); });
#else
    return shardload::cli::cmd_read_host(read);
#endif
  }
  if (cmd.rfind("-", 0) == 0) {
    std::cerr << "shardload: unknown option " << shardload::printable_redacted(cmd)
              << "; see 'shardload --help'\n";
  } else {
    // A SOURCE given without its command (`shardload s3://B/d/?secret_key=...`) lands here.
    std::cerr << "shardload: unknown command '" << shardload::printable_redacted(cmd)
              << "'; see 'shardload --help'\n";
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Ctrl-C ends the requests a command waits for (a slow server, its retries); the command
  // then fails, and that failure is reported as the interrupt it is. Work the interrupt
  // cannot end (a request on Arrow's path, local reads) is cut off after
  // kInterruptGraceSeconds, or at once on a second Ctrl-C.
  static const std::string interrupted =
      "shardload" + (argc >= 2 ? " " + shardload::printable_redacted(argv[1]) : std::string()) +
      ": interrupted\n";
  shardload::interrupt_on_sigint(interrupted.c_str(), kInterruptGraceSeconds);
  const int rc = run_command(argc, argv);
  if (shardload::interrupt_requested()) {
    std::cerr << interrupted;
    shardload::interrupt_message_written();
    return 130;
  }
  return rc;
}
