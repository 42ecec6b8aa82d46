package reprise

// Notify hands e a store's notice, as its listener would.
func (e *Engine) Notify(n Notice) { e.notice(n) }

// PlainValue is plainValue, for tests.
var PlainValue = plainValue
