#include "cli/shutdown_signals.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <utility>

namespace encoderd::server {
namespace {

int g_pipe[2] = {-1, -1};
std::atomic<int> g_count{0};
std::mutex g_mu;
std::condition_variable g_cv;
int g_signal = 0;        // guarded by g_mu
bool g_waiting = false;  // guarded by g_mu; WaitForShutdownSignal was called

void OnSignal(int signal_number) {
  if (g_count.fetch_add(1) > 0) {
    static const char kMessage[] = "encoderd: second signal, exiting now\n";
    (void)!write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
    _exit(1);
  }
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  (void)!write(g_pipe[1], &byte, 1);
}

}  // namespace

void InstallShutdownSignalHandlers(std::function<void(int)> while_starting) {
  if (pipe(g_pipe) != 0) std::abort();
  std::thread([while_starting = std::move(while_starting)] {
    unsigned char byte = 0;
    while (read(g_pipe[0], &byte, 1) != 1) {
    }
    bool starting = false;
    {
      std::lock_guard<std::mutex> lock(g_mu);
      g_signal = byte;
      starting = !g_waiting;
    }
    g_cv.notify_all();
    if (starting && while_starting) while_starting(byte);
  }).detach();
  struct sigaction action = {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int ShutdownSignalReceived() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_signal;
}

int WaitForShutdownSignal() {
  std::unique_lock<std::mutex> lock(g_mu);
  g_waiting = true;
  g_cv.wait(lock, [] { return g_signal != 0; });
  return g_signal;
}

}  // namespace encoderd::server
