"""The official Kubernetes Python client with a token kubeconfig: lists with a good token (the
ConfigMap cm1 in default, put there by the test), is refused (401) with a bad one.

Usage: auth_test.py GOOD_KUBECONFIG BAD_KUBECONFIG
"""
import sys

from kubernetes import client, config
from kubernetes.client.rest import ApiException

good = client.CoreV1Api(config.new_client_from_config(config_file=sys.argv[1]))
names = [c.metadata.name for c in good.list_namespaced_config_map("default").items]
assert names == ["cm1"], names

bad = client.CoreV1Api(config.new_client_from_config(config_file=sys.argv[2]))
try:
    bad.list_namespaced_config_map("default")
    raise AssertionError("a bad token must be refused")
except ApiException as e:
    assert e.status == 401 and "Unauthorized" in e.body, (e.status, e.body)
print("OK")
