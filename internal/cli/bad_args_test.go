package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestBadArguments: a bad argument of any command is a usage error (exit
// 2) that says what is wrong, prints no password of the URLs it was
// given, and does nothing.
func TestBadArguments(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "reprise.db")
	for _, c := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"bogus"}, exitUsage, `unknown command "bogus"`},
		{[]string{"flow", "bogus"}, exitUsage, `unknown command "bogus"`},
		{[]string{"server", "--lease-ttl", "-5s"}, exitUsage, "--lease-ttl -5s must be positive"},
		{[]string{"server", "--lease-ttl", "soon"}, exitUsage, `invalid value "soon" for flag -lease-ttl`},
		{[]string{"server", "--db", "mysql://app:hunter2@db.internal/x"}, exitUsage, "scheme mysql: want a SQLite path, sqlite:PATH or postgres://URL"},
		{[]string{"runs", "--db", "postgres://app:hunter2@[::1/x"}, exitUsage, "cannot parse `postgres://app:xxxxx@[::1/x`"},
		{[]string{"migrate", "--db", "postgres://app:hunter2@db.internal:port/x"}, exitUsage, "invalid port"},
		{[]string{"demo", "--db", "redis://:hunter2@db.internal"}, exitUsage, "scheme redis"},
		{[]string{"flow", "run", "f.yaml", "--db", "mysql://app:hunter2@db.internal/x"}, exitUsage, "scheme mysql"},
		{[]string{"bench", "--db", "mysql://app:hunter2@db.internal/x"}, exitUsage, "scheme mysql"},
		{[]string{"runs", "--server", "http://app:hunter2@[::1"}, exitFail, `server url: parse "http://xxxxx@[::1": missing ']' in host`},
		{[]string{"runs", "--server", "ftp://app:hunter2@db.internal"}, exitFail, `server url "ftp://xxxxx@db.internal": want http://HOST:PORT`},
		{[]string{"run", "order", "--db", db, "--id", "a/b"}, exitUsage, "--id: run id has '/'"},
		{[]string{"run", "order", "--db", db, "--input", `{"a": 1, "a": 2}`}, exitUsage, `--input is not JSON as the API takes it (jsontext: duplicate object member name "a")`},
		{[]string{"signal", "r1", "go", "--db", db, "--payload", `"\u0000"`}, exitUsage, "--payload is not JSON as the API takes it (the string at the top holds a NUL"},
		{[]string{"flow", "run", "f.yaml", "--db", db, "--input", `"\ud800"`}, exitUsage, "--input is not JSON as the API takes it (jsontext: invalid surrogate pair"},
	} {
		var stdout, stderr bytes.Buffer
		code := Main(c.args, &stdout, &stderr)
		if code != c.code || !strings.Contains(stderr.String(), c.says) || strings.Contains(stderr.String(), "hunter2") {
			t.Errorf("%q: exit %d, stderr:\n%s\nwant exit %d saying %q, without the password", c.args, code, stderr.String(), c.code, c.says)
		}
	}
	// None touched the database: the run commands read their arguments
	// before they open it, and do not make one.
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a database at %s after bad arguments (%v)", db, err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"runs", "--db", db}, &stdout, &stderr); code != exitFail || !strings.Contains(stderr.String(), "no database at "+db) {
		t.Errorf("runs on no database: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("runs made a database at %s (%v)", db, err)
	}
}

// TestFlowFileBounded: a flow file is read up to the bound of a flow
// file, and no further: a device that never ends is refused at once.
func TestFlowFileBounded(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	for _, cmd := range [][]string{{"flow", "check", "/dev/zero"}, {"flow", "push", "/dev/zero", "--server", "http://127.0.0.1:9"}} {
		var stdout, stderr bytes.Buffer
		if code := Main(cmd, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "/dev/zero has over 4194304 bytes; a flow file has at most 4194304") {
			t.Errorf("%q: exit %d, stderr %s", cmd, code, stderr.String())
		}
	}
}
