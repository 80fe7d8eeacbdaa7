#!/usr/bin/env python3
"""fake_kube_nodelay.py: runs tests/lib/fake_kube_apiserver.py unchanged except that every accepted
connection gets TCP_NODELAY, as Go's net/http (so kube-apiserver) sets on every TCP connection.

Why the benchmark needs it: the fake writes a chunked body as one write per 4 KiB chunk. Without
TCP_NODELAY, Nagle's algorithm holds each chunk after the first until the client ACKs the previous
one, and a keep-alive client in request/response rhythm delays that ACK by up to 40 ms. A LIST of
10 pods (11 KB) then took 44 ms instead of ~1.5 ms, depending on how closely requests followed
each other: noise that belongs to neither the adapter nor kube-apiserver. Same arguments as the fake.
"""

import os
import socket
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
import fake_kube_apiserver as fake  # noqa: E402

_setup = fake.Handler.setup


def _setup_nodelay(self):
    self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _setup(self)


fake.Handler.setup = _setup_nodelay

if __name__ == "__main__":
    sys.exit(fake.main(sys.argv[1:]))
