package main

import (
	"context"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
	"github.com/idemkit/idem/sqlite"
)

// status is a google.rpc.Status's protobuf encoding: code, message.
func status(code idemrpc.Code, msg string) []byte {
	b := binary.AppendUvarint([]byte{0x08}, uint64(code))
	b = append(b, 0x12)
	b = binary.AppendUvarint(b, uint64(len(msg)))
	return append(b, msg...)
}

// TestRPCAnswers: records of idemgrpc and idemconnect are stored with
// status 0, success and error alike; inspect and list show which one the
// record holds, read from the stored answer, in text and in JSON. A
// record of status 0 that no RPC adapter stored (a queue consumer's)
// stays a plain 0.
func TestRPCAnswers(t *testing.T) {
	grpcV1 := func(st, msg []byte) []byte { // idemgrpc's first encoding
		return append(binary.AppendUvarint([]byte{1}, uint64(len(st))), append(st, msg...)...)
	}
	cases := []struct {
		name, scope string
		body        []byte
		inspect     string // in inspect's status line
		list        string // in list's status column
		answer      *rpcAnswer
	}{
		{"grpc error", idem.Scope("t1", `rpc:"/shop.v1.Orders/Create"`),
			idemrpc.Answer{Status: status(idemrpc.InvalidArgument, "amount is required")}.Append([]byte{2}),
			`0, gRPC error InvalidArgument: "amount is required"`, "0 gRPC InvalidArgument",
			&rpcAnswer{Protocol: "grpc", Code: "InvalidArgument", Message: "amount is required"}},
		{"grpc success", idem.Scope("t1", `rpc:"/shop.v1.Orders/Pay"`),
			idemrpc.Answer{Message: []byte{0x08, 0x2a}}.Append([]byte{2}),
			"0, gRPC OK, a 2-byte message", "0 gRPC OK",
			&rpcAnswer{Protocol: "grpc", Code: "OK", MessageBytes: 2}},
		{"grpc first encoding, error", idem.Scope("t1", `rpc:"/shop.v1.Orders/Refund"`),
			grpcV1(status(idemrpc.NotFound, "no such order"), nil),
			`0, gRPC error NotFound: "no such order"`, "0 gRPC NotFound",
			&rpcAnswer{Protocol: "grpc", Code: "NotFound", Message: "no such order"}},
		{"connect error", idem.Scope("t1", `connect:"/shop.v1.Orders/Create"`),
			idemrpc.Answer{Status: status(idemrpc.FailedPrecondition, "")}.Append([]byte{1}),
			"0, Connect error FailedPrecondition", "0 Connect FailedPrecondition",
			&rpcAnswer{Protocol: "connect", Code: "FailedPrecondition"}},
		{"connect success", idem.Scope("t1", `connect:"/shop.v1.Orders/Pay"`),
			idemrpc.Answer{Message: []byte{0x0a, 0x01, 'x'}}.Append([]byte{1}),
			"0, Connect OK, a 3-byte message", "0 Connect OK",
			&rpcAnswer{Protocol: "connect", Code: "OK", MessageBytes: 3}},
		{"queue result", idem.Scope("t1", `queue "ORDERS"`), []byte("order 7"), "status  0\n", "  0  ", nil},
	}

	path := filepath.Join(t.TempDir(), "rpc.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := sqlite.New(t.Context(), db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		req := idem.Request{Scope: tc.scope, Key: "k1", Fingerprint: idem.FingerprintRequest("POST", tc.scope, nil)}
		if _, err := store.Do(t.Context(), req, func(context.Context, *sql.Tx) (idem.Response, error) {
			return idem.Response{Status: idem.NoStatus, Body: tc.body}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	code, listOut, errOut := cli(t, false, "list", "-dsn", path, "-principal", "t1")
	if code != exitOK {
		t.Fatalf("list: exit %d: %s", code, errOut)
	}
	code, listJSON, errOut := cli(t, false, "list", "-dsn", path, "-principal", "t1", "-json")
	var listed struct{ Records []recordJSON }
	if err := json.Unmarshal([]byte(listJSON), &listed); code != exitOK || err != nil {
		t.Fatalf("list -json: exit %d, %v: %s %s", code, err, listJSON, errOut)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := cli(t, false, "inspect", "-dsn", path, "-scope", tc.scope, "-key", "k1")
			if code != exitOK || !strings.Contains(strings.Join(strings.Fields(out), " ")+"\n", strings.Join(strings.Fields(tc.inspect), " ")) {
				t.Errorf("inspect: exit %d, want %q in:\n%s%s", code, tc.inspect, out, errOut)
			}
			code, out, _ = cli(t, false, "inspect", "-dsn", path, "-scope", tc.scope, "-key", "k1", "-json")
			var rec recordJSON
			if err := json.Unmarshal([]byte(out), &rec); code != exitOK || err != nil || rec.Status != 0 || !sameAnswer(rec.Answer, tc.answer) {
				t.Errorf("inspect -json: exit %d, %v: answer %+v, want %+v:\n%s", code, err, rec.Answer, tc.answer, out)
			}
			var line string
			for l := range strings.Lines(listOut) {
				if strings.HasPrefix(l, tc.scope+" ") {
					line = l
				}
			}
			if !strings.Contains(line, tc.list) {
				t.Errorf("list: want %q in the line of %s:\n%s", tc.list, tc.scope, listOut)
			}
			found := false
			for _, r := range listed.Records {
				if r.Scope == tc.scope {
					found = true
					if !sameAnswer(r.Answer, tc.answer) {
						t.Errorf("list -json: answer %+v, want %+v", r.Answer, tc.answer)
					}
				}
			}
			if !found {
				t.Errorf("list -json: no record of %s", tc.scope)
			}
		})
	}
}

func sameAnswer(a, b *rpcAnswer) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// TestRPCProtocol: which adapter built a scope, from its operation.
func TestRPCProtocol(t *testing.T) {
	for scope, want := range map[string]string{
		idem.Scope("t", `rpc:"/a.B/C"`):     "grpc",
		idem.Scope("t", `connect:"/a.B/C"`): "connect",
		`grpc "/a.B/C" "t"`:                 "grpc", // idem v0.0's gRPC scope
		idem.Scope("t", `POST "/orders"`):   "",
		idem.Scope(`rpc:"x"`, `POST "/o"`):  "", // the principal is not the operation
		"not quoted":                        "",
	} {
		if got := rpcProtocol(scope); got != want {
			t.Errorf("rpcProtocol(%q) = %q, want %q", scope, got, want)
		}
	}
}
