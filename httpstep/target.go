package httpstep

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Which targets a Caller calls, so that a step's URL cannot reach what the
// server alone should (a cloud's metadata service at 169.254.169.254):
//
//   - Every target is http or https, and no address it connects to is
//     link-local (169.254.0.0/16, fe80::/10), multicast, or unspecified
//     (0.0.0.0/8, ::), nor one of those in an IPv4-mapped (::ffff:a.b.c.d)
//     or NAT64 (64:ff9b::a.b.c.d) form. Loopback and private addresses are
//     allowed.
//   - With an allow-list (Options.AllowHosts), a target's host name must be
//     listed, or every address it resolves to must be inside a listed CIDR.
//
// The host of the URL and of every redirect is checked before a request
// (CheckRedirect); the addresses in the dialer, at each connection, on the
// address actually connected to (net.Dialer.Control), since DNS may change
// after a step is registered.

const (
	// ResolveTimeout bounds CheckTarget's lookup of a host name.
	ResolveTimeout = 5 * time.Second
	// dialTimeout and keepAlive are http.DefaultTransport's.
	dialTimeout = 30 * time.Second
	keepAlive   = 30 * time.Second
	// leastDialShare is the least time one of several addresses of a host
	// is given to connect, as net.Dialer gives.
	leastDialShare = 2 * time.Second
)

// A Resolver looks up the addresses of a host name. *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// A refusal says why a Caller does not call a target. Call reports it as
// the permanent TypeTargetRefused.
type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }

func refuse(format string, args ...any) *refusal {
	return &refusal{fmt.Sprintf(format, args...)}
}

// allowList is Options.AllowHosts, parsed. The zero value allows every
// target but the addresses refused always.
type allowList struct {
	prefixes []netip.Prefix
	names    []string // exact, lowercase, without a trailing dot
	suffixes []string // of *.example.com patterns: ".example.com"
}

// parseAllowList reads the entries of Options.AllowHosts: CIDRs,
// addresses, host names and *.domain patterns.
func parseAllowList(entries []string) (allowList, error) {
	var l allowList
	var errs []error
	for i, raw := range entries {
		e := strings.ToLower(strings.TrimSpace(raw))
		if e == "" {
			errs = append(errs, fmt.Errorf("allowed host %d is blank", i+1))
			continue
		}
		if strings.Contains(e, "/") {
			p, err := netip.ParsePrefix(e)
			if err != nil {
				errs = append(errs, fmt.Errorf("allowed host %q is not a CIDR: %w", raw, err))
				continue
			}
			l.prefixes = append(l.prefixes, plainPrefix(p))
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			if ip.Zone() != "" {
				errs = append(errs, fmt.Errorf("allowed host %q: give an address without a zone", raw))
				continue
			}
			ip = ip.Unmap()
			l.prefixes = append(l.prefixes, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		name, pattern := strings.CutPrefix(strings.TrimSuffix(e, "."), "*.")
		if !validHostName(name) {
			errs = append(errs, fmt.Errorf("allowed host %q is not a CIDR, an address, a host name or a *.domain pattern", raw))
			continue
		}
		if pattern {
			l.suffixes = append(l.suffixes, "."+name)
		} else {
			l.names = append(l.names, name)
		}
	}
	return l, errors.Join(errs...)
}

// plainPrefix masks p, and gives an IPv4-mapped prefix (::ffff:10.0.0.0/104)
// as the IPv4 one it means, since addresses are compared unmapped.
func plainPrefix(p netip.Prefix) netip.Prefix {
	p = p.Masked()
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// validHostName reports whether s is a DNS name: dot-separated labels of
// 1 to 63 letters, digits, '-' and '_', not starting or ending with '-',
// the last one not all digits (so that "10.0.0" is no name).
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	labels := strings.Split(s, ".")
	for _, label := range labels {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			default:
				return false
			}
		}
	}
	last := labels[len(labels)-1]
	return strings.Trim(last, "0123456789") != ""
}

// set reports whether the list restricts targets.
func (l *allowList) set() bool {
	return len(l.prefixes)+len(l.names)+len(l.suffixes) > 0
}

// named reports whether host is a host name the list names.
func (l *allowList) named(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return slices.Contains(l.names, h) || slices.ContainsFunc(l.suffixes, func(s string) bool {
		return len(h) > len(s) && strings.HasSuffix(h, s)
	})
}

// nat64 is the well-known NAT64 prefix (RFC 6052): its addresses reach the
// IPv4 address in their last four bytes through a NAT64 gateway.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// refusedAlways names the kind of ip if no step may call it, else "".
func refusedAlways(ip netip.Addr) string {
	ip = ip.WithZone("").Unmap()
	if nat64.Contains(ip) {
		b := ip.As16()
		ip = netip.AddrFrom4([4]byte(b[12:]))
	}
	switch {
	case !ip.IsValid():
		return "an invalid"
	case ip.IsUnspecified(), ip.Is4() && ip.As4()[0] == 0:
		return "an unspecified"
	case ip.IsLinkLocalUnicast():
		return "a link-local"
	case ip.IsMulticast():
		return "a multicast"
	}
	return ""
}

// checkAddr reports whether ip may be called. name is the host name it was
// resolved from ("" for an address in the URL), and listed whether the
// allow-list names that name.
func (l *allowList) checkAddr(name string, ip netip.Addr, listed bool) error {
	ip = ip.WithZone("").Unmap()
	subject := ip.String() + " is"
	if name != "" {
		subject = name + " resolves to " + ip.String() + ", which is"
	}
	if kind := refusedAlways(ip); kind != "" {
		return refuse("%s %s address; steps may not call link-local, multicast or unspecified addresses", subject, kind)
	}
	if listed || !l.set() || slices.ContainsFunc(l.prefixes, func(p netip.Prefix) bool { return p.Contains(ip) }) {
		return nil
	}
	return refuse("%s not among the allowed step hosts", subject)
}

// checkHost reports whether u may be called, as far as can be told without
// resolving its host: its scheme, an address given as its host, and a host
// name against an allow-list that lists no CIDR.
func (l *allowList) checkHost(u *url.URL) error {
	if u.Scheme != "http" && u.Scheme != "https" {
		return refuse("scheme %q is not http or https", u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return refuse("no host")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return l.checkAddr("", ip, false)
	}
	if l.set() && len(l.prefixes) == 0 && !l.named(host) {
		return refuse("%s is not among the allowed step hosts", host)
	}
	return nil
}

// CheckURL reports whether raw can be an HTTP step's URL, as far as can be
// told without a Caller or DNS: absolute, http or https, with a host that
// is not a link-local, multicast or unspecified address. A Caller's
// CheckTarget checks more.
func CheckURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return hideURL(err)
	}
	if err := checkURL(u); err != nil {
		return err
	}
	if err := (&allowList{}).checkHost(u); err != nil {
		return fmt.Errorf("url %q: %w", where(u), err)
	}
	return nil
}

func checkURL(u *url.URL) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("url %q: scheme must be http or https", where(u))
	case u.Host == "":
		return fmt.Errorf("url %q: no host", where(u))
	}
	return nil
}

// CheckTarget reports whether c calls raw, as a step's URL is checked when
// it is registered: CheckURL's rules, the allow-list (Options.AllowHosts),
// and the addresses its host name resolves to now. A name that does not
// resolve within ResolveTimeout is accepted: DNS may not be ready yet, and
// every connection checks the addresses again anyway.
func (c *Caller) CheckTarget(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return hideURL(err)
	}
	if err := checkURL(u); err != nil {
		return err
	}
	if err := c.allow.checkHost(u); err != nil {
		return fmt.Errorf("url %q: %w", where(u), err)
	}
	host := u.Hostname()
	if _, err := netip.ParseAddr(host); err == nil {
		return nil // checked by checkHost
	}
	ctx, cancel := context.WithTimeout(ctx, ResolveTimeout)
	defer cancel()
	ips, err := c.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil // checked when it connects
	}
	listed := c.allow.named(host)
	for _, ip := range ips {
		if err := c.allow.checkAddr(host, ip, listed); err != nil {
			return fmt.Errorf("url %q: %w", where(u), err)
		}
	}
	return nil
}

// dial is the default Transport's DialContext: it resolves the host,
// refuses it unless every address it has may be called, and connects to
// them in turn, checking again the address each connection is made to.
func (c *Caller) dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: network, Err: fmt.Errorf("port %q: %w", portText, err)}
	}
	name, listed := "", false
	ips := []netip.Addr{}
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = append(ips, ip)
	} else {
		name, listed = host, c.allow.named(host)
		lookup := "ip"
		switch network {
		case "tcp4":
			lookup = "ip4"
		case "tcp6":
			lookup = "ip6"
		}
		if ips, err = c.resolver.LookupNetIP(ctx, lookup, host); err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		if len(ips) == 0 {
			return nil, &net.OpError{Op: "dial", Net: network, Err: &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}}
		}
	}
	for _, ip := range ips {
		if err := c.allow.checkAddr(name, ip, listed); err != nil {
			return nil, err
		}
	}
	d := net.Dialer{KeepAlive: keepAlive, Control: c.control(name, listed)}
	deadline := time.Now().Add(dialTimeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	var first error
	for i, ip := range ips {
		d.Deadline = dialShare(time.Now(), deadline, len(ips)-i)
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, first
}

// control returns the net.Dialer.Control of a connection to an address of
// the host name name ("" for an address in the URL), listed or not in the
// allow-list: it checks the address the socket connects to.
func (c *Caller) control(name string, listed bool) func(network, address string, _ syscall.RawConn) error {
	return func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return refuse("connect to %q: not an address", address)
		}
		return c.allow.checkAddr(name, ap.Addr(), listed)
	}
}

// dialShare is the deadline of a connection to one of the left addresses
// still to try before deadline: an equal share of the time left, at least
// leastDialShare.
func dialShare(now, deadline time.Time, left int) time.Time {
	remain := deadline.Sub(now)
	share := remain / time.Duration(left)
	if share < leastDialShare {
		share = min(leastDialShare, remain)
	}
	return now.Add(share)
}
