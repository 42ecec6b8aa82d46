package cli

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"reprise/httpapi"
)

// TestServerAllowStepHosts: --allow-step-hosts, repeated and with commas,
// limits the targets of the HTTP steps registered with the server.
func TestServerAllowStepHosts(t *testing.T) {
	t.Parallel()
	endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer endpoint.Close()
	c := newClient(t, startServer(t, "--allow-step-hosts", "10.0.0.0/8", "--allow-step-hosts", "192.0.2.1,localhost"))
	ctx := t.Context()
	for _, target := range []string{"http://10.1.2.3/x", "http://192.0.2.1:8080/x", "http://localhost:1/x"} {
		if err := c.RegisterStep(ctx, httpapi.Step{Name: "ok", Kind: httpapi.KindHTTP, URL: target}); err != nil {
			t.Errorf("register %s: %v", target, err)
		}
	}
	for _, target := range []string{endpoint.URL, "http://192.0.2.2/x", "http://169.254.169.254/"} {
		err := c.RegisterStep(ctx, httpapi.Step{Name: "refused", Kind: httpapi.KindHTTP, URL: target})
		var p *httpapi.Problem
		if !errors.As(err, &p) || p.Status != 400 || p.Field != "url" {
			t.Errorf("register %s: %v, want a 400 on url", target, err)
		}
	}
}

func TestServerAllowStepHostsErrors(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "reprise.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--allow-step-hosts", "10.0.0.0/33"}, `--allow-step-hosts: httpstep options: allowed host "10.0.0.0/33" is not a CIDR`},
		{[]string{"--allow-step-hosts", "10.0.0.0/8,"}, "allowed host 2 is blank"},
		{[]string{"--allow-step-hosts", "example.com:443"}, `allowed host "example.com:443" is not a CIDR, an address, a host name or a *.domain pattern`},
	} {
		var stdout, stderr strings.Builder
		if code := Main(append([]string{"server", "--db", db}, c.args...), &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, %q; want a usage error %q", c.args, code, stderr.String(), c.want)
		}
	}
}
