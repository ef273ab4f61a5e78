package main

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Informers as identities whose every answer is narrowed by authorization. A WatchList informer
// is synced only by the bookmark annotated k8s.io/initial-events-end: a server that dropped
// bookmarks for a narrow identity (Teleport's per-object RBAC filter did, teleport#64188) hangs
// every client-go >= 0.35 informer of that identity, so these must sync, then see a change.

// impersonated is a clientset acting as user in groups, through the admin's config (the admin
// may impersonate anyone) and its recording transport.
func (e *env) impersonated(user string, groups ...string) (kubernetes.Interface, error) {
	cfg := rest.CopyConfig(e.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return kubernetes.NewForConfig(cfg)
}

// narrowInformer runs a typed informer of cs with WatchListClient on, over one namespace (or
// all, ns ""), until it syncs or the check's time runs out; then waits for name to be added.
func (e *env) narrowInformer(ctx context.Context, cs kubernetes.Interface, ns, resource, selector string, initial []string, create func() error, name string) (string, error) {
	opts := []informers.SharedInformerOption{informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = selector })}
	if ns != "" {
		opts = append(opts, informers.WithNamespace(ns))
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, opts...)
	gi, err := f.ForResource(corev1.SchemeGroupVersion.WithResource(resource))
	if err != nil {
		return "", err
	}
	inf := gi.Informer()
	h := &handlerLog{}
	if _, err := inf.AddEventHandler(h.handler()); err != nil {
		return "", err
	}
	mark := e.rec.mark()
	prev := watchListOn.Swap(true)
	stop := make(chan struct{})
	defer func() { close(stop); f.Shutdown() }()
	f.Start(stop)
	synced := cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	watchListOn.Store(prev)
	collection := "/api/v1/" + resource
	if ns != "" {
		collection = "/api/v1/namespaces/" + ns + "/" + resource
	}
	if !synced {
		return "", fmt.Errorf("the informer of %s did not sync (no initial-events-end bookmark?)", collection)
	}
	mode, err := requestMode(e.rec.since(mark), collection, selector, true, e.watchListRequired)
	if err != nil {
		return "", err
	}
	if _, err := h.wait(ctx, "initial adds", allAdded(initial)); err != nil {
		return "", err
	}
	if err := create(); err != nil {
		return "", err
	}
	if _, err := h.wait(ctx, "the add of "+name, hasCall("add", name)); err != nil {
		return "", err
	}
	return mode, nil
}

// informerNarrowUser: a service account bound by a Role to list and watch the ConfigMaps of
// the test namespace, and nothing else.
func (e *env) informerNarrowUser(ctx context.Context) (string, error) {
	const sa = "wcc-narrow"
	if _, err := e.cs.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create service account: %w", err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		Rules:      []rbacv1.PolicyRule{{Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"configmaps"}}},
	}
	if _, err := e.cs.RbacV1().Roles(e.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create role: %w", err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: sa},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: e.ns}},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa},
	}
	if _, err := e.cs.RbacV1().RoleBindings(e.ns).Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create role binding: %w", err)
	}
	cms := e.cs.CoreV1().ConfigMaps(e.ns)
	if _, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "narrow-pre"}}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create narrow-pre: %w", err)
	}
	cs, err := e.impersonated("system:serviceaccount:" + e.ns + ":" + sa)
	if err != nil {
		return "", err
	}
	// Narrow indeed: the grant applies (RBAC may take a moment to see it), and only there.
	if err := poll(ctx, func() error {
		_, err := cs.CoreV1().ConfigMaps(e.ns).List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		return "", fmt.Errorf("the grant never applied: %w", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{}); err == nil {
		return "", fmt.Errorf("the service account may list configmaps in default: not a narrow grant")
	}
	return e.narrowInformer(ctx, cs, e.ns, "configmaps", "", []string{"narrow-pre"}, func() error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "narrow-new"}}, metav1.CreateOptions{})
		return err
	}, "narrow-new")
}

// informerNode: a node (user system:node:NAME in system:nodes, which the Node authorizer reads)
// may list and watch only the pods bound to it, cluster-wide, with spec.nodeName pinned.
func (e *env) informerNode(ctx context.Context) (string, error) {
	node := e.ns + "-node"
	pods := e.cs.CoreV1().Pods(e.ns)
	// kube-apiserver admits a pod only with its service account (run alone, this check makes it).
	if _, err := e.serviceAccount(ctx); err != nil {
		return "", err
	}
	if _, err := pods.Create(ctx, pod("node-pre", node, nil), metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("create node-pre: %w", err)
	}
	cs, err := e.impersonated("system:node:"+node, "system:nodes")
	if err != nil {
		return "", err
	}
	if _, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil {
		return "", fmt.Errorf("the node may list every pod: not narrowed")
	}
	selector := fields.OneTermEqualSelector("spec.nodeName", node).String()
	return e.narrowInformer(ctx, cs, "", "pods", selector, []string{"node-pre"}, func() error {
		_, err := pods.Create(ctx, pod("node-new", node, nil), metav1.CreateOptions{})
		return err
	}, "node-new")
}

// poll retries fn every 50 ms until it succeeds or ctx ends (its last error).
func poll(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
