package multiproc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// A server is a PostgreSQL server of the test's own, in a temporary
// directory, on a free port.
type server struct {
	dir   string
	pgctl string
	port  int
	dsn   string
	asPG  []string // the command prefix that runs a program as the postgres user, when root
}

// startServer initdb's and starts a server, which is stopped and removed
// when the test ends. It skips the test when PostgreSQL's programs are not
// installed, or it runs as root and there is no postgres user to run them.
func startServer(t *testing.T) *server {
	t.Helper()
	testDSN(t) // the shared server's variable decides whether PostgreSQL tests run
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	sort.Slice(bins, func(i, j int) bool { return versionOf(bins[i]) < versionOf(bins[j]) })
	initdb := ""
	if len(bins) > 0 {
		initdb = bins[len(bins)-1]
	} else if p, err := exec.LookPath("initdb"); err == nil {
		initdb = p
	} else {
		t.Skip("no initdb (PostgreSQL's server programs) found: cannot start a server to restart")
	}
	s := &server{pgctl: filepath.Join(filepath.Dir(initdb), "pg_ctl")}
	dir, err := os.MkdirTemp("", "reprise-multiproc-pg-") //nolint:usetesting // t.TempDir's parent is 0700, closed to the postgres user a root test runs the server as
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skip("running as root and there is no postgres user to run a server as")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		runuser, err := exec.LookPath("runuser")
		if err != nil {
			t.Skip("running as root without runuser to run a server as the postgres user")
		}
		s.asPG = []string{runuser, "-u", "postgres", "--"}
	}
	s.port = freePort(t)
	data := filepath.Join(dir, "data")
	if out, err := s.run(initdb, "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c max_connections=200 -c shared_buffers=32MB", s.port, dir)
	if out, err := s.run(s.pgctl, "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start"); err != nil {
		t.Fatalf("pg_ctl start: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := s.run(s.pgctl, "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
			t.Errorf("pg_ctl stop: %v\n%s", err, out)
		}
	})
	s.dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", s.port)
	conn, err := pgx.Connect(t.Context(), s.dsn)
	if err != nil {
		t.Fatalf("connect to the test's server: %v", err)
	}
	conn.Close(t.Context())
	return s
}

// restart restarts the server (pg_ctl restart, fast mode: clients are
// disconnected) and returns how long it took.
func (s *server) restart(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	out, err := s.run(s.pgctl, "-D", filepath.Join(s.dir, "data"), "-l", filepath.Join(s.dir, "log"), "-m", "fast", "-w", "restart")
	if err != nil {
		t.Fatalf("pg_ctl restart: %v\n%s", err, out)
	}
	return time.Since(start)
}

func (s *server) run(prog string, args ...string) ([]byte, error) {
	argv := append(append(append([]string{}, s.asPG...), prog), args...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

func versionOf(bin string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(bin))))
	return v
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
