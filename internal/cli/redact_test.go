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
