#!/usr/bin/env python3
"""Evaluates the shipped ValidatingAdmissionPolicy prism-node-scoped-writes (docs/rbac.md), and
the DRA opt-in's prism-node-scoped-resourceslices (examples/dra/ through deploy/dra/, and the chart
with dra.enabled).

The policy is taken as shipped twice: from deploy/ (`kubectl kustomize`, or the file itself where
kubectl is missing) and from the chart (tests/e2e/helm_render.py). Its CEL is evaluated by a real
CEL implementation (@marcbachmann/cel-js under node, tests/e2e/cel/; tools/setup.sh installs both),
with the admission request, object and oldObject Kubernetes would pass, and the policy semantics
modelled after the API server's:
  - matchConstraints.resourceRules select the request (a resource without `/` matches the main
    resource only, `pods/*` its subresources: k8s.io/apiserver/pkg/admission/plugin/webhook/
    predicates/rules/rules.go, Matcher.Matches);
  - matchConditions all true, or the policy does not apply; an error applies failurePolicy;
  - variables in order (`variables.<name>`), an error in one fails the expressions that use it;
  - each validation false -> denied with its message (messageExpression when it evaluates);
    an error -> failurePolicy (Fail: denied). k8s.io/apiserver/pkg/admission/plugin/policy/
    validating/validator.go, validator.Validate.

The admission webhooks' matchConditions (deploy/webhook/webhooks.yaml and the chart's) are
evaluated the same way, with the webhook dispatcher's semantics: rules, then namespaceSelector,
then every matchCondition: any false skips the webhook, else any error applies failurePolicy, else
the webhook is called (k8s.io/apiserver/pkg/admission/plugin/webhook/matchconditions/matcher.go,
matcher.Match). Variables: object, oldObject (dyn), request, authorizer (plugin/cel/compile.go,
createEnvForOpts).

What this proves: the expressions as shipped parse, evaluate without error on every request shape
below and decide each case as intended. What it does not: Kubernetes type-checks the expressions
against the resources' OpenAPI schemas and estimates their cost when the policy is created; that
needs a 1.30+ API server (`kubectl apply --dry-run=server -f deploy/policies/`).
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import unittest

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("PRISM_SOURCE_DIR", os.path.abspath(os.path.join(HERE, "..", "..")))
sys.path.insert(0, HERE)
import helm_render  # noqa: E402
from deploy_test import selector_matches  # noqa: E402

CEL_DIR = os.path.join(HERE, "cel")
POLICY = "prism-node-scoped-writes"
NS = "prism-system"
AGENT = f"system:serviceaccount:{NS}:prism-device-plugin"
MANAGER = f"system:serviceaccount:{NS}:prism-mig-manager"
NODE_KEY = "authentication.kubernetes.io/node-name"


def cel_available():
    node = shutil.which("node")
    return node and os.path.isdir(os.path.join(CEL_DIR, "node_modules", "@marcbachmann", "cel-js"))


_EVALUATOR = None


def evaluate(jobs):
    """[(expression, bindings)] -> [("value", v) | ("error", message)], by one node process
    kept for the whole run."""
    global _EVALUATOR
    if _EVALUATOR is None:
        _EVALUATOR = subprocess.Popen(["node", os.path.join(CEL_DIR, "cel_eval.mjs")],
                                      cwd=CEL_DIR, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      text=True)
    _EVALUATOR.stdin.write(json.dumps({"jobs": [{"expression": e, "bindings": b}
                                                for e, b in jobs]}) + "\n")
    _EVALUATOR.stdin.flush()
    line = _EVALUATOR.stdout.readline()
    if not line:
        raise RuntimeError(f"the CEL evaluator exited ({_EVALUATOR.wait()})")
    return [("value", r["value"]) if "value" in r else ("error", r["error"])
            for r in json.loads(line)["results"]]


def shipped_policies(name=POLICY, kustomization="deploy",
                     raw_file=os.path.join("deploy", "policies", "node-scoped-writes.yaml"),
                     values=None):
    """{source: (policy, binding)} for policy `name` as `kubectl kustomize <kustomization>`
    renders it (`raw_file` as written where kubectl is missing) and as the chart renders it with
    `values`."""
    out = {}
    kubectl = shutil.which("kubectl")
    if kubectl:
        text = subprocess.run([kubectl, "kustomize", os.path.join(ROOT, kustomization)],
                              check=True, capture_output=True, text=True).stdout
        objects = [d for d in yaml.safe_load_all(text) if d]
    else:
        with open(os.path.join(ROOT, raw_file)) as f:
            objects = [d for d in yaml.safe_load_all(f) if d]
    out["deploy"] = objects
    out["chart"] = helm_render.render_objects(os.path.join(ROOT, "charts", "prism"),
                                              values or {}, namespace=NS)
    result = {}
    for source, objects in out.items():
        pol = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"
               and o["metadata"]["name"] == name]
        bind = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding"
                and o["spec"]["policyName"] == name]
        assert len(pol) == 1 and len(bind) == 1, f"{source}: one policy and one binding"
        result[source] = (pol[0], bind[0])
    return result


def rule_matches(rule, group, version, resource, subresource, operation):
    def any_of(values, v):
        return "*" in values or v in values
    if not any_of(rule["apiGroups"], group) or not any_of(rule["apiVersions"], version):
        return False
    if not any_of(rule["operations"], operation):
        return False
    for r in rule["resources"]:
        main, _, sub = r.partition("/")
        if main not in ("*", resource):
            continue
        if (sub == "" and subresource == "") or sub == "*" or (sub and sub == subresource):
            return True
    return False


class Admission:
    """The API server's evaluation of one ValidatingAdmissionPolicy with a Deny binding."""

    def __init__(self, policy, binding):
        self.spec = policy["spec"]
        self.binding = binding["spec"]

    def review(self, request, obj, old):
        """-> (allowed, [messages])."""
        a = request["resource"]
        if not any(rule_matches(r, a["group"], a["version"], a["resource"],
                                request.get("subResource", ""), request["operation"])
                   for r in self.spec["matchConstraints"]["resourceRules"]):
            return True, ["not matched"]
        fail = self.spec.get("failurePolicy", "Fail") == "Fail"
        bindings = {"request": request, "object": obj, "oldObject": old,
                    "params": None, "namespaceObject": None, "authorizer": None}
        conditions = self.spec.get("matchConditions", [])
        results = evaluate([(c["expression"], bindings) for c in conditions])
        for c, (kind, value) in zip(conditions, results):
            if kind == "error":
                return (not fail), [f"matchCondition {c['name']}: {value}"]
            if value is not True:
                return True, [f"matchCondition {c['name']} is false"]
        variables, failed = {}, {}
        for v in self.spec.get("variables", []):
            ((kind, value),) = evaluate([(v["expression"], dict(bindings, variables=variables))])
            if kind == "error":
                failed[v["name"]] = value
            else:
                variables[v["name"]] = value
        bindings["variables"] = variables
        messages = []
        for val in self.spec["validations"]:
            used_failed = [n for n in failed if f"variables.{n}" in val["expression"]]
            if used_failed:
                messages.append(f"variable {used_failed[0]}: {failed[used_failed[0]]}")
                continue
            ((kind, value),) = evaluate([(val["expression"], bindings)])
            if kind == "error":
                messages.append(f"error: {value}")
                continue
            if value is not True:
                text = val.get("message", "denied")
                if "messageExpression" in val:
                    ((mk, mv),) = evaluate([(val["messageExpression"], bindings)])
                    if mk == "value" and isinstance(mv, str):
                        text = mv
                messages.append(text)
        if not messages:
            return True, []
        if "Deny" in self.binding["validationActions"]:
            return False, messages
        return True, messages


def request(user, operation, resource, name, namespace="", subresource="", node=None,
            extra=None):
    info = {"username": user, "uid": "u-1", "groups": ["system:serviceaccounts",
                                                       "system:authenticated"]}
    ex = dict(extra or {})
    if node is not None:
        ex[NODE_KEY] = [node]
        ex["authentication.kubernetes.io/pod-name"] = ["agent-x"]
    if ex:
        info["extra"] = ex
    kind = {"nodes": "Node", "pods": "Pod"}[resource]
    r = {"kind": {"group": "", "version": "v1", "kind": kind},
         "resource": {"group": "", "version": "v1", "resource": resource},
         "requestKind": {"group": "", "version": "v1", "kind": kind},
         "requestResource": {"group": "", "version": "v1", "resource": resource},
         "name": name, "operation": operation, "userInfo": info, "dryRun": False}
    if namespace:
        r["namespace"] = namespace
    if subresource:
        r["subResource"] = subresource
    return r


def node_object(name, labels=None, annotations=None):
    meta = {"name": name, "uid": f"uid-{name}", "resourceVersion": "7",
            "creationTimestamp": "2026-12-01T00:00:00Z"}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Node", "metadata": meta,
            "spec": {"podCIDR": "10.0.1.0/24", "providerID": f"fake://{name}"},
            "status": {"capacity": {"nvidia.com/gpu": "8"}}}


def pod_object(name, node, annotations=None, labels=None):
    meta = {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "resourceVersion": "9"}
    if annotations is not None:
        meta["annotations"] = annotations
    if labels is not None:
        meta["labels"] = labels
    spec = {"containers": [{"name": "main", "image": "cuda:12",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "schedulerName": "prism-scheduler"}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
            "status": {"phase": "Running"}}


def patched(obj, labels=None, annotations=None):
    """A merge patch of metadata.labels/annotations (None values remove), as the code sends."""
    out = copy.deepcopy(obj)
    for field, changes in (("labels", labels), ("annotations", annotations)):
        for k, v in (changes or {}).items():
            m = out["metadata"].setdefault(field, {})
            if v is None:
                m.pop(k, None)
            else:
                m[k] = v
            if not m:
                del out["metadata"][field]
    return out


INVENTORY = '{"version":1,"splitCount":4,"gpus":[]}'
STATUS = '{"node":"n1","containers":{}}'
DECISION = '{"node":"n1","containers":[]}'
GPU_LABELS = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "nvidia.com/gpu.count": "8",
              "nvidia.com/mig.config": "all-1g.10gb", "nvidia.com/mig.config.state": "pending",
              "nvidia.com/gpu.deploy.dcgm-exporter": "true", "prism.io/mig.mode": "static",
              "kubernetes.io/hostname": "n1", "node-role.kubernetes.io/gpu": ""}


class PolicyCheck:
    """Verdicts of one policy as shipped by every source (self.sources)."""

    sources = {}

    def assert_sources_agree(self):
        (p1, b1), (p2, b2) = self.sources["deploy"], self.sources["chart"]
        self.assertEqual(p1["spec"], p2["spec"])
        self.assertEqual(b1["spec"], b2["spec"])
        self.assertEqual(p1["spec"]["failurePolicy"], "Fail")
        self.assertEqual(b1["spec"]["validationActions"], ["Deny"])
        self.assertNotIn("matchResources", b1["spec"])  # Every namespace, every node.

    def check(self, want_allowed, req, obj, old, want_message=None):
        for source, (policy, binding) in self.sources.items():
            allowed, messages = Admission(policy, binding).review(req, obj, old)
            self.assertEqual(allowed, want_allowed, f"{source}: {messages}")
            if not want_allowed:
                # Denials are the policy's own verdicts, never a CEL error.
                self.assertFalse([m for m in messages if m.startswith(("error", "variable",
                                                                       "matchCondition"))],
                                 f"{source}: {messages}")
            if want_message:
                self.assertTrue(any(want_message in m for m in messages), f"{source}: {messages}")


@unittest.skipUnless(cel_available() or os.environ.get("CI"),
                     "node or tests/e2e/cel/node_modules missing (tools/setup.sh installs them)")
class NodeScopedWritesTest(PolicyCheck, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sources = shipped_policies()

    def test_chart_and_deploy_ship_the_same_policy(self):
        self.assert_sources_agree()
        objs = helm_render.render_objects(os.path.join(ROOT, "charts", "prism"),
                                          {"nodePolicy": {"enabled": False}}, namespace=NS)
        self.assertFalse([o for o in objs if o["kind"].startswith("ValidatingAdmissionPolicy")])

    def test_policy_names_the_service_accounts_the_daemonsets_run_as(self):
        for objects in (helm_render.render_objects(os.path.join(ROOT, "charts", "prism"), {},
                                                   namespace="gpu-ops"),):
            for name in ("prism-device-plugin", "prism-mig-manager"):
                ds = [o for o in objects if o["kind"] == "DaemonSet"
                      and o["metadata"]["name"] == name][0]
                sa = ds["spec"]["template"]["spec"]["serviceAccountName"]
                user = f"system:serviceaccount:{ds['metadata']['namespace']}:{sa}"
                # Automounted tokens are the bound ones that carry the node's name.
                self.assertNotEqual(ds["spec"]["template"]["spec"].get(
                    "automountServiceAccountToken"), False)
                policy, binding = self.sources["chart"]
                allowed, messages = Admission(policy, binding).review(
                    request(user, "UPDATE", "nodes", "n2", node="n1"), node_object("n2"),
                    node_object("n2"))
                self.assertFalse(allowed, f"{user}: {messages}")

    # --- the node agent -----------------------------------------------------------------------

    def test_agent_publishes_its_own_nodes_inventory(self):
        old = node_object("n1", GPU_LABELS, {"prism.io/gpu-inventory": "{}", "other": "x"})
        self.check(True, request(AGENT, "UPDATE", "nodes", "n1", node="n1"),
                   patched(old, annotations={"prism.io/gpu-inventory": INVENTORY}), old)
        old = node_object("n1")  # First publication: no annotations at all before.
        self.check(True, request(AGENT, "UPDATE", "nodes", "n1", node="n1"),
                   patched(old, annotations={"prism.io/gpu-inventory": INVENTORY}), old)

    def test_agent_cannot_touch_another_node(self):
        old = node_object("n2", GPU_LABELS, {"prism.io/gpu-inventory": "{}"})
        self.check(False, request(AGENT, "UPDATE", "nodes", "n2", node="n1"),
                   patched(old, annotations={"prism.io/gpu-inventory": INVENTORY}), old,
                   "only the Node its pod runs on")

    def test_agent_cannot_change_what_it_does_not_own_on_its_node(self):
        old = node_object("n1", GPU_LABELS, {"prism.io/gpu-inventory": "{}"})
        for labels, annotations in (({"nvidia.com/mig.config": "all-disabled"}, None),
                                    ({"prism.io/mig.mode": None}, None),
                                    (None, {"prism.io/mig.dynamic-gpus": "0,1"}),
                                    (None, {"prism.io/gpu-inventory": INVENTORY,
                                            "prism.io/mig-manager.in-flight": "{}"})):
            self.check(False, request(AGENT, "UPDATE", "nodes", "n1", node="n1"),
                       patched(old, labels, annotations), old, "only the")
        tainted = copy.deepcopy(old)
        tainted["spec"]["taints"] = [{"key": "x", "effect": "NoSchedule"}]
        self.check(False, request(AGENT, "UPDATE", "nodes", "n1", node="n1"), tainted, old,
                   "only labels and annotations")
        owned = copy.deepcopy(old)
        owned["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                                 "uid": "u"}]
        self.check(False, request(AGENT, "UPDATE", "nodes", "n1", node="n1"), owned, old)
        self.check(False, request(AGENT, "UPDATE", "nodes", "n1", subresource="status",
                                  node="n1"), old, old, "only update")
        self.check(False, request(AGENT, "DELETE", "nodes", "n1", node="n1"), None, old)

    def test_agent_writes_allocation_status_on_pods_of_its_node(self):
        old = pod_object("p1", "n1", {"prism.io/decision": DECISION, "team": "a"})
        self.check(True, request(AGENT, "UPDATE", "pods", "p1", "team-a", node="n1"),
                   patched(old, annotations={"prism.io/allocation-status": STATUS}), old)

    def test_agent_records_a_local_decision_only_where_none_exists(self):
        old = pod_object("p1", "n1")
        decision = {"prism.io/decision": DECISION, "hami.io/vgpu-node": "n1",
                    "hami.io/vgpu-devices-allocated": "x", "hami.io/vgpu-devices-to-allocate": "x"}
        self.check(True, request(AGENT, "UPDATE", "pods", "p1", "team-a", node="n1"),
                   patched(old, annotations=decision), old)
        decided = patched(old, annotations=decision)
        self.check(True, request(AGENT, "UPDATE", "pods", "p1", "team-a", node="n1"),
                   patched(decided, annotations=decision), decided)  # A retried patch.
        self.check(False, request(AGENT, "UPDATE", "pods", "p1", "team-a", node="n1"),
                   patched(decided, annotations={"prism.io/decision": '{"node":"n1"}'}),
                   decided, "only the annotations it owns")
        self.check(False, request(AGENT, "UPDATE", "pods", "p1", "team-a", node="n1"),
                   patched(decided, annotations={"hami.io/vgpu-devices-allocated": None}),
                   decided)

    def test_agent_cannot_touch_pods_of_another_node(self):
        for node in ("n2", None):  # Bound elsewhere, or not bound yet.
            old = pod_object("p2", node)
            self.check(False, request(AGENT, "UPDATE", "pods", "p2", "team-a", node="n1"),
                       patched(old, annotations={"prism.io/allocation-status": STATUS}), old,
                       "only pods bound to the node")

    def test_agent_changes_only_its_annotations_on_its_pods(self):
        old = pod_object("p1", "n1", {"prism.io/decision": DECISION}, {"app": "x"})
        for labels, annotations in (({"app": "y"}, None), (None, {"team": "b"}),
                                    (None, {"prism.io/decision": None})):
            self.check(False, request(AGENT, "UPDATE", "pods", "p1", "team-a", node="n1"),
                       patched(old, labels, annotations), old)
        image = copy.deepcopy(old)
        image["spec"]["containers"][0]["image"] = "evil:latest"
        self.check(False, request(AGENT, "UPDATE", "pods", "p1", "team-a", node="n1"), image,
                   old, "only labels and annotations")
        self.check(False, request(AGENT, "DELETE", "pods", "p1", "team-a", node="n1"), None, old)
        self.check(False, request(AGENT, "CREATE", "pods", "p3", "team-a", subresource="eviction",
                                  node="n1"), {"apiVersion": "policy/v1", "kind": "Eviction",
                                               "metadata": {"name": "p1"}}, None)
        self.check(False, request(AGENT, "CREATE", "pods", "p3", "team-a", node="n1"),
                   pod_object("p3", "n1"), None)

    def test_a_token_without_a_node_is_refused(self):
        old = node_object("n1", GPU_LABELS, {"prism.io/gpu-inventory": "{}"})
        new = patched(old, annotations={"prism.io/gpu-inventory": INVENTORY})
        for extra in (None, {NODE_KEY: []}, {NODE_KEY: ["n1", "n2"]},
                      {"authentication.kubernetes.io/pod-name": ["agent-x"]}):
            self.check(False, request(AGENT, "UPDATE", "nodes", "n1", extra=extra), new, old,
                       "bound to their pod")
            self.check(False, request(MANAGER, "UPDATE", "nodes", "n1", extra=extra), new, old)

    # --- the MIG manager ----------------------------------------------------------------------

    def test_manager_changes_its_labels_on_its_node(self):
        old = node_object("n1", GPU_LABELS, {"prism.io/mig.config.force": "true"})
        for labels, annotations in (
                ({"nvidia.com/mig.config.state": "success", "nvidia.com/mig-1g.10gb.count": "7",
                  "nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.count": None,
                  "nvidia.com/gpu.deploy.dcgm-exporter": "paused-for-mig-change",
                  "prism.io/gpu.deploy.device-plugin": "paused-for-mig-change"},
                 {"prism.io/mig-manager.in-flight": '{"config":"all-1g.10gb","labels":{}}'}),
                ({"prism.io/gpu.deploy.device-plugin": None},
                 {"prism.io/mig.config.reason": None})):
            self.check(True, request(MANAGER, "UPDATE", "nodes", "n1", node="n1"),
                       patched(old, labels, annotations), old)

    def test_manager_cannot_choose_a_layout_or_touch_another_node(self):
        old = node_object("n1", GPU_LABELS)
        for labels, annotations in (({"nvidia.com/mig.config": "all-disabled"}, None),
                                    ({"prism.io/mig.mode": "dynamic"}, None),
                                    ({"kubernetes.io/hostname": "n9"}, None),
                                    (None, {"prism.io/gpu-inventory": INVENTORY}),
                                    (None, {"prism.io/mig.config.force": "true"})):
            self.check(False, request(MANAGER, "UPDATE", "nodes", "n1", node="n1"),
                       patched(old, labels, annotations), old, "only the")
        other = node_object("n2", GPU_LABELS)
        self.check(False, request(MANAGER, "UPDATE", "nodes", "n2", node="n1"),
                   patched(other, {"nvidia.com/mig.config.state": "success"}), other,
                   "only the Node its pod runs on")

    def test_manager_deletes_pods_of_its_node_only(self):
        validator = pod_object("nvidia-operator-validator-x", "n1",
                               labels={"app": "nvidia-operator-validator"})
        self.check(True, request(MANAGER, "DELETE", "pods", validator["metadata"]["name"],
                                 "gpu-operator", node="n1"), None, validator)
        elsewhere = pod_object("v2", "n2")
        self.check(False, request(MANAGER, "DELETE", "pods", "v2", "gpu-operator", node="n1"),
                   None, elsewhere, "only pods bound to the node")
        self.check(False, request(MANAGER, "UPDATE", "pods", validator["metadata"]["name"],
                                  "gpu-operator", node="n1"),
                   patched(validator, annotations={"prism.io/allocation-status": STATUS}),
                   validator)

    # --- everyone else ------------------------------------------------------------------------

    def test_other_users_are_not_this_policys_business(self):
        old = node_object("n2", GPU_LABELS)
        new = patched(old, {"nvidia.com/mig.config": "all-disabled"})
        for user in ("system:serviceaccount:prism-system:prism-scheduler", "kubernetes-admin",
                     "system:node:n2", "system:serviceaccount:kube-system:prism-device-plugin-x"):
            self.check(True, request(user, "UPDATE", "nodes", "n2", node="n1"), new, old)
        # Another namespace's account of the same name is held to the same rule.
        self.check(False, request("system:serviceaccount:gpu-ops:prism-device-plugin", "UPDATE",
                                  "nodes", "n2", node="n1"), new, old)

    def test_the_model_notices_a_broken_expression(self):
        # The evaluator and the model are what the verdicts above rest on: a policy whose
        # expression does not evaluate is denied with an error (failurePolicy Fail), a false
        # matchCondition skips it.
        policy, binding = copy.deepcopy(self.sources["deploy"])
        policy["spec"]["validations"].append({"expression": "object.metadata.nosuchfield == 1"})
        old = node_object("n1", GPU_LABELS, {"prism.io/gpu-inventory": "{}"})
        allowed, messages = Admission(policy, binding).review(
            request(AGENT, "UPDATE", "nodes", "n1", node="n1"), old, old)
        self.assertFalse(allowed)
        self.assertTrue(any(m.startswith("error") for m in messages), messages)
        policy["spec"]["matchConditions"][0]["expression"] = "false"
        self.assertTrue(Admission(policy, binding).review(
            request(AGENT, "UPDATE", "nodes", "n9", node="n1"), old, old)[0])


# --- The DRA opt-in's policy on ResourceSlices ---------------------------------------------------

SLICE_POLICY = "prism-node-scoped-resourceslices"
DRIVER = "gpu.prism.io"


def slice_request(user, operation, name, node=None, extra=None, resource="resourceslices"):
    """request() for a cluster-scoped resource.k8s.io/v1 object."""
    r = request(user, operation, "nodes", name, node=node, extra=extra)
    kind = {"resourceslices": "ResourceSlice", "resourceclaims": "ResourceClaim"}[resource]
    for field in ("kind", "requestKind"):
        r[field] = {"group": "resource.k8s.io", "version": "v1", "kind": kind}
    for field in ("resource", "requestResource"):
        r[field] = {"group": "resource.k8s.io", "version": "v1", "resource": resource}
    return r


def slice_object(node, driver=DRIVER, pool=None, minor=0, generation=1):
    """A ResourceSlice as DraSlicePublisher writes it (src/deviceplugin/dra_slices.cc)."""
    spec = {"driver": driver, "pool": {"name": pool if pool is not None else node,
                                       "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{minor}", "attributes": {
                "type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{minor}"}},
                "capacity": {"memory": {"value": "40960Mi"}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{driver}-{minor}", "uid": f"uid-{node}-{minor}",
                         "resourceVersion": "3"},
            "spec": spec}


@unittest.skipUnless(cel_available() or os.environ.get("CI"),
                     "node or tests/e2e/cel/node_modules missing (tools/setup.sh installs them)")
class NodeScopedResourceSlicesTest(PolicyCheck, unittest.TestCase):
    """prism-node-scoped-resourceslices (docs/rbac.md#node-scoped-writes): the node agent's
    DRA driver writes only its node's slices of its driver and pool."""

    @classmethod
    def setUpClass(cls):
        cls.sources = shipped_policies(
            SLICE_POLICY, os.path.join("examples", "dra"),
            os.path.join("deploy", "dra", "node-scoped-resourceslices.yaml"),
            {"dra": {"enabled": True}})

    def test_chart_and_deploy_ship_the_same_policy(self):
        self.assert_sources_agree()

    def test_agent_writes_its_own_nodes_slices(self):
        own = slice_object("n1")
        self.check(True, slice_request(AGENT, "CREATE", own["metadata"]["name"], node="n1"), own,
                   None)
        newer = slice_object("n1", generation=2)
        self.check(True, slice_request(AGENT, "UPDATE", own["metadata"]["name"], node="n1"),
                   newer, own)
        self.check(True, slice_request(AGENT, "DELETE", own["metadata"]["name"], node="n1"),
                   None, own)

    def test_agent_cannot_write_another_nodes_slices(self):
        other = slice_object("n2")
        self.check(False, slice_request(AGENT, "CREATE", "", node="n1"), other, None,
                   "of the node its pod runs on")
        self.check(False, slice_request(AGENT, "UPDATE", other["metadata"]["name"], node="n1"),
                   slice_object("n2", generation=2), other, "of the node its pod runs on")
        self.check(False, slice_request(AGENT, "DELETE", other["metadata"]["name"], node="n1"),
                   None, other, "of the node its pod runs on")
        # Its own node, but another node's pool: it would break that node's pool (mixed
        # generations, a wrong slice count).
        self.check(False, slice_request(AGENT, "CREATE", "", node="n1"),
                   slice_object("n1", pool="n2"), None, "spec.pool.name")
        # A slice for no node or all nodes.
        self.check(False, slice_request(AGENT, "CREATE", "", node="n1"),
                   slice_object(None, pool="n1"), None, "of the node its pod runs on")
        every = slice_object("n1")
        del every["spec"]["nodeName"]
        every["spec"]["allNodes"] = True
        self.check(False, slice_request(AGENT, "CREATE", "", node="n1"), every, None)

    def test_an_update_cannot_move_a_slice_between_nodes(self):
        own, other = slice_object("n1"), slice_object("n2")
        moved = copy.deepcopy(own)
        moved["spec"]["nodeName"] = moved["spec"]["pool"]["name"] = "n2"
        self.check(False, slice_request(AGENT, "UPDATE", own["metadata"]["name"], node="n1"),
                   moved, own, "of the node its pod runs on")
        taken = copy.deepcopy(other)  # Another node's slice taken over.
        taken["spec"]["nodeName"] = taken["spec"]["pool"]["name"] = "n1"
        self.check(False, slice_request(AGENT, "UPDATE", other["metadata"]["name"], node="n1"),
                   taken, other, "of the node its pod runs on")

    def test_agent_cannot_write_another_drivers_slices(self):
        nvidia = slice_object("n1", driver="gpu.nvidia.com")
        self.check(False, slice_request(AGENT, "CREATE", "", node="n1"), nvidia, None,
                   "of its driver")
        self.check(False, slice_request(AGENT, "DELETE", nvidia["metadata"]["name"], node="n1"),
                   None, nvidia, "of its driver")
        ours = copy.deepcopy(nvidia)
        ours["spec"]["driver"] = DRIVER
        self.check(False, slice_request(AGENT, "UPDATE", nvidia["metadata"]["name"], node="n1"),
                   ours, nvidia, "of its driver")

    def test_a_token_without_a_node_is_refused(self):
        for extra in (None, {NODE_KEY: []}, {NODE_KEY: ["n1", "n2"]},
                      {"authentication.kubernetes.io/pod-name": ["agent-x"]}):
            self.check(False, slice_request(AGENT, "CREATE", "", extra=extra),
                       slice_object("n1"), None, "bound to its pod")

    def test_other_users_and_resources_are_not_this_policys_business(self):
        other = slice_object("n2", driver="gpu.nvidia.com")
        for user in ("system:node:n1", "system:serviceaccount:nvidia-dra:gpu-kubelet-plugin",
                     MANAGER, "kubernetes-admin"):
            self.check(True, slice_request(user, "CREATE", "", node="n1"), other, None)
        self.check(False, slice_request("system:serviceaccount:gpu-ops:prism-device-plugin",
                                        "CREATE", "", node="n1"), other, None)
        claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                 "metadata": {"name": "c", "namespace": "team-a"}, "spec": {}}
        self.check(True, slice_request(AGENT, "UPDATE", "c", node="n1",
                                       resource="resourceclaims"), claim, claim)


# --- The admission webhooks' matchConditions ----------------------------------------------------

TENANT = "system:serviceaccount:team-a:ci"
KUBELET = "system:node:n1"
OWNED_DECISION = {"prism.io/decision": DECISION}


def shipped_webhooks():
    """{source: {webhook name: webhook}} for deploy/ and the chart (both configurations)."""
    kinds = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
    kubectl = shutil.which("kubectl")
    if kubectl:
        text = subprocess.run([kubectl, "kustomize", os.path.join(ROOT, "deploy")], check=True,
                              capture_output=True, text=True).stdout
        deploy = [d for d in yaml.safe_load_all(text) if d]
    else:
        with open(os.path.join(ROOT, "deploy", "webhook", "webhooks.yaml")) as f:
            deploy = [d for d in yaml.safe_load_all(f) if d]
    chart = helm_render.render_objects(os.path.join(ROOT, "charts", "prism"), {}, namespace=NS)
    out = {}
    for source, objects in (("deploy", deploy), ("chart", chart)):
        hooks = {}
        for o in objects:
            if o["kind"] in kinds and o["metadata"]["name"] == "prism-webhook":
                for w in o["webhooks"]:
                    hooks[w["name"]] = w
        out[source] = hooks
    return out


class WebhookDispatch:
    """Whether the API server calls one webhook for a request: "call", "skip", or "reject: ..."
    (a matchCondition error under failurePolicy Fail)."""

    def __init__(self, hook):
        self.hook = hook

    def decide(self, req, obj, old, namespace_labels):
        a = req["resource"]
        if not any(rule_matches(r, a["group"], a["version"], a["resource"],
                                req.get("subResource", ""), req["operation"])
                   for r in self.hook["rules"]):
            return "skip"
        if not selector_matches(self.hook.get("namespaceSelector", {}), namespace_labels):
            return "skip"
        bindings = {"request": req, "object": obj, "oldObject": old, "authorizer": None}
        conditions = self.hook.get("matchConditions", [])
        results = evaluate([(c["expression"], bindings) for c in conditions])
        errors = []
        for c, (kind, value) in zip(conditions, results):
            if kind == "value" and value is False:
                return "skip"
            if kind == "error":
                errors.append(f"{c['name']}: {value}")
            elif value is not True:
                errors.append(f"{c['name']}: not a bool: {value!r}")
        if errors:
            return "skip" if self.hook.get("failurePolicy", "Fail") == "Ignore" else \
                f"reject: {errors}"
        return "call"


def tenant_pod(name="p", gpu=False, env=None, init_env=None, annotations=None, requests=None):
    container = {"name": "main", "image": "cuda:12"}
    if gpu:
        container["resources"] = {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3000"}}
    if requests:
        container["resources"] = {"requests": requests}
    if env is not None:
        container["env"] = env
    meta = {"name": name, "namespace": "team-a"}
    if annotations is not None:
        meta["annotations"] = annotations
    spec = {"containers": [container]}
    if init_env is not None:
        spec["initContainers"] = [{"name": "setup", "image": "busybox", "env": init_env}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def nv(name, value="all"):
    return [{"name": "PATH", "value": "/bin"}, {"name": name, "value": value}]


TEAM = {"kubernetes.io/metadata.name": "team-a"}
ENFORCING = {**TEAM, "prism.io/enforce-slice-limits": "true"}
MUTATE, VALIDATE, SLICES = "mutate.pods.prism.io", "validate.pods.prism.io", \
    "slice-limits.pods.prism.io"


@unittest.skipUnless(cel_available() or os.environ.get("CI"),
                     "node or tests/e2e/cel/node_modules missing (tools/setup.sh installs them)")
class WebhookMatchConditionsTest(unittest.TestCase):
    """Which pods reach Prism's webhooks, as shipped (issue 39 #5): those naming GPU resources,
    Prism's own annotations or device env; UPDATEs only when they touch those."""

    @classmethod
    def setUpClass(cls):
        cls.sources = shipped_webhooks()

    def check(self, want, req, obj, old=None, labels=TEAM):
        """want: {webhook name: "call" | "skip"} for every shipped webhook."""
        for source, hooks in self.sources.items():
            self.assertEqual(set(hooks), {MUTATE, VALIDATE, SLICES}, source)
            got = {name: WebhookDispatch(h).decide(req, obj, old, labels)
                   for name, h in hooks.items()}
            self.assertEqual(got, want, f"{source}: {req['operation']} "
                                        f"{req.get('subResource', '')} by "
                                        f"{req['userInfo']['username']}")

    def create(self, pod, user=TENANT, labels=TEAM):
        return request(user, "CREATE", "pods", pod["metadata"]["name"], "team-a"), pod

    def test_deploy_and_chart_ship_the_same_webhooks(self):
        def strip(h):
            h = copy.deepcopy(h)
            h["clientConfig"].pop("caBundle", None)
            return h
        self.assertEqual({n: strip(h) for n, h in self.sources["deploy"].items()},
                         {n: strip(h) for n, h in self.sources["chart"].items()})

    def test_a_gpu_pod_reaches_both(self):
        req, pod = self.create(tenant_pod(gpu=True))
        self.check({MUTATE: "call", VALIDATE: "call", SLICES: "skip"}, req, pod)
        # Any nvidia.com/ resource, in requests too (the device config's names are nvidia.com/:
        # deploy_test.py checks).
        req, pod = self.create(tenant_pod(requests={"nvidia.com/gpucores": "30"}))
        self.check({MUTATE: "call", VALIDATE: "call", SLICES: "skip"}, req, pod)

    def test_a_plain_pod_reaches_none(self):
        req, pod = self.create(tenant_pod(env=[{"name": "PATH", "value": "/bin"}],
                                          requests={"cpu": "1"}))
        self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"}, req, pod)
        bare = tenant_pod()
        bare["spec"]["containers"][0].pop("image")
        req, pod = self.create(bare)
        self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"}, req, pod)
        # No containers at all (the API server refuses it later, in validation): no CEL error.
        del bare["spec"]["containers"]
        self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"}, req, bare)

    def test_a_plain_pod_with_device_env_reaches_both(self):
        for name in ("NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "CUDA_VERSION",
                     "NVIDIA_IMEX_CHANNELS", "NVIDIA_MIG_CONFIG_DEVICES"):
            req, pod = self.create(tenant_pod(env=nv(name)))
            self.check({MUTATE: "call", VALIDATE: "call", SLICES: "skip"}, req, pod)
        req, pod = self.create(tenant_pod(init_env=nv("NVIDIA_VISIBLE_DEVICES")))
        self.check({MUTATE: "call", VALIDATE: "call", SLICES: "skip"}, req, pod)
        # From a ConfigMap by name: still named in the pod.
        req, pod = self.create(tenant_pod(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "valueFrom": {
            "configMapKeyRef": {"name": "c", "key": "k"}}}]))
        self.check({MUTATE: "call", VALIDATE: "call", SLICES: "skip"}, req, pod)

    def test_prisms_annotations_on_a_plain_pod_reach_both(self):
        req, pod = self.create(tenant_pod(annotations=OWNED_DECISION))
        self.check({MUTATE: "call", VALIDATE: "call", SLICES: "skip"}, req, pod)
        req, pod = self.create(tenant_pod(annotations={"team.io/owner": "a"}))
        self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"}, req, pod)

    def test_updates_reach_the_validating_webhook_only_when_they_touch_prisms_annotations(self):
        old = tenant_pod(gpu=True, annotations=OWNED_DECISION)
        old["spec"]["nodeName"] = "n1"
        changed = patched(old, annotations={"prism.io/decision": '{"node":"n2"}'})
        removed = patched(old, annotations={"prism.io/decision": None})
        edited = patched(old, annotations={"team.io/owner": "b"})
        for sub in ("", "status"):
            for new in (changed, removed):
                self.check({MUTATE: "skip", VALIDATE: "call", SLICES: "skip"},
                           request(TENANT, "UPDATE", "pods", "p", "team-a", subresource=sub),
                           new, old)
                # The node agent's account writes them: never sent.
                self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"},
                           request(AGENT, "UPDATE", "pods", "p", "team-a", subresource=sub,
                                   node="n1"), new, old)
            self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"},
                       request(TENANT, "UPDATE", "pods", "p", "team-a", subresource=sub),
                       edited, old)
        # The kubelet's status updates never wait for Prism.
        running = copy.deepcopy(old)
        running["status"] = {"phase": "Running"}
        self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"},
                   request(KUBELET, "UPDATE", "pods", "p", "team-a", subresource="status"),
                   running, old)

    def test_the_node_agents_account_never_waits_for_the_validating_webhook(self):
        req, pod = self.create(tenant_pod(gpu=True, annotations=OWNED_DECISION), user=AGENT)
        self.check({MUTATE: "call", VALIDATE: "skip", SLICES: "skip"}, req, pod)

    def test_an_ephemeral_container_with_device_env_reaches_the_validating_webhook(self):
        old = tenant_pod()
        new = copy.deepcopy(old)
        new["spec"]["ephemeralContainers"] = [{"name": "debug", "image": "busybox",
                                               "env": nv("NVIDIA_VISIBLE_DEVICES")}]
        req = request(TENANT, "UPDATE", "pods", "p", "team-a", subresource="ephemeralcontainers")
        self.check({MUTATE: "skip", VALIDATE: "call", SLICES: "skip"}, req, new, old)
        new["spec"]["ephemeralContainers"][0]["env"] = nv("CUDA_DISABLE_CONTROL", "true")
        self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "call"}, req, new, old, ENFORCING)
        del new["spec"]["ephemeralContainers"][0]["env"]
        self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"}, req, new, old, ENFORCING)

    def test_slice_limit_switches_reach_the_slice_limits_entry_where_enforced(self):
        req, pod = self.create(tenant_pod(gpu=True, env=nv("CUDA_DISABLE_CONTROL", "true")))
        self.check({MUTATE: "call", VALIDATE: "call", SLICES: "call"}, req, pod, labels=ENFORCING)
        self.check({MUTATE: "call", VALIDATE: "call", SLICES: "skip"}, req, pod, labels=TEAM)
        req, pod = self.create(tenant_pod(env=nv("GPU_CORE_UTILIZATION_POLICY", "disable")))
        self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "call"}, req, pod, labels=ENFORCING)
        self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"}, req, pod,
                   labels={**ENFORCING, "prism.io/enforce-slice-limits": "false"})

    def test_namespaces_the_webhooks_do_not_serve(self):
        req, pod = self.create(tenant_pod(gpu=True, env=nv("NVIDIA_VISIBLE_DEVICES")))
        for labels in ({"kubernetes.io/metadata.name": NS},
                       {"kubernetes.io/metadata.name": "kube-system"},
                       {"kubernetes.io/metadata.name": "gpu-operator", "prism.io/webhook": "ignore"}):
            self.check({MUTATE: "skip", VALIDATE: "skip", SLICES: "skip"}, req, pod, labels=labels)

    def test_the_model_notices_a_broken_condition(self):
        hook = copy.deepcopy(self.sources["deploy"][MUTATE])
        hook["matchConditions"].append({"name": "broken", "expression": "object.nosuchfield"})
        req, pod = self.create(tenant_pod(gpu=True))
        self.assertTrue(WebhookDispatch(hook).decide(req, pod, None, TEAM).startswith("reject"))
        # A false condition skips even beside an error (matcher.Match).
        hook["matchConditions"].append({"name": "off", "expression": "false"})
        self.assertEqual(WebhookDispatch(hook).decide(req, pod, None, TEAM), "skip")


def shipped_dra_gate():
    """{source: the prism-dra-gate webhook} for examples/dra (deploy/dra) and the chart's dra."""
    out = {}
    with open(os.path.join(ROOT, "deploy", "dra", "webhook.yaml")) as f:
        deploy = [d for d in yaml.safe_load_all(f) if d]
    chart = helm_render.render_objects(os.path.join(ROOT, "charts", "prism"),
                                       {"dra": {"enabled": True}}, namespace=NS)
    for source, objects in (("deploy", deploy), ("chart", chart)):
        for o in objects:
            if o["kind"] == "MutatingWebhookConfiguration" and \
                    o["metadata"]["name"] == "prism-dra-gate":
                out[source] = o["webhooks"][0]
    return out


@unittest.skipUnless(cel_available() or os.environ.get("CI"),
                     "node or tests/e2e/cel/node_modules missing (tools/setup.sh installs them)")
class DraGateMatchConditionsTest(unittest.TestCase):
    """Which pods reach the DRA gate (deploy/dra/webhook.yaml, the chart's dra.enabled): pods
    with claims, and pods asking the implicit extended resource of one of Prism's classes
    (KEP-5004), which the webhook refuses (docs/dra.md)."""

    @classmethod
    def setUpClass(cls):
        cls.hooks = shipped_dra_gate()

    def decide(self, pod):
        req = request(TENANT, "CREATE", "pods", pod["metadata"]["name"], "team-a")
        self.assertEqual(set(self.hooks), {"deploy", "chart"})
        got = {s: WebhookDispatch(h).decide(req, pod, None, TEAM) for s, h in self.hooks.items()}
        self.assertEqual(got["deploy"], got["chart"])
        return got["deploy"]

    def test_pods_with_claims_or_prism_class_resources_reach_it(self):
        pod = tenant_pod()
        pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "c"}]
        self.assertEqual(self.decide(pod), "call")
        for cls in ("gpu.prism.io", "mig.gpu.prism.io", "slice.gpu.prism.io"):
            self.assertEqual(
                self.decide(tenant_pod(requests={f"deviceclass.resource.kubernetes.io/{cls}": "1"})),
                "call", cls)
        init = tenant_pod()
        init["spec"]["initContainers"] = [{"name": "setup", "image": "busybox", "resources": {
            "limits": {"deviceclass.resource.kubernetes.io/gpu.prism.io": "1"}}}]
        self.assertEqual(self.decide(init), "call")

    def test_other_pods_do_not(self):
        self.assertEqual(self.decide(tenant_pod()), "skip")
        self.assertEqual(self.decide(tenant_pod(gpu=True)), "skip")  # The main webhook's.
        self.assertEqual(self.decide(tenant_pod(
            requests={"deviceclass.resource.kubernetes.io/gpu.nvidia.com": "1"})), "skip")
        empty = tenant_pod()
        empty["spec"]["resourceClaims"] = []
        self.assertEqual(self.decide(empty), "skip")


if __name__ == "__main__":
    unittest.main(verbosity=2)
