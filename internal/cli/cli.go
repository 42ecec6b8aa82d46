// Package cli is the reprise command: a switch of subcommands, each of which
// parses its own flags and writes to the given stdout and stderr.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Exit codes of Main.
const (
	exitOK    = 0
	exitFail  = 1 // the command ran and failed
	exitUsage = 2 // bad arguments or input
)

const usage = `reprise: durable execution with first-class retries

usage: reprise <command> [arguments]

commands:
  demo                        run an order workflow whose steps fail, and show its history
  server                      serve the HTTP API: runs, HTTP steps and pull workers
  bench                       measure the engine: steps/s, retry lateness, memory
  run WORKFLOW                start a run
  runs                        list runs
  show RUN                    show a run
  history RUN                 show a run's history: every attempt, delay and decision
  cancel RUN                  cancel a run
  redrive RUN                 give a run that failed on a step a fresh attempt budget
  signal RUN NAME             send a signal to a run
  policy check '<policy>'     print a retry policy in its canonical form
  policy explain '<policy>'   show what a policy decides, attempt by attempt
  flow check FILE             check a flow file (YAML or JSON) and say what is wrong, where
  flow run FILE               run a flow on the embedded database, and show its history
  flow push FILE              push a flow to a server, as its next version
  flow list, flow show NAME   list a server's flows; show one, in canonical form
  migrate                     create or upgrade a database's schema
  help                        print this help

Run 'reprise <command> -h' for the flags of a command.
`

// Main runs the reprise command with args, the command line without the
// program's name, and returns the exit code: 0 on success, 1 when the
// command failed, 2 for bad arguments or input.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, args := args[0], args[1:]
	stderr = redactWriter{stderr}
	switch cmd {
	case "demo", "bench", "server": // the commands that run an engine
		TuneGC()
	}
	switch cmd {
	case "policy":
		return policyMain(args, stdout, stderr)
	case "demo":
		return demoMain(args, stdout, stderr)
	case "bench":
		return benchMain(args, stdout, stderr)
	case "server":
		return serverMain(args, stdout, stderr)
	case "run":
		return startMain(args, stdout, stderr)
	case "runs":
		return runsMain(args, stdout, stderr)
	case "show":
		return showMain(args, stdout, stderr)
	case "history":
		return historyMain(args, stdout, stderr)
	case "cancel":
		return cancelMain(args, stdout, stderr)
	case "redrive":
		return redriveMain(args, stdout, stderr)
	case "signal":
		return signalMain(args, stdout, stderr)
	case "migrate":
		return migrateMain(args, stdout, stderr)
	case "flow":
		return flowMain(args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "reprise: unknown command %q\n\n%s", cmd, usage)
	return exitUsage
}

// newFlagSet returns a flag set for the command name ("policy explain")
// whose usage starts with the synopsis ("'<policy>' [--json]").
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("reprise "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: reprise %s %s\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses args with fs, flags standing anywhere among the
// positional arguments (a "--" ends the flags), and returns the positional
// ones. When it returns ok false, the command should exit with code: -h
// printed the usage to stdout, and a bad flag its error and the usage to
// stderr.
func parseArgs(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (pos []string, code int, ok bool) {
	fs.SetOutput(io.Discard)
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fs.Usage()
			return nil, exitOK, false
		}
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", fs.Name(), err)
			fs.SetOutput(stderr)
			fs.Usage()
			return nil, exitUsage, false
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), exitOK, true
		}
		if len(rest) == 0 {
			return pos, exitOK, true
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
}

// usageErrorf reports a bad argument of the command fs and returns exitUsage.
func usageErrorf(fs *flag.FlagSet, stderr io.Writer, format string, args ...any) int {
	fmt.Fprintf(stderr, "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	fmt.Fprintf(stderr, "Run '%s -h' for usage.\n", fs.Name())
	return exitUsage
}

// stringsFlag is a flag that may be given many times, each value holding one
// or more comma-separated items.
type stringsFlag []string

func (s *stringsFlag) String() string { return strings.Join(*s, ",") }

func (s *stringsFlag) Set(v string) error {
	for item := range strings.SplitSeq(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return errors.New("empty item")
		}
		*s = append(*s, item)
	}
	return nil
}
