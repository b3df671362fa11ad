// SIGTERM / SIGINT handling for the daemon: the first signal asks for a
// graceful shutdown, the second forces an immediate exit (status 1).
#pragma once

namespace encoderd::server {

// Installs the handlers and starts the watcher thread (detached). The handler
// only writes to a pipe (async-signal-safe), whichever thread receives it.
// Call once.
void InstallShutdownSignalHandlers();

// Blocks until the first SIGTERM/SIGINT; returns its number.
int WaitForShutdownSignal();

}  // namespace encoderd::server
