// Package store is the seam between the engine and its database: the Store
// interface a driver implements, the parameters and results of its methods,
// the records they persist (runs, tasks, history events), and the rules
// that decide what each method appends and changes, which every driver
// calls so that it only persists what they decide.
//
// A user of reprise rarely needs it: package reprise names the records a
// user reads (Run, Event). A driver (package sqlite, postgres or memory)
// implements Store and proves it with the storetest suite.
package store
