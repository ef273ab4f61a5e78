package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
)

// exchange is one request client-go made and what the server answered.
type exchange struct {
	method      string
	path        string
	query       url.Values
	accept      string
	sentType    string
	status      int
	contentType string
	// body is the start of an error response's body (status >= 400).
	body string
	err  error
}

func (x exchange) watch() bool { return x.query.Get("watch") == "true" || x.query.Get("watch") == "1" }

// watchList is a WatchList request: a watch that starts with the current state.
func (x exchange) watchList() bool { return x.watch() && x.query.Get("sendInitialEvents") == "true" }

// list is a LIST: a GET of a collection that is not a watch.
func (x exchange) list(collection string) bool {
	return x.method == http.MethodGet && x.path == collection && !x.watch()
}

func (x exchange) String() string {
	q := x.query.Encode()
	if q != "" {
		q = "?" + q
	}
	answer := fmt.Sprintf("%d %s", x.status, x.contentType)
	if x.err != nil {
		answer = "error: " + x.err.Error()
	}
	s := fmt.Sprintf("%s %s%s (Accept: %s) -> %s", x.method, x.path, q, x.accept, answer)
	if x.body != "" {
		s += ": " + x.body
	}
	return s
}

// recorder is the transport every client of the program goes through: it keeps each exchange,
// so the checks can tell which requests client-go made (WatchList or LIST) and in which format
// the server answered, and failures can show the requests that went wrong.
type recorder struct {
	mu  sync.Mutex
	log []exchange
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (r *recorder) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		x := exchange{
			method:   req.Method,
			path:     req.URL.Path,
			query:    req.URL.Query(),
			accept:   req.Header.Get("Accept"),
			sentType: req.Header.Get("Content-Type"),
		}
		resp, err := next.RoundTrip(req)
		if err != nil {
			x.err = err
		} else {
			x.status = resp.StatusCode
			x.contentType = resp.Header.Get("Content-Type")
			if resp.StatusCode >= 400 {
				body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
				_ = resp.Body.Close()
				resp.Body = io.NopCloser(bytes.NewReader(body))
				x.body = printable(body, 400)
			}
		}
		r.mu.Lock()
		r.log = append(r.log, x)
		r.mu.Unlock()
		return resp, err
	})
}

// mark is the position of the next exchange.
func (r *recorder) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.log)
}

// since is every exchange from a mark on.
func (r *recorder) since(mark int) []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]exchange(nil), r.log[mark:]...)
}

// failures describes the exchanges since a mark that failed (status >= 400 or no answer), at
// most five.
func (r *recorder) failures(mark int) string {
	var out []string
	for _, x := range r.since(mark) {
		if x.err != nil || x.status >= 400 {
			out = append(out, x.String())
		}
	}
	if len(out) > 5 {
		out = append(out[:5], fmt.Sprintf("and %d more", len(out)-5))
	}
	return strings.Join(out, " | ")
}

// printable is a body as text: protobuf Status bodies have bytes that are not.
func printable(b []byte, max int) string {
	if len(b) > max {
		b = b[:max]
	}
	var s strings.Builder
	for _, c := range b {
		if c >= 0x20 && c < 0x7f {
			s.WriteByte(c)
		} else {
			s.WriteByte('.')
		}
	}
	return s.String()
}
