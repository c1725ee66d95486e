package idemqueue

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/idemkit/idem"
)

// derivedKeyPrefix begins every key KeyFor derives by hashing. It is
// reserved: an id that begins with it is hashed too, although it may be a
// valid key, so that no id kept as it is can equal a derived key.
const derivedKeyPrefix = "idemqueue-sha256:"

// KeyFor returns the idempotency key under which a Consumer records a
// message identified by id (what Config.Key returns; by default
// Message.ID), so that any id a publisher or broker gives makes a usable
// key and no message is rejected for its id:
//
//   - an id that is already a valid key (1 to idem.MaxKeyBytes bytes of
//     printable ASCII, see idem.ValidateKey) is its own key, unless it
//     begins with the reserved prefix "idemqueue-sha256:";
//   - any other id (longer than idem.MaxKeyBytes, with a byte outside
//     printable ASCII, or beginning with the reserved prefix) is keyed by
//     its hash: "idemqueue-sha256:" followed by the SHA-256 of the id's
//     bytes in lowercase hex, 81 bytes in all;
//   - an empty id has no key: KeyFor returns "", and Process rejects the
//     message (nothing identifies its redeliveries, so it could not be
//     processed once).
//
// The derivation is part of idem's compatibility promise: records stored
// by one version keep matching the redeliveries another version sees. No
// id kept as it is begins with the reserved prefix, so it never equals
// another id's derived key; two ids share a derived key only if SHA-256
// collides. Use KeyFor to find a message's record (idem.Store.Lookup or
// Inspect with Scope, the idem command's inspect -key); the hash is what
// "printf %s ID | sha256sum" prints.
func KeyFor(id string) string {
	if id == "" {
		return ""
	}
	if idem.ValidateKey(id) == nil && !strings.HasPrefix(id, derivedKeyPrefix) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return derivedKeyPrefix + hex.EncodeToString(sum[:])
}
