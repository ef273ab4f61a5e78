//go:build tools

// The ginkgo CLI, which runs e2e.test's specs in parallel processes (scripts/conformance -p).
package e2e

import _ "github.com/onsi/ginkgo/v2/ginkgo"
