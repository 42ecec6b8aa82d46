package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"reprise/httpapi"
)

// flowClient parses the flags of a flow command that talks to a server,
// and returns its client; on failure it returns the exit code.
func flowClient(name, synopsis string, args []string, stdout, stderr io.Writer, define func(*flag.FlagSet)) (c *httpapi.Client, fs *flag.FlagSet, pos []string, code int, ok bool) {
	fs = newFlagSet(name, synopsis)
	server := fs.String("server", os.Getenv("REPRISE_SERVER"), "the reprise server's `URL` (default $REPRISE_SERVER)")
	token := fs.String("token", "", "bearer token for --server (default $REPRISE_TOKEN)")
	if define != nil {
		define(fs)
	}
	pos, code, ok = parseArgs(fs, args, stdout, stderr)
	if !ok {
		return nil, fs, nil, code, false
	}
	if *server == "" {
		return nil, fs, nil, usageErrorf(fs, stderr, "give the server: --server URL"), false
	}
	c, err := serverClient(*server, *token)
	if err != nil {
		return nil, fs, nil, usageErrorf(fs, stderr, "--server: %v", err), false
	}
	return c, fs, pos, exitOK, true
}

// flowPushMain is "reprise flow push FILE --server URL": the file is
// checked here, then sent as it is, so that the server's errors place
// themselves in it too.
func flowPushMain(args []string, stdout, stderr io.Writer) int {
	c, fs, pos, code, ok := flowClient("flow push", "FILE --server URL [--token TOKEN]", args, stdout, stderr, nil)
	if !ok {
		return code
	}
	defer c.Close()
	if len(pos) != 1 {
		return usageErrorf(fs, stderr, "want one flow file, got %d arguments", len(pos))
	}
	file := pos[0]
	if _, code, ok := readFlow("flow push", file, stderr); !ok {
		return code
	}
	src, err := readFlowFile(file)
	if err != nil {
		fmt.Fprintf(stderr, "reprise flow push: %v\n", err)
		return exitUsage
	}
	contentType := "application/yaml"
	if strings.EqualFold(filepath.Ext(file), ".json") {
		contentType = "application/json"
	}
	f, created, err := c.PushFlow(context.Background(), src, contentType)
	var p *httpapi.Problem
	switch {
	case errors.As(err, &p) && len(p.Errors) > 0:
		for _, e := range p.Errors {
			fmt.Fprintf(stderr, "%s:%d:%d: %s\n", file, e.Line, e.Column, e.Message)
		}
		fmt.Fprintf(stderr, "reprise flow push: the server refused %s: %d error(s)\n", file, len(p.Errors))
		return exitUsage
	case err != nil:
		fmt.Fprintf(stderr, "reprise flow push: %v\n", err)
		return exitFail
	}
	what := "pushed"
	if !created {
		what = "unchanged: the latest version is the same flow"
	}
	fmt.Fprintf(stdout, "flow %s version %d (%s)\n", f.Name, f.Version, what)
	return exitOK
}

// flowListMain is "reprise flow list --server URL".
func flowListMain(args []string, stdout, stderr io.Writer) int {
	var asJSON bool
	c, fs, pos, code, ok := flowClient("flow list", "--server URL [--json]", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	})
	if !ok {
		return code
	}
	defer c.Close()
	if len(pos) > 0 {
		return usageErrorf(fs, stderr, "unexpected argument %q", pos[0])
	}
	flows, err := c.ListFlows(context.Background())
	if err != nil {
		fmt.Fprintf(stderr, "reprise flow list: %v\n", err)
		return exitFail
	}
	if asJSON {
		return writeJSON(fs, stdout, stderr, flows)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FLOW\tVERSION\tPUSHED\tSTEPS\tGOALS")
	for _, f := range flows {
		steps, goals := strings.Join(f.Steps, ","), strings.Join(f.Goals, ",")
		if f.Error != "" {
			steps, goals = "ERROR: "+f.Error, ""
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", f.Name, f.Version, f.CreatedAt.UTC().Format("2006-01-02 15:04:05"), steps, goals)
	}
	if err := tw.Flush(); err != nil {
		fmt.Fprintf(stderr, "reprise flow list: %v\n", err)
		return exitFail
	}
	return exitOK
}

// flowShowMain is "reprise flow show NAME [--version N] --server URL":
// the flow as the server keeps it, in canonical JSON.
func flowShowMain(args []string, stdout, stderr io.Writer) int {
	var version int
	c, fs, pos, code, ok := flowClient("flow show", "NAME [--version N] --server URL", args, stdout, stderr, func(fs *flag.FlagSet) {
		fs.IntVar(&version, "version", 0, "a version of the flow (default: the latest)")
	})
	if !ok {
		return code
	}
	defer c.Close()
	if len(pos) != 1 {
		return usageErrorf(fs, stderr, "want one flow name, got %d arguments", len(pos))
	}
	if version < 0 {
		return usageErrorf(fs, stderr, "--version %d is not a version (1 or more; 0 for the latest)", version)
	}
	f, err := c.GetFlow(context.Background(), pos[0], version)
	if err != nil {
		fmt.Fprintf(stderr, "reprise flow show: %v\n", err)
		return exitFail
	}
	if f.Error != "" {
		fmt.Fprintf(stderr, "reprise flow show: flow %s version %d %s\n", f.Name, f.Version, f.Error)
		return exitFail
	}
	var out bytes.Buffer
	if err := json.Indent(&out, f.Flow, "", "  "); err != nil {
		out.Reset()
		out.Write(f.Flow)
	}
	fmt.Fprintf(stdout, "# flow %s version %d, pushed %s\n%s\n", f.Name, f.Version, f.CreatedAt.UTC().Format("2006-01-02 15:04:05"), out.String())
	return exitOK
}
