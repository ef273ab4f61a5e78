"""The official Kubernetes Python client's dynamic client and typed PATCH/deletecollection calls,
unchanged, against watchcache in front of kube-apiserver: discovery (short names, verbs), list with
selectors, merge and strategic patches, the status subresource, deletecollection, and a
metadata-only list.

Usage: dynamic_test.py http://127.0.0.1:PORT
"""
import json
import sys
import urllib.request

from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

cfg = client.Configuration()
cfg.host = sys.argv[1]
api_client = client.ApiClient(cfg)
dyn = dynamic.DynamicClient(api_client)
core = client.CoreV1Api(api_client)

# A namespace of its own (client_test.py's pods are in default).
NS = "dynamic"
core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
core.create_namespaced_service_account(NS, {"metadata": {"name": "default"}})

pods = dyn.resources.get(api_version="v1", kind="Pod")
assert pods.short_names == ["po"], pods.short_names
assert "patch" in pods.verbs and "deletecollection" in pods.verbs, pods.verbs

for i in range(4):
    pods.create(namespace=NS, body={
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"d{i}", "labels": {"app": "web" if i < 2 else "db"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox:1"},
                                                  {"name": "side", "image": "envoy:1"}]},
    })

listed = pods.get(namespace=NS, label_selector="app=web")
assert [p.metadata.name for p in listed.items] == ["d0", "d1"], listed

# Merge patch (the dynamic client's default for dicts is a merge patch).
patched = pods.patch(namespace=NS, name="d0", body={"metadata": {"labels": {"tier": "a"}}},
                     content_type="application/merge-patch+json")
assert patched.metadata.labels.tier == "a"
# Strategic merge patch through the typed client: containers merge by name.
core.patch_namespaced_pod("d1", NS, {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}})
d1 = core.read_namespaced_pod("d1", NS)
assert [c.image for c in d1.spec.containers] == ["busybox:2", "envoy:1"], d1.spec.containers
# The status subresource, as a kubelet patches it.
core.patch_namespaced_pod_status("d1", NS, {"status": {"phase": "Running", "podIP": "10.1.1.1"}})
d1 = core.read_namespaced_pod_status("d1", NS)
assert d1.status.pod_ip == "10.1.1.1" and d1.status.phase == "Running", d1.status
# A stale resourceVersion in a patch is a conflict.
try:
    core.patch_namespaced_pod("d1", NS, {"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}})
    raise AssertionError("a stale resourceVersion must conflict")
except ApiException as e:
    assert e.status == 409, (e.status, e.body)
# A metadata-only list, as client-go's metadata client asks for it.
req = urllib.request.Request(sys.argv[1] + f"/api/v1/namespaces/{NS}/pods", headers={
    "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
meta = json.loads(urllib.request.urlopen(req).read())
assert meta["kind"] == "PartialObjectMetadataList", meta["kind"]
assert all("spec" not in item for item in meta["items"])

# deletecollection with a label selector.
# (At once: no kubelet runs here to confirm a graceful deletion.)
deleted = core.delete_collection_namespaced_pod(NS, label_selector="app=db", grace_period_seconds=0)
# (The typed client reads the answer as a Status; the server answers the deleted objects' list,
# as upstream.)
left = None
for _ in range(50):
    left = sorted(p.metadata.name for p in core.list_namespaced_pod(NS).items)
    if left == ["d0", "d1"]:
        break
    import time
    time.sleep(0.1)
assert left == ["d0", "d1"], left
print("OK")
