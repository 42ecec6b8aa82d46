package flow_test

import (
	"testing"

	"reprise/flow"
)

// TestItemOf reads the idempotency keys a flow's step calls carry, and
// refuses keys a flow did not make.
func TestItemOf(t *testing.T) {
	t.Parallel()
	const hex = "0123456789abcdef01234567"
	tests := []struct {
		key   string
		step  string
		index int
		ok    bool
	}{
		{"quote-" + hex, "quote", -1, true},
		{"reserve[0]-" + hex, "reserve", 0, true},
		{"reserve[12]-" + hex, "reserve", 12, true},
		{"send_wrapped-" + hex, "send_wrapped", -1, true},
		{"_x[3]-" + hex, "_x", 3, true},

		{"", "", 0, false},
		{"quote", "", 0, false},
		{"quote-" + hex[:23], "", 0, false},
		{"quote-" + hex + "0", "", 0, false},
		{"quote-0123456789abcdef0123456z", "", 0, false},
		{"quote-0123456789ABCDEF01234567", "", 0, false},
		{"-" + hex, "", 0, false},
		{"[1]-" + hex, "", 0, false},
		{"reserve[-1]-" + hex, "", 0, false},
		{"reserve[x]-" + hex, "", 0, false},
		{"reserve[]-" + hex, "", 0, false},
		{"reserve[1-" + hex, "", 0, false},
		{"order-1/charge", "", 0, false},
		{"send-wrapped-" + hex, "", 0, false},
		{"a.b[3]-" + hex, "", 0, false},
		{"reserve[+1]-" + hex, "", 0, false},
	}
	for _, tt := range tests {
		step, index, ok := flow.ItemOf(tt.key)
		if ok != tt.ok || step != tt.step || (ok && index != tt.index) {
			t.Errorf("ItemOf(%q) = %q, %d, %v; want %q, %d, %v", tt.key, step, index, ok, tt.step, tt.index, tt.ok)
		}
	}
}
