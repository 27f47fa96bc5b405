// The commands' progress bar (progress.hpp).
#include "cli/progress.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

namespace shardload::cli {

namespace {

constexpr int kWidth = 30;
constexpr auto kRedraw = std::chrono::milliseconds(100);

// "1.23 GB": three significant digits in powers of 1000, as the rate beside it.
std::string short_size(double bytes) {
  static const char* const units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  int u = 0;
  while (bytes >= 999.5 && u < 5) {
    bytes /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", bytes, units[u]);
  return buf;
}

// The terminal's width (80 where it does not say).
int terminal_columns() {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 80;
}

std::atomic<bool> silenced{false};

}  // namespace

bool stderr_is_terminal() { return !silenced.load() && ::isatty(STDERR_FILENO) == 1; }

void silence_progress() { silenced.store(true); }

TerminalBar::TerminalBar(const char* label, std::uint64_t total_bytes, std::int64_t total_count,
                         const char* unit, bool on)
    : label_(label),
      unit_(unit),
      total_bytes_(total_bytes),
      total_count_(total_count),
      on_(on),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

TerminalBar::~TerminalBar() { clear(); }

void TerminalBar::start() {
  const std::lock_guard<std::mutex> hold(mutex_);
  start_ = last_ = std::chrono::steady_clock::now();
}

void TerminalBar::update(std::uint64_t bytes_done, std::int64_t count_done) {
  if (!on_) return;
  const std::lock_guard<std::mutex> hold(mutex_);
  // Counts only grow: a report that arrives late does not move the bar back.
  bytes_done_ = std::max(bytes_done_, std::min(bytes_done, total_bytes_));
  if (count_done >= 0) count_done_ = std::max(count_done_, std::min(count_done, total_count_));
  const auto now = std::chrono::steady_clock::now();
  if (bytes_done_ < total_bytes_ && now - last_ < kRedraw) return;
  draw(now);
}

void TerminalBar::finish() {
  if (!on_) return;
  {
    const std::lock_guard<std::mutex> hold(mutex_);
    bytes_done_ = total_bytes_;
    count_done_ = total_count_;
    draw(std::chrono::steady_clock::now());
  }
  clear();
}

void TerminalBar::clear() {
  const std::lock_guard<std::mutex> hold(mutex_);
  if (!drawn_) return;
  std::fprintf(stderr, "\r%*s\r", static_cast<int>(drawn_width_), "");
  std::fflush(stderr);
  drawn_ = false;
}

void TerminalBar::draw(std::chrono::steady_clock::time_point now) {
  last_ = now;
  // An empty dataset is all done at once.
  const double frac =
      total_bytes_ > 0   ? static_cast<double>(bytes_done_) / static_cast<double>(total_bytes_)
      : total_count_ > 0 ? static_cast<double>(count_done_) / static_cast<double>(total_count_)
                         : 1.0;
  const double secs = std::chrono::duration<double>(now - start_).count();
  std::string count;
  if (total_count_ > 0) {
    count = ", " + std::to_string(count_done_) + "/" + std::to_string(total_count_) + " " + unit_;
  }
  const double gbps = secs > 0 ? static_cast<double>(bytes_done_) / 1e9 / secs : 0.0;
  char head[64];
  std::snprintf(head, sizeof head, "%s %3d%% ", label_, static_cast<int>(frac * 100));
  char tail[160];
  std::snprintf(tail, sizeof tail, " %s/%s%s, %.2f GB/s, %.1f s",
                short_size(static_cast<double>(bytes_done_)).c_str(),
                short_size(static_cast<double>(total_bytes_)).c_str(), count.c_str(), gbps, secs);
  // One line that never wraps (a wrapped line is not redrawn in place by "\r"): the bar
  // narrows, then goes, then the text is cut, on a narrow terminal.
  const int columns = terminal_columns();
  const int text = static_cast<int>(std::strlen(head) + std::strlen(tail));
  const int width = std::min(kWidth, columns - 1 - text - 2);
  std::string line = head;
  if (width >= 10) {
    const int filled = static_cast<int>(frac * width);
    line += "[" + std::string(static_cast<std::size_t>(filled), '#') +
            std::string(static_cast<std::size_t>(width - filled), ' ') + "]";
  }
  line += tail;
  if (static_cast<int>(line.size()) > columns - 1) line.resize(std::max(columns - 1, 0));
  // Blanks over what the last, longer line left.
  const std::size_t shown = line.size();
  if (line.size() < drawn_width_) line.append(drawn_width_ - line.size(), ' ');
  std::fprintf(stderr, "\r%s", line.c_str());
  std::fflush(stderr);
  drawn_width_ = std::max(drawn_width_, shown);
  drawn_ = true;
}

std::int64_t process_io_bytes(bool written) {
  std::ifstream in("/proc/self/io");
  const std::string key = written ? "wchar:" : "rchar:";
  std::string name;
  long long value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return -1;
}

IoTicker::IoTicker(TerminalBar* bar, bool written) : bar_(bar) {
  if (bar_ == nullptr || !bar_->on()) return;
  const std::int64_t base = process_io_bytes(written);
  thread_ = std::thread([this, base, written] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, kRedraw, [this] { return stop_; })) {
      const std::int64_t now = process_io_bytes(written);
      const std::uint64_t done =
          base >= 0 && now >= base ? static_cast<std::uint64_t>(now - base) : 0;
      // The counters also count what is not the work (the runtime's own files): only
      // finish() says it is done.
      const std::uint64_t total = bar_->total_bytes();
      if (total > 0) bar_->update(std::min(done, total - 1));
    }
  });
}

IoTicker::~IoTicker() { stop(); }

void IoTicker::stop() {
  {
    const std::lock_guard<std::mutex> hold(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace shardload::cli
