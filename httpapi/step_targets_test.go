package httpapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"reprise/httpstep"
	"reprise/store"
)

// testDNS resolves the names it holds, and no other.
type testDNS map[string]string

func (d testDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	a, ok := d[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return []netip.Addr{netip.MustParseAddr(a)}, nil
}

// callerWith is a Caller resolving with dns.
func callerWith(t *testing.T, dns testDNS, allow ...string) *httpstep.Caller {
	t.Helper()
	c, err := httpstep.New(httpstep.Options{Resolver: dns, AllowHosts: allow})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.CloseIdleConnections)
	return c
}

// TestStepRegistrationRefusesTargets: an http step whose URL is, or
// resolves to, a link-local, multicast or unspecified address is refused
// with a 400 on url that changes nothing; a name that does not resolve yet
// is accepted.
func TestStepRegistrationRefusesTargets(t *testing.T) {
	t.Parallel()
	for name, open := range strictStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dns := testDNS{"metadata.test": "169.254.169.254", "ok.test": "10.0.0.7"}
			s := serveStore(t, open(t), Options{Caller: callerWith(t, dns)})
			s.register(t, `{"name":"charge","kind":"http","url":"http://ok.test/charge"}`, 201)
			before := s.snapshot(t)
			for _, target := range []string{
				"http://169.254.169.254/",
				"http://169.254.169.254/latest/meta-data/iam/security-credentials/",
				"http://[::ffff:169.254.169.254]/",
				"http://[fe80::1%25eth0]:8080/",
				"http://0.0.0.0:8080/",
				"http://[::]:8080/",
				"http://224.0.0.1/",
				"http://metadata.test/",
				"https://metadata.test:8443/charge",
			} {
				for _, step := range []string{"charge", "fresh"} {
					p := s.wantProblem(t, "POST", "/v1/steps", `{"name":"`+step+`","kind":"http","url":"`+target+`"}`, 400, "url")
					if !strings.Contains(p.Detail, "steps may not call link-local, multicast or unspecified addresses") {
						t.Errorf("%s: detail %q", target, p.Detail)
					}
				}
			}
			if after := s.snapshot(t); after != before {
				t.Errorf("refused registrations changed the server:\nbefore %s\nafter  %s", before, after)
			}
			// DNS may not know a name yet: its addresses are checked at
			// each connection.
			s.register(t, `{"name":"later","kind":"http","url":"http://not-yet.test/later"}`, 201)
		})
	}
}

// TestStepAllowList: with AllowStepHosts, a step on 127.0.0.1 is
// registered and called when 127.0.0.0/8 is listed; when only another
// CIDR is, its registration is refused, and a step registered before the
// list was given fails its call with the permanent TargetRefused.
func TestStepAllowList(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	endpoint := newRecorder(t, func(_ string, _ int, w http.ResponseWriter) { calls.Add(1); succeed(t, w) })

	allowed := newTestServer(t, Options{AllowStepHosts: []string{"127.0.0.0/8"}})
	allowed.register(t, `{"name":"charge","kind":"http","url":"`+endpoint.URL+`/charge"}`, 201)
	if _, _, err := allowed.c.StartStep(t.Context(), "charge", json.RawMessage(`1`), "ok-1"); err != nil {
		t.Fatal(err)
	}
	if run := allowed.waitRun(t, "ok-1"); run.Status != store.RunCompleted || calls.Load() != 1 {
		t.Fatalf("run on an allowed host: %+v, %d calls", run, calls.Load())
	}

	st := openStore(t)
	open := newServerOn(t, st, false, Options{})
	open.register(t, `{"name":"charge","kind":"http","url":"`+endpoint.URL+`/charge","policy":"[retry: 3, backoff: 10ms]"}`, 201)
	closed := newServerOn(t, st, true, Options{AllowStepHosts: []string{"10.0.0.0/8"}})
	before := closed.snapshot(t)
	p := closed.wantProblem(t, "POST", "/v1/steps", `{"name":"other","kind":"http","url":"`+endpoint.URL+`/other"}`, 400, "url")
	if !strings.Contains(p.Detail, "127.0.0.1 is not among the allowed step hosts") {
		t.Errorf("detail %q", p.Detail)
	}
	if after := closed.snapshot(t); after != before {
		t.Errorf("a refused registration changed the server:\nbefore %s\nafter  %s", before, after)
	}
	if _, _, err := closed.c.StartStep(t.Context(), "charge", json.RawMessage(`2`), "refused-1"); err != nil {
		t.Fatal(err)
	}
	run := closed.waitRun(t, "refused-1")
	if run.Status != store.RunFailed || run.Error == nil || run.Error.Type != httpstep.TypeTargetRefused ||
		run.Error.Attempts != 1 || run.Error.Reason != "permanent" ||
		!strings.Contains(run.Error.Message, "not among the allowed step hosts") {
		t.Fatalf("run of a step outside the allow-list: %+v %+v", run, run.Error)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("the endpoint saw %d calls, want only the allowed server's 1", n)
	}
}

// TestStepRedirectToRefusedTarget: a step whose endpoint redirects to a
// refused address fails at once with the permanent TargetRefused, however
// many retries its policy allows.
func TestStepRedirectToRefusedTarget(t *testing.T) {
	t.Parallel()
	dns := testDNS{"metadata.test": "169.254.169.254"}
	for _, to := range []string{"http://169.254.169.254/latest/meta-data/", "http://metadata.test/latest/meta-data/"} {
		var calls atomic.Int64
		endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.Header().Set("Location", to)
			w.WriteHeader(http.StatusTemporaryRedirect)
		}))
		t.Cleanup(endpoint.Close)
		s := newTestServer(t, Options{Caller: callerWith(t, dns)})
		s.register(t, `{"name":"fetch","kind":"http","url":"`+endpoint.URL+`/fetch","policy":"[retry: 3, backoff: 10ms]"}`, 201)
		if _, _, err := s.c.StartStep(t.Context(), "fetch", nil, "r1"); err != nil {
			t.Fatal(err)
		}
		run := s.waitRun(t, "r1")
		if run.Status != store.RunFailed || run.Error == nil || run.Error.Type != httpstep.TypeTargetRefused ||
			run.Error.Attempts != 1 || run.Error.Reason != "permanent" || !strings.Contains(run.Error.Message, "169.254.169.254") {
			t.Errorf("redirect to %s: run %+v, error %+v", to, run, run.Error)
		}
		if n := calls.Load(); n != 1 {
			t.Errorf("redirect to %s: %d calls, want 1", to, n)
		}
	}
}

func TestNewHandlerAllowStepHosts(t *testing.T) {
	t.Parallel()
	if _, err := NewHandler(nil, nil, Options{AllowStepHosts: []string{"10.0.0.0/8", "10.0.0.0/33"}}); err == nil ||
		!strings.Contains(err.Error(), `allowed host "10.0.0.0/33" is not a CIDR`) {
		t.Errorf("a bad entry: %v", err)
	}
	if _, err := NewHandler(nil, nil, Options{Caller: callerWith(t, nil), AllowStepHosts: []string{"10.0.0.0/8"}}); err == nil ||
		!strings.Contains(err.Error(), "AllowStepHosts configures the default Caller") {
		t.Errorf("Caller and AllowStepHosts: %v", err)
	}
}
