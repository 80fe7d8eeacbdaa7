#!/usr/bin/env python3
"""slowloris.py: a bounded slow-client attacker for the adapter's connection model tests
(tests/e2e/test_slowloris.sh) and memory bench (bench/connections.sh). Python 3 standard library
only. Every mode is bounded in connection count (--max-connections-cap, 5,000) and time
(--max-seconds, 600): it always stops by itself and closes what it opened.

Modes (all against --host/--port, TLS where it says so, certificates never verified):

  hold      opens --idle plain TCP connections that send nothing and --half-tls connections that
            send only the first half of a real TLS ClientHello, spread over the --sources
            addresses (127.0.0.2-127.0.0.13 style ranges; Linux lets a socket bind any
            127.0.0.0/8 address) at most --per-source per address; writes --ready-file once
            all are open, keeps them --hold seconds while watching which ones the server
            closes, then prints a JSON report: per kind, how many were opened, refused (closed
            by the server within --refused-within seconds of connecting: a per-client or total
            limit), and closed later, with the earliest and latest close time after opening,
            the wall-clock time (Unix seconds) of the first close and every close time.
  drip      completes a TLS handshake, sends a request line, then one header line every
            --interval seconds and never ends the headers; prints JSON with the seconds from
            the end of the handshake until the server closed the connection and the number of
            header lines sent.
  raw       completes a TLS handshake, sends --data (Python escapes allowed: \\x00, \\r\\n),
            reads until the server closes or --timeout, prints JSON: seconds, whether the
            server closed, the status line, headers and body of the answer.
  keepalive opens --count TLS connections from --sources, sends one HTTP/1.1 GET --path on
            each (keep-alive) and reads the answer, writes --ready-file, keeps them --hold
            seconds and prints JSON: how many answered 200 and how many the server closed
            while they were held.

Exit status: 0 when the mode ran (the report says what happened), 2 on bad arguments.
"""

import argparse
import ipaddress
import json
import selectors
import socket
import ssl
import sys
import time

MAX_CONNECTIONS_CAP = 5000
MAX_SECONDS_CAP = 600


def parse_sources(spec):
    """'127.0.0.2-127.0.0.13,127.0.0.20' -> list of addresses."""
    out = []
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = (ipaddress.IPv4Address(x.strip()) for x in part.split("-", 1))
            if int(hi) < int(lo):
                raise ValueError(f"empty range {part}")
            out.extend(str(ipaddress.IPv4Address(i)) for i in range(int(lo), int(hi) + 1))
        else:
            out.append(str(ipaddress.IPv4Address(part)))
    return out


def client_context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def connect(host, port, source, timeout=10.0):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    # as curl and Go clients do: without it Nagle holds the request until the handshake's last
    # segment is ACKed (a 40 ms delayed-ACK stall on every new connection)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if source:
        s.bind((source, 0))
    s.connect((host, port))
    return s


def partial_client_hello():
    """The first half of a real ClientHello, as a client stuck mid-handshake would send."""
    ctx = client_context()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_side=False)
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    return hello[: max(1, len(hello) // 2)]


class Sources:
    """Hands out source addresses, at most `per_source` connections each."""

    def __init__(self, addresses, per_source):
        self.addresses = addresses or [None]
        self.per_source = per_source if addresses else float("inf")
        self.index = 0
        self.used = 0

    def next(self):
        if self.used >= self.per_source:
            self.index += 1
            self.used = 0
        if self.index >= len(self.addresses):
            raise RuntimeError("not enough source addresses for the requested connections")
        self.used += 1
        return self.addresses[self.index]


def mode_hold(args):
    total = args.idle + args.half_tls
    hello = partial_client_hello() if args.half_tls else b""
    sources = Sources(parse_sources(args.sources) if args.sources else [], args.per_source)
    sel = selectors.DefaultSelector()
    kinds = {"idle": {"opened": 0, "failed": 0, "closes": []},
             "half_tls": {"opened": 0, "failed": 0, "closes": []}}
    conns = []
    for i in range(total):
        kind = "idle" if i < args.idle else "half_tls"
        try:
            s = connect(args.host, args.port, sources.next())
            if kind == "half_tls":
                s.sendall(hello)
        except OSError:
            kinds[kind]["failed"] += 1
            continue
        s.setblocking(False)
        opened = time.monotonic()
        sel.register(s, selectors.EVENT_READ, (kind, opened))
        conns.append(s)
        kinds[kind]["opened"] += 1
    if args.ready_file:
        with open(args.ready_file, "w", encoding="utf-8") as f:
            f.write(json.dumps({k: v["opened"] for k, v in kinds.items()}) + "\n")
    deadline = time.monotonic() + args.hold
    open_now = len(conns)
    while open_now > 0 and time.monotonic() < deadline:
        for key, _ in sel.select(timeout=min(0.2, max(0.0, deadline - time.monotonic()))):
            kind, opened = key.data
            try:
                data = key.fileobj.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                data = b""
            if data:
                continue  # a TLS alert or the like: keep waiting for the close
            kinds[kind]["closes"].append(time.monotonic() - opened)
            kinds[kind].setdefault("first_close_at", time.time())
            sel.unregister(key.fileobj)
            key.fileobj.close()
            open_now -= 1
    for s in conns:
        try:
            s.close()
        except OSError:
            pass
    report = {}
    for kind, v in kinds.items():
        closes = sorted(v["closes"])
        refused = [c for c in closes if c <= args.refused_within]
        later = [c for c in closes if c > args.refused_within]
        report[kind] = {
            "opened": v["opened"],
            "failed": v["failed"],
            "refused": len(refused),
            "closed_later": len(later),
            "still_open": v["opened"] - len(closes),
            "first_close_s": round(later[0], 2) if later else None,
            "last_close_s": round(later[-1], 2) if later else None,
            "first_close_at": v.get("first_close_at"),
            "close_times_s": [round(c, 2) for c in closes],
        }
    print(json.dumps(report))


def tls_connect(args, source=None):
    s = connect(args.host, args.port, source)
    t = client_context().wrap_socket(s)
    return t


def mode_drip(args):
    t = tls_connect(args)
    start = time.monotonic()
    t.settimeout(0.05)
    lines = [b"GET /healthz HTTP/1.1\r\n"] + [
        f"X-Drip-{i}: {i}\r\n".encode() for i in range(100000)
    ]
    sent = 0
    closed_after = None
    next_send = start
    deadline = start + args.max_seconds
    while time.monotonic() < deadline:
        now = time.monotonic()
        if now >= next_send:
            try:
                t.sendall(lines[sent])
                sent += 1
            except OSError:
                closed_after = now - start
                break
            next_send += args.interval
        try:
            data = t.recv(4096)
            if not data:
                closed_after = time.monotonic() - start
                break
        except (socket.timeout, ssl.SSLWantReadError):
            continue
        except OSError:
            closed_after = time.monotonic() - start
            break
    t.close()
    print(json.dumps({"closed_after_s": None if closed_after is None else round(closed_after, 2),
                      "lines_sent": sent}))


def read_answer(t, timeout):
    """Reads until EOF or timeout; returns (bytes, closed, seconds)."""
    start = time.monotonic()
    t.settimeout(0.2)
    out = b""
    closed = False
    while time.monotonic() - start < timeout:
        try:
            data = t.recv(65536)
        except (socket.timeout, ssl.SSLWantReadError):
            continue
        except OSError:
            closed = True
            break
        if not data:
            closed = True
            break
        out += data
    return out, closed, time.monotonic() - start


def split_answer(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n") if head else []
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return (lines[0] if lines else ""), headers, body.decode("utf-8", "replace")


def mode_raw(args):
    data = args.data.encode("latin-1").decode("unicode_escape").encode("latin-1")
    t = tls_connect(args)
    t.sendall(data)
    raw, closed, seconds = read_answer(t, args.timeout)
    t.close()
    status, headers, body = split_answer(raw)
    print(json.dumps({"seconds": round(seconds, 2), "closed": closed, "status": status,
                      "headers": headers, "body": body}))


def mode_keepalive(args):
    sources = Sources(parse_sources(args.sources) if args.sources else [], args.per_source)
    request = (f"GET {args.path} HTTP/1.1\r\nHost: {args.host}\r\nUser-Agent: slowloris.py\r\n"
               "Accept: application/json\r\n\r\n").encode()
    sel = selectors.DefaultSelector()
    ok = failed = 0
    conns = []
    for _ in range(args.count):
        try:
            t = tls_connect(args, sources.next())
            t.sendall(request)
            t.settimeout(10)
            raw = b""
            while b"\r\n\r\n" not in raw:
                chunk = t.recv(65536)
                if not chunk:
                    break
                raw += chunk
            status, headers, body = split_answer(raw)
            need = int(headers.get("content-length", "0"))
            rest = raw.partition(b"\r\n\r\n")[2]
            while len(rest) < need:
                chunk = t.recv(65536)
                if not chunk:
                    break
                rest += chunk
            if " 200 " in status + " " and len(rest) >= need:
                ok += 1
            else:
                failed += 1
        except OSError:
            failed += 1
            continue
        t.setblocking(False)
        sel.register(t, selectors.EVENT_READ)
        conns.append(t)
    if args.ready_file:
        with open(args.ready_file, "w", encoding="utf-8") as f:
            f.write(json.dumps({"open": len(conns), "ok": ok}) + "\n")
    closed = 0
    deadline = time.monotonic() + args.hold
    while time.monotonic() < deadline and closed < len(conns):
        for key, _ in sel.select(timeout=0.2):
            try:
                data = key.fileobj.recv(4096)
            except (ssl.SSLWantReadError, BlockingIOError):
                continue
            except OSError:
                data = b""
            if not data:
                closed += 1
                sel.unregister(key.fileobj)
    for t in conns:
        try:
            t.close()
        except OSError:
            pass
    print(json.dumps({"ok": ok, "failed": failed, "held": len(conns), "closed_while_held": closed}))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sources", default="", help="source addresses, e.g. 127.0.0.2-127.0.0.13")
    p.add_argument("--per-source", type=int, default=100)
    p.add_argument("--max-seconds", type=float, default=120.0)
    p.add_argument("--max-connections-cap", type=int, default=MAX_CONNECTIONS_CAP)
    sub = p.add_subparsers(dest="mode", required=True)
    h = sub.add_parser("hold")
    h.add_argument("--idle", type=int, default=0)
    h.add_argument("--half-tls", type=int, default=0)
    h.add_argument("--hold", type=float, default=10.0)
    h.add_argument("--refused-within", type=float, default=0.5)
    h.add_argument("--ready-file")
    d = sub.add_parser("drip")
    d.add_argument("--interval", type=float, default=1.0)
    r = sub.add_parser("raw")
    r.add_argument("--data", required=True)
    r.add_argument("--timeout", type=float, default=30.0)
    k = sub.add_parser("keepalive")
    k.add_argument("--count", type=int, required=True)
    k.add_argument("--path", default="/healthz")
    k.add_argument("--hold", type=float, default=10.0)
    k.add_argument("--ready-file")
    args = p.parse_args()
    count = getattr(args, "idle", 0) + getattr(args, "half_tls", 0) + getattr(args, "count", 0)
    if count > min(args.max_connections_cap, MAX_CONNECTIONS_CAP):
        p.error(f"at most {MAX_CONNECTIONS_CAP} connections")
    args.max_seconds = min(args.max_seconds, MAX_SECONDS_CAP)
    for name in ("hold", "timeout"):
        if hasattr(args, name):
            setattr(args, name, min(getattr(args, name), args.max_seconds))
    {"hold": mode_hold, "drip": mode_drip, "raw": mode_raw, "keepalive": mode_keepalive}[args.mode](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
