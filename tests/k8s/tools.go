//go:build tools

// Package tools keeps the Kubernetes commands that scripts/k8s-peers builds in go.mod and go.sum
// (go mod tidy drops a module no package imports).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubemark"
)
