package store

// Received returns the event SignalSend appends to the run's current
// execution: SignalReceived{Step: Name, Input: Payload}.
func (p *SignalSendParams) Received() Event {
	return Event{Type: EventSignalReceived, Step: p.Name, Input: p.Payload}
}
