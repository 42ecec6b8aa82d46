package webui

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The page's cookies. Both are HttpOnly, SameSite=Strict, and Secure when
// the request came over TLS.
const (
	// sessionCookie holds a login: its expiry, a random nonce, and a MAC
	// of both under the token that logged in. It holds nothing of the
	// token, and any server with the same tokens accepts it: sessions
	// outlive a restart, and end when their token is retired.
	sessionCookie = "reprise_session"
	// csrfCookie holds a random nonce; every form posts back a MAC of it
	// (the field csrf), which a page of another site can neither read
	// nor make.
	csrfCookie = "reprise_csrf"
)

// auth keeps logins and checks forms. Its keys are the API's tokens; a
// server without tokens (open) has no login, and signs its forms with a
// key of its own, made at start.
type auth struct {
	open   bool
	keys   [][]byte
	hashes [][sha256.Size]byte // of the tokens, to compare in constant time
	ttl    time.Duration
	now    func() time.Time
}

func newAuth(tokens []string, ttl time.Duration, now func() time.Time) *auth {
	a := &auth{open: len(tokens) == 0, ttl: ttl, now: now}
	for _, t := range tokens {
		a.keys = append(a.keys, []byte(t))
		a.hashes = append(a.hashes, sha256.Sum256([]byte(t)))
	}
	if a.open {
		key := make([]byte, 32)
		_, _ = rand.Read(key)
		a.keys = [][]byte{key}
	}
	return a
}

// mac is the MAC of purpose and value under key.
func mac(key []byte, purpose, value string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// signedByAny reports whether sum is the MAC of purpose and value under
// one of the keys; it computes every one.
func (a *auth) signedByAny(purpose, value, sum string) bool {
	ok := 0
	for _, k := range a.keys {
		ok |= subtle.ConstantTimeCompare([]byte(mac(k, purpose, value)), []byte(sum))
	}
	return ok == 1
}

// token returns the index of the token given, or -1: the hash of the
// given token is compared with every token's, in constant time.
func (a *auth) token(given string) int {
	sum := sha256.Sum256([]byte(given))
	found := -1
	for i, h := range a.hashes {
		if subtle.ConstantTimeCompare(sum[:], h[:]) == 1 {
			found = i
		}
	}
	return found
}

// nonce returns 16 random bytes in hex.
func nonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newSession returns the value of a session cookie signed by token i.
func (a *auth) newSession(i int) string {
	v := strconv.FormatInt(a.now().Add(a.ttl).Unix(), 10) + "." + nonce()
	return v + "." + mac(a.keys[i], "session", v)
}

// signedIn reports whether r carries a live session, or the server has no
// login.
func (a *auth) signedIn(r *http.Request) bool {
	if a.open {
		return true
	}
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return false
	}
	v, sum, ok := cutLast(c.Value, ".")
	if !ok {
		return false
	}
	exp, _, ok := strings.Cut(v, ".")
	unix, err := strconv.ParseInt(exp, 10, 64)
	if !ok || err != nil || !a.now().Before(time.Unix(unix, 0)) {
		return false
	}
	return a.signedByAny("session", v, sum)
}

func cutLast(s, sep string) (before, after string, found bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

// secure reports whether the request came over TLS, to the server or to a
// proxy in front of it, so that its cookies are marked Secure.
func secure(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secure(r)})
}

// csrfToken returns the token the forms of a page for r post back, and
// sets the nonce it signs in a cookie if r has none.
func (a *auth) csrfToken(w http.ResponseWriter, r *http.Request) string {
	n := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 32 {
		n = c.Value
	} else {
		n = nonce()
		setCookie(w, r, csrfCookie, n, 0)
		r.AddCookie(&http.Cookie{Name: csrfCookie, Value: n}) // for a second call on r
	}
	return mac(a.keys[0], "csrf", n)
}

// checkCSRF reports whether a form posted the token of its cookie's nonce.
func (a *auth) checkCSRF(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	return a.signedByAny("csrf", c.Value, r.PostFormValue("csrf"))
}

// maxForm bounds a form's body: a signal's payload is the largest field.
const maxForm = 1 << 20

// checkPost guards every POST but the login: a session (when the server
// has tokens), a request from this site, and the form's CSRF token. It
// answers the refusal and reports false.
func (h *Handler) checkPost(w http.ResponseWriter, r *http.Request) bool {
	if !h.auth.signedIn(r) {
		w.Header().Set("Connection", "close")
		h.fail(w, r, http.StatusUnauthorized, "Sign in first", "This action needs a token: sign in, then try again.")
		return false
	}
	return h.checkForm(w, r)
}

// checkForm refuses a cross-site POST, one too large, and one without the
// CSRF token of its cookie.
func (h *Handler) checkForm(w http.ResponseWriter, r *http.Request) bool {
	if err := h.origin.Check(r); err != nil {
		h.fail(w, r, http.StatusForbidden, "Refused", "A form of another site cannot act on this server.")
		return false
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "Bad form", "The form could not be read (it may be over 1 MiB).")
		return false
	}
	if !h.auth.checkCSRF(r) {
		h.fail(w, r, http.StatusForbidden, "Form expired",
			"This form's security token is missing or out of date (the server may have restarted). Reload the page and try again.")
		return false
	}
	return true
}

// requireSignIn sends a reader without a session to the login form, and
// reports whether r may go on.
func (h *Handler) requireSignIn(w http.ResponseWriter, r *http.Request) bool {
	if h.auth.signedIn(r) {
		return true
	}
	next := localPath(r.URL.RequestURI())
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" && r.Method == http.MethodGet {
		// A link from another site (a chat, a ticket) is followed
		// without the SameSite=Strict cookie; the same URL opened from
		// this site has it. The page reopens it so.
		h.render(w, r, http.StatusOK, "reopen", "Opening", next)
		return false
	}
	http.Redirect(w, r, "/login?next="+url.QueryEscape(next), http.StatusSeeOther)
	return false
}

// localPath returns next if it is a path on this server, else "/". A
// browser drops the tabs and newlines of a URL and takes \ for /, so
// that "/\t/evil.example" would be "//evil.example", another site: a
// path with a control character is none.
func localPath(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "/"
	}
	return next
}

// loginData is the data of the login page.
type loginData struct {
	Next  string
	Error string
}

func (h *Handler) loginForm(w http.ResponseWriter, r *http.Request) {
	next := localPath(r.URL.Query().Get("next"))
	if h.auth.open || h.auth.signedIn(r) {
		http.Redirect(w, r, next, http.StatusSeeOther)
		return
	}
	h.render(w, r, http.StatusOK, "login", "Sign in", loginData{Next: next})
}

// login checks the token of the login form, and on success sets the
// session cookie and a new CSRF nonce. The token is never logged, nor
// written back into the form.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if h.auth.open {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	if !h.checkForm(w, r) {
		return
	}
	next := localPath(r.PostFormValue("next"))
	i := h.auth.token(r.PostFormValue("token"))
	if i < 0 {
		w.Header().Set("Connection", "close")
		h.render(w, r, http.StatusUnauthorized, "login", "Sign in",
			loginData{Next: next, Error: "That is not one of the server's tokens."})
		return
	}
	setCookie(w, r, sessionCookie, h.auth.newSession(i), int(h.auth.ttl/time.Second))
	setCookie(w, r, csrfCookie, nonce(), 0)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (h *Handler) logout(w http.ResponseWriter, r *http.Request) {
	if !h.checkForm(w, r) {
		return
	}
	setCookie(w, r, sessionCookie, "", -1)
	setCookie(w, r, csrfCookie, "", -1)
	if h.auth.open {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}
