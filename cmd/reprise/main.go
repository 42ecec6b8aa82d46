// Command reprise inspects retry policies and, with its other subcommands,
// runs and shows reprise workflows. See internal/cli for the commands.
package main

import (
	"os"

	"reprise/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
