package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crdSettle: how long after its CRD is Established a resource is left before it is read, so
// that a cache in front serves it from its own cache of it (until then it hands its requests
// to kube-apiserver, which would make this check about kube-apiserver).
const crdSettle = 3 * time.Second

// informerCRDFieldSelector: a dynamic informer of a custom resource whose CRD was created just
// before, selecting on a field the CRD declares in selectableFields. Objects enter and leave the
// selection as the field changes, and the store follows.
func (e *env) informerCRDFieldSelector(ctx context.Context) (string, error) {
	group := e.ns + ".watchcache.test"
	name := "gadgets." + group
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": name},
		"spec": map[string]any{
			"group": group,
			"scope": "Namespaced",
			"names": map[string]any{"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{"spec": map[string]any{
						"type":       "object",
						"properties": map[string]any{"color": map[string]any{"type": "string"}},
					}},
				}},
				"selectableFields": []any{map[string]any{"jsonPath": ".spec.color"}},
			}},
		},
	}}
	crds := e.dyn.Resource(crdResource)
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create the CRD: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(e.ctx, 10*time.Second)
		_ = crds.Delete(ctx, name, metav1.DeleteOptions{})
		cancel()
	}()
	for established := false; !established; {
		got, err := crds.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", fmt.Errorf("get the CRD: %w", err)
		}
		conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			established = established || (m["type"] == "Established" && m["status"] == "True")
		}
		if !established {
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("the CRD is not Established: %w", ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	time.Sleep(crdSettle)

	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}
	gadgets := e.dyn.Resource(gvr).Namespace(e.ns)
	gadget := func(name, color string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/v1",
			"kind":       "Gadget",
			"metadata":   map[string]any{"name": name},
			"spec":       map[string]any{"color": color},
		}}
	}
	for _, g := range []*unstructured.Unstructured{gadget("a", "blue"), gadget("b", "red")} {
		if _, err := gadgets.Create(ctx, g, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("create %s: %w", g.GetName(), err)
		}
	}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(e.dyn, 0, e.ns, func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.color=blue"
	})
	inf := f.ForResource(gvr).Informer()
	stop := make(chan struct{})
	f.Start(stop)
	defer func() { close(stop); f.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return "", fmt.Errorf("the informer did not sync")
	}
	wait := func(what string, want ...string) error {
		for !slices.Equal(storeNames(inf), want) {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s: the store holds %v, want %v", what, storeNames(inf), want)
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	}
	if err := wait("at start", "a"); err != nil {
		return "", err
	}
	recolor := func(name, color string) error {
		g, err := gadgets.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedField(g.Object, color, "spec", "color"); err != nil {
			return err
		}
		_, err = gadgets.Update(ctx, g, metav1.UpdateOptions{})
		return err
	}
	if err := recolor("b", "blue"); err != nil {
		return "", fmt.Errorf("b turns blue: %w", err)
	}
	if err := wait("b turned blue", "a", "b"); err != nil {
		return "", err
	}
	if err := recolor("a", "red"); err != nil {
		return "", fmt.Errorf("a turns red: %w", err)
	}
	if err := wait("a turned red", "b"); err != nil {
		return "", err
	}
	return "", nil
}
