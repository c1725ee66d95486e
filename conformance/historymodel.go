package conformance

import (
	"fmt"

	"github.com/anishathalye/porcupine"
)

// The History case's sequential specification: an idempotent register per
// key, checked for linearizability by porcupine. A key holds nothing, a
// pending intention (one request body, held by a lease with a fencing
// token), or a done one (its body and the response stored for it). Every
// operation of the history is one of these, with what it returned:
//
//   - Do(body, resp): Won stores resp on a key holding nothing; Replay
//     answers exactly the stored response of the same body; Mismatch a key
//     held or done for another body; InFlight a key holding nothing (its
//     holder had not committed, or SQLite's writer was busy) or pending
//     for the same body, never a done one. Do never takes a pending key.
//     A blind InFlight (no record, not Busy) is the store's answer when a
//     claim's wait ran out and the read that followed it failed (a
//     restart, a dropped connection), or found nothing committed: it says
//     nothing of the key and is accepted in any state (had the read found
//     a done key, the answer would have been Replay or Mismatch).
//   - Lease(body): Won makes a key holding nothing pending with the
//     returned token, or takes over (resumes) a pending one of the same
//     body with a greater token; the losers answer as Do's do.
//   - Complete(body, resp, token): stores resp on a key pending for body
//     under exactly that token; ErrLeaseLost everywhere else.
//   - Read: the record read from the database once every operation ended
//     must be the state.
//
// An operation that failed before anything of it committed (a cut before
// COMMIT that Do retried until it gave up, a lock timeout) changes
// nothing. One whose COMMIT's outcome is unknown may or may not have taken
// effect, at any time after its call: it returns at the end of the history
// with an output the model lets step either way (porcupine's
// NondeterministicModel). A takeover whose commit is unknown leaves the
// token unknown (0): no known holder's token matches it, since tokens only
// grow.

// histKind is what an operation of the history did.
type histKind uint8

const (
	histDo histKind = iota + 1
	histLease
	histComplete
	histRead
)

func (k histKind) String() string {
	switch k {
	case histDo:
		return "do"
	case histLease:
		return "lease"
	case histComplete:
		return "complete"
	case histRead:
		return "read"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// histInput is an operation's call.
type histInput struct {
	Kind histKind
	Key  string
	// Body says which of the key's request bodies (fingerprints).
	Body int
	// Resp is the response Do or Complete would store ("status:body").
	Resp string
	// Token is the holder's fencing token (Complete).
	Token int64
}

// histResult is how an operation ended.
type histResult uint8

const (
	resWon histResult = iota + 1 // Do won and committed, Lease won, Complete stored
	resReplay
	resMismatch
	resInFlight
	resLost    // Complete: ErrLeaseLost
	resFailed  // an error after which nothing of the operation committed
	resUnknown // an error after which whether it committed is unknown
	resRead    // Read: Rec holds what the database held
)

func (r histResult) String() string {
	return [...]string{"?", "won", "replay", "mismatch", "in-flight", "lease-lost", "failed", "unknown", "read"}[min(int(r), 8)]
}

// histOutput is an operation's return.
type histOutput struct {
	Result histResult
	// Resp is the response a Won Do or a Replay answered ("status:body").
	Resp string
	// Token is a won Lease's fencing token.
	Token int64
	// Blind marks an InFlight with no record that is not Busy: nothing was
	// read of the key (see historyOutcome).
	Blind bool
	// Rec is what a Read found.
	Rec histState
}

type histPhase uint8

const (
	phaseNone histPhase = iota
	phasePending
	phaseDone
)

// histState is a key's register. It is comparable, so porcupine's default
// equality serves.
type histState struct {
	Phase histPhase
	Body  int
	Resp  string
	// Token is a pending key's holder's token; 0 when unknown (a takeover
	// whose commit's outcome is unknown). A done key keeps none.
	Token int64
}

func (s histState) String() string {
	switch s.Phase {
	case phasePending:
		if s.Token == 0 {
			return fmt.Sprintf("pending b%d token ?", s.Body)
		}
		return fmt.Sprintf("pending b%d token %d", s.Body, s.Token)
	case phaseDone:
		return fmt.Sprintf("done b%d %q", s.Body, s.Resp)
	}
	return "none"
}

// histStep returns every state the register may be in after the
// operation (in, out) on s: none when the operation could not have
// returned out from s.
func histStep(s histState, in histInput, out histOutput) []histState {
	same := s.Phase != phaseNone && s.Body == in.Body
	stay := []histState{s}
	if out.Result == resFailed {
		return stay
	}
	switch in.Kind {
	case histRead:
		if out.Result == resRead && out.Rec.Phase == s.Phase &&
			(s.Phase == phaseNone || out.Rec.Body == s.Body) &&
			(s.Phase != phaseDone || out.Rec.Resp == s.Resp) &&
			(s.Phase != phasePending || s.Token == 0 || out.Rec.Token == s.Token) {
			return stay
		}
		return nil
	case histComplete:
		holds := s.Phase == phasePending && same && s.Token == in.Token
		done := histState{Phase: phaseDone, Body: in.Body, Resp: in.Resp}
		switch out.Result {
		case resWon:
			if holds {
				return []histState{done}
			}
		case resLost:
			if !holds && s.Phase != phaseNone {
				return stay
			}
		case resUnknown:
			if holds {
				return []histState{s, done}
			}
			return stay
		}
		return nil
	}
	// Do and Lease.
	switch out.Result {
	case resWon:
		switch {
		case in.Kind == histDo && s.Phase == phaseNone && out.Resp == in.Resp:
			return []histState{{Phase: phaseDone, Body: in.Body, Resp: in.Resp}}
		case in.Kind == histLease && out.Token > 0 &&
			(s.Phase == phaseNone || s.Phase == phasePending && same && (s.Token == 0 || out.Token > s.Token)):
			return []histState{{Phase: phasePending, Body: in.Body, Token: out.Token}}
		}
	case resReplay:
		if s.Phase == phaseDone && same && out.Resp == s.Resp {
			return stay
		}
	case resMismatch:
		if s.Phase != phaseNone && !same {
			return stay
		}
	case resInFlight:
		if out.Blind || s.Phase == phaseNone || s.Phase == phasePending && same {
			return stay
		}
	case resUnknown:
		switch {
		case in.Kind == histDo && s.Phase == phaseNone:
			return []histState{s, {Phase: phaseDone, Body: in.Body, Resp: in.Resp}}
		case in.Kind == histLease && (s.Phase == phaseNone || s.Phase == phasePending && same):
			return []histState{s, {Phase: phasePending, Body: in.Body}}
		}
		return stay
	}
	return nil
}

// historyModel is the register model for porcupine, partitioned by key.
func historyModel() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			byKey := map[string]int{}
			var parts [][]porcupine.Operation
			for _, op := range history {
				k := op.Input.(histInput).Key
				i, ok := byKey[k]
				if !ok {
					i = len(parts)
					byKey[k] = i
					parts = append(parts, nil)
				}
				parts[i] = append(parts[i], op)
			}
			return parts
		},
		Init: func() []any { return []any{histState{}} },
		Step: func(state, input, output any) []any {
			next := histStep(state.(histState), input.(histInput), output.(histOutput))
			out := make([]any, len(next))
			for i, s := range next {
				out[i] = s
			}
			return out
		},
		DescribeOperation: func(input, output any) string {
			return describeHistOp(input.(histInput), output.(histOutput))
		},
		DescribeState: func(state any) string { return state.(histState).String() },
		DescribeOperationMetadata: func(info any) string {
			if info == nil {
				return ""
			}
			return fmt.Sprint(info)
		},
	}
	return nm.ToModel()
}

func describeHistOp(in histInput, out histOutput) string {
	var call string
	switch in.Kind {
	case histDo:
		call = fmt.Sprintf("do(%s b%d, %q)", in.Key, in.Body, in.Resp)
	case histLease:
		call = fmt.Sprintf("lease(%s b%d)", in.Key, in.Body)
	case histComplete:
		call = fmt.Sprintf("complete(%s b%d token %d, %q)", in.Key, in.Body, in.Token, in.Resp)
	default:
		return fmt.Sprintf("read(%s) -> %v", in.Key, out.Rec)
	}
	switch {
	case out.Result == resReplay, out.Result == resWon && in.Kind == histDo:
		return fmt.Sprintf("%s -> %v %q", call, out.Result, out.Resp)
	case out.Result == resWon && in.Kind == histLease:
		return fmt.Sprintf("%s -> won token %d", call, out.Token)
	case out.Result == resInFlight && out.Blind:
		return fmt.Sprintf("%s -> in-flight, no record read", call)
	}
	return fmt.Sprintf("%s -> %v", call, out.Result)
}
