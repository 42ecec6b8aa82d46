package sqlite

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// ErrLocked is the error of Open with Exclusive when another process has
// the database open with Exclusive.
var ErrLocked = errors.New("the database is in use by another process")

// errWouldBlock is what lockFile returns when another process holds the
// lock.
var errWouldBlock = errors.New("locked by another process")

// A fileLock is the exclusive lock of one database, held by this process
// for the stores that share it.
type fileLock struct {
	f     *os.File
	info  os.FileInfo
	count int // the open stores that share it
}

// processLocks are the locks this process holds. The kernel's locks are
// per open file, so a second Open of the same database in this process
// shares the first one's instead of taking its own, which would fail.
var processLocks struct {
	mu    sync.Mutex
	locks []*fileLock
}

// lockExclusive takes the lock of the database at path, the file
// path+".lock" (never the database itself: SQLite's own locks on it are
// lost when any descriptor of it in the process closes), or shares the
// one this process holds. The lock file records the holder's pid, for the
// error of the process that finds it locked.
func lockExclusive(path string) (*fileLock, error) {
	name := path + ".lock"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock: %w", err)
	}
	processLocks.mu.Lock()
	defer processLocks.mu.Unlock()
	for _, l := range processLocks.locks {
		if os.SameFile(l.info, info) {
			f.Close()
			l.count++
			return l, nil
		}
	}
	if err := lockFile(f); err != nil {
		defer f.Close()
		if errors.Is(err, errWouldBlock) {
			holder := "another process"
			if pid := readPID(f); pid != "" {
				holder = "process " + pid
			}
			return nil, fmt.Errorf("%w (%s holds %s)", ErrLocked, holder, name)
		}
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	l := &fileLock{f: f, info: info, count: 1}
	processLocks.locks = append(processLocks.locks, l)
	return l, nil
}

// release gives up this store's share of the lock; the last one closes
// the file, which releases the lock.
func (l *fileLock) release() error {
	processLocks.mu.Lock()
	defer processLocks.mu.Unlock()
	if l.count--; l.count > 0 {
		return nil
	}
	for i, held := range processLocks.locks {
		if held == l {
			processLocks.locks = append(processLocks.locks[:i], processLocks.locks[i+1:]...)
			break
		}
	}
	return l.f.Close()
}

// readPID reads the pid a lock file records, or "".
func readPID(f *os.File) string {
	b := make([]byte, 32)
	n, err := f.ReadAt(b, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	pid := strings.TrimSpace(string(b[:n]))
	if _, err := strconv.Atoi(pid); err != nil {
		return ""
	}
	return pid
}
