package idemhttptest

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/idemhttp"
)

// testWebhookVerifyFirst: a sender's event id taken from the body
// (Config.Key), its signature checked before anything is claimed
// (Config.Verify), under Wrap and WrapLease. A forged delivery with a real
// id gets 401 and leaves no record, effect or run, before the genuine
// delivery and after it; the genuine one runs once, and its redelivery,
// with other bytes, replays (TargetFingerprint). A delivery without an id
// gets 400, nothing claimed.
func testWebhookVerifyFirst[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	signed := []byte(`{"signed":true,`) // the suite's stand-in for a signature
	e := setup(t, b, options[TTx]{http: idemhttp.Config{
		Key: idemhttp.JSONKeyFunc("id"),
		Verify: func(_ *http.Request, body []byte) error {
			if !bytes.HasPrefix(body, signed) {
				return errors.New("not signed")
			}
			return nil
		},
		Fingerprint: idemhttp.TargetFingerprint,
	}})
	for i, path := range []string{"/orders", "/leased/1"} {
		const forged = `{"signed":false,"id":"evt-1"}`
		n := int64(i)
		e.expectProblem(path+" forged", e.send(call{noKey: true, path: path, body: forged}), http.StatusUnauthorized, "unverified")
		e.expectRows(path+" forged", n, n, n)
		first := e.send(call{noKey: true, path: path, body: `{"signed":true,"id":"evt-1"}`})
		if first.status != http.StatusCreated || first.header.Get(idemhttp.HeaderReplayed) != "" {
			e.Fatalf(path+" evt-1", "delivery: %d %v %s, want the handler's 201", first.status, first.header, first.body)
		}
		e.expectRetention(path+" evt-1", first)
		e.expectRows(path+" evt-1", n+1, n+1, n+1)
		again := e.send(call{noKey: true, path: path, body: `{"signed":true,"id":"evt-1","attempt":2}`})
		if strings.HasPrefix(path, "/leased/") {
			e.expectReplay(path+" evt-1", first, again)
		} else {
			e.expectReplay(path+" evt-1", first, again, "Set-Cookie", "Connection", "X-Hop")
		}
		e.expectProblem(path+" forged again", e.send(call{noKey: true, path: path, body: forged}), http.StatusUnauthorized, "unverified")
		e.expectProblem(path+" no id", e.send(call{noKey: true, path: path, body: `{"signed":true,"type":"ping"}`}), http.StatusBadRequest, "key-missing")
		e.expectRows(path+" evt-1", n+1, n+1, n+1)
	}
}
