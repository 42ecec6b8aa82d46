// Command reprise is reprise's command line; 'reprise help' lists its
// commands, which live in internal/cli.
package main

import (
	"os"

	"reprise/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
