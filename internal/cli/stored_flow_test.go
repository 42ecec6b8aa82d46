package cli

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"reprise"
	"reprise/flow"
	"reprise/httpapi"
	"reprise/reprisetest"
	"reprise/sqlite"
	"reprise/store"
)

// TestFlowSyncLogsOnce: a stored flow that does not parse is logged once,
// not at every sync, until it is replaced; one that breaks again is
// logged again.
func TestFlowSyncLogsOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "reprise.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, err := reprise.New(reprise.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	flows := flow.NewSet(e, nil)
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	put := func(src string) {
		t.Helper()
		if _, _, err := st.FlowPut(ctx, &store.FlowPutParams{Name: "f", Flow: json.RawMessage(src)}); err != nil {
			t.Fatal(err)
		}
	}
	var s flowSync
	put(`{"flow":"f","steps":{"a":{"pull":true,"retries":3}}}`)
	for range 3 {
		s.once(ctx, st, flows, log)
	}
	put(`{"flow":"f","steps":{"a":{"pull":true}}}`)
	s.once(ctx, st, flows, log)
	put(`{"flow":"f","steps":{"a":{"pull":true,"tries":3}}}`)
	s.once(ctx, st, flows, log)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "version 1 does not parse") || !strings.Contains(lines[1], "version 3 does not parse") {
		t.Errorf("logged:\n%s\nwant version 1, then version 3, once each", out.String())
	}
}

// TestFlowListShowsAVersionThatDoesNotParse: flow list and flow show say
// why a stored version does not parse.
func TestFlowListShowsAVersionThatDoesNotParse(t *testing.T) {
	t.Parallel()
	env := reprisetest.New(t, nil)
	h, err := httpapi.NewHandler(env.Engine, env.Store, httpapi.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	if _, _, err := env.Store.FlowPut(t.Context(), &store.FlowPutParams{Name: "f",
		Flow: json.RawMessage(`{"flow":"f","steps":{"a":{"pull":true,"retries":3}}}`)}); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"flow", "list", "--server", hs.URL}, &stdout, &stderr); code != exitOK ||
		!strings.Contains(stdout.String(), `ERROR: does not parse: step a: unknown key "retries"`) {
		t.Errorf("flow list: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	stdout.Reset()
	if code := Main([]string{"flow", "show", "f", "--server", hs.URL}, &stdout, &stderr); code != exitFail ||
		!strings.Contains(stderr.String(), `flow f version 1 does not parse: step a: unknown key "retries"`) {
		t.Errorf("flow show: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
}
