package main

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reprise/internal/cli"
)

// TestOrderFlow runs order.yaml against the demo shop with reprise flow
// run: the 503 is retried after its Retry-After, the hang is cut by the
// timeout and retried, the 4xx and the success: false fail their optional
// steps at once, the step that needs one of them is skipped, and the flow
// completes with its goals' outputs.
func TestOrderFlow(t *testing.T) {
	t.Parallel()
	shop := httptest.NewServer(shop())
	t.Cleanup(shop.Close)
	src, err := os.ReadFile("order.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "order.yaml")
	if err := os.WriteFile(file, bytes.ReplaceAll(src, []byte("http://127.0.0.1:7431"), []byte(shop.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code := cli.Main([]string{"flow", "check", file}, new(bytes.Buffer), new(bytes.Buffer)); code != 0 {
		t.Fatalf("flow check: exit %d", code)
	}
	var stdout, stderr bytes.Buffer
	code := cli.Main([]string{"flow", "run", file, "--db", filepath.Join(dir, "reprise.db"), "--json",
		"--input", `{"sku": "espresso", "warehouses": ["north", "south", "east"]}`}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("flow run: exit %d\n%s\n%s", code, stdout.String(), stderr.String())
	}
	var got struct {
		Run struct {
			ID     string          `json:"id"`
			Status string          `json:"status"`
			Output json.RawMessage `json:"output"`
		} `json:"run"`
		Events []struct {
			Type   string `json:"type"`
			Change string `json:"change"`
			Key    string `json:"idempotency_key"`
			Error  *struct {
				Type string `json:"type"`
			} `json:"error"`
		} `json:"events"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, stdout.String())
	}
	var out map[string]any
	if err := json.Unmarshal(got.Run.Output, &out); err != nil {
		t.Fatalf("run %s, output %s: %v", got.Run.Status, got.Run.Output, err)
	}
	if got.Run.Status != "completed" || out["notify"] != "sent" || len(out["reserve"].([]any)) != 3 {
		t.Fatalf("run %s, output %s", got.Run.Status, got.Run.Output)
	}
	var failures, markers []string
	for _, ev := range got.Events {
		if ev.Type == "AttemptFailed" {
			failures = append(failures, ev.Error.Type)
		}
		if ev.Type == "VersionMarker" {
			markers = append(markers, ev.Change)
		}
	}
	for _, want := range []string{"HTTP5xx", "Timeout", "HTTP4xx", "NotAMember"} {
		if !strings.Contains(strings.Join(failures, " "), want) {
			t.Errorf("attempts failed with %v, want a %s among them", failures, want)
		}
	}
	if strings.Join(markers, " ") != "skipped:send_wrapped" {
		t.Errorf("markers %v, want send_wrapped skipped", markers)
	}

	// The timeline names each item under its step.
	stdout.Reset()
	cli.Main([]string{"history", "--db", filepath.Join(dir, "reprise.db"), got.Run.ID}, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "key reserve[1]") {
		t.Errorf("history does not name reserve[1]:\n%s", stdout.String())
	}
}
