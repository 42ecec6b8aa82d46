// Package httpstep runs HTTP steps: it POSTs one attempt of a step to its URL
// and classifies the outcome into a retry.Error (docs/http-steps.md).
package httpstep

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"reprise"
	"reprise/internal/redact"
	"reprise/retry"
)

// The error types a Call returns, for policies to name.
const (
	// TypeTransport: the request did not get a response (connection refused
	// or reset, DNS failure, TLS failure, a broken body). Retryable.
	TypeTransport = "TransportError"
	// TypeTimeout: the attempt's context reached its deadline, or was
	// cancelled with a cause that is a timeout. Retryable.
	TypeTimeout = "Timeout"
	// TypeHTTP5xx: the endpoint answered 5xx. Retryable; Retry-After honoured.
	TypeHTTP5xx = "HTTP5xx"
	// TypeRateLimited: the endpoint answered 429. Retryable; Retry-After honoured.
	TypeRateLimited = "RateLimited"
	// TypeHTTP4xx: the endpoint answered a 4xx other than 429. Permanent.
	TypeHTTP4xx = "HTTP4xx"
	// TypeHTTP3xx: the endpoint answered a redirect that was not followed
	// (301, 302, 303, 304, or one past Options.MaxRedirects). Permanent.
	TypeHTTP3xx = "HTTP3xx"
	// TypeStepFailed: the endpoint answered 2xx with "success": false and an
	// error without a type. Permanent unless the error says "retryable": true.
	TypeStepFailed = "StepFailed"
	// TypeInvalidResponse: a 2xx body that is not JSON or breaks the
	// contract, or a final 1xx or non-standard status. Permanent.
	TypeInvalidResponse = "InvalidResponse"
	// TypeResponseTooLarge: a 2xx body over Options.MaxResponseBytes. Permanent.
	TypeResponseTooLarge = "ResponseTooLarge"
	// TypeInvalidRequest: the URL or the step's input cannot be sent. Permanent.
	TypeInvalidRequest = "InvalidRequest"
	// TypeTargetRefused: the URL, a redirect, or an address one of them
	// resolves to is one the Caller does not call (a link-local,
	// multicast or unspecified address, or one outside
	// Options.AllowHosts). Permanent.
	TypeTargetRefused = "TargetRefused"
)

const (
	// DefaultMaxResponseBytes is the default limit on a 2xx response body.
	DefaultMaxResponseBytes = 1 << 20
	// DefaultMaxRedirects is the default number of 307/308 redirects followed.
	DefaultMaxRedirects = 10
	// DefaultUserAgent is the default User-Agent header.
	DefaultUserAgent = "reprise-httpstep/1"
	// DefaultMaxIdleConnsPerHost is the idle connections the default
	// Transport keeps per host, so that concurrent steps calling one endpoint
	// reuse connections instead of dialling each time.
	DefaultMaxIdleConnsPerHost = 64
	// MaxRetryAfter caps every retry-after hint an endpoint or a worker
	// gives; a longer one is taken as this.
	MaxRetryAfter = 24 * time.Hour
)

// snippetBytes is how much of an error response's body goes into the error
// message, and headerBytes how much of a header; the rest of the body is
// discarded unread, up to drainBytes, so that the connection can be reused.
const (
	snippetBytes = 512
	headerBytes  = 128
	drainBytes   = 64 << 10
)

// Request is one attempt of an HTTP step: what the engine knows about it and
// what the endpoint receives.
type Request struct {
	RunID          string          `json:"run_id"`
	Step           string          `json:"step"`
	Attempt        int             `json:"attempt"`
	IdempotencyKey string          `json:"idempotency_key"`
	Input          json.RawMessage `json:"input"`
	// TraceParent, when set, is sent as the traceparent header (W3C Trace
	// Context): the attempt's span (reprise.StepInfo.TraceParent), so that
	// the endpoint's spans join the run's trace. Not part of the body.
	TraceParent string `json:"-"`
}

// StepRequest is the request of the attempt a step's context belongs to
// (reprise.StepInfoFrom), with its input.
func StepRequest(info reprise.StepInfo, input json.RawMessage) *Request {
	return &Request{RunID: info.RunID, Step: info.Step, Attempt: info.Attempt, IdempotencyKey: info.IdempotencyKey,
		Input: input, TraceParent: info.TraceParent}
}

// Options configure a Caller. The zero value works.
type Options struct {
	// Transport sends the requests. Default: a clone of
	// http.DefaultTransport (30 s dial timeout, keep-alives) without a
	// proxy, whose dialer checks the address of every connection (see
	// AllowHosts), keeping DefaultMaxIdleConnsPerHost idle connections per
	// host. A Transport given here makes its own connections: the
	// Caller still checks the scheme and host of the URL and of every
	// redirect (an address given as the host, the host names of
	// AllowHosts), but the addresses a host name resolves to are the
	// Transport's to check.
	Transport http.RoundTripper
	// AllowHosts, when not empty, limits the targets of calls, redirects
	// included. Each entry is a CIDR ("10.0.0.0/8", "fd00::/8"), an address
	// (one host), a host name ("api.example.com", matched exactly, case
	// aside), or a pattern "*.example.com" (any name ending in
	// ".example.com", at any depth; not "example.com" itself). A target
	// whose host name is listed is called wherever it resolves; any other
	// must resolve only to addresses inside a listed CIDR. Link-local,
	// multicast and unspecified addresses are refused whatever the list
	// says. Default: none; every target but those addresses.
	AllowHosts []string
	// Resolver looks up the addresses of the host names of targets, in
	// CheckTarget and for each connection of the default Transport.
	// Default: net.DefaultResolver.
	Resolver Resolver
	// MaxResponseBytes limits a 2xx response body; a larger one fails the
	// attempt with the permanent TypeResponseTooLarge. Default:
	// DefaultMaxResponseBytes (1 MiB). Negative is an error.
	MaxResponseBytes int64
	// MaxRedirects is how many 307 and 308 redirects one call follows
	// (method, body and headers kept). 301, 302 and 303, which would turn the
	// POST into a GET without its body, are never followed. Default:
	// DefaultMaxRedirects (10); negative follows none.
	MaxRedirects int
	// UserAgent is sent as User-Agent. Default: DefaultUserAgent.
	UserAgent string
	// Header holds extra headers sent with every call, such as
	// Authorization. It may not set Content-Type, User-Agent,
	// Idempotency-Key or Reprise-Attempt. Default: none.
	Header http.Header
	// Now tells the time, to read a Retry-After given as an HTTP date.
	// Default: time.Now.
	Now func() time.Time
}

// reservedHeaders are set by the Caller itself.
var reservedHeaders = []string{"Content-Type", "User-Agent", "Idempotency-Key", "Reprise-Attempt"}

// A Caller runs HTTP steps. It is safe for concurrent use and pools
// connections across calls; create one and share it.
type Caller struct {
	client       http.Client
	header       http.Header
	maxBytes     int64
	maxRedirects int
	now          func() time.Time
	allow        allowList
	resolver     Resolver
}

// New returns a Caller with opts' defaults filled in, or every problem with
// opts at once.
func New(opts Options) (*Caller, error) {
	var errs []error
	if opts.MaxResponseBytes < 0 {
		errs = append(errs, fmt.Errorf("max response bytes %d is negative", opts.MaxResponseBytes))
	}
	header, err := extraHeader(opts.Header)
	if err != nil {
		errs = append(errs, err)
	}
	allow, err := parseAllowList(opts.AllowHosts)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("httpstep options: %w", err)
	}

	c := &Caller{
		header:       header,
		maxBytes:     cmp.Or(opts.MaxResponseBytes, DefaultMaxResponseBytes),
		maxRedirects: max(cmp.Or(opts.MaxRedirects, DefaultMaxRedirects), 0),
		now:          opts.Now,
		allow:        allow,
		resolver:     opts.Resolver,
	}
	c.header.Set("Content-Type", "application/json")
	if c.header.Get("Accept") == "" {
		c.header.Set("Accept", "application/json")
	}
	c.header.Set("User-Agent", cmp.Or(opts.UserAgent, DefaultUserAgent))
	if c.now == nil {
		c.now = time.Now
	}
	if c.resolver == nil {
		c.resolver = net.DefaultResolver
	}
	c.client.Transport = opts.Transport
	if c.client.Transport == nil {
		// No proxy: the dialer must see the step's own address.
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		t.DialContext = c.dial
		t.MaxIdleConnsPerHost = DefaultMaxIdleConnsPerHost
		c.client.Transport = t
	}
	c.client.CheckRedirect = c.checkRedirect
	return c, nil
}

// extraHeader checks and copies the extra headers of Options.
func extraHeader(h http.Header) (http.Header, error) {
	out := make(http.Header, len(h)+len(reservedHeaders)+1)
	var errs []error
	for name, values := range h {
		key := textproto.CanonicalMIMEHeaderKey(name)
		switch {
		case !validHeaderName(name):
			errs = append(errs, fmt.Errorf("header name %q is not a valid token", name))
		case slices.Contains(reservedHeaders, key):
			errs = append(errs, fmt.Errorf("header %s is set by the caller itself", key))
		}
		for _, v := range values {
			if !validHeaderValue(v) {
				errs = append(errs, fmt.Errorf("header %s: value holds a control character", key))
			}
			out.Add(key, v)
		}
	}
	return out, errors.Join(errs...)
}

// validHeaderName reports whether s is an HTTP token (RFC 9110 §5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s can be sent as a header value: no
// control characters but tab.
func validHeaderValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// checkRedirect follows 307 and 308 only, and at most maxRedirects of them;
// otherwise the redirect response itself is the outcome. A redirect to a
// target the Caller does not call is refused (the dialer checks the
// addresses of a host name).
func (c *Caller) checkRedirect(req *http.Request, via []*http.Request) error {
	code := req.Response.StatusCode
	if len(via) > c.maxRedirects || (code != http.StatusTemporaryRedirect && code != http.StatusPermanentRedirect) {
		return http.ErrUseLastResponse
	}
	if err := c.allow.checkHost(req.URL); err != nil {
		return refuse("redirect to %s: %v", where(req.URL), err)
	}
	return nil
}

// CloseIdleConnections closes the pooled connections that are idle.
func (c *Caller) CloseIdleConnections() { c.client.CloseIdleConnections() }

// Call runs one attempt of an HTTP step: it POSTs req to rawURL and returns
// the step's output, or an error classified as docs/http-steps.md says (see the Type
// constants). The whole exchange runs under ctx, which carries the attempt's
// timeout.
//
// The error is a *retry.Error wrapped with the URL, except when ctx was
// cancelled with a cause that is not a timeout (shutdown, a lost lease):
// then it wraps context.Cause(ctx) so that the engine can tell with
// errors.Is.
func (c *Caller) Call(ctx context.Context, rawURL string, req *Request) (json.RawMessage, error) {
	switch {
	case req == nil:
		return nil, &retry.Error{Type: TypeInvalidRequest, Message: "no request"}
	case req.IdempotencyKey == "" || !validHeaderValue(req.IdempotencyKey):
		return nil, &retry.Error{Type: TypeInvalidRequest, Message: fmt.Sprintf(
			"idempotency key %q is empty or holds a control character", req.IdempotencyKey)}
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, &retry.Error{Type: TypeInvalidRequest, Message: "encode request: " + err.Error()}
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err == nil {
		err = checkURL(hreq.URL)
	}
	if err != nil {
		return nil, &retry.Error{Type: TypeInvalidRequest, Message: hideURL(err).Error()}
	}
	if err := c.allow.checkHost(hreq.URL); err != nil {
		return nil, fmt.Errorf("post %s: %w", where(hreq.URL), &retry.Error{Type: TypeTargetRefused, Message: err.Error()})
	}
	out, err := c.exchange(ctx, hreq, req)
	if err != nil {
		return nil, fmt.Errorf("post %s: %w", where(hreq.URL), err)
	}
	return out, nil
}

// where names u in errors and traces without its query and fragment, and
// with its user information as xxxxx (redact.Mask): they may hold secrets.
func where(u *url.URL) string {
	v := *u
	v.RawQuery, v.ForceQuery, v.Fragment, v.RawFragment = "", false, "", ""
	if v.User != nil {
		v.User = url.User(redact.Mask)
	}
	return v.String()
}

// hideURL returns err, url.Parse's, quoting the URL as redact.String
// shows it.
func hideURL(err error) error {
	if uerr := (*url.Error)(nil); errors.As(err, &uerr) {
		uerr.URL = redact.String(uerr.URL)
	}
	return err
}

// exchange sends hreq and classifies the response.
func (c *Caller) exchange(ctx context.Context, hreq *http.Request, req *Request) (json.RawMessage, error) {
	hreq.Header = c.header.Clone()
	hreq.Header["Idempotency-Key"] = []string{req.IdempotencyKey}
	hreq.Header["Reprise-Attempt"] = []string{strconv.Itoa(req.Attempt)}
	if req.TraceParent != "" {
		hreq.Header["Traceparent"] = []string{req.TraceParent}
	}
	span := trace.SpanFromContext(ctx)
	if span.IsRecording() {
		traceRequest(span, hreq.URL, req.Attempt)
	}

	resp, err := c.client.Do(hreq)
	if err != nil {
		return nil, interrupted(ctx, err)
	}
	defer resp.Body.Close()

	code := resp.StatusCode
	if span.IsRecording() {
		span.SetAttributes(semconv.HTTPResponseStatusCode(code))
	}
	switch {
	case code >= 200 && code <= 299:
		var body []byte
		if resp.ContentLength <= c.maxBytes {
			if body, err = io.ReadAll(io.LimitReader(resp.Body, c.maxBytes+1)); err != nil {
				return nil, interrupted(ctx, err)
			}
		}
		if resp.ContentLength > c.maxBytes || int64(len(body)) > c.maxBytes {
			return nil, &retry.Error{Type: TypeResponseTooLarge, Message: fmt.Sprintf(
				"%s: body exceeds the limit of %d bytes", resp.Status, c.maxBytes)}
		}
		return decodeOutput(body)
	case code == http.StatusTooManyRequests:
		return nil, c.statusError(resp, TypeRateLimited, true)
	case code >= 500 && code <= 599:
		return nil, c.statusError(resp, TypeHTTP5xx, true)
	case code >= 400 && code <= 499:
		return nil, c.statusError(resp, TypeHTTP4xx, false)
	case code >= 300 && code <= 399:
		return nil, c.statusError(resp, TypeHTTP3xx, false)
	}
	return nil, c.statusError(resp, TypeInvalidResponse, false)
}

// traceRequest writes the HTTP client span attributes of a request to the
// attempt's span (OpenTelemetry's semantic conventions): the method, the
// server, the URL without its query, and the resends before it.
func traceRequest(span trace.Span, u *url.URL, attempt int) {
	port := u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	n, _ := strconv.Atoi(port)
	span.SetName(http.MethodPost)
	span.SetAttributes(semconv.HTTPRequestMethodPost, semconv.ServerAddress(u.Hostname()), semconv.ServerPort(n),
		semconv.URLFull(where(u)))
	if attempt > 1 {
		span.SetAttributes(semconv.HTTPRequestResendCount(attempt - 1))
	}
}

// statusError describes a response classified by its status alone: the
// status, the Retry-After header of a retryable one, and the start of the
// body.
func (c *Caller) statusError(resp *http.Response, typ string, retryable bool) *retry.Error {
	e := &retry.Error{Type: typ, Retryable: retryable}
	msg := resp.Status
	if retryable {
		if h := resp.Header.Get("Retry-After"); h != "" {
			e.RetryAfter = parseRetryAfter(h, c.now())
			msg += " (Retry-After: " + clip(h, headerBytes) + ")"
		}
	}
	if loc := resp.Header.Get("Location"); typ == TypeHTTP3xx && loc != "" {
		msg += " to " + clip(loc, headerBytes)
	}
	head, _ := io.ReadAll(io.LimitReader(resp.Body, snippetBytes+1))
	_, _ = io.CopyN(io.Discard, resp.Body, drainBytes)
	if s := snippet(head); s != "" {
		msg += ": " + s
	}
	e.Message = redact.String(msg) // a Location may hold the secrets of a URL
	return e
}

// interrupted classifies an error that ended the exchange before a whole
// response arrived.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() == nil {
		var refused *refusal
		if errors.As(err, &refused) {
			return &retry.Error{Type: TypeTargetRefused, Message: refused.Error()}
		}
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message repeats the URL
		}
		return retry.NewError(TypeTransport, err.Error())
	}
	cause := context.Cause(ctx)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) || isTimeout(cause) {
		return retry.NewError(TypeTimeout, "attempt timed out: "+cause.Error())
	}
	return cause
}

// isTimeout reports whether a context's cancel cause says it is a timeout.
func isTimeout(cause error) bool {
	var t interface{ Timeout() bool }
	return errors.Is(cause, context.DeadlineExceeded) ||
		(errors.As(cause, &t) && t.Timeout()) ||
		slices.Contains(retry.TypeChain(cause), TypeTimeout)
}
