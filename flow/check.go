package flow

// The checks Parse makes once every step is read: needs, cycles and the
// steps' order, goals, and the references in inputs and foreaches.

import (
	"encoding/json"
	"slices"
	"strings"

	"go.yaml.in/yaml/v4"
)

// graph checks needs, finds cycles and orders the steps.
func (p *parser) graph() {
	f := p.f
	for _, s := range f.Steps {
		n := p.stepNodes[s.Name]
		if n == nil {
			continue
		}
		for _, need := range s.Needs {
			if p.c.full() {
				break
			}
			switch {
			case need == s.Name:
				p.c.add(p.needPos(s.Name, need), "step %s needs itself", s.Name)
			case f.byName[need] == nil:
				p.c.add(p.needPos(s.Name, need), "step %s needs %s, which is no step of this flow%s", s.Name, need, didYouMean(need, stepNames(f)))
			}
		}
	}
	// Kahn's algorithm, taking the first step of the file that is free.
	indeg := map[string]int{}
	dependents := map[string][]string{}
	for _, s := range f.Steps {
		for _, need := range s.Needs {
			if f.byName[need] != nil && need != s.Name {
				indeg[s.Name]++
				dependents[need] = append(dependents[need], s.Name)
			}
		}
	}
	placed := map[string]bool{}
	for len(f.order) < len(f.Steps) {
		var next *Step
		for _, s := range f.Steps {
			if !placed[s.Name] && indeg[s.Name] == 0 {
				next = s
				break
			}
		}
		if next == nil {
			p.cycle(placed)
			return
		}
		placed[next.Name] = true
		f.order = append(f.order, next)
		for _, d := range dependents[next.Name] {
			indeg[d]--
		}
	}
	// Each step's after, as bits by place in order first: merging the
	// maps of a flow whose steps each need many would take a time of the
	// steps times the needs.
	place := make(map[string]int, len(f.order))
	for i, s := range f.order {
		place[s.Name] = i
	}
	words := (len(f.order) + 63) / 64
	bits := make([][]uint64, len(f.order))
	for i, s := range f.order {
		b := make([]uint64, words)
		for _, need := range s.Needs {
			if j, ok := place[need]; ok && j < i {
				b[j/64] |= 1 << (j % 64)
				for w, x := range bits[j] {
					b[w] |= x
				}
			}
		}
		bits[i] = b
		s.after = map[string]bool{}
		for j := range i {
			if b[j/64]&(1<<(j%64)) != 0 {
				s.after[f.order[j].Name] = true
			}
		}
	}
}

// cycle reports the cycles among the steps not placed.
func (p *parser) cycle(placed map[string]bool) {
	f := p.f
	reported := map[string]bool{}
	for _, s := range f.Steps {
		if placed[s.Name] || reported[s.Name] {
			continue
		}
		// Walk needs among unplaced steps until a step comes again.
		path := []string{s.Name}
		at := map[string]int{s.Name: 0}
		cur := s
		for {
			var next *Step
			for _, need := range cur.Needs {
				if d := f.byName[need]; d != nil && !placed[need] && need != cur.Name {
					next = d
					break
				}
			}
			if next == nil {
				break
			}
			if i, ok := at[next.Name]; ok {
				loop := append(slices.Clone(path[i:]), next.Name)
				seen := false
				for _, name := range loop {
					seen = seen || reported[name]
				}
				if !seen {
					for _, name := range loop {
						reported[name] = true
					}
					first := f.byName[loop[0]]
					p.c.add(p.needPos(first.Name, loop[1]), "steps %s form a cycle: each needs the next; remove one of these needs",
						strings.Join(reversed(loop), " → "))
				}
				break
			}
			at[next.Name] = len(path)
			path = append(path, next.Name)
			cur = next
		}
		reported[s.Name] = true
	}
}

// reversed returns a cycle of needs written in the order the steps would
// run: a needs b needs a is "b → a → b".
func reversed(loop []string) []string {
	out := slices.Clone(loop)
	slices.Reverse(out)
	return out
}

// needPos is the place where step names need, or the step's.
func (p *parser) needPos(step, need string) Pos {
	n := p.stepNodes[step]
	if n == nil {
		return p.f.byName[step].pos
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value != "needs" {
			continue
		}
		for _, e := range deref(n.Content[i+1]).Content {
			if deref(e).Value == need {
				return pos(deref(e))
			}
		}
	}
	return p.f.byName[step].pos
}

func stepNames(f *Flow) []string {
	names := make([]string, len(f.Steps))
	for i, s := range f.Steps {
		names[i] = s.Name
	}
	return names
}

// goals reads goals, or makes the default: the steps that are not
// optional and that no step needs but optional ones.
func (p *parser) goals() {
	f := p.f
	cyclic := len(f.order) < len(f.Steps)
	if v := p.goalsNode; v != nil {
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			p.c.add(pos(v), "goals: want a list of one step name or more, such as [reserve], not %s", describe(v))
			return
		}
		if len(v.Content) > maxSteps {
			p.c.add(pos(v), "goals lists %d steps; a flow has at most %d", len(v.Content), maxSteps)
			return
		}
		listed := map[string]bool{}
		for _, e := range v.Content {
			if p.c.full() {
				return
			}
			e = deref(e)
			name, ok := p.str(e, "goals")
			if !ok {
				continue
			}
			s := f.byName[name]
			switch {
			case listed[name]:
				p.c.add(pos(e), "goals: %s is listed twice", name)
				continue
			case s == nil:
				p.c.add(pos(e), "goal %s is no step of this flow%s", name, didYouMean(name, stepNames(f)))
			case s.Optional:
				p.c.add(pos(e), "goal %s is optional: a goal must complete for the flow to complete; drop optional or the goal", name)
			case cyclic && s.after == nil:
				p.c.add(pos(e), "goal %s can never run: it needs a step of a cycle", name)
			}
			listed[name] = true
			f.Goals = append(f.Goals, name)
		}
	} else {
		needed := map[string]bool{}
		for _, s := range f.Steps {
			for _, n := range s.Needs {
				needed[n] = needed[n] || !s.Optional
			}
		}
		for _, s := range f.Steps {
			if !needed[s.Name] && !s.Optional {
				f.Goals = append(f.Goals, s.Name)
			}
		}
	}
	f.critical = map[string]bool{}
	for _, g := range f.Goals {
		if s := f.byName[g]; s != nil {
			f.critical[g] = true
			for a := range s.after {
				f.critical[a] = true
			}
		}
	}
}

// references compiles the templates of every step's input and foreach,
// and checks what they refer to.
func (p *parser) references() {
	for _, s := range p.f.Steps {
		sc := scope{step: s.Name, steps: s.after}
		if s.after == nil {
			sc.steps = map[string]bool{} // in a cycle: reported already
		}
		if n := p.foreaches[s.Name]; n != nil && s.Foreach != nil {
			s.foreach = p.compileValue(n, s.Foreach, sc)
			if t := s.foreach.tmpls[n.Value]; n.Kind == yaml.ScalarNode && t != nil && !t.whole {
				p.c.add(pos(n), "foreach: want one reference and nothing else, such as \"{{ input.items }}\"")
			}
		}
		if n := p.inputs[s.Name]; n != nil && s.Input != nil {
			sc.item = s.Foreach != nil
			s.input = p.compileValue(n, s.Input, sc)
		}
		if s.Foreach != nil && s.Input == nil {
			// A work item's input is the item itself.
			s.Input = json.RawMessage(`"{{ item }}"`)
			s.input = &value{raw: s.Input, tmpls: map[string]*template{}}
			t, _ := compileTemplate("{{ item }}", scope{item: true})
			s.input.tmpls["{{ item }}"] = t
		}
	}
}

// compileValue compiles the templates in the strings of n, whose JSON is
// raw.
func (p *parser) compileValue(n *yaml.Node, raw json.RawMessage, sc scope) *value {
	val := &value{raw: raw, tmpls: map[string]*template{}}
	var walk func(n *yaml.Node, depth int)
	walk = func(n *yaml.Node, depth int) {
		n = deref(n)
		if depth > 100 || !p.visit(n) {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if k := n.Content[i]; hasTemplate(k.Value) {
					p.c.add(pos(k), "a key cannot hold a reference: {{ }} goes in values")
				}
				walk(n.Content[i+1], depth+1)
			}
		case yaml.SequenceNode:
			for _, e := range n.Content {
				walk(e, depth+1)
			}
		case yaml.ScalarNode:
			if n.ShortTag() != "!!str" || !hasTemplate(n.Value) {
				return
			}
			if _, done := val.tmpls[n.Value]; done {
				return
			}
			t, errs := compileTemplate(n.Value, sc)
			for _, e := range errs {
				p.c.add(p.offsetPos(n, e.off), "%s", e.msg)
			}
			if t != nil {
				val.tmpls[n.Value] = t
			}
		}
	}
	walk(n, 0)
	return val
}
