// Command flows is the demo service of the example flow, order.yaml: a
// shop's endpoints that fail the ways real ones do. Run it, then the flow:
//
//	go run ./examples/flows &
//	reprise flow run examples/flows/order.yaml --input '{"sku": "espresso", "warehouses": ["north", "south", "east"]}'
package main

import (
	"encoding/json"
	"flag"
	"log"
	"net/http"
	"sync"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:7431", "address to listen on")
	flag.Parse()
	log.Printf("demo shop listening on http://%s", *addr)
	log.Fatal(http.ListenAndServe(*addr, shop()))
}

// shop returns the demo's endpoints. Each request is an attempt of an HTTP
// step (docs/http-steps.md); seen counts the attempts of each work item
// by its idempotency key.
func shop() http.Handler {
	var mu sync.Mutex
	seen := map[string]int{}
	mux := http.NewServeMux()
	handle := func(path string, answer func(w http.ResponseWriter, r *http.Request, input map[string]any, n int)) {
		mux.HandleFunc("POST "+path, func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Input any `json:"input"` // an object, or a string for notify
			}
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
				http.Error(w, "the request is not an HTTP step's: "+err.Error(), http.StatusBadRequest)
				return
			}
			input, _ := req.Input.(map[string]any)
			mu.Lock()
			seen[path+r.Header.Get("Idempotency-Key")]++
			n := seen[path+r.Header.Get("Idempotency-Key")]
			mu.Unlock()
			answer(w, r, input, n)
		})
	}
	// reply answers v; a write that fails is a caller gone (a timeout).
	reply := func(w http.ResponseWriter, v any) {
		if err := json.NewEncoder(w).Encode(v); err != nil {
			log.Printf("answer: %v", err)
		}
	}
	ok := func(w http.ResponseWriter, output any) {
		reply(w, map[string]any{"success": true, "output": output})
	}
	// quote: busy at first, with Retry-After; then a price.
	handle("/quote", func(w http.ResponseWriter, r *http.Request, in map[string]any, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "busy, come back in a second", http.StatusServiceUnavailable)
			return
		}
		ok(w, map[string]any{"sku": in["sku"], "price": 42})
	})
	// reserve: one item per warehouse; "south" hangs on its first attempt
	// (the step's timeout cuts it, and the retry succeeds).
	handle("/reserve", func(w http.ResponseWriter, r *http.Request, in map[string]any, n int) {
		if in["warehouse"] == "south" && n == 1 {
			<-r.Context().Done()
			return
		}
		ok(w, map[string]any{"warehouse": in["warehouse"], "reserved": true})
	})
	// gift_wrap: a 4xx, which no retry fixes.
	handle("/gift-wrap", func(w http.ResponseWriter, r *http.Request, in map[string]any, n int) {
		http.Error(w, "gift wrapping is not offered for this item", http.StatusUnprocessableEntity)
	})
	// loyalty: the endpoint says it failed, and that it is final.
	handle("/loyalty", func(w http.ResponseWriter, r *http.Request, in map[string]any, n int) {
		reply(w, map[string]any{"success": false,
			"error": map[string]any{"type": "NotAMember", "message": "the customer has no loyalty account"}})
	})
	handle("/notify", func(w http.ResponseWriter, r *http.Request, in map[string]any, n int) {
		ok(w, "sent")
	})
	return mux
}
