package flow

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v4"

	"reprise/httpstep"
	"reprise/retry"
)

// The keys a flow file and its steps may have, in the order docs/flows.md
// gives them.
var (
	flowKeys = []string{"flow", "input_schema", "steps", "goals"}
	stepKeys = []string{"http", "pull", "step", "input", "needs", "foreach", "policy", "work_config", "parallelism", "optional"}
)

var (
	// A flow's name goes into workflow and step names.
	flowNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$`)
	// A step's name is an identifier, so that steps.NAME.output reads.
	stepNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	// celReserved are the words CEL keeps for itself.
	celReserved = []string{"as", "break", "const", "continue", "else", "false", "for", "function", "if", "import",
		"in", "let", "loop", "package", "namespace", "null", "return", "true", "var", "void", "while"}
)

// Bounds of a flow file, so that checking one takes bounded time and
// memory whatever it holds.
const (
	// MaxFileSize is the most bytes a flow file may have.
	MaxFileSize = 4 << 20
	// maxSteps is the most steps a flow may have; it bounds every list
	// of steps in the file too (needs, goals).
	maxSteps = 1000
	// maxVisits bounds the values a file may stand for, aliases expanded.
	maxVisits = 100_000
)

// Parse reads a flow file, YAML or JSON (JSON is YAML), and checks all of
// it before anything runs. file names the file in errors. The error, when
// there is one, is an ErrorList of the faults found (the first hundred),
// each with its line and column and what was expected there.
func Parse(file string, src []byte) (*Flow, error) {
	c := &collector{file: file}
	if len(src) > MaxFileSize {
		c.add(Pos{}, "the file has %d bytes; a flow file has at most %d", len(src), MaxFileSize)
		return nil, c.err()
	}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc, more yaml.Node
	err := dec.Decode(&doc)
	if err == nil {
		err = dec.Decode(&more)
		if err == nil {
			c.add(pos(&more), "a second YAML document (---) starts here: a flow file holds one")
			return nil, c.err()
		}
	}
	var le *yaml.LoadError
	switch {
	case errors.Is(err, io.EOF):
	case errors.As(err, &le):
		c.add(Pos{le.Mark.Line, le.Mark.Column}, "not valid YAML: %s", le.Message)
		return nil, c.err()
	case err != nil:
		c.add(Pos{}, "%v", err)
		return nil, c.err()
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		c.add(Pos{1, 1}, "the file is empty: want a mapping with flow and steps")
		return nil, c.err()
	}
	p := &parser{c: c, lines: bytes.Split(src, []byte("\n")), f: &Flow{byName: map[string]*Step{}}}
	p.flow(doc.Content[0])
	if err := c.err(); err != nil {
		return nil, err
	}
	p.f.canonical = p.f.canonicalJSON(func(u string) string { return u })
	return p.f, nil
}

type parser struct {
	c     *collector
	lines [][]byte
	f     *Flow
	// stepNodes holds each step's mapping, for the checks that need
	// every step known.
	stepNodes map[string]*yaml.Node
	goalsNode *yaml.Node
	// inputs and foreaches hold the nodes of each step's input and
	// foreach.
	inputs, foreaches map[string]*yaml.Node
	// visits counts the values converted or searched: aliases can make a
	// small file stand for a huge (or endless) value.
	visits int
	tooBig bool
}

// visit counts one value, and reports whether the file is still within
// bounds.
func (p *parser) visit(n *yaml.Node) bool {
	p.visits++
	if p.visits <= maxVisits {
		return true
	}
	if !p.tooBig {
		p.tooBig = true
		p.c.add(pos(n), "the file stands for more than %d values: are aliases (*name) expanding without end?", maxVisits)
	}
	return false
}

func pos(n *yaml.Node) Pos { return Pos{n.Line, n.Column} }

// deref follows an alias.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

// describe says what a node is, for messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return n.Value
		case "!!int", "!!float":
			return "the number " + n.Value
		}
		return strconv.Quote(n.Value)
	}
	return "nothing"
}

// pairs returns a mapping's keys and values, reporting keys that are not
// strings or are given twice.
func (p *parser) pairs(n *yaml.Node) (keys []*yaml.Node, vals []*yaml.Node) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			p.c.add(pos(k), "a key must be a string, not %s", describe(k))
			continue
		}
		if seen[k.Value] {
			p.c.add(pos(k), "key %q is given twice", k.Value)
			continue
		}
		seen[k.Value] = true
		keys, vals = append(keys, k), append(vals, v)
	}
	return keys, vals
}

func (p *parser) flow(n *yaml.Node) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		p.c.add(pos(n), "want a mapping with flow and steps, not %s", describe(n))
		return
	}
	var stepsNode, nameNode *yaml.Node
	keys, vals := p.pairs(n)
	for i, k := range keys {
		v := vals[i]
		switch k.Value {
		case "flow":
			nameNode = k
			if name, ok := p.str(v, "the flow's name"); ok {
				if err := CheckName(name); err != nil {
					p.c.add(pos(v), "%v", err)
				}
				p.f.Name = name
			}
		case "input_schema":
			p.inputSchema(v)
		case "steps":
			stepsNode = k
			p.steps(v)
		case "goals":
			p.goalsNode = v
		default:
			p.c.add(pos(k), "unknown key %q%s: a flow has %s", k.Value, didYouMean(k.Value, flowKeys), strings.Join(flowKeys, ", "))
		}
	}
	if nameNode == nil {
		p.c.add(pos(n), "flow has no name: want flow: NAME")
	}
	if stepsNode == nil {
		p.c.add(pos(n), "flow has no steps: want steps: with one step or more")
	}
	if stepsNode == nil || len(p.f.Steps) == 0 {
		return
	}
	p.graph()
	p.goals()
	p.references()
}

// str reads a string scalar.
func (p *parser) str(v *yaml.Node, what string) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		p.c.add(pos(v), "%s: want a string, not %s", what, describe(v))
		return "", false
	}
	return v.Value, true
}

func (p *parser) inputSchema(v *yaml.Node) {
	if v.Kind != yaml.MappingNode && !(v.Kind == yaml.ScalarNode && v.ShortTag() == "!!bool") {
		p.c.add(pos(v), "input_schema: want a JSON Schema (a mapping, or true or false), not %s", describe(v))
		return
	}
	b, ok := p.json(v)
	if !ok {
		return
	}
	s, err := compileSchema(b)
	if err != nil {
		p.c.add(pos(v), "input_schema is not a valid JSON Schema: %s", deepest(err.Error()))
		return
	}
	p.f.InputSchema, p.f.schema = b, s
}

func (p *parser) steps(v *yaml.Node) {
	if v.Kind != yaml.MappingNode {
		p.c.add(pos(v), "steps: want a mapping of step names to steps, not %s", describe(v))
		return
	}
	if len(v.Content) == 0 {
		p.c.add(pos(v), "steps is empty: want one step or more")
		return
	}
	if n := len(v.Content) / 2; n > maxSteps {
		p.c.add(pos(v), "steps: %d steps; a flow has at most %d", n, maxSteps)
		return
	}
	p.stepNodes = map[string]*yaml.Node{}
	p.inputs = map[string]*yaml.Node{}
	p.foreaches = map[string]*yaml.Node{}
	keys, vals := p.pairs(v)
	for i, k := range keys {
		name := k.Value
		switch {
		case !stepNameRE.MatchString(name):
			p.c.add(pos(k), "step name %q: want a letter or '_', then up to 63 letters, digits or '_'", name)
		case slices.Contains(celReserved, name):
			p.c.add(pos(k), "step name %q is a word expressions keep for themselves: choose another", name)
		}
		s := &Step{Name: name, pos: pos(k)}
		p.f.Steps = append(p.f.Steps, s)
		p.f.byName[name] = s
		p.step(s, vals[i])
	}
}

func (p *parser) step(s *Step, n *yaml.Node) {
	if n.Kind != yaml.MappingNode {
		p.c.add(pos(n), "step %s: want a mapping with http, pull or step, not %s", s.Name, describe(n))
		return
	}
	p.stepNodes[s.Name] = n
	var kinds []*yaml.Node
	var policyNode, workNode, parNode *yaml.Node
	keys, vals := p.pairs(n)
	for i, k := range keys {
		v := vals[i]
		switch k.Value {
		case "http":
			kinds = append(kinds, k)
			if u, ok := p.str(v, "http"); ok {
				if err := httpstep.CheckURL(u); err != nil {
					p.c.add(pos(v), "http: bad URL: %v", err)
				}
				s.Kind, s.URL = KindHTTP, u
			}
		case "pull":
			kinds = append(kinds, k)
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Value != "true" {
				p.c.add(pos(v), "pull: want true, not %s", describe(v))
			}
			s.Kind = KindPull
		case "step":
			kinds = append(kinds, k)
			if t, ok := p.str(v, "step"); ok {
				if t == "" || strings.ContainsFunc(t, func(r rune) bool { return r < ' ' || r == 0x7f }) {
					p.c.add(pos(v), "step: want the name of a registered step")
				}
				s.Kind, s.Target = KindStep, t
			}
		case "input":
			p.inputs[s.Name] = v
			if b, ok := p.json(v); ok {
				s.Input = b
			}
		case "needs":
			s.Needs = p.needs(v)
		case "foreach":
			p.foreaches[s.Name] = v
			switch {
			case v.Kind == yaml.SequenceNode:
			case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str" && hasTemplate(v.Value):
			default:
				p.c.add(pos(v), "foreach: want a reference to a list, such as \"{{ input.items }}\", or a list, not %s", describe(v))
				continue
			}
			if b, ok := p.json(v); ok {
				s.Foreach = b
			}
		case "policy":
			policyNode = v
			p.policy(s, v)
		case "work_config":
			workNode = v
			p.workConfig(s, v)
		case "parallelism":
			parNode = v
			n, err := strconv.Atoi(v.Value)
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || err != nil || n < 1 {
				p.c.add(pos(v), "parallelism: want a whole number of 1 or more, not %s", describe(v))
				continue
			}
			s.Parallelism = n
		case "optional":
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" {
				p.c.add(pos(v), "optional: want true or false, not %s", describe(v))
				continue
			}
			s.Optional = v.Value == "true"
		default:
			p.c.add(pos(k), "step %s: unknown key %q%s: a step has %s", s.Name, k.Value, didYouMean(k.Value, stepKeys), strings.Join(stepKeys, ", "))
		}
	}
	switch {
	case len(kinds) == 0:
		p.c.add(pos(n), "step %s: want one of http: URL, pull: true or step: NAME", s.Name)
	case len(kinds) > 1:
		p.c.add(pos(kinds[1]), "step %s: %s and %s: want only one of http, pull and step", s.Name, kinds[0].Value, kinds[1].Value)
	}
	if policyNode != nil && workNode != nil {
		p.c.add(pos(workNode), "step %s: give policy or work_config, not both", s.Name)
	}
	if parNode != nil && p.foreaches[s.Name] == nil {
		p.c.add(pos(parNode), "step %s: parallelism bounds the work items of a foreach step, and this step has no foreach", s.Name)
	}
}

func (p *parser) needs(v *yaml.Node) []string {
	if v.Kind != yaml.SequenceNode {
		p.c.add(pos(v), "needs: want a list of step names, such as [quote], not %s", describe(v))
		return nil
	}
	if len(v.Content) > maxSteps {
		p.c.add(pos(v), "needs lists %d steps; a flow has at most %d", len(v.Content), maxSteps)
		return nil
	}
	var out []string
	listed := map[string]bool{}
	for _, e := range v.Content {
		e = deref(e)
		name, ok := p.str(e, "needs")
		if !ok {
			continue
		}
		if listed[name] {
			p.c.add(pos(e), "needs: %s is listed twice", name)
			continue
		}
		listed[name] = true
		out = append(out, name)
	}
	return out
}

func (p *parser) policy(s *Step, v *yaml.Node) {
	var text string
	switch {
	case v.Kind == yaml.ScalarNode && v.ShortTag() == "!!str":
		text = v.Value
	case v.Kind == yaml.MappingNode:
		b, ok := p.json(v)
		if !ok {
			return
		}
		text = string(b)
	default:
		p.c.add(pos(v), "policy: want a policy such as \"[retry: 3, backoff: 1s]\", not %s", describe(v))
		return
	}
	pol, err := retry.ParseAny(text)
	if err != nil {
		var se *retry.SyntaxError
		if errors.As(err, &se) && v.Kind == yaml.ScalarNode {
			p.c.add(p.textPos(v, se.Line, se.Column), "policy: %s", se.Msg)
			return
		}
		p.c.add(pos(v), "policy: %v", err)
		return
	}
	s.Policy = &pol
}

func (p *parser) workConfig(s *Step, v *yaml.Node) {
	if v.Kind != yaml.MappingNode {
		p.c.add(pos(v), "work_config: want a mapping such as {max_retries: 3, backoff: 500}, not %s", describe(v))
		return
	}
	b, ok := p.json(v)
	if !ok {
		return
	}
	pol, err := retry.ParseWorkConfig(b)
	if err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "work_config") {
			msg = "work_config: " + msg
		}
		p.c.add(pos(v), "%s", msg)
		return
	}
	s.Policy = &pol
}

// textPos is the place in the file of line and col (from 1, in
// characters) of scalar v's value.
func (p *parser) textPos(v *yaml.Node, line, col int) Pos {
	switch v.Style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		l := v.Line + line
		if l-1 < len(p.lines) {
			text := string(p.lines[l-1])
			indent := len(text) - len(strings.TrimLeft(text, " "))
			return Pos{l, indent + col}
		}
		return pos(v)
	case yaml.DoubleQuotedStyle, yaml.SingleQuotedStyle:
		if line == 1 {
			return Pos{v.Line, v.Column + col}
		}
	default:
		if line == 1 {
			return Pos{v.Line, v.Column + col - 1}
		}
	}
	return Pos{v.Line + line - 1, col}
}

// offsetPos is the place of the character at offset off of scalar v's
// value.
func (p *parser) offsetPos(v *yaml.Node, off int) Pos {
	line, col := 1, 1
	for i, r := range []rune(v.Value) {
		if i == off {
			break
		}
		if r == '\n' {
			line, col = line+1, 1
			continue
		}
		col++
	}
	return p.textPos(v, line, col)
}

// json converts a YAML value to JSON, keeping the order of mapping keys.
func (p *parser) json(n *yaml.Node) (json.RawMessage, bool) {
	var b bytes.Buffer
	ok := p.writeJSON(&b, n, 0)
	return b.Bytes(), ok
}

func (p *parser) writeJSON(b *bytes.Buffer, n *yaml.Node, depth int) bool {
	n = deref(n)
	if !p.visit(n) {
		return false
	}
	if depth > 100 {
		p.c.add(pos(n), "values nest more than 100 deep")
		return false
	}
	switch n.Kind {
	case yaml.MappingNode:
		b.WriteByte('{')
		keys, vals := p.pairs(n)
		ok := true
		for i, k := range keys {
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(quote(k.Value))
			b.WriteByte(':')
			ok = p.writeJSON(b, vals[i], depth+1) && ok
		}
		b.WriteByte('}')
		return ok && len(keys)*2 == len(n.Content)
	case yaml.SequenceNode:
		b.WriteByte('[')
		ok := true
		for i, e := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			ok = p.writeJSON(b, e, depth+1) && ok
		}
		b.WriteByte(']')
		return ok
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			b.WriteString("null")
		case "!!bool":
			var v bool
			if err := n.Decode(&v); err != nil {
				p.c.add(pos(n), "%v", err)
				return false
			}
			b.WriteString(strconv.FormatBool(v))
		case "!!int":
			var v int64
			if err := n.Decode(&v); err != nil {
				p.c.add(pos(n), "the number %s does not fit in 64 bits", n.Value)
				return false
			}
			b.WriteString(strconv.FormatInt(v, 10))
		case "!!float":
			var v float64
			if err := n.Decode(&v); err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
				p.c.add(pos(n), "%s is not a number JSON can hold", n.Value)
				return false
			}
			js, _ := json.Marshal(v)
			b.Write(js)
		default: // strings, and timestamps and the like as written
			if !utf8.ValidString(n.Value) {
				p.c.add(pos(n), "a string that is not UTF-8")
				return false
			}
			b.Write(quote(n.Value))
		}
		return true
	}
	p.c.add(pos(n), "want a value, not %s", describe(n))
	return false
}

// deepest returns the most indented line of a message that lists nested
// causes (a JSON Schema error does), which says what is wrong, or the
// message itself.
func deepest(msg string) string {
	best, depth := msg, -1
	for _, line := range strings.Split(msg, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if d := len(line) - len(trimmed); d > depth && strings.HasPrefix(trimmed, "- ") {
			best, depth = strings.TrimPrefix(trimmed, "- "), d
		}
	}
	return best
}
