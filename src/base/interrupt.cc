#include "shardload/interrupt.hpp"

#include <signal.h>
#include <unistd.h>
#include "base/detail/interrupt_aside.hpp"

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>

namespace shardload {

namespace {

std::atomic<bool> g_interrupt{false};
// Waits alive, and those of them that SIGINT ends.
std::atomic<int> g_waits{0};
std::atomic<int> g_sigint_waits{0};
std::mutex g_install_mu;
// The SIGINT handler that was installed before ours: called after ours. Written under
// g_install_mu only while ours is not the installed one.
struct sigaction g_previous {};

void on_sigint(int sig, siginfo_t* info, void* context) {
  if (g_sigint_waits.load(std::memory_order_relaxed) > 0) request_interrupt();
  const struct sigaction& p = g_previous;
  if ((p.sa_flags & SA_SIGINFO) != 0) {
    if (p.sa_sigaction != nullptr) p.sa_sigaction(sig, info, context);
  } else if (p.sa_handler == SIG_DFL) {
    // What SIGINT did before: end the process.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(SIGINT, &dfl, nullptr);
    raise(SIGINT);
  } else if (p.sa_handler != SIG_IGN && p.sa_handler != nullptr) {
    p.sa_handler(sig);
  }
}

// Puts on_sigint in front of whatever handles SIGINT now, unless it is there already (Python
// installs its own again whenever signal.signal() is called).
void chain_sigint_handler() {
  std::lock_guard lock(g_install_mu);
  struct sigaction current {};
  if (sigaction(SIGINT, nullptr, &current) != 0) return;
  if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == &on_sigint) return;
  g_previous = current;
  struct sigaction ours = current;
  ours.sa_sigaction = &on_sigint;
  ours.sa_flags = (current.sa_flags & ~SA_RESETHAND) | SA_SIGINFO;
  sigaction(SIGINT, &ours, nullptr);
}

// What a program says when its grace after a SIGINT has run out (interrupt_on_sigint).
const char* g_grace_message = nullptr;
std::size_t g_grace_length = 0;
unsigned g_grace_seconds = 0;

// SIGALRM after the grace: the program is ended, as SIGINT did before it was taken.
volatile std::sig_atomic_t g_grace_quiet = 0;

void on_grace_over(int) {
  if (g_grace_message != nullptr && g_grace_quiet == 0) {
    [[maybe_unused]] const auto n = write(STDERR_FILENO, g_grace_message, g_grace_length);
  }
  _exit(130);
}

// The CLI's handler: the first SIGINT asks for an interrupt (and starts the grace), the next
// ends the process.
void on_program_sigint(int sig) {
  if (interrupt_requested()) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);
    return;
  }
  request_interrupt();
  if (g_grace_seconds > 0) alarm(g_grace_seconds);
}

}  // namespace

void interrupt_on_sigint(const char* message, unsigned grace_seconds) {
  if (message != nullptr) {
    g_grace_message = message;
    g_grace_length = std::strlen(message);
    g_grace_seconds = grace_seconds;
    struct sigaction alrm {};
    alrm.sa_handler = &on_grace_over;
    sigemptyset(&alrm.sa_mask);
    sigaction(SIGALRM, &alrm, nullptr);
  }
  struct sigaction sa {};
  sa.sa_handler = &on_program_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
}

void interrupt_message_written() noexcept { g_grace_quiet = 1; }

void request_interrupt() noexcept { g_interrupt.store(true, std::memory_order_relaxed); }

bool interrupt_requested() noexcept { return g_interrupt.load(std::memory_order_relaxed); }

void clear_interrupt() noexcept { g_interrupt.store(false, std::memory_order_relaxed); }

InterruptibleWait::InterruptibleWait(bool sigint) : sigint_(sigint) {
  g_waits.fetch_add(1);
  if (sigint_) {
    chain_sigint_handler();
    g_sigint_waits.fetch_add(1);
  }
}

InterruptibleWait::~InterruptibleWait() {
  if (sigint_) g_sigint_waits.fetch_sub(1);
  // The last wait out forgets the interrupt: every wait it could end has ended.
  if (g_waits.fetch_sub(1) == 1) clear_interrupt();
}

}  // namespace shardload

namespace shardload::detail {

namespace {
thread_local bool t_set_aside = false;
}  // namespace

InterruptSetAside::InterruptSetAside(std::optional<std::chrono::milliseconds> most)
    : interrupted_(interrupt_requested()), outer_(t_set_aside) {
  if (!interrupted_) return;
  clear_interrupt();
  t_set_aside = true;
  if (!most) return;
  try {
    timer_ = std::thread([this, wait = *most] {
      std::unique_lock lock(mu_);
      if (!cv_.wait_for(lock, wait, [this] { return done_; })) request_interrupt();
    });
  } catch (...) {  // no thread to bound the work: the interrupt ends it at once
    request_interrupt();
  }
}

InterruptSetAside::~InterruptSetAside() {
  if (!interrupted_) return;
  if (timer_.joinable()) {
    {
      const std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    timer_.join();
  }
  t_set_aside = outer_;
  request_interrupt();
}

bool InterruptSetAside::active() { return t_set_aside; }

}  // namespace shardload::detail
