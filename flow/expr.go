package flow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"cel.dev/cel-go/common/types/traits"
)

// What is inside {{ }} is a CEL expression (cel.dev), over three variables:
// input (the run's input), item (the work item, in a foreach step's input)
// and steps (steps.NAME.output is the output of step NAME). A string that
// is one reference and nothing else takes the reference's value, of any
// JSON type; a string that mixes text and references is a string, each
// reference written in it (a string as it is, anything else as JSON).

// costLimit bounds the work of one evaluation (CEL's cost units: about
// one per operation, and one per element a comprehension visits).
const costLimit = 1_000_000

var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("input", cel.DynType),
		cel.Variable("item", cel.DynType),
		cel.Variable("steps", cel.MapType(cel.StringType, cel.DynType)),
	)
})

// A template is a string of the file with {{ }} references in it.
type template struct {
	parts []part
	// whole says the string is one reference and nothing else (spaces
	// aside): its value keeps its JSON type.
	whole bool
}

// A part is literal text, or an expression when prg is set.
type part struct {
	text string
	prg  cel.Program
}

// exprError is an error in a template: off is the character offset in
// the template's string it is at.
type exprError struct {
	off int
	msg string
}

// scope is what a template may refer to.
type scope struct {
	// item says the template may use item (a foreach step's input).
	item bool
	// step names the referrer, for messages; steps holds the steps it may
	// refer to: those it needs, transitively.
	step  string
	steps map[string]bool
}

// hasTemplate reports whether s holds a {{.
func hasTemplate(s string) bool { return strings.Contains(s, "{{") }

// compileTemplate compiles the references of s.
func compileTemplate(s string, sc scope) (*template, []exprError) {
	env, err := celEnv()
	if err != nil {
		return nil, []exprError{{0, fmt.Sprintf("expression environment: %v", err)}}
	}
	var t template
	var errs []exprError
	rest, off := s, 0 // off: characters of s before rest
	exprs := 0
	for {
		i := strings.Index(rest, "{{")
		if i < 0 {
			if rest != "" {
				t.parts = append(t.parts, part{text: rest})
			}
			break
		}
		if i > 0 {
			t.parts = append(t.parts, part{text: rest[:i]})
		}
		open := off + utf8.RuneCountInString(rest[:i])
		body := rest[i+2:]
		j := strings.Index(body, "}}")
		if j < 0 {
			errs = append(errs, exprError{open, "{{ is not closed: want {{ expression }}"})
			return nil, errs
		}
		src := body[:j]
		start := open + 2 // characters of s before src
		exprs++
		if strings.TrimSpace(src) == "" {
			errs = append(errs, exprError{open, "empty {{ }}: want an expression such as {{ input.id }}"})
		} else if prg, perrs := compileExpr(env, src, sc); len(perrs) > 0 {
			for _, e := range perrs {
				errs = append(errs, exprError{start + e.off, e.msg})
			}
		} else {
			t.parts = append(t.parts, part{text: src, prg: prg})
		}
		consumed := rest[:i+2+j+2]
		off += utf8.RuneCountInString(consumed)
		rest = rest[i+2+j+2:]
	}
	if len(errs) > 0 {
		return nil, errs
	}
	t.whole = exprs == 1 && strings.TrimSpace(strings.Join(texts(t.parts), "")) == ""
	if t.whole {
		for _, p := range t.parts {
			if p.prg != nil {
				t.parts = []part{p}
			}
		}
	}
	return &t, nil
}

// texts returns the literal text of parts.
func texts(parts []part) []string {
	var out []string
	for _, p := range parts {
		if p.prg == nil {
			out = append(out, p.text)
		}
	}
	return out
}

// compileExpr compiles one expression and checks what it refers to; the
// offsets of its errors are characters into src.
func compileExpr(env *cel.Env, src string, sc scope) (cel.Program, []exprError) {
	checked, iss := env.Compile(src)
	if iss != nil && iss.Err() != nil {
		var errs []exprError
		for _, e := range iss.Errors() {
			errs = append(errs, exprError{offsetOf(src, e.Location.Line(), e.Location.Column()), e.Message})
		}
		return nil, errs
	}
	native := checked.NativeRep()
	info := native.SourceInfo()
	var errs []exprError
	at := func(id int64) int {
		loc := info.GetStartLocation(id)
		return offsetOf(src, loc.Line(), loc.Column())
	}
	for _, e := range ast.MatchDescendants(ast.NavigateAST(native), ast.KindMatcher(ast.IdentKind)) {
		switch e.AsIdent() {
		case "item":
			if !sc.item {
				errs = append(errs, exprError{at(e.ID()), "item is only defined in the input of a step with foreach"})
			}
		case "steps":
			name, ok := stepRef(e)
			switch {
			case !ok:
				errs = append(errs, exprError{at(e.ID()), "refer to a step's output as steps.NAME.output"})
			case !sc.steps[name]:
				errs = append(errs, exprError{at(e.ID()), fmt.Sprintf("step %s refers to steps.%s but does not need it: add %s to its needs", sc.step, name, name)})
			}
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	prg, err := env.Program(checked, cel.CostLimit(costLimit))
	if err != nil {
		return nil, []exprError{{0, err.Error()}}
	}
	return prg, nil
}

// stepRef returns the step name of a use of steps, which must be
// steps.NAME.output or steps["NAME"].output.
func stepRef(e ast.NavigableExpr) (string, bool) {
	parent, ok := e.Parent()
	if !ok {
		return "", false
	}
	var name string
	switch parent.Kind() {
	case ast.SelectKind:
		name = parent.AsSelect().FieldName()
	case ast.CallKind:
		call := parent.AsCall()
		if call.FunctionName() != "_[_]" || len(call.Args()) != 2 || call.Args()[1].Kind() != ast.LiteralKind {
			return "", false
		}
		s, ok := call.Args()[1].AsLiteral().(types.String)
		if !ok {
			return "", false
		}
		name = string(s)
	default:
		return "", false
	}
	grand, ok := parent.Parent()
	if !ok || grand.Kind() != ast.SelectKind || grand.AsSelect().FieldName() != "output" {
		return "", false
	}
	return name, true
}

// offsetOf turns CEL's location (line from 1, column from 0, in
// characters) into a character offset into src.
func offsetOf(src string, line, col int) int {
	off := 0
	for l := 1; l < line; l++ {
		i := strings.IndexByte(src, '\n')
		if i < 0 {
			break
		}
		off += utf8.RuneCountInString(src[:i+1])
		src = src[i+1:]
	}
	return off + max(col, 0)
}

// vars are the values a template is evaluated with.
type vars struct {
	input any
	item  any
	steps map[string]any
}

func (v *vars) activation() map[string]any {
	return map[string]any{"input": v.input, "item": v.item, "steps": v.steps}
}

// eval evaluates t: a JSON value for a whole reference, else a string.
func (t *template) eval(v *vars) (any, error) {
	if t.whole {
		return evalExpr(t.parts[0], v)
	}
	var b strings.Builder
	for _, p := range t.parts {
		if p.prg == nil {
			b.WriteString(p.text)
			continue
		}
		val, err := evalExpr(p, v)
		if err != nil {
			return nil, err
		}
		if s, ok := val.(string); ok {
			b.WriteString(s)
			continue
		}
		js, err := json.Marshal(val)
		if err != nil {
			return nil, fmt.Errorf("{{%s}}: %w", p.text, err)
		}
		b.Write(js)
	}
	return b.String(), nil
}

func evalExpr(p part, v *vars) (any, error) {
	out, _, err := p.prg.Eval(v.activation())
	if err != nil {
		return nil, fmt.Errorf("{{%s}}: %w", p.text, err)
	}
	j, err := toJSON(out)
	if err != nil {
		return nil, fmt.Errorf("{{%s}}: %w", p.text, err)
	}
	return j, nil
}

// toJSON turns a CEL value into the Go form of a JSON value: nil, bool,
// int64, uint64, float64, string, []any or map[string]any.
func toJSON(v ref.Val) (any, error) {
	switch v := v.(type) {
	case types.Null:
		return nil, nil
	case types.Bool:
		return bool(v), nil
	case types.Int:
		return int64(v), nil
	case types.Uint:
		return uint64(v), nil
	case types.Double:
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return nil, fmt.Errorf("%v is not a JSON number", f)
		}
		return f, nil
	case types.String:
		return string(v), nil
	case types.Bytes:
		return nil, errors.New("bytes have no JSON form: convert them with string()")
	case traits.Lister:
		n, ok := v.Size().(types.Int)
		if !ok {
			return nil, errors.New("a list of unknown size")
		}
		out := make([]any, 0, int(n))
		for i := range int(n) {
			e, err := toJSON(v.Get(types.Int(i)))
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		return out, nil
	case traits.Mapper:
		out := map[string]any{}
		it := v.Iterator()
		for it.HasNext() == types.True {
			k := it.Next()
			ks, ok := k.(types.String)
			if !ok {
				return nil, fmt.Errorf("a map key %v is not a string: JSON objects have string keys", k)
			}
			e, err := toJSON(v.Get(k))
			if err != nil {
				return nil, err
			}
			out[string(ks)] = e
		}
		return out, nil
	case *types.Err:
		return nil, v
	}
	if s, ok := v.ConvertToType(types.StringType).(types.String); ok {
		return string(s), nil // a timestamp or a duration
	}
	return nil, fmt.Errorf("a %s has no JSON form", v.Type())
}

// fromJSON decodes a JSON document into the values expressions see:
// integers as int64 where they fit, other numbers as float64.
func fromJSON(b []byte) (any, error) {
	if len(b) == 0 {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return numbers(v), nil
}

// numbers replaces the json.Numbers in v.
func numbers(v any) any {
	switch v := v.(type) {
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	case []any:
		for i := range v {
			v[i] = numbers(v[i])
		}
	case map[string]any:
		for k := range v {
			v[k] = numbers(v[k])
		}
	}
	return v
}

// A value is a JSON value of the file (a step's input, a foreach) with the
// templates in its strings compiled.
type value struct {
	raw   json.RawMessage
	tmpls map[string]*template
}

// eval returns the value with its templates evaluated, as JSON.
func (val *value) eval(v *vars) (json.RawMessage, error) {
	if len(val.tmpls) == 0 {
		return val.raw, nil
	}
	doc, err := fromJSON(val.raw)
	if err != nil {
		return nil, err
	}
	out, err := val.fill(doc, v)
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

// evalAny is eval giving the Go form.
func (val *value) evalAny(v *vars) (any, error) {
	doc, err := fromJSON(val.raw)
	if err != nil {
		return nil, err
	}
	return val.fill(doc, v)
}

func (val *value) fill(doc any, v *vars) (any, error) {
	switch d := doc.(type) {
	case string:
		if t := val.tmpls[d]; t != nil {
			return t.eval(v)
		}
	case []any:
		for i := range d {
			e, err := val.fill(d[i], v)
			if err != nil {
				return nil, err
			}
			d[i] = e
		}
	case map[string]any:
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		sort.Strings(keys) // the first error is the same every time
		for _, k := range keys {
			e, err := val.fill(d[k], v)
			if err != nil {
				return nil, err
			}
			d[k] = e
		}
	}
	return doc, nil
}
