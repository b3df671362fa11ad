#!/usr/bin/python3
"""What clients that never read their answers cost `encoderd serve` (not part
of ctest): starts the daemon on its embedded default config (the bundled
model), opens --connections raw HTTP/2 connections with a 4 KiB receive
buffer, each granting the server all the flow-control window HTTP/2 allows,
sends --calls Embed calls of --texts short texts on each, and never reads a
byte. Prints the daemon's resident memory before, once the answers have
piled up (--settle seconds), and then every few seconds for --watch seconds,
with what the kernel queues toward the clients and the connections the
daemon closed as `send_timeout` (encoderd_connections_closed_total); at the
end, whether a client that reads is still served.

usage: loadtest/scripts/unread_answers.py [--binary build/cli/encoderd]
       [--connections 200] [--calls 40] [--texts 64] [--settle 10]
       [--watch 0] [-- extra serve flags]
Use /usr/bin/python3 (Debian's python3-hyperframe and python3-hpack).
"""
import argparse
import pathlib
import select
import socket
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "e2e"))
from e2e_common import RawHttp2Client, proc_rss_bytes, start_daemon  # noqa: E402


def calls_bytes(port, calls, texts):
    """The preface, SETTINGS granting the largest window, a connection
    WINDOW_UPDATE to match, and `calls` complete Embed calls."""
    import hpack
    import hyperframe.frame as hf
    encoder = hpack.Encoder()
    headers = [(":method", "POST"), (":scheme", "http"), (":path", "/encoderd.v1.Encoder/Embed"),
               (":authority", f"127.0.0.1:{port}"), ("content-type", "application/grpc"),
               ("te", "trailers")]
    message = b"".join(b"\x0a" + bytes([len(t)]) + t
                       for t in (f"word {i}".encode() for i in range(texts)))
    body = b"\x00" + len(message).to_bytes(4, "big") + message
    out = [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
           hf.SettingsFrame(0, settings={hf.SettingsFrame.INITIAL_WINDOW_SIZE: 2**31 - 1}).serialize(),
           hf.WindowUpdateFrame(0, window_increment=2**31 - 1 - 65535).serialize()]
    for i in range(calls):
        out.append(hf.HeadersFrame(1 + 2 * i, data=encoder.encode(headers),
                                   flags=["END_HEADERS"]).serialize())
        out.append(hf.DataFrame(1 + 2 * i, data=body, flags=["END_STREAM"]).serialize())
    return b"".join(out)


def kernel_send_queues(port):
    """Bytes the kernel queues on the daemon's side of its connections on
    `port` (written, not yet acknowledged by the client): /proc/net/tcp's
    tx_queue of each socket whose local port is `port`."""
    total = 0
    for line in pathlib.Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].split(":")[1], 16) == port:
            total += int(fields[4].split(":")[0], 16)
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", default=str(REPO / "build" / "cli" / "encoderd"))
    p.add_argument("--connections", type=int, default=200)
    p.add_argument("--calls", type=int, default=40, help="Embed calls per connection")
    p.add_argument("--texts", type=int, default=64, help="texts per call")
    p.add_argument("--settle", type=float, default=10.0,
                   help="seconds for the answers to pile up")
    p.add_argument("--watch", type=float, default=0.0,
                   help="seconds to watch memory and closes afterwards")
    p.add_argument("serve_args", nargs="*", help="more `encoderd serve` flags (after --)")
    a = p.parse_args()
    log = pathlib.Path(tempfile.mkdtemp(prefix="encoderd_unread_")) / "serve.log"
    daemon = start_daemon(a.binary, ["--max-connections", str(max(4096, a.connections + 16)),
                                     *a.serve_args], log)
    socks = []
    try:
        time.sleep(1)
        before = proc_rss_bytes(daemon.proc.pid)
        payload = calls_bytes(daemon.port, a.calls, a.texts)
        pending = {}
        for _ in range(a.connections):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect(("127.0.0.1", daemon.port))
            s.setblocking(False)
            socks.append(s)
            pending[s] = memoryview(payload)
        start = time.monotonic()
        # Sends what the daemon takes (it stops reading a client whose
        # answers fill its buffers), never reads.
        while time.monotonic() - start < a.settle:
            writable = [s for s, left in pending.items() if len(left)]
            if writable:
                _, ready, _ = select.select([], writable, [], 0.1)
                for s in ready:
                    try:
                        n = s.send(pending[s])
                        pending[s] = pending[s][n:]
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:
                        pending[s] = memoryview(b"")
            else:
                time.sleep(0.1)
        sent = sum(len(payload) - len(left) for left in pending.values())
        rss = proc_rss_bytes(daemon.proc.pid)
        print(f"{a.connections} connection(s) x {a.calls} calls of {a.texts} texts, never read: "
              f"{sent / len(payload):.1f} connections' worth of calls taken; RSS "
              f"{before // 1024} -> {rss // 1024} KiB after {a.settle:.0f} s "
              f"(+{(rss - before) / a.connections / 1024:.0f} KiB a connection); the kernel "
              f"queues {kernel_send_queues(daemon.port) / 2**20:.1f} MiB for the clients",
              flush=True)
        watch_end = time.monotonic() + a.watch
        while time.monotonic() < watch_end:
            time.sleep(min(5.0, max(0.0, watch_end - time.monotonic())))
            closed = daemon.metric("encoderd_connections_closed_total", {"reason": "send_timeout"})
            print(f"  +{time.monotonic() - start:.0f} s: RSS {proc_rss_bytes(daemon.proc.pid) // 1024}"
                  f" KiB, kernel queues {kernel_send_queues(daemon.port) / 2**20:.1f} MiB, "
                  f"{closed:.0f} closed as send_timeout", flush=True)
        reader = RawHttp2Client(daemon.port)
        reader.open([1])
        reader.finish(1, "hello")
        served = reader.wait(lambda st: 1 in st, timeout=30)
        print(f"a client that reads: {'answered ' + str(reader.statuses[1]) if served else 'no answer'}",
              flush=True)
        reader.close()
    finally:
        for s in socks:
            s.close()
        daemon.stop()


if __name__ == "__main__":
    main()
