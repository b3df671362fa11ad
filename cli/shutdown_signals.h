// SIGTERM / SIGINT handling for the daemon: the first signal asks for a
// graceful shutdown, the second forces an immediate exit (status 1).
#pragma once

#include <functional>

namespace encoderd::server {

// Installs the handlers and starts the watcher thread (detached). The handler
// only writes to a pipe (async-signal-safe), whichever thread receives it.
// A first signal that comes before WaitForShutdownSignal is called (while
// the daemon starts) also runs `while_starting(signal)` on the watcher
// thread, when given. Call once.
void InstallShutdownSignalHandlers(std::function<void(int)> while_starting = nullptr);

// The first SIGTERM/SIGINT's number, 0 before one came. Does not block.
int ShutdownSignalReceived();

// Blocks until the first SIGTERM/SIGINT; returns its number.
int WaitForShutdownSignal();

}  // namespace encoderd::server
