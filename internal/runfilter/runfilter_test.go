package runfilter_test

import (
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"reprise/internal/runfilter"
	"reprise/store"
)

func TestRead(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 14, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		query string
		want  store.RunListParams
		param string // of the error, if any
		says  string
	}{
		{query: "", want: store.RunListParams{}},
		{query: "status=failed&workflow=+order+&step=charge&error_type=HTTP503",
			want: store.RunListParams{Status: store.RunFailed, Workflow: "order", Step: "charge", ErrorType: "HTTP503"}},
		{query: "status=retrying", want: store.RunListParams{Retrying: true}},
		{query: "since=90m&until=2026-03-14T11:59:00Z",
			want: store.RunListParams{CreatedSince: now.Add(-90 * time.Minute), CreatedUntil: now.Add(-time.Minute)}},
		{query: "since=7d", want: store.RunListParams{CreatedSince: now.AddDate(0, 0, -7)}},
		{query: "status=done", param: "status", says: `status "done" is not one of pending, running, retrying`},
		{query: "step=a&step=b", param: "step", says: `parameter "step" is given 2 times`},
		{query: "error_type=" + strings.Repeat("x", 201), param: "error_type", says: "201 characters long"},
		{query: "since=yesterday", param: "since", says: `since "yesterday" is neither a duration`},
		{query: "until=-5m", param: "until", says: `until "-5m" is neither`},
		{query: "since=0s", param: "since", says: "neither"},
		{query: "since=0d", param: "since", says: "neither"},
		{query: "since=1w", param: "since", says: "neither"},
		{query: "since=1h&until=2h", param: "until", says: "is not after since"},
	} {
		values, err := url.ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		f, err := runfilter.Read(values, now)
		if c.param != "" {
			var fe *runfilter.Error
			if !errors.As(err, &fe) || fe.Param != c.param || !strings.Contains(fe.Error(), c.says) {
				t.Errorf("Read(%q) = %v, want an error of %s saying %q", c.query, err, c.param, c.says)
			}
			continue
		}
		if err != nil {
			t.Errorf("Read(%q): %v", c.query, err)
			continue
		}
		var p store.RunListParams
		f.Apply(&p)
		if !reflect.DeepEqual(p, c.want) {
			t.Errorf("Read(%q) applies %+v, want %+v", c.query, p, c.want)
		}
		if again, _ := runfilter.Read(f.Values(), now); again != f {
			t.Errorf("Read(%q).Values() reads as %+v, want %+v", c.query, again, f)
		}
	}
}
