package cli

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// The server serves the web page at / beside the API: /v1/..., /metrics
// and /healthz answer as before, and the page asks for a token when the
// API does.
func TestServerServesWebPage(t *testing.T) {
	t.Parallel()
	const token = "web-page-token-0123456789"
	p := spawnServer(t, filepath.Join(t.TempDir(), "reprise.db"), "--token", token)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path, bearer string) (int, http.Header, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, p.url+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, string(b)
	}
	for _, c := range []struct {
		path, bearer string
		status       int
		want         string
	}{
		{"/", "", http.StatusSeeOther, ""},
		{"/login", "", http.StatusOK, "<h1>Sign in</h1>"},
		{"/static/app.css", "", http.StatusOK, "reprise web page"},
		{"/healthz", "", http.StatusOK, `"ok"`},
		{"/v1/runs", "", http.StatusUnauthorized, "unauthorized"},
		{"/v1/runs", token, http.StatusOK, `"runs"`},
		{"/v1/nope", token, http.StatusNotFound, "no endpoint"},
		{"/metrics", token, http.StatusOK, "reprise_api_requests_total"},
	} {
		status, header, body := get(c.path, c.bearer)
		if status != c.status || !strings.Contains(body, c.want) {
			t.Errorf("GET %s: %d %.200s; want %d with %q", c.path, status, body, c.status, c.want)
		}
		if c.path == "/" && header.Get("Location") != "/login?next=%2F" {
			t.Errorf("GET /: Location %q, want the login", header.Get("Location"))
		}
	}
	if strings.Contains(p.output(), token) {
		t.Errorf("the server's log holds the token:\n%s", p.output())
	}
}
