package cli

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestFlowCheck(t *testing.T) {
	t.Parallel()
	good := writeFile(t, "good.yaml", "flow: f\nsteps:\n  a:\n    http: https://a.example.com/\n")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"flow", "check", good}, &stdout, &stderr); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "flow f is valid: 1 step(s), goals a") {
		t.Errorf("stdout %q", stdout.String())
	}
	bad := writeFile(t, "bad.yaml", "flow: f\nsteps:\n  a:\n    http: https://a.example.com/\n    needs: [b]\n    retries: 3\n")
	stdout.Reset()
	stderr.Reset()
	if code := Main([]string{"flow", "check", bad}, &stdout, &stderr); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	want := bad + ":5:13: step a needs b, which is no step of this flow\n" +
		bad + `:6:5: step a: unknown key "retries": a step has http, pull, step, input, needs, foreach, policy, work_config, parallelism, optional` + "\n" +
		"reprise flow check: 2 error(s) in " + bad + "\n"
	if stderr.String() != want {
		t.Errorf("stderr\n%s\nwant\n%s", stderr.String(), want)
	}
}

func TestFlowRunFails(t *testing.T) {
	t.Parallel()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bad" {
			http.Error(w, "no such order", http.StatusNotFound)
			return
		}
		answer(t, w, `{"success": true, "output": "fine"}`)
	}))
	t.Cleanup(svc.Close)
	file := writeFile(t, "f.yaml", "flow: f\nsteps:\n  a:\n    http: "+svc.URL+"/ok\n  b:\n    needs: [a]\n    foreach: [1, 2]\n    http: "+svc.URL+"/bad\n")
	db := filepath.Join(t.TempDir(), "reprise.db")
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"flow", "run", file, "--db", db}, &stdout, &stderr); code != exitFail {
		t.Fatalf("exit %d, want %d\n%s\n%s", code, exitFail, stdout.String(), stderr.String())
	}
	out := stdout.String()
	// Both items fail, in either order: the first ends the run, and the
	// other's failure may come after the end, unrecorded.
	for _, want := range []string{"workflow flow:f  failed", "error HTTP4xx", "key b[0]-", "2 item(s), attempts per item: [0] 1", "[1] 1", "FAILED HTTP4xx"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	stdout.Reset()
	stderr.Reset()
	if code := Main([]string{"flow", "run", file, "--db", db, "--input", "{"}, &stdout, &stderr); code != exitUsage {
		t.Errorf("bad --input: exit %d, want %d", code, exitUsage)
	}
	pull := writeFile(t, "p.yaml", "flow: p\nsteps:\n  a:\n    pull: true\n")
	if code := Main([]string{"flow", "run", pull, "--db", db}, &stdout, &stderr); code != exitUsage {
		t.Errorf("a pull step: exit %d, want %d", code, exitUsage)
	}
}
