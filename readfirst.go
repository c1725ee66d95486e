package idem

import (
	"fmt"
	"math"
	"sync/atomic"
)

// ReadFirstPolicy says when Do reads the key's record before it begins a
// transaction (Config.ReadFirst). The read answers a completed record
// (Replay) or one with another fingerprint (Mismatch) with one statement
// outside any transaction: no write transaction, no claim, no wait. It
// costs a request that goes on to claim one more statement and round trip.
type ReadFirstPolicy int

const (
	// ReadFirstAuto, the default, reads first while recent requests are
	// mostly retries: while at least ReadFirstShare of the store's recent
	// decided claims (a moving average over about the last 32) found the
	// work done or the key used with another body. During an incident,
	// when clients retry in bulk, replays then cost one read instead of a
	// write transaction; in normal traffic, where nearly every request is
	// new, nothing is read first.
	ReadFirstAuto ReadFirstPolicy = iota
	// ReadFirstAlways reads first on every request: for clients that
	// retry often, or a store that serves mostly retries.
	ReadFirstAlways
	// ReadFirstNever always decides by the claim: one write transaction
	// per request, replays included.
	ReadFirstNever
)

// ReadFirstShare is the share of replays (and mismatches) among recent
// claims above which ReadFirstAuto reads first. Reading first costs a new
// request one read and saves a replay a write transaction of three to four
// statements, so it pays from about a quarter of replays on.
const ReadFirstShare = 0.25

// String names the policy.
func (p ReadFirstPolicy) String() string {
	switch p {
	case ReadFirstAuto:
		return "auto"
	case ReadFirstAlways:
		return "always"
	case ReadFirstNever:
		return "never"
	}
	return fmt.Sprintf("ReadFirstPolicy(%d)", int(p))
}

// settledShare is a moving average of how many decided claims found a
// settled record: Replay and Mismatch count 1, Won 0. It is lock-free, as
// every Do updates it.
type settledShare struct{ bits atomic.Uint64 }

// settledWeight is the weight of one observation: about the last 32 count.
const settledWeight = 1.0 / 32

func (s *settledShare) observe(o Outcome) {
	var x float64
	switch o {
	case Won:
	case Replay, Mismatch:
		x = 1
	default:
		return // InFlight says nothing about settled keys
	}
	for {
		old := s.bits.Load()
		v := math.Float64frombits(old)
		if s.bits.CompareAndSwap(old, math.Float64bits(v+(x-v)*settledWeight)) {
			return
		}
	}
}

func (s *settledShare) value() float64 { return math.Float64frombits(s.bits.Load()) }

// readsFirst says whether Do reads before it claims now.
func (c *core) readsFirst() bool {
	switch c.cfg.ReadFirst {
	case ReadFirstAlways:
		return true
	case ReadFirstNever:
		return false
	}
	return c.settled.value() >= ReadFirstShare
}
