package runid_test

import (
	"strings"
	"testing"

	"reprise/internal/runid"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for id, ok := range map[string]bool{
		"order-A-1": true, "r1/2": true, "r1/e2/3": true, "r1/2/4": true, "r1/0": true,
		"": false, "a b": false, "r1/": false, "r1/x": false, "r1/e": false, "/2": false, "r1//2": false,
		"r1/-2": false, "r1/2/history": false, "r1%2F2": false, strings.Repeat("a", 201): false,
		"r1" + strings.Repeat("/2", 499): true, "r1" + strings.Repeat("/2", 500): false,
	} {
		if err := runid.Check(id); (err == nil) != ok {
			t.Errorf("Check(%q) = %v, want ok %v", id, err, ok)
		}
	}
}

func TestSplit(t *testing.T) {
	t.Parallel()
	actions := []string{"live", "cancel", "signal"}
	for path, want := range map[string][2]string{
		"a": {"a", ""}, "a/live": {"a", "live"}, "a/2/cancel": {"a/2", "cancel"}, "a/2": {"a/2", ""},
		"a/e2/3/signal": {"a/e2/3", "signal"}, "a/redrive": {"a/redrive", ""}, "live": {"live", ""}, "": {"", ""},
	} {
		if id, action := runid.Split(path, actions...); id != want[0] || action != want[1] {
			t.Errorf("Split(%q) = %q, %q; want %q, %q", path, id, action, want[0], want[1])
		}
	}
}

// FuzzSplit: a run's id, with an action after it or none, splits back
// into the two, whatever the id.
func FuzzSplit(f *testing.F) {
	for _, id := range []string{"order-1", "order-1/2", "order-1/e2/3", "cancel", "a/0/e1/0"} {
		f.Add(id)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if runid.Check(id) != nil {
			return
		}
		if got, action := runid.Split(id, "cancel", "history"); got != id || action != "" {
			t.Errorf("Split(%q) = %q, %q", id, got, action)
		}
		if got, action := runid.Split(id+"/cancel", "cancel", "history"); got != id || action != "cancel" {
			t.Errorf("Split(%q) = %q, %q", id+"/cancel", got, action)
		}
	})
}
