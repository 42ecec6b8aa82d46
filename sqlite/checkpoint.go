package sqlite

import (
	"context"
	"time"
)

// A checkpointer copies the write-ahead log back into the database file
// from its own connection, every so often. SQLite's automatic checkpoint
// runs inside the commit that crosses its threshold, where it holds up
// every caller of that batch: it was most of the p99 of retry lateness.
// A PASSIVE checkpoint waits for no one and blocks no writer or reader.
//
// It is the one goroutine the store starts; Close stops it.
type checkpointer struct {
	conn *conn
	stop chan struct{}
	done chan struct{}
}

func startCheckpointer(ctx context.Context, path, busy string, every time.Duration) (*checkpointer, error) {
	c, err := openConn(ctx, path, busy)
	if err != nil {
		return nil, err
	}
	cp := &checkpointer{conn: c, stop: make(chan struct{}), done: make(chan struct{})}
	go cp.run(ctx, every)
	return cp, nil
}

func (cp *checkpointer) run(ctx context.Context, every time.Duration) {
	defer close(cp.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-cp.stop:
			return
		case <-t.C:
		}
		// A busy database makes a checkpoint do less, never fail the
		// store: the next tick, or the backstop, catches up.
		_ = cp.conn.script(ctx, "PRAGMA wal_checkpoint(PASSIVE)")
	}
}

func (cp *checkpointer) close() error {
	close(cp.stop)
	<-cp.done
	return cp.conn.close()
}
