package reprise

import "reprise/store"

// Notify hands e a store's notice, as its listener would.
func (e *Engine) Notify(n store.Notice) { e.notice(n) }

// PlainValue is plainValue, for tests.
var PlainValue = plainValue
