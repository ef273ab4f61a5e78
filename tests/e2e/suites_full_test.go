//go:build full

// The suites of the whole list (tests/e2e/specs.txt) beyond API machinery and instrumentation:
// scripts/conformance builds them with -tags full; its --ci binary leaves them out.
package e2e

import (
	_ "k8s.io/kubernetes/test/e2e/apps"
	_ "k8s.io/kubernetes/test/e2e/common/node"
	_ "k8s.io/kubernetes/test/e2e/network"
	_ "k8s.io/kubernetes/test/e2e/node"
)
