package httpapi

import (
	_ "embed"
	"net/http"
)

// openAPI is the API's contract, an OpenAPI 3.1 document: every endpoint,
// its parameters, bodies, answers and problems, with examples. The handler
// serves it at GET /v1/openapi.json, without a token. Tests send its
// examples, and bodies made from its schemas, to a live server, and check
// each answer against it.
//
//go:embed openapi.json
var openAPI []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI) // a write that fails is a client gone
}
