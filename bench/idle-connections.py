#!/usr/bin/env python3
"""Memory held by idle downstream connections, Outrider beside Envoy 1.40.

For each proxy and each protocol (HTTP/1.1 keep-alive, HTTP/2 prior knowledge), one after
the other and each on a fresh proxy process: start the proxy with bench/proxy-bootstrap.yaml
(its ports moved so that a concurrent bench run cannot share them through SO_REUSEPORT),
open N connections, send one request on each and keep it open, then report the proxy's RSS
before and after, the bytes per connection, whether a new request still succeeds and
whether a sample of the idle connections still answers.

    bench/idle-connections.py [--connections N] [--outrider PATH] [--envoy PATH]
                              [--proxies outrider,envoy] [--protocols h1,h2]

Needs nginx (the backend), and `outrider` built in release; Envoy from
bench/install-envoy.sh. Prints a markdown table. Standard library only.
"""

import argparse
import asyncio
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LISTEN_PORT = 19100
ADMIN_PORT = 19911
BACKEND_PORT = 18180
# How many connections are being opened at once.
OPENING = 200


def port_in_use(port):
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port(port, proc, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        if port_in_use(port):
            return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {seconds}s")


def rss_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def settled_rss(pid):
    """RSS once it stops moving: a few samples a short while apart, the last one."""
    previous = -1
    for _ in range(10):
        current = rss_kib(pid)
        if current == previous:
            break
        previous = current
        time.sleep(0.5)
    return current


# === HTTP/1.1 ===

async def h1_request(reader, writer):
    writer.write(b"GET / HTTP/1.1\r\nHost: idle.example.com\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
    if length:
        await reader.readexactly(int(length.group(1)))
    return status


async def h1_open(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    status = await h1_request(reader, writer)
    return (reader, writer), status


# === HTTP/2 (h2c prior knowledge, hand-framed: one GET on stream 1, 3, ...) ===

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, HEADERS, DATA, RST_STREAM, GOAWAY, PING = 4, 1, 0, 3, 7, 6


def frame(kind, flags, stream, payload=b""):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def h2_get_headers():
    # HPACK: :method GET (2), :scheme http (6), :path / (4), :authority literal (name 1).
    authority = b"idle.example.com"
    return bytes([0x82, 0x86, 0x84, 0x01, len(authority)]) + authority


class H2Conn:
    def __init__(self, reader, writer):
        self.reader, self.writer, self.next_stream = reader, writer, 1

    async def read_frame(self):
        head = await self.reader.readexactly(9)
        length = int.from_bytes(head[:3], "big")
        kind, flags, stream = head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        return kind, flags, stream, await self.reader.readexactly(length)

    async def get(self):
        """One GET; True when its response headers say 200 (indexed :status 200, 0x88)."""
        stream, self.next_stream = self.next_stream, self.next_stream + 2
        self.writer.write(frame(HEADERS, 0x5, stream, h2_get_headers()))  # END_STREAM|END_HEADERS
        await self.writer.drain()
        ok = False
        while True:
            kind, flags, sid, payload = await self.read_frame()
            if kind == SETTINGS and not flags & 1:
                self.writer.write(frame(SETTINGS, 1, 0))
            elif kind == PING and not flags & 1:
                self.writer.write(frame(PING, 1, 0, payload))
            elif kind in (GOAWAY, RST_STREAM) and sid in (0, stream):
                return False
            elif sid == stream and kind == HEADERS:
                # Skip padding and priority fields when flagged.
                block = payload[1:] if flags & 0x8 else payload
                block = block[5:] if flags & 0x20 else block
                ok = ok or (block[:1] == b"\x88")
                if flags & 1:
                    return ok
            elif sid == stream and kind == DATA and flags & 1:
                return ok


async def h2_open(port):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(PREFACE + frame(SETTINGS, 0, 0))
    conn = H2Conn(reader, writer)
    ok = await conn.get()
    return conn, (200 if ok else 0)


async def h2_request(conn):
    return 200 if await conn.get() else 0


# === one run ===

async def open_all(protocol, count):
    opener = h1_open if protocol == "h1" else h2_open
    connections, failures = [], 0
    gate = asyncio.Semaphore(OPENING)

    async def one():
        nonlocal failures
        async with gate:
            try:
                conn, status = await opener(LISTEN_PORT)
                connections.append(conn)
                failures += status != 200
            except (OSError, asyncio.IncompleteReadError, ValueError):
                failures += 1

    await asyncio.gather(*(one() for _ in range(count)))
    return connections, failures


async def still_answer(protocol, connections, sample):
    """Whether `sample` of the idle connections, spread over them, still serve a request."""
    step = max(1, len(connections) // sample)
    ok = 0
    for conn in connections[::step][:sample]:
        try:
            status = await (h1_request(*conn) if protocol == "h1" else h2_request(conn))
            ok += status == 200
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
    return ok


async def fresh_request(protocol):
    try:
        conn, status = await (h1_open if protocol == "h1" else h2_open)(LISTEN_PORT)
        close(protocol, [conn])
        return status == 200
    except (OSError, asyncio.IncompleteReadError, ValueError):
        return False


def close(protocol, connections):
    for conn in connections:
        writer = conn[1] if protocol == "h1" else conn.writer
        writer.close()


def start_proxy(name, binary, bootstrap):
    if port_in_use(LISTEN_PORT):
        raise RuntimeError(f"port {LISTEN_PORT} is already in use: refusing to share it")
    log = open(os.devnull, "wb")
    if name == "envoy":
        args = [binary, "-c", bootstrap, "--concurrency", "1", "--log-level", "error",
                "--disable-hot-restart", "--use-dynamic-base-id"]
    else:
        args = [binary, "run", "--config", bootstrap, "--concurrency", "1"]
    env = dict(os.environ, RUST_LOG="error")
    proc = subprocess.Popen(args, stdout=log, stderr=log, env=env)
    wait_port(LISTEN_PORT, proc)
    return proc


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_one(name, binary, bootstrap, protocol, count):
    proc = start_proxy(name, binary, bootstrap)
    try:
        loop = asyncio.new_event_loop()
        # Warm up: the first request sets up the upstream pool and lazily built state.
        assert loop.run_until_complete(fresh_request(protocol)), f"{name} {protocol}: first request failed"
        before = settled_rss(proc.pid)
        started = time.monotonic()
        connections, failures = loop.run_until_complete(open_all(protocol, count))
        opened_s = time.monotonic() - started
        after = settled_rss(proc.pid)
        fresh = loop.run_until_complete(fresh_request(protocol))
        sample = loop.run_until_complete(still_answer(protocol, connections, 100))
        close(protocol, connections)
        loop.run_until_complete(asyncio.sleep(0.5))
        loop.close()
        return {
            "proxy": name, "protocol": protocol, "open": len(connections), "failed": failures,
            "open_s": opened_s, "rss_before": before, "rss_after": after,
            "per_conn": (after - before) * 1024 / max(1, len(connections)),
            "fresh_ok": fresh, "sample_ok": sample, "alive": proc.poll() is None,
        }
    finally:
        stop(proc)


def bootstrap_file(tmp):
    text = (HERE / "proxy-bootstrap.yaml").read_text()
    text = text.replace("port_value: 19000", f"port_value: {LISTEN_PORT}")
    text = text.replace("port_value: 19901", f"port_value: {ADMIN_PORT}")
    text = text.replace("port_value: 18080", f"port_value: {BACKEND_PORT}")
    path = Path(tmp) / "bootstrap.yaml"
    path.write_text(text)
    return str(path)


def start_backend(tmp):
    if port_in_use(BACKEND_PORT):
        raise RuntimeError(f"port {BACKEND_PORT} is already in use")
    conf = (HERE / "nginx.conf").read_text()
    conf = conf.replace("127.0.0.1:18080", f"127.0.0.1:{BACKEND_PORT}")
    conf = conf.replace("/tmp/outrider-bench-nginx.pid", f"{tmp}/nginx.pid")
    path = Path(tmp) / "nginx.conf"
    path.write_text(conf)
    proc = subprocess.Popen(["nginx", "-c", str(path), "-p", tmp],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(BACKEND_PORT, proc)
    return proc


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--outrider", default=os.environ.get("OUTRIDER_BIN", f"{target}/dist/outrider"))
    parser.add_argument("--envoy", default=str(HERE / ".envoy/bin/envoy"))
    parser.add_argument("--proxies", default="envoy,outrider")
    parser.add_argument("--protocols", default="h1,h2")
    args = parser.parse_args()

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 1000
    if hard != resource.RLIM_INFINITY and hard < want:
        sys.exit(f"the open-files limit is {hard}; {want} are needed (ulimit -Hn)")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, want), hard))  # inherited by the proxies

    binaries = {"outrider": args.outrider, "envoy": args.envoy}
    results = []
    with tempfile.TemporaryDirectory(prefix="outrider-idle-") as tmp:
        backend = start_backend(tmp)
        try:
            bootstrap = bootstrap_file(tmp)
            for protocol in args.protocols.split(","):
                for name in args.proxies.split(","):
                    if not os.access(binaries[name], os.X_OK):
                        print(f"skipped {name}: no executable at {binaries[name]}", file=sys.stderr)
                        continue
                    results.append(run_one(name, binaries[name], bootstrap, protocol, args.connections))
        finally:
            stop(backend)

    print(f"| proxy | protocol | idle connections | failed | open (s) | RSS before (KiB) | RSS after (KiB) "
          f"| bytes per connection | new request | 100 idle re-used | proxy alive |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        print(f"| {r['proxy']} | {r['protocol']} | {r['open']} | {r['failed']} | {r['open_s']:.1f} "
              f"| {r['rss_before']} | {r['rss_after']} | {r['per_conn']:.0f} "
              f"| {'ok' if r['fresh_ok'] else 'FAILED'} | {r['sample_ok']}/100 | {'yes' if r['alive'] else 'NO'} |")
    bad = [r for r in results if r["failed"] or not r["fresh_ok"] or not r["alive"]]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
