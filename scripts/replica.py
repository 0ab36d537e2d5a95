#!/usr/bin/env python3
"""A replica not written for prequal, for the live scripts in this folder: Python's
http.server on 127.0.0.1, a thread per connection, answering every GET with 200 "ok" after a
service time. Like most servers it finishes a request whose client went away.

Usage: replica.py PORT [--workers N] [--queue fifo|semaphore] [--service KIND:SECONDS[:SD]]
                       [--factor F] [--seed S] [--slow-path PREFIX=SECONDS] [--slow-flag FILE]
                       [--nodelay]

--workers N      requests wait FIFO for N workers: a worker that finishes is handed to the
                 oldest waiting request, never taken by one arriving meanwhile; without it
                 every request is served at once
--queue semaphore  the workers as a threading.Semaphore instead (the script's queue before
                 2026-11-28): a request arriving while a woken waiter has yet to run takes the
                 free worker first, so a queue is served out of order
--service        fixed:S, exp:MEAN or lognormal:MEAN:SD, in seconds (default fixed:0.01)
--factor F       every service time times F (a slower machine)
--seed S         seed of the service times (default: unseeded)
--slow-path      a request whose path starts with PREFIX takes SECONDS instead
--slow-flag FILE while FILE exists, every service time is ten times longer (an episode)
--nodelay        TCP_NODELAY: the head and the body go out in two sends, and without it Nagle
                 holds the body until the head is acknowledged, which a delayed ACK puts off
                 by up to 40 ms
"""
import argparse
import collections
import http.server
import math
import os
import random
import socketserver
import threading
import time


def service_times(spec, factor, seed):
    """A function drawing one service time, in seconds, from `spec` (see --service)."""
    kind, _, rest = spec.partition(":")
    args = [float(v) for v in rest.split(":")] if rest else []
    rng, lock = random.Random(seed), threading.Lock()
    if kind == "fixed" and len(args) == 1:
        return lambda: args[0] * factor
    if kind == "exp" and len(args) == 1:
        draw = lambda: rng.expovariate(1.0 / args[0])
    elif kind == "lognormal" and len(args) == 2:
        mean, sd = args
        sigma = math.sqrt(math.log(1 + (sd / mean) ** 2))
        mu = math.log(mean) - sigma * sigma / 2
        draw = lambda: rng.lognormvariate(mu, sigma)
    else:
        raise SystemExit(f"replica.py: --service {spec!r} is not fixed:S, exp:MEAN or lognormal:MEAN:SD")

    def locked():
        with lock:
            return draw() * factor

    return locked


class FifoWorkers:
    """N workers that requests wait for in arrival order. A `threading.Semaphore` is not
    that: its waiters are woken in order, but a request arriving between a release and the
    woken waiter's turn takes the free worker first, so under a queue some requests wait far
    longer than the ones ahead of them. Here a released worker passes straight to the oldest
    waiter."""

    def __init__(self, count):
        self.free = count
        self.lock = threading.Lock()
        self.waiting = collections.deque()

    def __enter__(self):
        with self.lock:
            if self.free > 0:
                self.free -= 1
                return self
            turn = threading.Event()
            self.waiting.append(turn)
        turn.wait()
        return self

    def __exit__(self, *_):
        with self.lock:
            if self.waiting:
                self.waiting.popleft().set()
            else:
                self.free += 1


def main():
    parser = argparse.ArgumentParser(description="a replica for the live scripts")
    parser.add_argument("port", type=int)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--queue", choices=["fifo", "semaphore"], default="fifo")
    parser.add_argument("--service", default="fixed:0.01")
    parser.add_argument("--factor", type=float, default=1.0)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--slow-path")
    parser.add_argument("--slow-flag")
    parser.add_argument("--nodelay", action="store_true")
    args = parser.parse_args()
    service = service_times(args.service, args.factor, args.seed)
    slow_prefix, slow_seconds = None, 0.0
    if args.slow_path:
        slow_prefix, _, seconds = args.slow_path.partition("=")
        slow_seconds = float(seconds)
    if not args.workers:
        workers = None
    elif args.queue == "semaphore":
        workers = threading.Semaphore(args.workers)
    else:
        workers = FifoWorkers(args.workers)

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = args.nodelay

        def log_message(self, *_):
            pass

        def do_GET(self):
            if slow_prefix is not None and self.path.startswith(slow_prefix):
                seconds = slow_seconds
            else:
                seconds = service()
            if args.slow_flag and os.path.exists(args.slow_flag):
                seconds *= 10
            if workers is None:
                time.sleep(seconds)
            else:
                with workers:
                    time.sleep(seconds)
            body = b"ok\n"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True
        request_queue_size = 1024

    Server(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
