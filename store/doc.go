// Package store is the seam between the engine and its database: the Store
// interface a driver implements, the parameters and results of its methods,
// and the records they persist (runs, tasks, history events).
//
// A user of reprise rarely needs it: package reprise names the records a
// user reads (Run, Event). A driver (package sqlite, postgres or memory)
// implements Store and proves it with the storetest suite.
package store
