//go:build tools

// Package tools keeps etcd's server command in go.mod and go.sum (go mod tidy drops a module no
// package imports).
package tools

import _ "go.etcd.io/etcd/server/v3"
