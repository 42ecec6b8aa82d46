// Package redact hides the secrets that database URLs, DSNs and other URLs
// carry, before text, or a run's payloads, reach a log line, an API
// answer, the web page or the terminal.
package redact

import (
	"regexp"
	"strings"
)

// Mask replaces a secret in what String returns.
const Mask = "xxxxx"

var (
	// urlUserinfo matches the userinfo of a URL: its scheme, then what
	// comes before the last "@" of its authority.
	urlUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*)://([^/?#\s"'<>@]*(?:@[^/?#\s"'<>@]*)*)@`)
	// secretParam matches a key=value pair, in a key=value DSN or a URL's
	// query string, whose key names a secret; the value may be quoted.
	secretParam = regexp.MustCompile(`(?i)\b([a-z0-9_.-]*(?:password|passwd|pwd|secret|token|key|signature|sig|credential|auth)[a-z0-9_.-]*)(\s*=\s*)('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[^\s&;,'"]*)`)
)

// String returns s with the secrets a database URL, a DSN or another URL
// may hold replaced by xxxxx: the password of a postgres:// URL's userinfo
// (its user is kept) and the whole userinfo of any other URL; the value of
// a key=value pair or query parameter whose key names a secret (password,
// sslpassword, token, access_token, api_key, secret, sig, ...). Every line
// the server logs, and every step URL the API shows, goes through it.
//
// s is text: JSON goes through JSON, which masks inside its strings (a
// mask may swallow the backslash of an escaped quote in JSON text).
func String(s string) string {
	s = urlUserinfo.ReplaceAllStringFunc(s, func(m string) string {
		parts := urlUserinfo.FindStringSubmatch(m)
		scheme, userinfo := parts[1], parts[2]
		switch strings.ToLower(scheme) {
		case "postgres", "postgresql":
			if user, _, ok := strings.Cut(userinfo, ":"); ok {
				return scheme + "://" + user + ":" + Mask + "@"
			}
			return m
		}
		return scheme + "://" + Mask + "@"
	})
	return secretParam.ReplaceAllString(s, "${1}${2}"+Mask)
}
