package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
)

// rpcAnswer is what a completed record of idemgrpc or idemconnect holds.
// Their answers are stored with status 0 (idem.NoStatus), success and
// error alike, so the status alone does not tell them apart: the stored
// body does.
type rpcAnswer struct {
	Protocol string `json:"protocol"` // "grpc" or "connect"
	Code     string `json:"code"`     // "OK", "InvalidArgument", ...
	Message  string `json:"message,omitempty"`
	// MessageBytes is the size of a success's response message.
	MessageBytes int `json:"message_bytes,omitempty"`
}

func (a rpcAnswer) String() string {
	name := map[string]string{"grpc": "gRPC", "connect": "Connect"}[a.Protocol]
	if a.Code == idemrpc.OK.String() {
		return fmt.Sprintf("%s OK, a %d-byte message", name, a.MessageBytes)
	}
	if a.Message == "" {
		return fmt.Sprintf("%s error %s", name, a.Code)
	}
	return fmt.Sprintf("%s error %s: %q", name, a.Code, a.Message)
}

// rpcProtocol says which RPC adapter built scope: its operation, after the
// quoted principal, is rpc:"/pkg.Service/Method" for idemgrpc (or, from
// idem v0.0, the whole scope begins with grpc "), connect:"/..." for
// idemconnect. "" for any other scope, and for one too long to hold its
// operation (idem.Scope hashed it).
func rpcProtocol(scope string) string {
	if strings.HasPrefix(scope, `grpc "`) {
		return "grpc"
	}
	principal, err := strconv.QuotedPrefix(scope)
	if err != nil {
		return ""
	}
	switch op := strings.TrimPrefix(scope[len(principal):], " "); {
	case strings.HasPrefix(op, `rpc:"`):
		return "grpc"
	case strings.HasPrefix(op, `connect:"`):
		return "connect"
	}
	return ""
}

// Each adapter writes a version byte before its answer (idemgrpc and
// idemconnect, outcome.go): idemgrpc 2 for an idemrpc.Answer and 1 for its
// first encoding (the google.rpc.Status's length as a uvarint, the
// status, the message), idemconnect 1 for an idemrpc.Answer.
var errUnknownAnswer = errors.New("not an answer this idem knows")

// parseRPCAnswer decodes the body an adapter of protocol stored.
func parseRPCAnswer(protocol string, body []byte) (rpcAnswer, error) {
	if len(body) == 0 {
		return rpcAnswer{}, errUnknownAnswer
	}
	var a idemrpc.Answer
	switch v := body[0]; {
	case protocol == "grpc" && v == 2, protocol == "connect" && v == 1:
		var err error
		if a, err = idemrpc.ParseAnswer(body[1:]); err != nil {
			return rpcAnswer{}, err
		}
	case protocol == "grpc" && v == 1:
		n, w := binary.Uvarint(body[1:])
		if w <= 0 || n > uint64(len(body)-1-w) { //nolint:gosec // w > 0
			return rpcAnswer{}, idemrpc.ErrCorruptAnswer
		}
		rest := body[1+w:]
		a.Message = rest[n:]
		if n > 0 {
			a.Status = rest[:n]
		}
	default:
		return rpcAnswer{}, fmt.Errorf("%w: version %d", errUnknownAnswer, v)
	}
	code, msg, err := a.Code()
	if err != nil {
		return rpcAnswer{}, err
	}
	out := rpcAnswer{Protocol: protocol, Code: code.String(), Message: msg}
	if code == idemrpc.OK {
		out.MessageBytes = len(a.Message)
	}
	return out, nil
}

// answerOf reads what the completed record r of an RPC adapter holds; nil
// for any other record, or when its body can no longer be read (it expired
// and Lookup no longer returns it) or is not an answer this idem knows.
func answerOf(ctx context.Context, e *env, r idem.RecordInfo) (*rpcAnswer, error) {
	protocol := rpcProtocol(r.Scope)
	if r.State != idem.StateCompleted || r.Status != idem.NoStatus || protocol == "" {
		return nil, nil
	}
	rec, err := e.target.store.Lookup(ctx, r.Scope, r.Key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	a, err := parseRPCAnswer(protocol, rec.Response.Body)
	if err != nil {
		fmt.Fprintf(e.stderr, "idem: %s %s: the stored answer cannot be read: %v\n", r.Scope, r.Key, err)
		return nil, nil
	}
	return &a, nil
}
