package idem

import (
	"encoding/hex"
	"strconv"
	"strings"
)

// Scope builds a scope that begins with the principal, so that
// ScopePrefix(principal) selects every record of one principal or tenant
// (the admin view's and the CLI's prefix filters): the principal quoted as a
// Go string literal, a space, then operation, the name a transport gives
// the endpoint. The transports build it for you (idemhttp.Scope,
// idemgrpc.Scope, idemconnect.Scope, idemqueue.Scope):
//
//	"tenant-42" POST "/orders/{id}/pay"
//	"tenant-42" rpc:"/orders.v1.Orders/Create"
//	"tenant-42" connect:"/orders.v1.Orders/Create"
//	"billing" queue:"invoices"
//
// The quoting makes the framing unambiguous: two different pairs never
// build the same scope. A scope longer than MaxScopeBytes keeps the quoted
// principal and replaces the operation with "sha256:" and the hex of its
// hash; when even that is too long, the whole scope is "sha256:" and the
// hex of a hash of both, which no prefix selects. An operation must not
// begin with "sha256:", so that a hashed scope never equals a plain one.
func Scope(principal, operation string) string {
	p := strconv.Quote(principal)
	if s := p + " " + operation; len(s) <= MaxScopeBytes {
		return s
	}
	if s := p + " " + hashedOperation(operation); len(s) <= MaxScopeBytes {
		return s
	}
	var h Hasher
	h.AddString("idem scope")
	h.AddString(principal)
	h.AddString(operation)
	all := h.Sum()
	return "sha256:" + hex.EncodeToString(all[:])
}

// ScopePrefix is the prefix every Scope of principal begins with, for the
// admin view's and the CLI's prefix filters. A principal whose quoted form
// is longer than about 180 bytes has fully hashed scopes that it does not
// select.
func ScopePrefix(principal string) string {
	return strconv.Quote(principal) + " "
}

// hashedOperation is the form of operation that Scope puts in a scope too
// long to hold it: "sha256:" and the hex of its hash.
func hashedOperation(operation string) string {
	var h Hasher
	h.AddString("idem scope operation")
	h.AddString(operation)
	op := h.Sum()
	return "sha256:" + hex.EncodeToString(op[:])
}

// scopeOperation is the operation of a scope Scope built: what follows the
// quoted principal and a space (hashed when Scope hashed it). ok is false
// for a scope of another form, and for one Scope hashed whole.
func scopeOperation(scope string) (operation string, ok bool) {
	p, err := strconv.QuotedPrefix(scope)
	if err != nil {
		return "", false
	}
	operation, ok = strings.CutPrefix(scope[len(p):], " ")
	return operation, ok && operation != ""
}
