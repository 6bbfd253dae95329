#!/usr/bin/env python3
"""Does the webhook still answer a normal pod within its timeout while under hostile load?
(issue 39; docs/scheduler.md#limits.) Starts `prism scheduler` as deployed (extender verbs on a
mutual-TLS port, the webhook on a server-TLS port, probes on plain HTTP) against the fake API
server, then measures AdmissionReview latency for a GPU pod on the webhook port (a fresh TLS
connection per review, as after the API server's idle connection closed) with no load, and while:

  slow-loris   N connections that never finish a request, held open and reopened at once when
               the server cuts them: half trickle a TLS ClientHello one byte a second, half
               finish the handshake and trickle request headers; spread over K source addresses
               (127.0.0.2...), as K pods would, each under --max-connections-per-client
  large-body   M senders posting bodies back to back: half just under the 8 MiB cap (a valid
               AdmissionReview padded with an annotation), half over it (16 MiB declared)

against the webhook port, the extender port (slow-loris without a client certificate: what any pod
can do; large bodies with kube-scheduler's certificate) and both. The bar is the webhooks'
timeoutSeconds (deploy/webhook/webhooks.yaml): past it the API server fails the pod's creation
(failurePolicy: Fail).

usage: webhook_load_bench.py PRISM FAKE_APISERVER [--slow N] [--sources K] [--large M]
           [--seconds S] [--timeout T] [--only SCENARIO]
  (build/dev/apps/prism/prism and build/dev/testing/fake_apiserver/fake_apiserver)
"""
import argparse
import http.client
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time

p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
p.add_argument("prism")
p.add_argument("fake_apiserver")
p.add_argument("--slow", type=int, default=400, help="slow-loris connections per attacked port")
p.add_argument("--sources", type=int, default=8, help="source addresses they come from")
p.add_argument("--large", type=int, default=4, help="large-body senders per attacked port")
p.add_argument("--seconds", type=float, default=25, help="measuring time per scenario")
p.add_argument("--timeout", type=float, default=10, help="the webhook's timeoutSeconds")
p.add_argument("--interval", type=float, default=0.2, help="seconds between normal reviews")
p.add_argument("--only", default="", help="run only the scenarios whose name contains this")
args = p.parse_args()

tmp = tempfile.mkdtemp(prefix="prism-webhook-bench-")


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def pki():
    """A serving CA and certificate for 127.0.0.1, and a client CA with kube-scheduler's cert."""
    f = lambda n: os.path.join(tmp, n)  # noqa: E731
    for ca in ("ca", "client-ca"):
        sh("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
           f"/CN={ca}", "-keyout", f(ca + ".key"), "-out", f(ca + ".crt"))
    for name, ca, ext in (("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
                          ("client", "client-ca", "extendedKeyUsage=clientAuth")):
        sh("openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
           "-keyout", f(name + ".key"), "-out", f(name + ".csr"))
        with open(f(name + ".ext"), "w") as e:
            e.write(ext + "\n")
        sh("openssl", "x509", "-req", "-in", f(name + ".csr"), "-CA", f(ca + ".crt"), "-CAkey",
           f(ca + ".key"), "-CAcreateserial", "-days", "1", "-extfile", f(name + ".ext"),
           "-out", f(name + ".crt"))
    return f


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


f = pki()
kc = os.path.join(tmp, "kubeconfig")
api = subprocess.Popen([args.fake_apiserver, "--port", "0", "--print-port", "--kubeconfig-out", kc],
                       stdout=subprocess.PIPE, text=True)
api.stdout.readline()
ext_port, hook_port, probe_port = free_port(), free_port(), free_port()
log = open(os.path.join(tmp, "scheduler.log"), "w")
sched = subprocess.Popen(
    [args.prism, "scheduler", "--kubeconfig", kc, "--bind-address", "127.0.0.1",
     "--port", str(ext_port), "--webhook-port", str(hook_port), "--probe-port", str(probe_port),
     "--tls-cert-file", f("server.crt"), "--tls-key-file", f("server.key"),
     "--client-ca-file", f("client-ca.crt"), "--no-events"], stderr=log)
for _ in range(200):
    try:
        c = http.client.HTTPConnection("127.0.0.1", probe_port, timeout=2)
        c.request("GET", "/readyz")
        if c.getresponse().status == 200:
            break
    except OSError:
        pass
    time.sleep(0.1)
else:
    sys.exit("prism scheduler never became ready; log: " + log.name)

server_ctx = ssl.create_default_context(cafile=f("ca.crt"))
client_ctx = ssl.create_default_context(cafile=f("ca.crt"))
client_ctx.load_cert_chain(f("client.crt"), f("client.key"))
anon_ctx = ssl.create_default_context(cafile=f("ca.crt"))  # No client certificate.

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "trainer", "namespace": "team-a", "uid": "u-1"},
       "spec": {"containers": [{"name": "main", "image": "cuda",
                                "resources": {"limits": {"nvidia.com/gpu": "1",
                                                         "nvidia.com/gpumem": "4000"}}}]}}


def review(pod, uid="r-1"):
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                                   "operation": "CREATE", "namespace": "team-a",
                                   "userInfo": {"username": "alice"}, "object": pod}})


NORMAL = review(POD)


def normal_review(timeout):
    """Seconds to an answer to a normal pod's review on a fresh connection, or None."""
    t = time.monotonic()
    try:
        c = http.client.HTTPSConnection("127.0.0.1", hook_port, context=server_ctx, timeout=timeout)
        c.request("POST", "/mutate", NORMAL, {"Content-Type": "application/json"})
        r = c.getresponse()
        body = json.loads(r.read())
        c.close()
        if r.status != 200 or body["response"]["uid"] != "r-1":
            return None
        return time.monotonic() - t
    except (OSError, ValueError, KeyError, http.client.HTTPException):
        return None


stop = threading.Event()
stats = {"slow_opened": 0, "slow_cut": 0, "large_sent": 0, "large_status": {}}
lock = threading.Lock()


def count(key, status=None):
    with lock:
        if status is None:
            stats[key] += 1
        else:
            stats[key][status] = stats[key].get(status, 0) + 1


def slow_loris(port, source, after_handshake, ctx):
    """One connection that never finishes a request; reopened when the server cuts it."""
    while not stop.is_set():
        s = None
        try:
            s = socket.socket()
            s.bind((source, 0))
            s.settimeout(30)
            s.connect(("127.0.0.1", port))
            count("slow_opened")
            if after_handshake:
                s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
                trickle = b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nX-A: " + b"a" * 10000
            else:
                # A real ClientHello, sent a byte at a time: the handshake never completes.
                out = ssl.MemoryBIO()
                obj = ctx.wrap_bio(ssl.MemoryBIO(), out, server_hostname="127.0.0.1")
                try:
                    obj.do_handshake()
                except ssl.SSLWantReadError:
                    pass
                trickle = out.read()
            for i in range(len(trickle)):
                if stop.wait(1.0):
                    break
                s.send(trickle[i:i + 1])
        except (OSError, ssl.SSLError):
            count("slow_cut")
            stop.wait(0.05)
        finally:
            if s is not None:
                s.close()


def large_body(port, path, size, ctx):
    pad = "x" * max(0, size - len(NORMAL) - 64)
    pod = json.loads(json.dumps(POD))
    pod["metadata"]["annotations"] = {"pad": pad}
    body = review(pod).encode() if path == "/mutate" else json.dumps(
        {"Pod": pod, "NodeNames": []}).encode()
    while not stop.is_set():
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=30)
        try:
            c.request("POST", path, body, {"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            count("large_status", r.status)
        except (OSError, http.client.HTTPException) as e:
            count("large_status", type(e).__name__)
        finally:
            c.close()
        count("large_sent")


def attack(slow_ports, large_targets):
    threads = []
    for port, ctx in slow_ports:
        for i in range(args.slow):
            source = "127.0.0.%d" % (2 + i % args.sources)
            threads.append(threading.Thread(target=slow_loris, args=(port, source, i % 2 == 1, ctx),
                                            daemon=True))
    for port, path, ctx in large_targets:
        for i in range(args.large):
            size = (8 << 20) - 4096 if i % 2 == 0 else 16 << 20
            threads.append(threading.Thread(target=large_body, args=(port, path, size, ctx),
                                            daemon=True))
    for t in threads:
        t.start()
    return threads


def measure(name, slow_ports=(), large_targets=()):
    if args.only and args.only not in name and name != "no load":
        return
    stop.clear()
    with lock:
        stats.update(slow_opened=0, slow_cut=0, large_sent=0, large_status={})
    threads = attack(slow_ports, large_targets)
    if threads:
        time.sleep(3)  # Let the attack take hold.
    latencies, failed = [], 0
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        lat = normal_review(timeout=30)
        if lat is None:
            failed += 1
        else:
            latencies.append(lat)
        time.sleep(args.interval)
    stop.set()
    for t in threads:
        t.join(timeout=35)
    n = len(latencies) + failed
    over = failed + sum(1 for x in latencies if x > args.timeout)
    q = sorted(latencies)
    pct = lambda p: q[min(len(q) - 1, int(p * len(q)))] * 1000 if q else float("nan")  # noqa: E731
    print("%-44s %5d %5d %8.1f %8.1f %8.1f %6d   %s" % (
        name, n, failed, pct(0.5), pct(0.99), (q[-1] * 1000 if q else float("nan")), over,
        "slow opened %d cut %d; large sent %d %s" % (
            stats["slow_opened"], stats["slow_cut"], stats["large_sent"],
            dict(sorted(stats["large_status"].items(), key=str)))), flush=True)


print("prism scheduler: webhook :%d (server TLS), extender :%d (mutual TLS); %d slow-loris "
      "connections per port from %d addresses, %d large-body senders per port; bar: %.0f s"
      % (hook_port, ext_port, args.slow, args.sources, args.large, args.timeout))
print("%-44s %5s %5s %8s %8s %8s %6s" % ("scenario (normal GPU pod reviews)", "n", "fail",
                                          "p50 ms", "p99 ms", "max ms", ">bar"))
measure("no load")
measure("slow-loris on the webhook port", slow_ports=[(hook_port, anon_ctx)])
measure("slow-loris on the extender port", slow_ports=[(ext_port, anon_ctx)])
measure("large bodies on the webhook port", large_targets=[(hook_port, "/mutate", anon_ctx)])
measure("large bodies on the extender port", large_targets=[(ext_port, "/filter", client_ctx)])
measure("all of the above",
        slow_ports=[(hook_port, anon_ctx), (ext_port, anon_ctx)],
        large_targets=[(hook_port, "/mutate", anon_ctx), (ext_port, "/filter", client_ctx)])
with open(f"/proc/{sched.pid}/status") as st:
    rss = [line.split()[1] for line in st if line.startswith("VmHWM:")][0]
print("scheduler peak RSS %.0f MiB" % (int(rss) / 1024))
sched.terminate()
sched.wait()
api.terminate()
api.wait()
