package cli

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
)

// redacted replaces a secret in what redact returns.
const redacted = "xxxxx"

var (
	// urlUserinfo matches the userinfo of a URL: its scheme, then what
	// comes before the last "@" of its authority.
	urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*)://([^/?#\s"'<>@]*(?:@[^/?#\s"'<>@]*)*)@`)
	// secretParam matches a key=value pair, in a key=value DSN or a URL's
	// query string, whose key names a secret; the value may be quoted.
	secretParam = regexp.MustCompile(`(?i)\b([a-z0-9_.-]*(?:password|passwd|pwd|secret|token|key|signature|sig|credential|auth)[a-z0-9_.-]*)(\s*=\s*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s&;,'"]*)`)
)

// redact returns s with the secrets a database URL, a DSN or another URL
// may hold replaced by xxxxx: the password of a postgres:// URL's userinfo
// (its user is kept) and the whole userinfo of any other URL; the value of
// a key=value pair or query parameter whose key names a secret (password,
// sslpassword, token, access_token, api_key, secret, sig, ...). Every line
// the server logs goes through it.
func redact(s string) string {
	s = urlUserinfo.ReplaceAllStringFunc(s, func(m string) string {
		parts := urlUserinfo.FindStringSubmatch(m)
		scheme, userinfo := parts[1], parts[2]
		switch strings.ToLower(scheme) {
		case "postgres", "postgresql":
			if user, _, ok := strings.Cut(userinfo, ":"); ok {
				return scheme + "://" + user + ":" + redacted + "@"
			}
			return m
		}
		return scheme + "://" + redacted + "@"
	})
	return secretParam.ReplaceAllString(s, "${1}${2}"+redacted)
}

// redactHandler is a slog.Handler that redacts every message and every
// attribute's value before its handler sees them.
type redactHandler struct{ slog.Handler }

func (h redactHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redactAttr(a))
		return true
	})
	return h.Handler.Handle(ctx, out)
}

func (h redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = redactAttr(a)
	}
	return redactHandler{h.Handler.WithAttrs(clean)}
}

func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h.Handler.WithGroup(name)}
}

// redactAttr redacts an attribute's value as text: strings, errors,
// Stringers and whatever else a handler would print.
func redactAttr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, redact(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]any, len(group))
		for i, g := range group {
			clean[i] = redactAttr(g)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		return slog.String(a.Key, redact(fmt.Sprint(v.Any())))
	}
	return slog.Attr{Key: a.Key, Value: v}
}
