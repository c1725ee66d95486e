package main

import (
	"slices"
	"strings"

	"github.com/idemkit/idem"
)

// path is one workload: a scheme (how a request's write and its record are
// sent to the database) and the keys it sends.
type path string

// pathDef defines a path.
type pathDef struct {
	name   path
	scheme string // the target's scheme that sends it
	// of is the write whose keys, completed in the same round, this path
	// sends again with the same body; "" for a write (a new key per
	// request).
	of    path
	about string
}

// Schemes: the ways a request is sent. Every target has every one.
const (
	schemeBare      = "bare"
	schemeFloor     = "floor"
	schemeSeed      = "seed"
	schemeIdem      = "idem"
	schemeReadFirst = "idem-rf"
	schemeClaimOnly = "idem-claim"
	schemeLease     = "lease"
	schemeLeaseCall = "lease-5ms"
	schemeIdemCall  = "idem-5ms"
	schemeBareCall  = "bare-5ms"
)

const (
	pathBare        path = "bare"
	pathFloor       path = "floor"
	pathSeed        path = "seed"
	pathIdem        path = "idem"
	pathIdemRF      path = "idem-rf"
	pathReplay      path = "replay"
	pathReplayRF    path = "replay-rf"
	pathReplayClaim path = "replay-claim"
	pathSeedReplay  path = "seed-replay"
	pathLease       path = "lease"
	pathLeaseCall   path = "lease-5ms"
	pathIdemCall    path = "idem-5ms"
	pathBareCall    path = "bare-5ms"
)

// defaultPaths are the paths of a run without -paths: all but lease
// mode's and the provider call's, which -paths names.
const defaultPaths = "bare,floor,seed,idem,idem-rf,replay,replay-rf,replay-claim,seed-replay"

// pathDefs are every path, writes first (their order rotates each round),
// then the paths that send keys the writes completed.
var pathDefs = []pathDef{
	{pathBare, schemeBare, "", "the user's write alone: BEGIN; INSERT an order; COMMIT, each statement sent as the application sends it"},
	{pathFloor, schemeFloor, "", "bare plus one plain INSERT of the key into the idem table, sent the way idem sends its own statements (pgx: with COMMIT, through idem's driver; MariaDB: values inlined; SQLite: prepared by idem's driver)"},
	{pathSeed, schemeSeed, "", "the seed's SQL as written (claim INSERT ... ON CONFLICT DO NOTHING RETURNING, or a plain INSERT and 1062 on MySQL; the order; UPDATE ... SET response; COMMIT), sent the way idem sends its own statements (pgx: BEGIN with the claim, the UPDATE with COMMIT, through idem's driver; MariaDB: values inlined; SQLite: prepared by idem's driver)"},
	{pathIdem, schemeIdem, "", "the write inside Store.Do"},
	{pathIdemRF, schemeReadFirst, "", "Store.Do with ReadFirstAlways: a read before the transaction"},
	{pathLease, schemeLease, "", "Store.DoLease: the claim commits alone, then the order is written with a recorded step (RecordStep), then Complete stores the response: three transactions"},
	{pathLeaseCall, schemeLeaseCall, "", "lease with a fake provider call of 5 ms (a sleep that honours ctx) before the step, outside any transaction, as lease mode intends"},
	{pathIdemCall, schemeIdemCall, "", "idem with the same 5 ms call inside Store.Do's transaction, before the order: the claim's row (SQLite: the database) stays locked across it"},
	{pathBareCall, schemeBareCall, "", "bare with the same 5 ms call inside its transaction, before the order"},
	{pathReplay, schemeIdem, pathIdem, "keys the idem cell completed, sent again through Store.Do with the default Config.ReadFirst (ReadFirstAuto: it reads first once recent requests were mostly retries)"},
	{pathReplayRF, schemeReadFirst, pathIdem, "those keys through Store.Do with ReadFirstAlways"},
	{pathReplayClaim, schemeClaimOnly, pathIdem, "those keys through Store.Do with ReadFirstNever: every replay decided by the claim, in a write transaction"},
	{pathSeedReplay, schemeSeed, pathSeed, "keys the seed cell completed, sent again through the seed's SQL (the claim finds the key; the record is read in the same transaction)"},
}

func defOf(p path) (pathDef, bool) {
	i := slices.IndexFunc(pathDefs, func(d pathDef) bool { return d.name == p })
	if i < 0 {
		return pathDef{}, false
	}
	return pathDefs[i], true
}

func allPathNames() string {
	var names []string
	for _, d := range pathDefs {
		names = append(names, string(d.name))
	}
	return strings.Join(names, ",")
}

// expected is the outcome a request of p should have.
func expected(p path) idem.Outcome {
	if d, _ := defOf(p); d.of != "" {
		return idem.Replay
	}
	return idem.Won
}
