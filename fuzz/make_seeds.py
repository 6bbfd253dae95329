#!/usr/bin/env python3
"""Writes the seed corpora under fuzz/corpus/<target>/ from examples/, data/, docs and the tests'
inputs (docs/fuzzing.md). Targets with a selector read the first byte as it: seeds start with an
ASCII digit ('0' = selector 0, '1' = 1, ...). Rerun after adding inputs; the output is stable."""
import hashlib
import json
import os
import re
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def yaml_blocks(doc):
    """The ```yaml fenced blocks of a docs page."""
    text = read(doc).decode()
    return [b.encode() for b in re.findall(r"```yaml\n(.*?)```", text, re.S)]


def json_blocks(doc):
    """The ```json fenced blocks of a docs page."""
    text = read(doc).decode()
    return [b.encode() for b in re.findall(r"```json\n(.*?)```", text, re.S)]


def raw_strings(src):
    """The R"(...)" literals of a test source file."""
    text = read(src).decode()
    return [s.encode() for s in re.findall(r'R"\((.*?)\)"', text, re.S)]


def put(target, data, selector=None):
    if selector is not None:
        data = str(selector).encode() + data
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    name = hashlib.sha1(data).hexdigest()[:16]
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def pod_json(annotations=None, node="gpu-node", limits=None):
    return json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u1",
                     "annotations": annotations or {}},
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": {
            "limits": limits or {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}}}]},
        "status": {"phase": "Running"}}).encode()


def vgpu_region(used, slot_used, limit=1 << 30, device_table=None, slot_state=1):
    """A libprism-vgpu shared region as intercept_region_fuzzer reads its input: the header up to
    its lock (128 bytes), then the device table and the first slots (docs/intercept.md). Device 0
    is the fuzzer's GPU (UUID 1..16) with `limit` and `used`; slot 0 is PID 1 (always alive) with
    `slot_used` on it."""
    header = struct.pack("<8sIIIIIIQ", b"PRSMVGPU", 1, 192, 320, 320, 16, 1024, 332992)
    header = header.ljust(128, b"\0")
    if device_table is None:
        device = struct.pack("<II16sQIIQQ", 1, 30, bytes(range(1, 17)), limit, 1, 132, used,
                             max(used, slot_used))
        device_table = device.ljust(320, b"\0") + bytes(15 * 320)
    slot = struct.pack("<IiQiI", slot_state, 1, 0, 0, 1) + struct.pack("<Q", slot_used)
    return header + device_table + slot.ljust(320, b"\0")


def main():
    # mig-parted configs and hooks.
    put("mig_config_fuzzer", read("data/mig-parted/default-mig-parted-config.yaml"), 0)
    put("mig_config_fuzzer", b"version: v1\nmig-configs:\n  c:\n    - devices: all\n"
        b"      mig-enabled: false\n    - devices: [0]\n      device-filter: ['0x20B010DE']\n"
        b"      mig-enabled: true\n      mig-devices: {1g.5gb: 7}\n", 0)
    for s in raw_strings("src/migparted/config_test.cc"):
        put("mig_config_fuzzer", s, 0)
    for s in raw_strings("src/migparted/hooks_test.cc"):
        put("mig_config_fuzzer", s, 1)
    put("mig_config_fuzzer", b"version: v1\nhooks:\n  apply-start:\n    - command: /bin/true\n"
        b"      args: [a]\n      envs: {K: V}\n      workdir: /\n", 1)
    # Simulated NVML state files.
    for b in yaml_blocks("docs/nvml-simulator.md"):
        put("sim_state_fuzzer", b)
    for s in raw_strings("src/nvml/sim/sim_state_test.cc"):
        put("sim_state_fuzzer", s)
    # Trace CSVs: the header and first rows of the shipped trace.
    nodes = read("data/traces/openb_node_list_gpu_node.csv").splitlines(True)
    pods = read("data/traces/openb_pod_list_default.csv").splitlines(True)
    put("trace_csv_fuzzer", b"".join(nodes[:40]), 0)
    put("trace_csv_fuzzer", b"".join(pods[:40]), 1)
    for s in raw_strings("src/sim/trace_test.cc"):
        put("trace_csv_fuzzer", s, 0)
        put("trace_csv_fuzzer", s, 1)
    # Device configs.
    for p in ("src/config/data/hami-device-config-v2.9.yaml", "examples/plan/device-config.yaml",
              "deploy/config/device-config.yaml"):
        put("device_config_fuzzer", read(p))
    for s in raw_strings("src/config/device_config_yaml_test.cc"):
        put("device_config_fuzzer", s)
    # Cluster files.
    for p in ("examples/plan/cluster.yaml", "examples/plan/seed-cluster.yaml"):
        put("cluster_yaml_fuzzer", read(p))
    for s in raw_strings("src/config/cluster_yaml_test.cc") + raw_strings(
            "src/sim/yaml_input_test.cc"):
        put("cluster_yaml_fuzzer", s)
    # Pod manifests, YAML.
    for p in ("examples/plan/pods.yaml", "examples/plan/seed-pod.yaml"):
        put("pod_yaml_fuzzer", read(p), 0)
        put("pod_yaml_fuzzer", read(p), 1)
    for s in raw_strings("src/sim/yaml_input_test.cc"):
        put("pod_yaml_fuzzer", s, 1)
    # Pod manifests, JSON; the extender's wire and webhook.
    for limits in ({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": 2, "nvidia.com/gpumem-percentage": "50"},
                   {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30", "cpu": "500m"}):
        put("pod_json_fuzzer", pod_json(limits=limits))
    put("pod_json_fuzzer", pod_json({"nvidia.com/vgpu-mode": "mig",
                                     "nvidia.com/use-gputype": "A100"}))
    pod = json.loads(pod_json())
    put("extender_wire_fuzzer", json.dumps({"Pod": pod, "NodeNames": ["a", "b"]}).encode(), 0)
    put("extender_wire_fuzzer", json.dumps({"Pod": pod, "Nodes": {"items": [
        {"metadata": {"name": "a", "annotations": {}},
         "status": {"allocatable": {"cpu": "8", "memory": "16Gi"}}}]}}).encode(), 0)
    put("extender_wire_fuzzer", b'{"PodName":"p","PodNamespace":"default","PodUID":"u1","Node":"a"}', 1)
    for s in raw_strings("src/extender/wire_test.cc"):
        put("extender_wire_fuzzer", s, 0)
    for mutate in (0, 1):
        put("admission_review_fuzzer", json.dumps({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "r1", "operation": "CREATE", "namespace": "default",
                        "object": pod}}).encode(), mutate)
    for s in raw_strings("src/extender/webhook_test.cc"):
        put("admission_review_fuzzer", s, 1)
    # Decision annotations (prism.io/decision, HAMi grammars) and allocation status.
    decision = {"node": "node-a", "containers": [{"name": "main", "devices": [
        {"uuid": "GPU-a100", "mode": "hami-core", "memory_mib": 4000, "cores": 0}]}]}
    put("decision_annotations_fuzzer", json.dumps(decision).encode(), 0)
    put("decision_annotations_fuzzer", b"GPU-a100,NVIDIA,4000,0:GPU-t4,NVIDIA,4000,0:;", 1)
    put("decision_annotations_fuzzer", b"GPU-a100-mig[1-1],NVIDIA,10240,28:;", 1)
    put("decision_annotations_fuzzer", b'[{"uuid":"GPU-a100-mig","profile":"2g.10gb","start":0}]', 2)
    put("decision_annotations_fuzzer", b"GPU-a100,NVIDIA,4000,0:;", 3)
    for s in raw_strings("src/config/annotations_test.cc"):
        put("decision_annotations_fuzzer", s, 0)
    put("extender_cache_fuzzer", pod_json({"prism.io/decision": json.dumps(decision)}), 0)
    put("extender_cache_fuzzer", json.dumps(decision).encode(), 1)
    put("extender_cache_fuzzer", b'{"containers":[{"name":"main","devices":[{"mode":1}]}]}', 1)
    put("extender_cache_fuzzer", b'{"containers":{"main":{"allocations":["a-1"],'
        b'"deviceIds":["GPU-x::0"],"error":""}}}', 2)
    put("extender_cache_fuzzer", b'{"containers":{"main":{"error":"no GPU"}}}', 2)
    put("extender_cache_fuzzer", b'{"node":"gpu-node","containers":{"main":{"allocations":'
        b'["mx1ogiv5-7"],"deviceIds":["GPU-x::0"],"error":"no GPU"}}}', 2)
    put("extender_cache_fuzzer", b"GPU-gpu-node-1,NVIDIA,3000,0:;", 3)
    # prism.io/allocation-status as the node agent reads it: the docs' example, the tests'.
    for b in json_blocks("docs/annotations.md"):
        if b"allocations" in b:
            put("allocation_status_fuzzer", b)
    for s in raw_strings("src/config/allocation_status_test.cc"):
        put("allocation_status_fuzzer", s)
    # Node inventory annotation.
    for s in raw_strings("src/deviceplugin/inventory_test.cc"):
        if s.lstrip().startswith(b"{"):
            put("inventory_fuzzer", s)
    put("inventory_fuzzer", b'{"version":1,"split_count":10,"gpus":[{"index":0,"uuid":"GPU-0",'
        b'"model":"A100-PCIE-40GB","product":"NVIDIA A100-PCIE-40GB","memory_mib":40960,'
        b'"mode":"mig","healthy":true,"mig_capable":true,"mig_profiles":["1g.5gb","7g.40gb"],'
        b'"instances":[{"profile":"1g.5gb","start":0,"uuid":"MIG-0","in_use":false}]}]}')
    # Whole v1.Nodes as the extender's informer gets them (selector 0), and inventory values on
    # an otherwise good node (selector 1): the inventory seeds, and the tests' nodes.
    inventory = (b'{"version":1,"split_count":10,"gpus":[{"index":0,"uuid":"GPU-0",'
                 b'"model":"A100-PCIE-40GB","product":"NVIDIA A100-PCIE-40GB","memory_mib":40960,'
                 b'"mode":"mig","healthy":true,"mig_capable":true,"mig_profiles":["1g.5gb","7g.40gb"],'
                 b'"instances":[{"profile":"1g.5gb","start":0,"uuid":"MIG-0","in_use":false}]}]}')
    put("node_json_fuzzer", inventory, 1)
    for s in raw_strings("src/deviceplugin/inventory_test.cc"):
        if s.lstrip().startswith(b"{"):
            put("node_json_fuzzer", s, 1)
    for alloc in ({"cpu": "64", "memory": "512Gi"}, {"cpu": "1500m", "memory": 1073741824},
                  {"cpu": "-1", "memory": "1Ei"}):
        put("node_json_fuzzer", json.dumps({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "hostile",
                         "annotations": {"prism.io/gpu-inventory": inventory.decode()}},
            "status": {"allocatable": alloc}}).encode(), 0)
    for s in raw_strings("src/extender/wire_test.cc"):
        if b'"kind":"Node"' in s.replace(b" ", b""):
            put("node_json_fuzzer", s, 0)
    # The node agent's allocation record files: what the agent writes, and the tests' records.
    put("ledger_record_fuzzer", json.dumps({
        "id": "mx1ogiv5-7", "seq": 7, "deviceIds": ["GPU-a::0", "GPU-a::1"],
        "createdMs": 1700000000000, "state": "ready",
        "pod": {"uid": "u1", "namespace": "default", "name": "p", "container": "main"}}).encode())
    for s in raw_strings("src/deviceplugin/ledger_test.cc"):
        if s.lstrip().startswith(b"{"):
            put("ledger_record_fuzzer", s)
    # libprism-vgpu's environment: NUL-separated values of CUDA_DEVICE_MEMORY_LIMIT, _0,
    # CUDA_DEVICE_SM_LIMIT, _0, GPU_CORE_UTILIZATION_POLICY, CUDA_DISABLE_CONTROL,
    # PRISM_VGPU_CONTEXT_ESTIMATE, PRISM_VGPU_LOCK_TIMEOUT_MS (issue 14's cases and the docs').
    for values in ([b"1g", b"garbage"], [b"1g", b"-5"], [b"lots"], [b"1.5g"],
                   [b"4Gi", b"", b"30.0", b"1e2", b"force", b"false", b"256m", b"2000"],
                   [b"0", b"", b"100%", b"", b"disable"],
                   [b"4096m", b"4g", b"2.5e1", b"30.5", b"Default", b"yes", b"300m", b"10"],
                   [b""] * 8):
        put("intercept_env_fuzzer", b"\0".join(values))
    # The shared region: consistent, `used` lowered (issue 14 review gap 1), a slot lowered, a
    # device table of 0xff (issue 14 item 2), a slot in an unknown state.
    mib = 1 << 20
    put("intercept_region_fuzzer", vgpu_region(600 * mib, 600 * mib))
    put("intercept_region_fuzzer", vgpu_region(0, 600 * mib))
    put("intercept_region_fuzzer", vgpu_region(600 * mib, 0))
    put("intercept_region_fuzzer", vgpu_region(0, 0, device_table=b"\xff" * (16 * 320)))
    put("intercept_region_fuzzer", vgpu_region(0, 0, slot_state=7))
    return 0


if __name__ == "__main__":
    sys.exit(main())
