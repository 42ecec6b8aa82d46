package reprise

import (
	"encoding/json"
	"fmt"
	"strings"

	"reprise/retry"
)

// A compiledPolicy is a retry.Policy with what the engine derives from it
// once rather than at every step or attempt: its text and JSON, which the
// store keeps with a scheduled step, and the text of each of its rules,
// which AttemptFailed records as the rule that decided. It is the engine's
// one form of a policy: given (Config, WithPolicy, a step definition) or
// read back from a task (decodePolicy).
type compiledPolicy struct {
	retry.Policy
	text  string
	json  json.RawMessage
	rules []string
}

// compilePolicy validates p and derives its forms.
func compilePolicy(p retry.Policy) (*compiledPolicy, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return newCompiledPolicy(p, b), nil
}

func newCompiledPolicy(p retry.Policy, b json.RawMessage) *compiledPolicy {
	cp := &compiledPolicy{Policy: p, text: p.String(), json: b, rules: make([]string, len(p.Rules))}
	for k := range p.Rules {
		cp.rules[k] = (&retry.Policy{Rules: p.Rules[k : k+1]}).String()
	}
	return cp
}

// decodePolicy reads a task's policy, caching by its encoding.
func (e *Engine) decodePolicy(b json.RawMessage) (*compiledPolicy, error) {
	if p, ok := e.decoded.Load(string(b)); ok {
		return p.(*compiledPolicy), nil
	}
	var p retry.Policy
	if len(b) > 0 {
		if err := json.Unmarshal(b, &p); err != nil {
			return nil, fmt.Errorf("decode policy: %w", err)
		}
	}
	key := string(b)
	cp := newCompiledPolicy(p, json.RawMessage(key)) // a copy: b is the task's
	e.decoded.Store(key, cp)
	return cp, nil
}

// policyFor returns the default policy of a step called without one.
func (e *Engine) policyFor(name string) *compiledPolicy {
	e.mu.Lock()
	s := e.steps[name]
	if s == nil {
		s = e.remote[name]
	}
	e.mu.Unlock()
	if s != nil && s.cfg.policy != nil {
		return s.cfg.policy
	}
	if p, ok := e.policies[name]; ok {
		return p
	}
	best, bestLen := e.defaultPolicy, -1
	for pat, p := range e.policies {
		prefix, ok := strings.CutSuffix(pat, "*")
		if ok && strings.HasPrefix(name, prefix) && len(prefix) > bestLen {
			best, bestLen = p, len(prefix)
		}
	}
	return best
}
