package store

import (
	"testing"
	"time"
)

func TestRunRenewParamsCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		p    RunRenewParams
		ok   bool
	}{
		{"positive ttl", RunRenewParams{Owner: "e1", LeaseTTL: time.Nanosecond}, true},
		{"zero ttl", RunRenewParams{Owner: "e1"}, false},
		{"negative ttl", RunRenewParams{Owner: "e1", LeaseTTL: -time.Second}, false},
		{"no owner", RunRenewParams{LeaseTTL: time.Minute}, false},
	} {
		if err := tt.p.Check(); (err == nil) != tt.ok {
			t.Errorf("%s: Check() = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestRunReleaseParamsCheck(t *testing.T) {
	t.Parallel()
	if err := (&RunReleaseParams{Owner: "e1"}).Check(); err != nil {
		t.Errorf("Check() with an owner = %v", err)
	}
	if err := (&RunReleaseParams{}).Check(); err == nil {
		t.Error("Check() without an owner: no error")
	}
}
