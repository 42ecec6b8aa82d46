package redact

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"reprise/store"
)

func TestJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{`{"url":"https://user:s3cret@api.example.com/charge?token=abc123&n=1"}`,
			`{"url":"https://xxxxx@api.example.com/charge?token=xxxxx&n=1"}`},
		// Escapes a writer may use, which String on the text would miss.
		{`{"url":"https:\/\/user:s3cret@api.example.com\/x"}`, `{"url":"https://xxxxx@api.example.com/x"}`},
		{`["https://user:s3cret\u0040api.example.com/x?token\u003dabc123"]`, `["https://xxxxx@api.example.com/x?token=xxxxx"]`},
		// A quoted value inside a string: its escaped quotes stay whole.
		{`{"dsn":"host=db password=\"hun ter2\" dbname=app"}`, `{"dsn":"host=db password=xxxxx dbname=app"}`},
		{`{"q":"token=abc\"","n":1}`, `{"q":"token=xxxxx\"","n":1}`},
		// Keys are strings too; the layout and the other values stay.
		{"{\n  \"https://u:p@h/x\": [1, true, null, \"a=b\"]\n}", "{\n  \"https://xxxxx@h/x\": [1, true, null, \"a=b\"]\n}"},
		{`{"a":"<&>","b":"https://u:p@h/?x=<&>"}`, `{"a":"<&>","b":"https://xxxxx@h/?x=<&>"}`},
		{`"plain"`, `"plain"`},
		{`{"key":"order-42","n":3}`, `{"key":"order-42","n":3}`},
		{`null`, `null`},
		{``, ``},
		// Not JSON: read as text.
		{`url=https://u:p@h token=abc`, `url=https://xxxxx@h token=xxxxx`},
	} {
		got := JSON(json.RawMessage(c.in))
		if string(got) != c.want {
			t.Errorf("JSON(%s) = %s, want %s", c.in, got, c.want)
		}
		if json.Valid([]byte(c.in)) && !json.Valid(got) {
			t.Errorf("JSON(%s) = %s: not JSON", c.in, got)
		}
	}
}

// TestJSONNotString: String on JSON text breaks a document (a mask eats
// the backslash of an escaped quote) or misses a secret behind an escape;
// JSON does neither.
func TestJSONNotString(t *testing.T) {
	t.Parallel()
	broken := `{"dsn":"password=\"hun ter2\""}`
	if json.Valid([]byte(String(broken))) {
		t.Errorf("String(%s) = %s, still JSON: the case no longer shows why JSON exists", broken, String(broken))
	}
	if got := JSON(json.RawMessage(broken)); !json.Valid(got) || strings.Contains(string(got), "hun") {
		t.Errorf("JSON(%s) = %s", broken, got)
	}
	hidden := `{"url":"https:\/\/user:s3cret@h\/x"}`
	if !strings.Contains(String(hidden), "s3cret") {
		t.Errorf("String(%s) = %s: the case no longer shows why JSON exists", hidden, String(hidden))
	}
	if got := JSON(json.RawMessage(hidden)); strings.Contains(string(got), "s3cret") {
		t.Errorf("JSON(%s) = %s", hidden, got)
	}
}

// TestJSONSame: a document with nothing to mask comes back as it is, not
// a copy.
func TestJSONSame(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{`{"a":"b\n","c":[1,2]}`, `{"a":"x@y"}`, `{"order":"A-1","email":"ann@example.com"}`} {
		in := json.RawMessage(doc)
		if got := JSON(in); &got[0] != &in[0] {
			t.Errorf("JSON(%s) made a copy: %s", doc, got)
		}
	}
}

func FuzzJSON(f *testing.F) {
	for _, s := range []string{
		`{"url":"https://user:s3cret@api.example.com/charge?token=abc123"}`,
		`{"dsn":"host=db password=\"hun ter2\""}`,
		`["https:\/\/u:p\u0040h", "a=b", {"k\"ey=1": "v"}]`,
		`"password='a\\' b'"`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		if !json.Valid([]byte(doc)) {
			return
		}
		got := JSON(json.RawMessage(doc))
		if !json.Valid(got) {
			t.Fatalf("JSON(%s) = %s: not JSON", doc, got)
		}
		if again := JSON(got); string(again) != string(got) {
			t.Fatalf("JSON(JSON(%s)) = %s, want %s", doc, again, got)
		}
		// Every string reads as String gives it.
		var in, out any
		if json.Unmarshal([]byte(doc), &in) != nil || json.Unmarshal(got, &out) != nil {
			t.Fatal("unmarshal")
		}
		if want := shownValue(in); !reflect.DeepEqual(out, want) {
			t.Fatalf("JSON(%s) = %s, want %v", doc, got, want)
		}
	})
}

// shownValue is v, decoded JSON, with each string as String gives it.
func shownValue(v any) any {
	switch v := v.(type) {
	case string:
		return String(v)
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = shownValue(e)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			out[String(k)] = shownValue(e)
		}
		return out
	}
	return v
}

func TestRunAndEvents(t *testing.T) {
	t.Parallel()
	const url = "https://user:s3cret@api.example.com/charge?token=abc123"
	in := json.RawMessage(`{"url":"` + url + `"}`)
	run := &store.Run{ID: "r-1", Input: in, Output: in,
		Error: &store.ErrorInfo{Type: "HTTP5xx", Message: "post " + url + ": 503", Stack: "at " + url}}
	kept := *run
	keptErr := *run.Error
	shown := Run(run)
	if !reflect.DeepEqual(*run, kept) || !reflect.DeepEqual(*run.Error, keptErr) {
		t.Errorf("Run changed its argument: %+v", run)
	}
	events := []store.Event{{Seq: 1, Type: store.EventRunStarted, Input: in},
		{Seq: 2, Type: store.EventAttemptFailed, Error: run.Error},
		{Seq: 3, Type: store.EventRunCancelled, Reason: "stop " + url, Output: in}}
	keptEvents := append([]store.Event(nil), events...)
	shownEvents := Events(events)
	if !reflect.DeepEqual(events, keptEvents) || !reflect.DeepEqual(*events[1].Error, keptErr) {
		t.Errorf("Events changed its argument: %+v", events)
	}
	b, err := json.Marshal(map[string]any{"run": shown, "events": shownEvents})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "s3cret") || strings.Contains(string(b), "abc123") || strings.Count(string(b), Mask) != 18 {
		t.Errorf("shown: %s", b)
	}
	if runs := Runs([]*store.Run{run}); len(runs) != 1 || !reflect.DeepEqual(runs[0], shown) {
		t.Errorf("Runs = %+v, want [%+v]", runs, shown)
	}
	if Run(nil) != nil || Runs(nil) != nil || Events(nil) != nil {
		t.Error("Run(nil), Runs(nil) or Events(nil) is not nil")
	}
}

// BenchmarkJSON: a flow run's input, which holds its flow, with a URL
// to mask, and one with nothing to mask.
func BenchmarkJSON(b *testing.B) {
	flow := `{"flow":{"flow":"pay","steps":{"quote":{"http":"https://pricing.internal/quote","input":{"sku":"{{ input.sku }}"}},` +
		`"charge":{"http":"https://shop:s3cret@pay.example/charge?token=abc123","needs":["quote"],"policy":"[retry: 5, backoff: 200ms]"}},` +
		`"goals":["charge"]},"input":{"sku":"espresso","qty":2,"note":"leave at the door"}}`
	for _, c := range []struct{ name, doc string }{
		{"secret", flow},
		{"clean", strings.ReplaceAll(strings.ReplaceAll(flow, "shop:s3cret@", ""), "?token=abc123", "")},
	} {
		b.Run(c.name, func(b *testing.B) {
			doc := json.RawMessage(c.doc)
			b.ReportAllocs()
			for b.Loop() {
				JSON(doc)
			}
		})
	}
}
