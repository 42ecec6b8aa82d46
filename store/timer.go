package store

// TimerFired returns the event TimerFire appends for the due timer at
// position of a run's execution: TimerFired{Execution, Position}.
func TimerFired(execution, position int) Event {
	return Event{Type: EventTimerFired, Execution: execution, Position: position}
}
