package httpstep

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeDNS resolves the names it holds to their addresses, and no other.
type fakeDNS map[string][]string

func (f fakeDNS) LookupNetIP(_ context.Context, network, host string) ([]netip.Addr, error) {
	addrs, ok := f[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range addrs {
		ip := netip.MustParseAddr(a)
		if (network == "ip4" && !ip.Unmap().Is4()) || (network == "ip6" && ip.Unmap().Is4()) {
			continue
		}
		out = append(out, ip)
	}
	return out, nil
}

// resolverFunc is a Resolver that answers as the function says.
type resolverFunc func(host string) []netip.Addr

func (f resolverFunc) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return f(host), nil
}

// TestRefusedAlways pins which addresses no step may call, in every form.
func TestRefusedAlways(t *testing.T) {
	t.Parallel()
	for addr, kind := range map[string]string{
		"169.254.169.254":          "a link-local",
		"169.254.0.1":              "a link-local",
		"169.254.255.255":          "a link-local",
		"fe80::1":                  "a link-local",
		"fe80::1%eth0":             "a link-local",
		"febf:ffff::1":             "a link-local",
		"224.0.0.1":                "a multicast",
		"239.255.255.250":          "a multicast",
		"ff02::1":                  "a multicast",
		"ff0e::1":                  "a multicast",
		"0.0.0.0":                  "an unspecified",
		"0.1.2.3":                  "an unspecified",
		"::":                       "an unspecified",
		"::ffff:169.254.169.254":   "a link-local",
		"::ffff:a9fe:a9fe":         "a link-local",
		"::ffff:0.0.0.0":           "an unspecified",
		"::ffff:224.0.0.1":         "a multicast",
		"64:ff9b::169.254.169.254": "a link-local",
		"64:ff9b::a9fe:a9fe":       "a link-local",
		"64:ff9b::e000:1":          "a multicast",
		// Allowed: loopback, private, public, and their neighbours.
		"127.0.0.1":            "",
		"::1":                  "",
		"::ffff:127.0.0.1":     "",
		"10.0.0.1":             "",
		"172.16.0.1":           "",
		"192.168.1.1":          "",
		"100.64.0.1":           "",
		"8.8.8.8":              "",
		"169.253.255.255":      "",
		"169.255.0.0":          "",
		"1.0.0.0":              "",
		"223.255.255.255":      "",
		"240.0.0.1":            "",
		"fc00::1":              "",
		"fec0::1":              "",
		"2001:db8::1":          "",
		"64:ff9b::8.8.8.8":     "",
		"64:ff9b:1::a9fe:a9fe": "",
	} {
		if got := refusedAlways(netip.MustParseAddr(addr)); got != kind {
			t.Errorf("refusedAlways(%s) = %q, want %q", addr, got, kind)
		}
	}
	if got := refusedAlways(netip.Addr{}); got == "" {
		t.Error("the zero Addr is allowed")
	}
}

func TestParseAllowList(t *testing.T) {
	t.Parallel()
	l, err := parseAllowList([]string{
		"10.0.0.0/8", " 192.168.1.7/24 ", "fd00::/8", "::ffff:172.16.0.0/108", "203.0.113.9", "2001:db8::1",
		"API.example.com.", "*.svc.cluster.local", "localhost", "under_score.internal",
	})
	if err != nil {
		t.Fatal(err)
	}
	wantPrefixes := []string{"10.0.0.0/8", "192.168.1.0/24", "fd00::/8", "172.16.0.0/12", "203.0.113.9/32", "2001:db8::1/128"}
	if got := fmt.Sprint(l.prefixes); got != fmt.Sprint(wantPrefixes) {
		t.Errorf("prefixes %v, want %v", got, wantPrefixes)
	}
	if got := fmt.Sprint(l.names, l.suffixes); got != "[api.example.com localhost under_score.internal] [.svc.cluster.local]" {
		t.Errorf("names and suffixes %s", got)
	}

	for _, bad := range []struct{ entry, message string }{
		{"", "allowed host 1 is blank"},
		{"  ", "allowed host 1 is blank"},
		{"10.0.0.0/33", "is not a CIDR"},
		{"10.0.0/8", "is not a CIDR"},
		{"example.com/8", "is not a CIDR"},
		{"fe80::1%eth0", "without a zone"},
		{"example.com:443", "is not a CIDR, an address, a host name"},
		{"*", "is not a CIDR, an address, a host name"},
		{"*.", "is not a CIDR, an address, a host name"},
		{"a.*.example.com", "is not a CIDR, an address, a host name"},
		{"-a.example.com", "is not a CIDR, an address, a host name"},
		{"a..example.com", "is not a CIDR, an address, a host name"},
		{"http://example.com", "is not a CIDR"},
		{"10.0.0", "is not a CIDR, an address, a host name"},
		{strings.Repeat("a", 64) + ".com", "is not a CIDR, an address, a host name"},
	} {
		if _, err := parseAllowList([]string{bad.entry}); err == nil || !strings.Contains(err.Error(), bad.message) {
			t.Errorf("parseAllowList(%q) = %v, want %q", bad.entry, err, bad.message)
		}
	}
	// Every fault at once.
	if _, err := parseAllowList([]string{"x/1", "ok.example", "", "*"}); err == nil || strings.Count(err.Error(), "\n") != 2 {
		t.Errorf("three bad entries: %v", err)
	}
}

// TestAllowListCheckAddr: an address may be called when it is not
// refused always, and the list is empty, names the host it was resolved
// from, or holds a CIDR around it.
func TestAllowListCheckAddr(t *testing.T) {
	t.Parallel()
	list := []string{"10.0.0.0/8", "fd00::/8", "192.0.2.7", "api.example.com", "*.corp.example", "169.254.0.0/16"}
	tests := []struct {
		list    []string
		name    string
		addr    string
		message string // "" when allowed
	}{
		{nil, "", "127.0.0.1", ""},
		{nil, "", "10.1.2.3", ""},
		{nil, "", "169.254.169.254", "169.254.169.254 is a link-local address; steps may not call"},
		{nil, "metadata.test", "169.254.169.254", "metadata.test resolves to 169.254.169.254, which is a link-local address"},
		{list, "", "10.1.2.3", ""},
		{list, "", "::ffff:10.1.2.3", ""},
		{list, "", "fd12::1", ""},
		{list, "", "192.0.2.7", ""},
		{list, "", "192.0.2.8", "192.0.2.8 is not among the allowed step hosts"},
		{list, "", "127.0.0.1", "127.0.0.1 is not among the allowed step hosts"},
		{list, "svc.test", "127.0.0.1", "svc.test resolves to 127.0.0.1, which is not among the allowed step hosts"},
		{list, "svc.test", "10.9.9.9", ""},
		{list, "api.example.com", "127.0.0.1", ""},
		{list, "API.Example.com.", "8.8.8.8", ""},
		{list, "a.b.corp.example", "8.8.8.8", ""},
		{list, "corp.example", "8.8.8.8", "corp.example resolves to 8.8.8.8, which is not among"},
		{list, "evilcorp.example", "8.8.8.8", "not among"},
		// Listed or not, these never.
		{list, "", "169.254.169.254", "is a link-local address"},
		{list, "api.example.com", "169.254.169.254", "is a link-local address"},
		{list, "api.example.com", "::ffff:169.254.169.254", "is a link-local address"},
		{list, "", "0.0.0.0", "is an unspecified address"},
	}
	for _, tt := range tests {
		l, err := parseAllowList(tt.list)
		if err != nil {
			t.Fatal(err)
		}
		err = l.checkAddr(tt.name, netip.MustParseAddr(tt.addr), tt.name != "" && l.named(tt.name))
		if tt.message == "" && err != nil || tt.message != "" && (err == nil || !strings.Contains(err.Error(), tt.message)) {
			t.Errorf("list %v: %s (%s): %v, want %q", tt.list, tt.name, tt.addr, err, tt.message)
		}
	}
}

func TestCheckTarget(t *testing.T) {
	t.Parallel()
	dns := fakeDNS{
		"metadata.test":   {"169.254.169.254"},
		"mapped.test":     {"::ffff:169.254.169.254"},
		"mixed.test":      {"10.0.0.5", "169.254.169.254"},
		"private.test":    {"10.0.0.5", "fd00::5"},
		"localhost":       {"127.0.0.1", "::1"},
		"multicast.test":  {"ff02::1"},
		"api.example.com": {"203.0.113.10"},
	}
	tests := []struct {
		list    []string
		url     string
		message string // "" when allowed
	}{
		{nil, "http://127.0.0.1:8080/step", ""},
		{nil, "http://localhost:8080/step", ""},
		{nil, "https://private.test/step", ""},
		{nil, "http://api.example.com/step", ""},
		{nil, "http://does-not-resolve.test/step", ""}, // checked when it connects
		{nil, "http://169.254.169.254/latest/meta-data/", "169.254.169.254 is a link-local address"},
		{nil, "http://[::ffff:169.254.169.254]/", "169.254.169.254 is a link-local address"},
		{nil, "http://[fe80::1%25eth0]:8080/", "fe80::1 is a link-local address"},
		{nil, "http://0.0.0.0:8080/", "0.0.0.0 is an unspecified address"},
		{nil, "http://[::]:8080/", ":: is an unspecified address"},
		{nil, "http://224.0.0.1/", "224.0.0.1 is a multicast address"},
		{nil, "http://metadata.test/", "metadata.test resolves to 169.254.169.254, which is a link-local address"},
		{nil, "http://mapped.test/", "mapped.test resolves to 169.254.169.254"},
		{nil, "http://mixed.test/", "mixed.test resolves to 169.254.169.254"},
		{nil, "http://multicast.test/", "a multicast address"},
		{nil, "ftp://127.0.0.1/", "scheme must be http or https"},
		{nil, "http:///step", "no host"},
		{[]string{"127.0.0.0/8"}, "http://127.0.0.1:8080/", ""},
		{[]string{"127.0.0.0/8"}, "http://localhost:8080/", "localhost resolves to ::1, which is not among the allowed step hosts"},
		{[]string{"127.0.0.0/8", "::1"}, "http://localhost:8080/", ""},
		{[]string{"10.0.0.0/8"}, "http://127.0.0.1:8080/", "127.0.0.1 is not among the allowed step hosts"},
		{[]string{"10.0.0.0/8"}, "http://private.test/", "private.test resolves to fd00::5, which is not among"},
		{[]string{"10.0.0.0/8", "fd00::/8"}, "http://private.test/", ""},
		{[]string{"10.0.0.0/8"}, "http://mixed.test/", "link-local"},
		{[]string{"10.0.0.0/8"}, "http://does-not-resolve.test/", ""}, // checked when it connects
		{[]string{"api.example.com"}, "http://api.example.com/", ""},
		{[]string{"api.example.com"}, "http://does-not-resolve.test/", "does-not-resolve.test is not among the allowed step hosts"},
		{[]string{"api.example.com"}, "http://127.0.0.1/", "127.0.0.1 is not among the allowed step hosts"},
		{[]string{"*.test"}, "http://private.test/", ""},
		{[]string{"*.test"}, "http://metadata.test/", "link-local"},
		{[]string{"0.0.0.0/0", "::/0"}, "http://metadata.test/", "link-local"},
	}
	for _, tt := range tests {
		c := newCaller(t, Options{AllowHosts: tt.list, Resolver: dns})
		err := c.CheckTarget(t.Context(), tt.url)
		if tt.message == "" && err != nil || tt.message != "" && (err == nil || !strings.Contains(err.Error(), tt.message)) {
			t.Errorf("list %v: CheckTarget(%s) = %v, want %q", tt.list, tt.url, err, tt.message)
		}
	}
	// A URL's secrets stay out of the message.
	err := newCaller(t, Options{}).CheckTarget(t.Context(), "http://user:hunter2@169.254.169.254/?token=hunter3")
	if err == nil || strings.Contains(err.Error(), "hunter") {
		t.Errorf("CheckTarget of a URL with secrets: %v", err)
	}
}

// TestCallRefusesTargets: a target refused, directly or through a redirect,
// by its address or by the allow-list, fails the attempt with the
// permanent TargetRefused, without a connection to it.
func TestCallRefusesTargets(t *testing.T) {
	t.Parallel()
	// The endpoint counts the requests of each case by its idempotency
	// key, which a redirect keeps, so that the cases run in parallel.
	var mu sync.Mutex
	hits := map[string]int64{}
	srv := serve(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		if to := r.URL.Query().Get("to"); to != "" {
			w.Header().Set("Location", to)
			w.WriteHeader(http.StatusTemporaryRedirect)
			return
		}
		if _, err := io.WriteString(w, `"ok"`); err != nil {
			t.Error(err)
		}
	})
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	dns := fakeDNS{
		"metadata.test": {"169.254.169.254"},
		"loopback.test": {"127.0.0.1"},
		"allowed.test":  {"127.0.0.1"},
		"mixed.test":    {"127.0.0.1", "169.254.169.254"},
	}
	loopback := fmt.Sprintf("http://loopback.test:%d/", port)
	allowed := fmt.Sprintf("http://allowed.test:%d/", port)
	// redirect is the URL of base that redirects to to.
	redirect := func(base, to string) string { return base + "?to=" + url.QueryEscape(to) }
	tests := []struct {
		name string
		list []string
		url  string
		hits int64 // requests the endpoint sees
		want want
	}{
		{"link-local URL", nil, "http://169.254.169.254/latest/meta-data/", 0,
			want{typ: TypeTargetRefused, message: []string{"169.254.169.254 is a link-local address"}}},
		{"name resolving to link-local", nil, "http://metadata.test/latest/meta-data/", 0,
			want{typ: TypeTargetRefused, message: []string{"metadata.test resolves to 169.254.169.254"}}},
		{"name resolving to loopback and link-local", nil, fmt.Sprintf("http://mixed.test:%d/", port), 0,
			want{typ: TypeTargetRefused, message: []string{"mixed.test resolves to 169.254.169.254"}}},
		{"redirect to link-local", nil, redirect(srv.URL+"/", "http://169.254.169.254/latest/meta-data/"), 1,
			want{typ: TypeTargetRefused, message: []string{"redirect to http://169.254.169.254/latest/meta-data/", "link-local"}}},
		{"redirect to a mapped link-local", nil, redirect(srv.URL+"/", "http://[::ffff:169.254.169.254]/"), 1,
			want{typ: TypeTargetRefused, message: []string{"link-local"}}},
		{"redirect to a name resolving to link-local", nil, redirect(srv.URL+"/", "http://metadata.test/"), 1,
			want{typ: TypeTargetRefused, message: []string{"metadata.test resolves to 169.254.169.254"}}},
		{"redirect to another scheme", nil, redirect(srv.URL+"/", "file:///etc/passwd"), 1,
			want{typ: TypeTargetRefused, message: []string{`scheme "file" is not http or https`}}},
		{"redirect to a loopback name", nil, redirect(srv.URL+"/", loopback), 2, want{output: `"ok"`}},
		{"allowed by CIDR", []string{"127.0.0.0/8"}, srv.URL, 1, want{output: `"ok"`}},
		{"name allowed by CIDR", []string{"127.0.0.0/8"}, loopback, 1, want{output: `"ok"`}},
		{"refused by CIDR", []string{"10.0.0.0/8"}, srv.URL, 0,
			want{typ: TypeTargetRefused, message: []string{"127.0.0.1 is not among the allowed step hosts"}}},
		{"name refused by CIDR", []string{"10.0.0.0/8"}, loopback, 0,
			want{typ: TypeTargetRefused, message: []string{"loopback.test resolves to 127.0.0.1, which is not among"}}},
		{"name allowed by name", []string{"allowed.test"}, allowed, 1, want{output: `"ok"`}},
		{"name allowed by pattern", []string{"*.test"}, loopback, 1, want{output: `"ok"`}},
		{"redirect to a name outside the CIDRs", []string{"allowed.test", "10.0.0.0/8"}, redirect(allowed, loopback), 1,
			want{typ: TypeTargetRefused, message: []string{"loopback.test resolves to 127.0.0.1, which is not among"}}},
		{"redirect to a name not listed", []string{"allowed.test"}, redirect(allowed, loopback), 1,
			want{typ: TypeTargetRefused, message: []string{"redirect to " + loopback, "loopback.test is not among"}}},
		{"link-local inside a CIDR", []string{"0.0.0.0/0"}, "http://169.254.169.254/", 0,
			want{typ: TypeTargetRefused, message: []string{"link-local"}}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := request(1)
			req.IdempotencyKey = fmt.Sprintf("case-%d", i)
			out, err := newCaller(t, Options{AllowHosts: tt.list, Resolver: dns}).Call(t.Context(), tt.url, req)
			tt.want.check(t, out, err)
			mu.Lock()
			got := hits[req.IdempotencyKey]
			mu.Unlock()
			if got != tt.hits {
				t.Errorf("%d requests reached the endpoint, want %d", got, tt.hits)
			}
		})
	}
}

// TestCallChecksEachConnection: a name that resolved to an allowed address
// when its step was checked is refused at the call when it has come to
// resolve to a refused one, since DNS may change.
func TestCallChecksEachConnection(t *testing.T) {
	t.Parallel()
	srv := serve(t, respond(200, `"ok"`))
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	var current atomic.Pointer[netip.Addr]
	loopback, metadata := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("169.254.169.254")
	current.Store(&loopback)
	c := newCaller(t, Options{Resolver: resolverFunc(func(string) []netip.Addr { return []netip.Addr{*current.Load()} })})
	target := fmt.Sprintf("http://rebinding.test:%d/", port)
	if err := c.CheckTarget(t.Context(), target); err != nil {
		t.Fatal(err)
	}
	out, err := c.Call(t.Context(), target, request(1))
	want{output: `"ok"`}.check(t, out, err)

	current.Store(&metadata)
	c.CloseIdleConnections() // else the next call reuses the connection made to 127.0.0.1
	out, err = c.Call(t.Context(), target, request(2))
	want{typ: TypeTargetRefused, message: []string{"rebinding.test resolves to 169.254.169.254"}}.check(t, out, err)
}

// TestDialControl: the dialer's Control checks the address each socket
// connects to, whatever was resolved before.
func TestDialControl(t *testing.T) {
	t.Parallel()
	c := newCaller(t, Options{AllowHosts: []string{"10.0.0.0/8", "api.example.com"}})
	for _, tt := range []struct {
		name    string
		listed  bool
		address string
		ok      bool
	}{
		{"", false, "10.1.2.3:80", true},
		{"", false, "[::ffff:10.1.2.3]:80", true},
		{"", false, "127.0.0.1:80", false},
		{"", false, "169.254.169.254:80", false},
		{"", false, "[fe80::1%eth0]:80", false},
		{"api.example.com", true, "127.0.0.1:443", true},
		{"api.example.com", true, "169.254.169.254:443", false},
		{"", false, "not-an-address", false},
	} {
		if err := c.control(tt.name, tt.listed)("tcp", tt.address, nil); (err == nil) != tt.ok {
			t.Errorf("control(%q, %v) of %s: %v, want ok %v", tt.name, tt.listed, tt.address, err, tt.ok)
		}
	}
}

// TestDefaultTransportUsesNoProxy: step calls do not go through a proxy
// from the environment, whose address the dialer would check instead of
// the step's.
func TestDefaultTransportUsesNoProxy(t *testing.T) {
	t.Parallel()
	tr, ok := newCaller(t, Options{}).client.Transport.(*http.Transport)
	if !ok || tr.Proxy != nil || tr.DialContext == nil {
		t.Fatalf("default transport %#v: want no proxy and the checking dialer", tr)
	}
}

func TestDialShare(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		remain int // seconds
		left   int
		want   float64 // seconds
	}{
		{30, 1, 30}, {30, 3, 10}, {30, 30, 2}, {1, 3, 1}, {3, 2, 2},
	} {
		deadline := now.Add(time.Duration(tt.remain) * time.Second)
		if got := dialShare(now, deadline, tt.left).Sub(now); got != time.Duration(tt.want*float64(time.Second)) {
			t.Errorf("dialShare(%ds, %d left) = %v, want %vs", tt.remain, tt.left, got, tt.want)
		}
	}
}
