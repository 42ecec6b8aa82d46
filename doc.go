// Package reprise is a durable execution engine in which retries are
// first-class: every step a workflow takes carries a retry policy, the engine
// enforces it across crashes and restarts, and every attempt lands in the
// run's history.
//
// A workflow is ordinary Go code. Each time it calls a step, the engine either
// returns the step's recorded outcome from the history (replay) or schedules
// the step as a task in a durable queue and parks the workflow until the
// outcome exists. The Store is the only source of truth.
package reprise
