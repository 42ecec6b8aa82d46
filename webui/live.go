package webui

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"reprise"
	"reprise/internal/runid"
	"reprise/store"
)

// keepAlive is how long a live stream stays silent at most: a comment
// then tells proxies the connection is in use.
const keepAlive = 15 * time.Second

// live streams a run's progress as server-sent events: an event history
// (id: the last sequence number) when the history grows, and an event
// end when the run has ended. The page then reads itself again. A stream
// lasts StreamFor; the browser opens the next one, sending the last id
// it had (Last-Event-ID).
func (h *Handler) live(w http.ResponseWriter, r *http.Request, id string) {
	if !h.auth.signedIn(r) {
		w.Header().Set("Connection", "close")
		http.Error(w, "sign in first", http.StatusUnauthorized)
		return
	}
	if err := runid.Check(id); err != nil {
		http.Error(w, fmt.Sprintf("%q is not a run id: %v", id, err), http.StatusBadRequest)
		return
	}
	var after int64
	q := r.URL.Query()
	for name := range q {
		if name != "after" {
			http.Error(w, fmt.Sprintf("unknown parameter %q: a run's stream takes only after", name), http.StatusBadRequest)
			return
		}
	}
	for _, s := range []string{q.Get("after"), r.Header.Get("Last-Event-ID")} {
		if s == "" {
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("after %q is not an event's sequence number", s), http.StatusBadRequest)
			return
		}
		after = max(after, n)
	}
	ctx := r.Context()
	run, err := h.cfg.Engine.GetRun(ctx, id)
	switch {
	case errors.Is(err, reprise.ErrNotFound):
		http.Error(w, fmt.Sprintf("no run %q", id), http.StatusNotFound)
		return
	case err != nil:
		h.internal(w, r, err)
		return
	}
	final := run.Status.Final()

	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 2000\n\n")
	if rc.Flush() != nil {
		return
	}
	stop := time.NewTimer(h.cfg.StreamFor)
	defer stop.Stop()
	poll := time.NewTimer(0)
	defer poll.Stop()
	quiet := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-stop.C:
			return
		case <-poll.C:
		}
		events, err := h.cfg.Store.HistoryList(ctx, &store.HistoryListParams{RunID: id, AfterSeq: after})
		if err != nil {
			if ctx.Err() == nil {
				h.log.Error("web page stream failed", "run_id", id, "err", err)
			}
			return
		}
		if n := len(events); n > 0 {
			after = events[n-1].Seq
			final = events[n-1].Type.EndsRun()
			fmt.Fprintf(w, "id: %d\nevent: history\ndata: {\"seq\":%d,\"final\":%t}\n\n", after, after, final)
			quiet = time.Now()
		} else if time.Since(quiet) >= keepAlive {
			fmt.Fprint(w, ": still here\n\n")
			quiet = time.Now()
		}
		if final {
			fmt.Fprint(w, "event: end\ndata: {}\n\n")
		}
		if rc.Flush() != nil || final {
			return
		}
		poll.Reset(h.cfg.PollInterval)
	}
}
