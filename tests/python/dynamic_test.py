"""The official Kubernetes Python client's dynamic client and typed PATCH/deletecollection calls,
unchanged, against a watchcache server: discovery (short names, verbs), list with selectors, merge
and strategic patches, the status subresource, deletecollection, and a metadata-only list.

Usage: dynamic_test.py http://127.0.0.1:PORT
"""
import json
import sys
import urllib.error
import urllib.request

from kubernetes import client, dynamic
from kubernetes.client.rest import ApiException

cfg = client.Configuration()
cfg.host = sys.argv[1]
api_client = client.ApiClient(cfg)
dyn = dynamic.DynamicClient(api_client)
core = client.CoreV1Api(api_client)

pods = dyn.resources.get(api_version="v1", kind="Pod")
assert pods.short_names == ["po"], pods.short_names
assert "patch" in pods.verbs and "deletecollection" in pods.verbs, pods.verbs
widgets = dyn.resources.get(api_version="example.com/v1alpha1", kind="Widget")

for i in range(4):
    pods.create(namespace="default", body={
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"d{i}", "labels": {"app": "web" if i < 2 else "db"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "main", "image": "busybox:1"},
                                                  {"name": "side", "image": "envoy:1"}]},
    })

listed = pods.get(namespace="default", label_selector="app=web")
assert [p.metadata.name for p in listed.items] == ["d0", "d1"], listed

# Merge patch (the dynamic client's default for dicts is a merge patch).
patched = pods.patch(namespace="default", name="d0", body={"metadata": {"labels": {"tier": "a"}}},
                     content_type="application/merge-patch+json")
assert patched.metadata.labels.tier == "a"
# Strategic merge patch through the typed client: containers merge by name.
core.patch_namespaced_pod("d1", "default", {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}})
d1 = core.read_namespaced_pod("d1", "default")
assert [c.image for c in d1.spec.containers] == ["busybox:2", "envoy:1"], d1.spec.containers
# The status subresource, as a kubelet patches it.
core.patch_namespaced_pod_status("d1", "default", {"status": {"phase": "Running", "podIP": "10.1.1.1"}})
d1 = core.read_namespaced_pod_status("d1", "default")
assert d1.status.pod_ip == "10.1.1.1" and d1.status.phase == "Running", d1.status
# A stale resourceVersion in a patch is a conflict.
try:
    core.patch_namespaced_pod("d1", "default", {"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}})
    raise AssertionError("a stale resourceVersion must conflict")
except ApiException as e:
    assert e.status == 409, (e.status, e.body)
# Strategic merge patch on a custom resource: 415.
widgets.create(namespace="default", body={"apiVersion": "example.com/v1alpha1", "kind": "Widget",
                                          "metadata": {"name": "w"}, "spec": {"owner": "a"}})
# (The client's typed patch methods pick the type; a raw request names it.)
req = urllib.request.Request(sys.argv[1] + "/apis/example.com/v1alpha1/namespaces/default/widgets/w",
                             data=b'{"spec":{"owner":"b"}}', method="PATCH",
                             headers={"Content-Type": "application/strategic-merge-patch+json"})
try:
    urllib.request.urlopen(req)
    raise AssertionError("strategic merge patch on a custom resource must be 415")
except urllib.error.HTTPError as e:
    body = json.loads(e.read())
    assert e.code == 415 and body["reason"] == "UnsupportedMediaType", (e.code, body)
# A merge patch works on it.
widgets.patch(namespace="default", name="w", body={"spec": {"owner": "b"}},
              content_type="application/merge-patch+json")
assert widgets.get(namespace="default", name="w").spec.owner == "b"

# A metadata-only list, as client-go's metadata client asks for it.
req = urllib.request.Request(sys.argv[1] + "/api/v1/namespaces/default/pods", headers={
    "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
meta = json.loads(urllib.request.urlopen(req).read())
assert meta["kind"] == "PartialObjectMetadataList", meta["kind"]
assert all("spec" not in item for item in meta["items"])

# deletecollection with a label selector.
deleted = core.delete_collection_namespaced_pod("default", label_selector="app=db")
# (The typed client reads the answer as a Status; the server answers the deleted objects' list,
# as upstream.)
left = None
for _ in range(50):
    left = sorted(p.metadata.name for p in core.list_namespaced_pod("default").items)
    if left == ["d0", "d1"]:
        break
    import time
    time.sleep(0.1)
assert left == ["d0", "d1"], left
print("OK")
