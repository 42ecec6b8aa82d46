package cli

import (
	"context"
	"encoding/json"
	"os"

	"reprise/httpapi"
	"reprise/store"
)

// openServerBackend runs the run commands through a reprise server's API.
func openServerBackend(url, token string) (runsBackend, error) {
	c, err := serverClient(url, token)
	if err != nil {
		return nil, err
	}
	return serverBackend{c}, nil
}

// serverBackend is a client as the run commands call it.
type serverBackend struct{ *httpapi.Client }

func (b serverBackend) StartRun(ctx context.Context, workflow string, input json.RawMessage, id string) (*store.Run, bool, error) {
	return b.Client.StartRun(ctx, workflow, input, id)
}

// serverClient is a client of the server at url, with token or else
// $REPRISE_TOKEN.
func serverClient(url, token string) (*httpapi.Client, error) {
	if token == "" {
		token = os.Getenv("REPRISE_TOKEN")
	}
	return httpapi.NewClient(url, token)
}
