#!/usr/bin/env python3
"""A client that scrapes /metrics back to back, a new connection each time
(connect, GET, read to the close, close), for --seconds; prints how many
scrapes it made and their rate. Used beside encoderd-loadtest to measure
what a scraping loop costs the encoder (docs/reliability.md, "A client
scraping in a loop").

  /usr/bin/python3 loadtest/scripts/scrape_loop.py --port 9400 --seconds 8
"""
import argparse
import socket
import time


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9400)
    p.add_argument("--seconds", type=float, default=8.0)
    args = p.parse_args()
    request = f"GET /metrics HTTP/1.1\r\nHost: {args.host}\r\n\r\n".encode()
    scrapes = 0
    start = time.monotonic()
    while time.monotonic() - start < args.seconds:
        with socket.create_connection((args.host, args.port), timeout=10) as s:
            s.sendall(request)
            while s.recv(65536):
                pass
        scrapes += 1
    elapsed = time.monotonic() - start
    print(f"scrapes {scrapes} in {elapsed:.1f} s: {scrapes / elapsed:.0f}/s", flush=True)


if __name__ == "__main__":
    main()
