#!/usr/bin/python3
"""gRPC health probe for encoderd (grpc.health.v1.Health/Check).

Exit status 0 when the server reports SERVING for SERVICE ("" = the whole
server, or a model name), 1 otherwise (NOT_SERVING, unreachable, timeout).
Uses only python3-grpcio: the request and reply are encoded by hand, so no
generated stubs or grpcio-health-checking are needed in the image.
The container HEALTHCHECK runs it; Kubernetes uses its native gRPC probe.

usage: encoderd-health [--address HOST] [--port PORT] [--service NAME]
                       [--timeout SECONDS]
Defaults: 127.0.0.1, $ENCODERD_PORT or 50051, "", 2 s.
"""
import argparse
import os
import sys

import grpc

_SERVING = 1  # grpc.health.v1.HealthCheckResponse.ServingStatus.SERVING


def _encode_request(service: str) -> bytes:
    """HealthCheckRequest{service}: field 1, wire type 2 (length-delimited)."""
    data = service.encode()
    if not data:
        return b""
    if len(data) > 127:
        raise ValueError("service name longer than 127 bytes")
    return bytes([0x0A, len(data)]) + data


def _decode_status(reply: bytes) -> int:
    """HealthCheckResponse.status: field 1, varint; absent means UNKNOWN (0)."""
    if len(reply) >= 2 and reply[0] == 0x08:
        return reply[1]
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=int(os.environ.get("ENCODERD_PORT", "50051")))
    parser.add_argument("--service", default="")
    parser.add_argument("--timeout", type=float, default=2.0)
    args = parser.parse_args()
    target = f"{args.address}:{args.port}"
    with grpc.insecure_channel(target) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            reply = check(_encode_request(args.service), timeout=args.timeout)
        except grpc.RpcError as e:
            print(f"encoderd-health: {target}: {e.code().name}: {e.details()}", file=sys.stderr)
            return 1
    status = _decode_status(reply)
    if status != _SERVING:
        print(f"encoderd-health: {target}: status {status} (want SERVING=1)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
