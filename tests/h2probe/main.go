// Command h2probe times sequential GETs over one kept connection with Go's own HTTP client
// (HTTP/2 over TLS, as kubectl, client-go and kubelets speak it), and prints the protocol, p50,
// p99 and the slowest. It separates a server's latency from the Rust bench client's
// (design/performance.md, "Consistent LISTs in proxy mode").
//
// Usage: h2probe URL CLIENT_CERT CLIENT_KEY CA_FILE N
package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"time"
)

func main() {
	if len(os.Args) != 6 {
		fmt.Fprintln(os.Stderr, "usage: h2probe URL CLIENT_CERT CLIENT_KEY CA_FILE N")
		os.Exit(2)
	}
	url, certFile, keyFile, caFile := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	n, err := strconv.Atoi(os.Args[5])
	if err != nil || n < 1 {
		fmt.Fprintln(os.Stderr, "h2probe: N must be a positive number")
		os.Exit(2)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "h2probe:", err)
		os.Exit(1)
	}
	ca, err := os.ReadFile(caFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "h2probe:", err)
		os.Exit(1)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool},
		ForceAttemptHTTP2: true,
	}}
	took := make([]time.Duration, 0, n)
	proto := ""
	for i := 0; i < n; i++ {
		start := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			fmt.Fprintln(os.Stderr, "h2probe:", err)
			os.Exit(1)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			fmt.Fprintln(os.Stderr, "h2probe:", err)
			os.Exit(1)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			fmt.Fprintln(os.Stderr, "h2probe:", url, resp.Status)
			os.Exit(1)
		}
		proto = resp.Proto
		took = append(took, time.Since(start))
	}
	sort.Slice(took, func(a, b int) bool { return took[a] < took[b] })
	fmt.Printf("%s %s p50 %v p99 %v max %v\n", url, proto, took[n/2], took[n*99/100], took[n-1])
}
