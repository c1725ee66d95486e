package idem_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// TestNewConfig: zero fields take their defaults, set fields are kept, and
// negative ones are refused with ErrInvalidConfig.
func TestNewConfig(t *testing.T) {
	// The documented defaults, as literals: a changed constant must fail.
	defaults := idem.Config{
		Table:       "idempotency_keys",
		Retention:   24 * time.Hour,
		WaitBound:   5 * time.Second,
		MaxBody:     1 << 20,
		MaxAttempts: 5,
		PurgeBatch:  1000,

		PurgeDutyCycle: 0.25,
		CommitTimeout:  10 * time.Second,
		Lease:          30 * time.Second,

		HolderWaitBound: 6 * time.Second,
	}
	custom := idem.Config{
		Table:       "my_keys",
		Retention:   time.Hour,
		WaitBound:   time.Second,
		MaxBody:     10,
		MaxAttempts: 2,
		PurgeBatch:  3,

		PurgeDutyCycle: 1,
		CommitTimeout:  time.Minute,
		Lease:          5 * time.Minute,

		HolderWaitBound: time.Minute,
	}
	for _, tc := range []struct {
		name    string
		cfg     idem.Config
		want    idem.Config
		wantErr bool
	}{
		{name: "zero value means defaults", cfg: idem.Config{}, want: defaults},
		{name: "set fields are kept", cfg: custom, want: custom},
		{name: "negative Retention", cfg: idem.Config{Retention: -time.Second}, wantErr: true},
		{name: "negative WaitBound", cfg: idem.Config{WaitBound: -time.Nanosecond}, wantErr: true},
		{name: "negative MaxBody", cfg: idem.Config{MaxBody: -1}, wantErr: true},
		{name: "negative MaxAttempts", cfg: idem.Config{MaxAttempts: -1}, wantErr: true},
		{name: "negative PurgeBatch", cfg: idem.Config{PurgeBatch: -1}, wantErr: true},
		{name: "negative PurgeDutyCycle", cfg: idem.Config{PurgeDutyCycle: -0.5}, wantErr: true},
		{name: "PurgeDutyCycle over 1", cfg: idem.Config{PurgeDutyCycle: 1.5}, wantErr: true},
		{name: "negative CommitTimeout", cfg: idem.Config{CommitTimeout: -time.Second}, wantErr: true},
		{name: "Retention equal to WaitBound", cfg: idem.Config{Retention: 5 * time.Second, WaitBound: 5 * time.Second}, wantErr: true},
		{name: "Retention shorter than the default WaitBound", cfg: idem.Config{Retention: time.Second}, wantErr: true},
		{name: "Retention just over WaitBound: no lease fits, the rest works", cfg: idem.Config{Retention: time.Second + 1, WaitBound: time.Second},
			want: idem.Config{Table: "idempotency_keys", Retention: time.Second + 1, WaitBound: time.Second, MaxBody: 1 << 20, MaxAttempts: 5,
				PurgeBatch: 1000, PurgeDutyCycle: 0.25, CommitTimeout: 10 * time.Second, Lease: 2 * time.Second, HolderWaitBound: 400 * time.Millisecond}},
		{name: "default Lease is at least twice WaitBound", cfg: idem.Config{Retention: time.Minute, WaitBound: 20 * time.Second},
			want: idem.Config{Table: "idempotency_keys", Retention: time.Minute, WaitBound: 20 * time.Second, MaxBody: 1 << 20, MaxAttempts: 5,
				PurgeBatch: 1000, PurgeDutyCycle: 0.25, CommitTimeout: 10 * time.Second, Lease: 40 * time.Second, HolderWaitBound: 8 * time.Second}},
		{name: "Lease not shorter than Retention", cfg: idem.Config{Retention: time.Minute, Lease: time.Minute}, wantErr: true},
		{name: "Lease shorter than twice WaitBound", cfg: idem.Config{WaitBound: time.Second, Lease: 2*time.Second - 1}, wantErr: true},
		{name: "HolderWaitBound over a fifth of Lease", cfg: idem.Config{Lease: 10 * time.Second, HolderWaitBound: 2*time.Second + 1}, wantErr: true},
		{name: "HolderWaitBound at a fifth of Lease", cfg: idem.Config{Lease: 10 * time.Second, HolderWaitBound: 2 * time.Second},
			want: idem.Config{Table: "idempotency_keys", Retention: 24 * time.Hour, WaitBound: 5 * time.Second, MaxBody: 1 << 20, MaxAttempts: 5,
				PurgeBatch: 1000, PurgeDutyCycle: 0.25, CommitTimeout: 10 * time.Second, Lease: 10 * time.Second, HolderWaitBound: 2 * time.Second}},
		{name: "negative Lease", cfg: idem.Config{Lease: -time.Second}, wantErr: true},
		{name: "negative HolderWaitBound", cfg: idem.Config{HolderWaitBound: -time.Second}, wantErr: true},
		{name: "table not an identifier", cfg: idem.Config{Table: "keys; DROP TABLE x"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := newFakeStore(tc.cfg)
			if tc.wantErr {
				if !errors.Is(err, idem.ErrInvalidConfig) {
					t.Fatalf("New(%+v) = %v, want ErrInvalidConfig", tc.cfg, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%+v): %v", tc.cfg, err)
			}
			got := s.Config()
			for _, f := range []struct {
				name      string
				got, want any
			}{
				{"Table", got.Table, tc.want.Table},
				{"Retention", got.Retention, tc.want.Retention},
				{"WaitBound", got.WaitBound, tc.want.WaitBound},
				{"MaxBody", got.MaxBody, tc.want.MaxBody},
				{"MaxAttempts", got.MaxAttempts, tc.want.MaxAttempts},
				{"PurgeBatch", got.PurgeBatch, tc.want.PurgeBatch},
				{"PurgeDutyCycle", got.PurgeDutyCycle, tc.want.PurgeDutyCycle},
				{"CommitTimeout", got.CommitTimeout, tc.want.CommitTimeout},
				{"Lease", got.Lease, tc.want.Lease},
				{"HolderWaitBound", got.HolderWaitBound, tc.want.HolderWaitBound},
				{"StoreStatus is set", got.StoreStatus != nil, true},
				{"Clock is nil", got.Clock == nil, true},
			} {
				if f.got != f.want {
					t.Errorf("Config().%s = %v, want %v", f.name, f.got, f.want)
				}
			}
		})
	}
	if _, err := idem.New[*fakeTx](nil, idem.Config{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("New(nil driver) = %v, want ErrInvalidConfig", err)
	}
}

// TestNewTypedNilDriver: what `driver, _ := sqlite.New(...)` leaves when New
// failed is a nil pointer in a non-nil interface; idem.New refuses it with
// ErrInvalidConfig instead of panicking.
func TestNewTypedNilDriver(t *testing.T) {
	var driver *fakeDriver // a constructor's nil result, error ignored
	store, err := idem.New[*fakeTx](driver, idem.Config{})
	if !errors.Is(err, idem.ErrInvalidConfig) || store != nil {
		t.Fatalf("New(typed nil driver) = %v, %v; want ErrInvalidConfig and no store", store, err)
	}
}

// headerOfSize returns a header whose stored encoding is exactly size bytes
// (size between 16392 and 2 MiB): version 1, one name (count 1, length 1,
// "X"), one value (count 1, a 3-byte length, the value).
func headerOfSize(size int) http.Header {
	return http.Header{"X": {strings.Repeat("v", size-8)}}
}

// TestCompleteLimits: the body may be exactly MaxBody bytes and the encoded
// header exactly MaxHeaderBytes; one byte more is ErrTooLarge, whose
// message names the limit, and reaches no statement.
func TestCompleteLimits(t *testing.T) {
	const maxBody = 16
	for _, tc := range []struct {
		name  string
		resp  idem.Response
		err   error
		limit string // named in the error's message
	}{
		{"body at the limit", idem.Response{Status: 200, Body: make([]byte, maxBody)}, nil, ""},
		{"body over the limit", idem.Response{Status: 200, Body: make([]byte, maxBody+1)}, idem.ErrTooLarge, "Config.MaxBody"},
		{"header at the limit", idem.Response{Status: 200, Header: headerOfSize(idem.MaxHeaderBytes)}, nil, ""},
		{"header over the limit", idem.Response{Status: 200, Header: headerOfSize(idem.MaxHeaderBytes + 1)}, idem.ErrTooLarge, "MaxHeaderBytes"},
		{"no status (work without HTTP)", idem.Response{Status: idem.NoStatus, Body: []byte("done")}, nil, ""},
		{"status 1", idem.Response{Status: 1}, idem.ErrInvalidResponse, ""},
		{"status -1", idem.Response{Status: -1}, idem.ErrInvalidResponse, ""},
		{"status 99", idem.Response{Status: 99}, idem.ErrInvalidResponse, ""},
		{"status 100", idem.Response{Status: 100}, nil, ""},
		{"status 599", idem.Response{Status: 599}, nil, ""},
		{"status 600", idem.Response{Status: 600}, idem.ErrInvalidResponse, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, f, err := newFakeStore(idem.Config{MaxBody: maxBody})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			claim, err := s.Claim(ctx, &fakeTx{d: f}, fakeRequest("k"))
			if err != nil || claim.Outcome != idem.Won {
				t.Fatalf("Claim = %+v, %v", claim, err)
			}
			err = claim.Complete(ctx, tc.resp)
			if tc.err == nil {
				if err != nil {
					t.Fatalf("Complete: %v", err)
				}
				if len(f.completes) != 1 {
					t.Fatalf("Complete ran %d statements, want 1", len(f.completes))
				}
				a := f.completes[0]
				if tc.resp.Header != nil && len(a.Header) != idem.MaxHeaderBytes {
					t.Errorf("stored header of %d bytes, want %d (test helper out of date?)", len(a.Header), idem.MaxHeaderBytes)
				}
				if a.Body == nil {
					t.Errorf("stored body is nil, want an empty slice")
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.limit) {
				t.Errorf("Complete = %v, want %v naming %q", err, tc.err, tc.limit)
			}
			if len(f.completes) != 0 {
				t.Errorf("a refused response reached the database")
			}
		})
	}
}

// TestCompleteOnLostClaim: Complete on any outcome but Won is ErrNotClaimed,
// including a claim that timed out (which has no transaction to run on).
func TestCompleteOnLostClaim(t *testing.T) {
	req := fakeRequest("k")
	for _, tc := range []struct {
		name    string
		result  dialect.ClaimResult
		err     error
		outcome idem.Outcome
	}{
		{"timed out", dialect.ClaimResult{}, errRawLockTimeout, idem.InFlight},
		{"in flight", dialect.ClaimResult{Record: dialect.Record{Fingerprint: req.Fingerprint[:], State: dialect.Pending}}, nil, idem.InFlight},
		{"replay", dialect.ClaimResult{Record: dialect.Record{Fingerprint: req.Fingerprint[:], State: dialect.Completed, Status: 200}}, nil, idem.Replay},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, f, err := newFakeStore(idem.Config{})
			if err != nil {
				t.Fatal(err)
			}
			f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) { return tc.result, tc.err }
			ctx := context.Background()
			claim, err := s.Claim(ctx, &fakeTx{d: f}, req)
			if err != nil || claim.Outcome != tc.outcome {
				t.Fatalf("Claim = %+v, %v, want %v", claim, err, tc.outcome)
			}
			if err := claim.Complete(ctx, idem.Response{Status: 200}); !errors.Is(err, idem.ErrNotClaimed) {
				t.Errorf("Complete = %v, want ErrNotClaimed", err)
			}
			if len(f.completes) != 0 {
				t.Errorf("Complete reached the database")
			}
		})
	}
}

func TestOutcomeString(t *testing.T) {
	for o, want := range map[idem.Outcome]string{
		idem.Won: "won", idem.Replay: "replay", idem.Mismatch: "mismatch", idem.InFlight: "in-flight", 0: "none", 99: "Outcome(99)",
	} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", int(o), got, want)
		}
	}
}
