package cli

import (
	"os"

	"reprise/httpapi"
)

// openServerBackend runs the run commands through a reprise server's API.
func openServerBackend(url, token string) (runsBackend, error) {
	return serverClient(url, token)
}

// serverClient is a client of the server at url, with token or else
// $REPRISE_TOKEN.
func serverClient(url, token string) (*httpapi.Client, error) {
	if token == "" {
		token = os.Getenv("REPRISE_TOKEN")
	}
	return httpapi.NewClient(url, token)
}
