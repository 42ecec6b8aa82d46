package cli

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

func TestRedactHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(redactHandler{slog.NewTextHandler(&buf, nil)}).With("db", "postgres://u:hunter2@h/db")
	log.Error("connect to postgres://u:hunter2@h/db failed",
		"err", errors.New("dial password=hunter2: refused"),
		slog.Group("g", "url", "https://x/?token=hunter2"),
		"n", 3)
	out := buf.String()
	if strings.Contains(out, "hunter2") {
		t.Errorf("a secret is in the log: %s", out)
	}
	for _, want := range []string{"postgres://u:xxxxx@h/db", "password=xxxxx", "token=xxxxx", "n=3", "level=ERROR"} {
		if !strings.Contains(out, want) {
			t.Errorf("log %q lacks %q", out, want)
		}
	}
}

// TestCommandErrorsShowNoSecrets: a command's error quotes the URL it could
// not reach, a --server URL with credentials among them, without them.
func TestCommandErrorsShowNoSecrets(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"runs", "--server", "http://bob:hunter2@127.0.0.1:1"},
		{"show", "r1", "--server", "http://127.0.0.1:1/?token=hunter2"},
		{"runs", "--db", "postgres://bob:hunter2@127.0.0.1:1/db?connect_timeout=1"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(args, &stdout, &stderr); code == exitOK {
			t.Errorf("%v: exit 0", args)
		}
		if out := stdout.String() + stderr.String(); strings.Contains(out, "hunter2") {
			t.Errorf("%v printed a secret:\n%s", args, out)
		}
	}
}
