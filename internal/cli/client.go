package cli

import (
	"os"

	"reprise/httpapi"
)

// openServerBackend runs the run commands through a reprise server's API.
func openServerBackend(url, token string) (runsBackend, error) {
	if token == "" {
		token = os.Getenv("REPRISE_TOKEN")
	}
	return httpapi.NewClient(url, token)
}
