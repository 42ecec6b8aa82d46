package flow_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"reprise/flow"
)

var update = flag.Bool("update", false, "rewrite the golden files of the tests")

// TestParseErrors reads every file of testdata/invalid and compares the
// errors Parse finds with the file's .golden.
func TestParseErrors(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/invalid/*.*")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		if strings.HasSuffix(file, ".golden") {
			continue
		}
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			_, err = flow.Parse(filepath.Base(file), src)
			if err == nil {
				t.Fatal("no error")
			}
			var list flow.ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error %T, want an ErrorList", err)
			}
			got := err.Error() + "\n"
			golden := strings.TrimSuffix(file, filepath.Ext(file)) + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(want) {
				t.Errorf("errors:\n%s\nwant:\n%s", got, want)
			}
		})
	}
}

const example = `
flow: fulfil-order            # name
input_schema: {type: object, required: [sku, warehouses]}
steps:
  quote:
    http: https://pricing.example.com/quote
    input: {sku: "{{ input.sku }}", qty: "{{ input.qty }}"}
    policy: "[HTTP5xx -> retry: 5, backoff: 200ms] [timeout: 2s]"
  reserve:
    needs: [quote]
    foreach: "{{ input.warehouses }}"
    http: https://stock.example.com/reserve
    input: {warehouse: "{{ item }}", price: "{{ steps.quote.output.price }}"}
    work_config: {max_retries: -1, backoff: 500, max_backoff: 10000, backoff_type: exponential}
    parallelism: 4
  notify:
    needs: [reserve]
    http: https://mail.example.com/send
    optional: true
  audit:
    pull: true
  charge:
    step: payments.charge
    needs: [quote]
`

func TestParseCanonical(t *testing.T) {
	t.Parallel()
	f, err := flow.Parse("example.yaml", []byte(example))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(f.Goals, ","), "reserve,audit,charge"; got != want {
		t.Errorf("default goals %s, want %s: the steps without dependents, optional ones left out", got, want)
	}
	want := `{"flow":"fulfil-order","input_schema":{"type":"object","required":["sku","warehouses"]},"steps":{` +
		`"quote":{"http":"https://pricing.example.com/quote","input":{"sku":"{{ input.sku }}","qty":"{{ input.qty }}"},"policy":"[HTTP5xx -> retry: 5, backoff: 200ms] [timeout: 2s]"},` +
		`"reserve":{"http":"https://stock.example.com/reserve","needs":["quote"],"foreach":"{{ input.warehouses }}","input":{"warehouse":"{{ item }}","price":"{{ steps.quote.output.price }}"},"policy":"[retry: unlimited, backoff: 500ms, max_backoff: 10s]","parallelism":4},` +
		`"notify":{"http":"https://mail.example.com/send","needs":["reserve"],"optional":true},` +
		`"audit":{"pull":true},` +
		`"charge":{"step":"payments.charge","needs":["quote"]}},` +
		`"goals":["reserve","audit","charge"]}`
	if got := string(f.Canonical()); got != want {
		t.Errorf("canonical\n%s\nwant\n%s", got, want)
	}
	again, err := flow.Parse("canonical", f.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Canonical()) != want {
		t.Errorf("canonical form read back gives\n%s", again.Canonical())
	}
	if got := f.EngineStep(f.Step("reserve")); got != "fulfil-order.reserve" {
		t.Errorf("engine step %s", got)
	}
	if got := f.EngineStep(f.Step("charge")); got != "payments.charge" {
		t.Errorf("engine step %s", got)
	}
	if f.Workflow() != "flow:fulfil-order" {
		t.Errorf("workflow %s", f.Workflow())
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(example))
	files, _ := filepath.Glob("testdata/invalid/*.*")
	for _, file := range files {
		b, _ := os.ReadFile(file)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		fl, err := flow.Parse("fuzz", src)
		if err != nil {
			var list flow.ErrorList
			if !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("error %v is not an ErrorList", err)
			}
			return
		}
		again, err := flow.Parse("canonical", fl.Canonical())
		if err != nil {
			t.Fatalf("canonical form %s: %v", fl.Canonical(), err)
		}
		if string(again.Canonical()) != string(fl.Canonical()) {
			t.Fatalf("canonical form changes when read back:\n%s\n%s", fl.Canonical(), again.Canonical())
		}
	})
}

// TestParseBounds: a file past the bounds of a flow is refused with an
// error that says which, and a file with many faults reports the first
// hundred: checking a file takes a time and memory bounded by its size.
func TestParseBounds(t *testing.T) {
	t.Parallel()
	steps := func(n int, extra string) string {
		var b strings.Builder
		b.WriteString("flow: big\nsteps:\n")
		for i := range n {
			fmt.Fprintf(&b, "  s%d: {pull: true}\n", i)
		}
		return b.String() + extra
	}
	names := func(n int) string {
		list := make([]string, n)
		for i := range list {
			list[i] = fmt.Sprintf("n%d", i)
		}
		return "[" + strings.Join(list, ", ") + "]"
	}
	for _, c := range []struct {
		name, src, says string
		errors          int
	}{
		{"steps", steps(1001, ""), "steps: 1001 steps; a flow has at most 1000", 1},
		{"needs", steps(1, "  z: {pull: true, needs: "+names(1001)+"}\n"), "needs lists 1001 steps; a flow has at most 1000", 1},
		{"goals", steps(1, "goals: "+names(1001)+"\n"), "goals lists 1001 steps; a flow has at most 1000", 1},
		{"size", "flow: big\n#" + strings.Repeat("x", flow.MaxFileSize) + "\n", "a flow file has at most", 1},
		{"errors", steps(1, "  z: {pull: true, needs: "+names(1000)+"}\n"), "stopped after 100 errors: correct these first", 101},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := flow.Parse("big.yaml", []byte(c.src))
			var list flow.ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("Parse = %v, want an ErrorList", err)
			}
			if len(list) != c.errors || !strings.Contains(list[len(list)-1].Msg, c.says) {
				t.Fatalf("%d error(s), the last %q; want %d, the last saying %q", len(list), list[len(list)-1].Msg, c.errors, c.says)
			}
		})
	}
	// A dense flow is checked at once: each step needs every one before
	// it.
	var b strings.Builder
	b.WriteString("flow: dense\nsteps:\n")
	for i := range 300 {
		need := make([]string, i)
		for j := range need {
			need[j] = fmt.Sprintf("s%d", j)
		}
		fmt.Fprintf(&b, "  s%d: {pull: true, needs: [%s]}\n", i, strings.Join(need, ","))
	}
	f, err := flow.Parse("dense.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Steps) != 300 || strings.Join(f.Goals, ",") != "s299" || len(f.Step("s299").Needs) != 299 {
		t.Fatalf("%d steps, goals %v", len(f.Steps), f.Goals)
	}
}
