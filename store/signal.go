package store

// Received returns the event SignalSend appends to the run's current
// execution: SignalReceived{Signal: Name, Input: Payload}.
func (p *SignalSendParams) Received() Event {
	return Event{Type: EventSignalReceived, Signal: p.Name, Input: p.Payload}
}
