package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"reprise/store"
)

// The notice types are the root package's; these names keep this
// package's code short.
type (
	Notice     = store.Notice
	NoticeKind = store.NoticeKind
)

const (
	NoticeTaskReady = store.NoticeTaskReady
	NoticeOutcome   = store.NoticeOutcome
	NoticeRunReady  = store.NoticeRunReady
	NoticeResync    = store.NoticeResync
)

// maxPayload keeps a notice below PostgreSQL's 8000-byte limit.
const maxPayload = 7900

// payload encodes n for NOTIFY. A notice whose ids would not fit is sent
// with its kind alone, which a listener reads as "something of this kind
// happened".
func payload(n Notice) string {
	b, err := json.Marshal(n)
	if err != nil || len(b) > maxPayload {
		b, _ = json.Marshal(Notice{Kind: n.Kind})
	}
	return string(b)
}

// A notifier sends the notices of committed transactions. NOTIFY takes a
// database-wide lock from its transaction's commit until the commit is
// durable, so a NOTIFY in every transaction would serialize all commits on
// the disk's flush. Instead, committed notices are queued and one goroutine
// at a time sends all that are queued in a single transaction that does not
// wait for its flush: notices are hints, and losing one in a crash costs a
// poll, not a run.
type notifier struct {
	mu       sync.Mutex
	pending  []string
	queued   map[string]bool
	flushing bool
	wg       sync.WaitGroup
}

// publish queues the notices of a committed transaction and starts a
// flush unless one is running. The flush outlives the transaction's call:
// it runs under ctx without its cancellation.
func (s *Store) publish(ctx context.Context, out []Notice) {
	if len(out) == 0 {
		return
	}
	n := &s.notifier
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.queued == nil {
		n.queued = map[string]bool{}
	}
	for _, notice := range out {
		p := payload(notice)
		if !n.queued[p] {
			n.queued[p] = true
			n.pending = append(n.pending, p)
		}
	}
	if !n.flushing {
		n.flushing = true
		n.wg.Add(1)
		go s.flush(context.WithoutCancel(ctx))
	}
}

// flush sends queued notices until none are left.
func (s *Store) flush(ctx context.Context) {
	n := &s.notifier
	defer n.wg.Done()
	for {
		n.mu.Lock()
		batch := n.pending
		n.pending, n.queued = nil, nil
		if len(batch) == 0 {
			n.flushing = false
			n.mu.Unlock()
			return
		}
		n.mu.Unlock()
		sendCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := s.pool.Exec(sendCtx, `
			SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, payload)
			FROM unnest($2::text[]) AS payload`,
			s.channel, batch)
		cancel()
		if err != nil {
			s.log.Warn("postgres notices lost", "count", len(batch), "err", err)
		}
	}
}

// channelName is the NOTIFY channel of the store in schema: one per schema,
// so that deployments sharing a database do not wake each other.
func channelName(schema string) string {
	name := "reprise_" + schema
	if len(name) > 63 {
		// Channel names are identifiers, at most 63 bytes.
		name = "reprise_" + strconv.FormatUint(uint64(advisoryKey(schema)), 36)
	}
	return name
}

// Listen calls fn with each notice the stores on this schema send, from any
// process, until ctx ends; then it returns nil. It holds one connection of
// its own, outside the pool. When the connection is lost (a server restart,
// a network failure) it reconnects with a growing delay, up to 5 s, and
// calls fn with NoticeResync each time it is listening again, the first
// time included. fn runs on Listen's goroutine, one notice at a time, and
// should return quickly.
func (s *Store) Listen(ctx context.Context, fn func(Notice)) error {
	const (
		minDelay = 100 * time.Millisecond
		maxDelay = 5 * time.Second
	)
	delay := minDelay
	for {
		listened, err := s.listen(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		if listened {
			delay = minDelay
		}
		s.log.Warn("postgres notice listener lost its connection; reconnecting",
			"channel", s.channel, "err", err, "retry_in", delay)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(2*delay, maxDelay)
	}
}

// listen connects, listens and delivers notices until the connection fails
// or ctx ends. listened reports whether it got as far as listening.
func (s *Store) listen(ctx context.Context, fn func(Notice)) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return false, fmt.Errorf("connect: %w", err)
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
		return false, fmt.Errorf("listen: %w", err)
	}
	fn(Notice{Kind: NoticeResync})
	// An idle connection is pinged now and then, so that one a network
	// failure killed silently is noticed.
	const idle = 30 * time.Second
	for {
		waitCtx, cancel := context.WithTimeout(ctx, idle)
		n, err := conn.WaitForNotification(waitCtx)
		idled := waitCtx.Err() != nil
		cancel()
		switch {
		case ctx.Err() != nil:
			return true, ctx.Err()
		case err != nil && idled && !conn.IsClosed():
			pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = conn.Ping(pingCtx)
			cancel()
			if err != nil {
				return true, fmt.Errorf("ping: %w", err)
			}
			continue
		case err != nil:
			return true, fmt.Errorf("wait for notification: %w", err)
		}
		var notice Notice
		if err := json.Unmarshal([]byte(n.Payload), &notice); err != nil || notice.Kind == "" {
			s.log.Debug("postgres notice unreadable", "payload", n.Payload, "err", err)
			continue
		}
		fn(notice)
	}
}
