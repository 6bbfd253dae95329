#!/usr/bin/env python3
"""Hostile-load probe (docs/scheduler.md, Limits): RSS growth of `prism scheduler` under 1 MB /prioritize bodies
(200,000 NodeNames) and /healthz latency with 80 idle connections.
usage: limits_probe.py PRISM_BINARY FAKE_APISERVER_BINARY [NAMES] [REQUESTS]
(build/dev/apps/prism/prism and build/dev/testing/fake_apiserver/fake_apiserver)"""
import json, os, socket, subprocess, sys, tempfile, time, http.client

prism, fake = sys.argv[1], sys.argv[2]
NAMES = int(sys.argv[3]) if len(sys.argv) > 3 else 200000
REQS = int(sys.argv[4]) if len(sys.argv) > 4 else 20
tmp = tempfile.mkdtemp()
kc = os.path.join(tmp, "kubeconfig")
api = subprocess.Popen([fake, "--port", "0", "--print-port", "--kubeconfig-out", kc],
                       stdout=subprocess.PIPE, text=True)
api.stdout.readline()
time.sleep(0.5)
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
sched = subprocess.Popen([prism, "scheduler", "--kubeconfig", kc, "--port", str(port),
                          "--bind-address", "127.0.0.1"], stderr=subprocess.DEVNULL)
def rss_mib():
    with open(f"/proc/{sched.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
for _ in range(100):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2); c.request("GET", "/readyz")
        if c.getresponse().status == 200: break
    except OSError: pass
    time.sleep(0.1)
pod = {"metadata": {"name": "p", "namespace": "default", "uid": "u1"},
       "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
body = json.dumps({"Pod": pod, "NodeNames": ["n%d" % i for i in range(NAMES)]})
print("body bytes", len(body))
print("rss before MiB %.1f" % rss_mib())
statuses = []
for i in range(REQS):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/prioritize", body, {"Content-Type": "application/json"})
    r = c.getresponse(); r.read(); statuses.append(r.status)
    if i + 1 in (1, 5, 10, 20, 40, 80, 160): print("after %d requests: rss MiB %.1f" % (i + 1, rss_mib()))
print("statuses", sorted(set(statuses)))
idle = []
for _ in range(80):
    so = socket.create_connection(("127.0.0.1", port)); idle.append(so)
time.sleep(0.3)
t = time.time()
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
c.request("GET", "/healthz"); r = c.getresponse(); r.read()
print("healthz with 80 idle connections: %d in %.3f s" % (r.status, time.time() - t))
for so in idle: so.close()
sched.terminate(); sched.wait(); api.terminate(); api.wait()
