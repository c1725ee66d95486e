package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/idemkit/idem"
)

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// recordJSON is a record in -json output.
type recordJSON struct {
	Scope       string    `json:"scope"`
	Key         string    `json:"key"`
	State       string    `json:"state"`
	Expired     bool      `json:"expired"`
	Status      int       `json:"status,omitempty"`
	Fingerprint string    `json:"fingerprint"`
	HeaderBytes int64     `json:"header_bytes"`
	BodyBytes   int64     `json:"body_bytes"`
	CreatedAt   time.Time `json:"created_at"`
	ExpiresAt   time.Time `json:"expires_at"`
	AgeSeconds  float64   `json:"age_seconds"`
	// Lease mode: the fencing token, the lease's end and the last step.
	Token        int64      `json:"token,omitempty"`
	LeaseUntil   *time.Time `json:"lease_until,omitempty"`
	LeaseExpired bool       `json:"lease_expired,omitempty"`
	Step         string     `json:"step,omitempty"`
	// Answer is what a record of idemgrpc or idemconnect holds: its status
	// is 0 for a success and an error alike.
	Answer *rpcAnswer `json:"answer,omitempty"`
}

func toJSON(r idem.RecordInfo) recordJSON {
	j := recordJSON{
		Scope:       r.Scope,
		Key:         r.Key,
		State:       r.State.String(),
		Expired:     r.Expired,
		Status:      r.Status,
		Fingerprint: hex.EncodeToString(r.Fingerprint[:]),
		HeaderBytes: r.HeaderBytes,
		BodyBytes:   r.BodyBytes,
		CreatedAt:   r.CreatedAt,
		ExpiresAt:   r.ExpiresAt,
		AgeSeconds:  r.Age.Seconds(),

		Token:        r.Token,
		LeaseExpired: r.LeaseExpired,
		Step:         r.Step,
	}
	if !r.LeaseUntil.IsZero() {
		j.LeaseUntil = &r.LeaseUntil
	}
	return j
}

// liveness says "live" or "expired", and for a pending lease-mode record
// whether its lease is held or has lapsed (work nobody is doing).
func liveness(r idem.RecordInfo) string {
	switch {
	case r.Expired:
		return "expired"
	case r.LeaseExpired:
		return "live, lease lapsed at step " + cmpOr(r.Step, "(none)")
	case !r.LeaseUntil.IsZero() && r.State == idem.StatePending:
		return "live, leased"
	}
	return "live"
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// age prints a duration rounded for people.
func age(d time.Duration) string {
	switch {
	case d >= time.Hour:
		return d.Round(time.Minute).String()
	case d >= time.Second:
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// count prints n with thousands separators.
func count(n int64) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + count(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
