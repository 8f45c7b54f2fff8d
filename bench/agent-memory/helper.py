#!/usr/bin/env python3
"""Helpers for bench/agent-memory.sh (python3's standard library and the openssl CLI only).

  helper.py jwks KEY KID OUT             the JWKS istiod's JWT_RULE points at (RSA key KEY)
  helper.py token KEY KID ISS SUB OUT    an RS256 JWT as the kubelet projects it (aud istio-ca)
  helper.py backend PORT                 the pod's application: HTTP/1.1 keep-alive, body "app"
  helper.py ready PID T0 OUTBOUND HOST SECS   until 15021/healthz/ready is 200 and a request
                                         through OUTBOUND (Host HOST) is 200; bounded; fails if
                                         PID dies; prints the seconds since T0 (epoch, the start)
  helper.py mem PID                      RSS and PSS (kB, /proc/PID/smaps_rollup) of PID and its
                                         descendants, as JSON
  helper.py tls INBOUND OUTBOUND          the proxy's completed TLS handshakes (admin 15000 /stats)
                                         on the inbound listener and to the outbound cluster, JSON
  helper.py oha FILE                     checks an `oha --output-format json` result; prints a summary
  helper.py report RESULTS.jsonl ...     medians, the markdown table, RESULTS.md
"""
import asyncio
import base64
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwks(key, kid, out):
    text = subprocess.run(["openssl", "rsa", "-in", key, "-noout", "-text"], check=True,
                          capture_output=True, text=True).stdout
    modulus = subprocess.run(["openssl", "rsa", "-in", key, "-noout", "-modulus"], check=True,
                             capture_output=True, text=True).stdout.strip().split("=", 1)[1]
    exponent = int(re.search(r"publicExponent: (\d+)", text).group(1))
    n = bytes.fromhex(modulus).lstrip(b"\0")
    e = exponent.to_bytes((exponent.bit_length() + 7) // 8, "big")
    keyset = {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": kid, "n": b64url(n), "e": b64url(e)}]}
    with open(out, "w") as f:
        json.dump(keyset, f)


def token(key, kid, iss, sub, out):
    now = int(time.time())
    header = {"alg": "RS256", "typ": "JWT", "kid": kid}
    # `aud` must be an array for istiod (JwtPayload.Aud []string); a day, longer than any run.
    claims = {"iss": iss, "aud": ["istio-ca"], "sub": sub, "iat": now, "nbf": now - 5, "exp": now + 86400}
    signing_input = f"{b64url(json.dumps(header).encode())}.{b64url(json.dumps(claims).encode())}"
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", key], input=signing_input.encode(),
                               check=True, capture_output=True).stdout
    with open(out, "w") as f:
        f.write(f"{signing_input}.{b64url(signature)}")


def backend(port):
    body = b"app"
    response = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\n" + body

    async def serve(reader, writer):
        buffer = b""
        try:
            while True:
                while b"\r\n\r\n" not in buffer:
                    chunk = await reader.read(65536)
                    if not chunk:
                        return
                    buffer += chunk
                head, buffer = buffer.split(b"\r\n\r\n", 1)
                length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
                if length:
                    need = int(length.group(1))
                    while len(buffer) < need:
                        chunk = await reader.read(65536)
                        if not chunk:
                            return
                        buffer += chunk
                    buffer = buffer[need:]
                writer.write(response)
                await writer.drain()
                if re.search(rb"(?im)^connection:\s*close", head):
                    return
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def http_get(port, host, path, timeout=2.0):
    """One GET on a fresh connection; the status code, 0 when none."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(f"GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        m = re.match(rb"HTTP/1\.[01] (\d{3})", data)
        return int(m.group(1)) if m else 0
    except OSError:
        return 0


def ready(pid, t0, outbound, host, seconds):
    pid, t0, outbound, seconds = int(pid), float(t0), int(outbound), float(seconds)
    deadline = time.monotonic() + seconds
    status = (0, 0)
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit(f"ready: process {pid} exited")
        status = (http_get(15021, "localhost", "/healthz/ready"), 0)
        if status[0] == 200:
            status = (200, http_get(outbound, host, "/"))
            if status[1] == 200:
                print(f"{time.time() - t0:.2f}")
                return
        time.sleep(0.1)
    sys.exit(f"ready: not ready after {seconds:.0f} s (15021/healthz/ready {status[0]}, through :{outbound} {status[1]})")


def http_body(port, host, path, timeout=5.0):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(f"GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if re.search(rb"(?i)^transfer-encoding:\s*chunked", head, re.M):
        out, rest = b"", body
        while True:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size.split(b";")[0], 16)
            if n == 0:
                break
            out, rest = out + rest[:n], rest[n + 2:]
        body = out
    return body.decode()


def tls(inbound, outbound):
    """Completed handshakes: the inbound listener's (`listener.<addr>_INBOUND.ssl.handshake`)
    and the outbound cluster's (`cluster.outbound|OUTBOUND||….ssl.handshake`)."""
    stats = http_body(15000, "localhost", "/stats?filter=ssl.handshake")
    counts = {"inbound": 0, "outbound": 0}
    for line in stats.splitlines():
        name, _, value = line.partition(": ")
        if not name.endswith("ssl.handshake") or not value.strip().isdigit():
            continue
        if name.startswith("listener.") and f"_{inbound}." in name:
            counts["inbound"] += int(value)
        elif name.startswith("cluster.") and f"outbound|{outbound}|" in name:
            counts["outbound"] += int(value)
    print(json.dumps(counts))


def children():
    kids = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def mem(pid):
    kids = children()
    todo, tree = [int(pid)], []
    while todo:
        p = todo.pop()
        tree.append(p)
        todo.extend(kids.get(p, []))
    processes = []
    for p in sorted(tree):
        try:
            with open(f"/proc/{p}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{p}/smaps_rollup") as f:
                rollup = f.read()
        except OSError:
            continue
        value = lambda key: int(re.search(rf"(?m)^{key}:\s+(\d+) kB", rollup).group(1))
        processes.append({"pid": p, "comm": comm, "rss_kb": value("Rss"), "pss_kb": value("Pss")})
    print(json.dumps({
        "processes": processes,
        "rss_kb": sum(p["rss_kb"] for p in processes),
        "pss_kb": sum(p["pss_kb"] for p in processes),
    }))


def oha(path):
    with open(path) as f:
        result = json.load(f)
    codes = {str(k): v for k, v in (result.get("statusCodeDistribution") or {}).items()}
    errors = result.get("errorDistribution") or {}
    ok = sum(v for k, v in codes.items() if k.startswith("2"))
    total = sum(codes.values()) + sum(errors.values())
    summary = result.get("summary", {})
    print(json.dumps({"ok": ok, "total": total, "non_2xx": total - ok, "codes": codes, "errors": errors,
                      "rps": summary.get("requestsPerSec"), "seconds": summary.get("total")}))


PHASES = [("idle", "idle, 10 s after ready"), ("traffic", "right after the requests"),
          ("after", "10 s after the requests")]
SETUPS = [("outrider", "Outrider (`outrider sidecar --istio-agent`)"), ("istio", "pilot-agent + Envoy 1.40")]
SHORT = [("outrider", "Outrider"), ("istio", "pilot-agent + Envoy")]


def report(paths, command, date, commit, versions, requests, concurrency, results_md, write):
    runs = []
    for path in paths:
        with open(path) as f:
            runs.extend(json.loads(line) for line in f if line.strip())
    med = lambda xs: statistics.median(xs) if xs else None
    mib = lambda kb: f"{kb / 1024:.1f}" if kb is not None else "–"
    by = {s: [r for r in runs if r["setup"] == s] for s, _ in SETUPS}
    n = {s: len(v) for s, v in by.items()}
    lines = [
        f"| one pod's mesh processes, medians of {n['outrider']} and {n['istio']} runs (MiB) "
        "| Outrider RSS | Outrider PSS | pilot-agent + Envoy RSS | pilot-agent + Envoy PSS "
        "| Outrider / (pilot-agent + Envoy), RSS | same, PSS |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    ratio = lambda a, b: f"{a / b:.2f}" if a and b else "–"
    for phase, label in PHASES:
        (orss, opss), (irss, ipss) = [
            tuple(med([r[phase][k] for r in by[setup]]) for k in ("rss_kb", "pss_kb")) for setup in ("outrider", "istio")]
        lines.append(f"| {label} | {mib(orss)} | {mib(opss)} | {mib(irss)} | {mib(ipss)} "
                     f"| {ratio(orss, irss)} | {ratio(opss, ipss)} |")
    table = "\n".join(lines)

    # Per process, for the pilot-agent + Envoy pod: which of the two holds what.
    split = []
    for phase, label in PHASES:
        per = {}
        for r in by["istio"]:
            for p in r[phase]["processes"]:
                per.setdefault(p["comm"], []).append((p["rss_kb"], p["pss_kb"]))
        split.append(f"{label}: " + ", ".join(
            f"{comm} {mib(med([x[0] for x in v]))} / {mib(med([x[1] for x in v]))}" for comm, v in sorted(per.items())))
    runs_lines = []
    for r in runs:
        runs_lines.append(
            f"| {r['run']} | {dict(SHORT)[r['setup']]} | {r['ready_s']:.2f} | "
            + " | ".join(f"{mib(r[p]['rss_kb'])} / {mib(r[p]['pss_kb'])}" for p, _ in PHASES)
            + f" | {r['oha']['ok']}/{r['oha']['total']} | {r['oha']['rps']:.0f} | {r['tls']['inbound']} / {r['tls']['outbound']}"
            + f" | {r['load']} |")
    every = "\n".join([
        "| run | setup | ready after (s) | idle RSS / PSS MiB | right after | 10 s after | 2xx / requests | req/s "
        "| mTLS handshakes inbound / outbound | load average (1 min) |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *runs_lines,
    ])
    print(table)
    print()
    print("pilot-agent + Envoy, per process, medians (RSS / PSS MiB): " + "; ".join(split))
    print()
    print(every)
    if not write:
        return
    section = f"""<!-- agent-memory:begin -->
`{command}` — {date}, commit `{commit}`; {versions}.

One pod's mesh processes, against the same real istiod, one setup after the other, {n['outrider']}
runs of each, alternating, each pod from a scratch working directory of its own, everything in a
network namespace made for the run (only `lo`). istiod is `pilot-discovery` in file mode (no
Kubernetes): its CA signs with an intermediate made with openssl (`ROOT_CA_DIR`), callers are
authenticated by an RS256 JWT (`JWT_RULE`, `sub: system:serviceaccount:default:default`,
`aud: [istio-ca]`), and it serves the pod's CA and ADS on its TLS port 15012. **Outrider alone**:
`outrider sidecar --istio-agent --concurrency 2` — the workload certificate from istiod's CA over
the SDS socket, ADS relayed to 15012 with the token, the status port 15020, the proxy.
**pilot-agent + Envoy 1.40**: `pilot-agent proxy sidecar` with Istio's bootstrap template and
Envoy 1.40 as its proxy binary (`PILOT_CERT_PROVIDER=istiod`, `JWT_POLICY=third-party-jwt`,
ProxyConfig `concurrency: 2`, `controlPlaneAuthPolicy: MUTUAL_TLS`, and
`proxyStatsMatcher.inclusionSuffixes: [ssl.handshake]` so that Envoy counts its handshakes).
Both read the token and the mesh root from `./var/run/secrets/…`, as Istio mounts them. The pod
is `default/default`, interception mode NONE; istiod's config (ServiceEntry, DestinationRule
`ISTIO_MUTUAL`, Sidecar ingress, PeerAuthentication STRICT, an AuthorizationPolicy) sends the
pod's outbound port back to its own inbound port over mutual TLS with the istiod-issued
certificates, then to a small HTTP backend. Upstream Envoy lacks Istio's proxy extensions, so
istiod runs with `PILOT_ENABLE_METADATA_EXCHANGE=false PILOT_ENABLE_ALPN_FILTER=false` for both
pods (with them, Envoy 1.40 rejects the listeners and clusters). Memory is the sum over every
process of the pod (`outrider`; `pilot-agent` and its `envoy`) of `Rss` and `Pss` from
`/proc/PID/smaps_rollup`: idle 10 s after the pod is ready (15021 `/healthz/ready` 200 and a first
request through the loop 200), right after {requests} requests (`oha -n {requests} -c
{concurrency}` to the outbound port, Host `app.default.svc.cluster.local`; every response 2xx and
handshakes counted at both ends of the loop, or the run fails) and 10 s after them. Medians of
the runs; MiB = 1024 KiB. Envoy keeps only the short list of stats Istio's bootstrap names,
Outrider all of its own. The requests per second are what oha reached on a 2-core machine that
may be shared (see the load average), not a throughput comparison.

{table}

pilot-agent + Envoy, per process, medians (RSS / PSS MiB): {"; ".join(split)}.

Every run:

{every}
<!-- agent-memory:end -->"""
    with open(results_md) as f:
        text = f.read()
    begin, end = "<!-- agent-memory:begin -->", "<!-- agent-memory:end -->"
    if begin in text and end in text:
        text = text[:text.index(begin)] + section + text[text.index(end) + len(end):]
    else:
        text = text.rstrip("\n") + ("\n\n## One process per pod: memory of the mesh processes "
                                    "(`bench/agent-memory.sh`)\n\n") + section + "\n"
    with open(results_md, "w") as f:
        f.write(text)
    print(f"\nwritten to {results_md}")


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "jwks":
        jwks(*args)
    elif command == "token":
        token(*args)
    elif command == "backend":
        backend(int(args[0]))
    elif command == "ready":
        ready(*args)
    elif command == "mem":
        mem(args[0])
    elif command == "tls":
        tls(*args)
    elif command == "oha":
        oha(args[0])
    elif command == "report":
        # report --command C --date D --commit H --requests N --concurrency C --results FILE [--no-write] FILES...
        opts, files, i = {}, [], 0
        while i < len(args):
            if args[i] == "--no-write":
                opts["no-write"] = True
                i += 1
            elif args[i].startswith("--"):
                opts[args[i][2:]] = args[i + 1]
                i += 2
            else:
                files.append(args[i])
                i += 1
        report(files, opts["command"], opts["date"], opts["commit"], opts["versions"], opts["requests"], opts["concurrency"],
               opts["results"], not opts.get("no-write"))
    else:
        sys.exit(__doc__)
