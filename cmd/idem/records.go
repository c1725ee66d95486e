package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// keyFlags adds -key and the flags that name its scope: -scope, or
// -principal, -method and -route, from which the scope is built the way
// idemhttp's middleware builds it (idemhttp.Scope). The key and one of the
// two forms are required; a command without them, with both, or with part
// of the trio is refused before the database is opened.
func keyFlags(fs *flag.FlagSet, e *env) (scope, key *string) {
	scope = fs.String("scope", "", "the key's scope, exactly as stored (see -principal, -method and -route for idemhttp's)")
	principal := fs.String("principal", "", "with -method and -route, instead of -scope: the principal (tenant, client) the\nservice's idemhttp.Config.Principal returned")
	method := fs.String("method", "", "with -principal and -route: the request's method, such as POST")
	route := fs.String("route", "", "with -principal and -method: the route the middleware saw: the http.ServeMux pattern\nthat matched without its method, with its host if it has one (\"/orders/{id}\"), or the\nframework's template (\"/orders/:id\" in echo and gin)")
	key = fs.String("key", "", "the idempotency key (required)")
	e.check = func() error {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		trio := 0
		for _, name := range []string{"principal", "method", "route"} {
			if set[name] {
				trio++
			}
		}
		switch {
		case *key == "":
			return usageError("-key is required")
		case set["scope"] && trio > 0:
			return usageError("-scope excludes -principal, -method and -route: give the scope, or the three it is built from")
		case trio > 0 && trio < 3:
			return usageError("-principal, -method and -route go together: give all three (an anonymous principal is -principal '')")
		case trio == 3 && *method == "":
			return usageError("-method is empty")
		case trio == 3:
			*scope = idemhttp.Scope(*principal, *method, *route)
		case *scope == "":
			return usageError("-scope, or -principal, -method and -route, are required")
		}
		return nil
	}
	return scope, key
}

// prefixFlags adds -prefix and -principal, which exclude each other, and
// returns the function that gives the scope prefix they select: -principal
// P selects every scope idem.Scope builds for P (idem.ScopePrefix).
func prefixFlags(fs *flag.FlagSet, what string) func() (string, error) {
	prefix := fs.String("prefix", "", what+" whose scope starts with this, byte for byte")
	principal := fs.String("principal", "", what+" of this principal (tenant, client): the scopes idemhttp, idemgrpc,\nidemconnect and idemqueue build for it begin with idem.ScopePrefix(principal), the quoted principal")
	return func() (string, error) {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		switch {
		case set["prefix"] && set["principal"]:
			return "", usageError("-prefix and -principal exclude each other")
		case set["principal"]:
			return idem.ScopePrefix(*principal), nil
		}
		return *prefix, nil
	}
}

var inspectCommand = command{
	name:    "inspect",
	summary: "show one key's record, whatever its state",
	usage: `inspect -dsn DSN [-table NAME] (-scope SCOPE | -principal P -method M -route R) -key KEY [-json]

Shows the record of one key: its state (pending or completed), whether its
retention has passed, the stored status, the sizes of the stored header and
body, the request fingerprint, when it was claimed and when it expires, and
for a lease-mode record its fencing token, its lease's end and its last
recovery step. Expired records that purge has not deleted yet are shown too.
Exits 3 when there is no record.

idemgrpc and idemconnect store every answer with status 0, a success and an
error alike: for their records the status line also says what the stored
answer is ("gRPC error InvalidArgument: ...", "Connect OK, a 12-byte
message"), and -json adds it as "answer".

A scope is stored as idem.Scope builds it: the quoted principal, then the
operation. For a key sent through idemhttp, give the principal, the method and
the route and the scope is built as the middleware builds it:

  idem inspect -principal tenant-42 -method POST -route '/accounts/{id}/deposits' -key k_9f2c

which is the same as
  idem inspect -scope '"tenant-42" POST "/accounts/{id}/deposits"' -key k_9f2c`,
	needsDB: true,
	timeout: time.Minute,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, *env) error {
		scope, key := keyFlags(fs, e)
		return func(ctx context.Context, e *env) error {
			r, err := e.target.store.Inspect(ctx, *scope, *key)
			if err != nil {
				return err
			}
			answer, err := answerOf(ctx, e, r)
			if err != nil {
				return err
			}
			if e.json {
				j := toJSON(r)
				j.Answer = answer
				return writeJSON(e.stdout, j)
			}
			w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "scope\t%s\n", r.Scope)
			fmt.Fprintf(w, "key\t%s\n", r.Key)
			fmt.Fprintf(w, "state\t%s, %s\n", r.State, liveness(r))
			if r.State == idem.StateCompleted {
				if answer != nil {
					fmt.Fprintf(w, "status\t%d, %s\n", r.Status, answer)
				} else {
					fmt.Fprintf(w, "status\t%d\n", r.Status)
				}
				fmt.Fprintf(w, "stored\t%d header bytes, %d body bytes\n", r.HeaderBytes, r.BodyBytes)
			}
			fmt.Fprintf(w, "fingerprint\t%s\n", hex.EncodeToString(r.Fingerprint[:]))
			fmt.Fprintf(w, "claimed\t%s (%s ago)\n", r.CreatedAt.Format(time.RFC3339Nano), age(r.Age))
			fmt.Fprintf(w, "expires\t%s\n", r.ExpiresAt.Format(time.RFC3339Nano))
			if r.Token != 0 || !r.LeaseUntil.IsZero() || r.Step != "" {
				fmt.Fprintf(w, "token\t%d\n", r.Token)
				switch {
				case r.LeaseUntil.IsZero():
					fmt.Fprintf(w, "lease\tnone\n")
				case r.LeaseExpired && r.LeaseUntil.Equal(r.CreatedAt):
					fmt.Fprintf(w, "lease\treleased (its holder gave it up; a claim may take it over)\n")
				case r.LeaseExpired:
					fmt.Fprintf(w, "lease\tended %s (lapsed: a claim may take it over)\n", r.LeaseUntil.Format(time.RFC3339Nano))
				default:
					fmt.Fprintf(w, "lease\theld until %s\n", r.LeaseUntil.Format(time.RFC3339Nano))
				}
				fmt.Fprintf(w, "step\t%s\n", cmpOr(r.Step, "(none)"))
			}
			return w.Flush()
		}
	},
}

var listCommand = command{
	name:    "list",
	summary: "list records by scope prefix, state and age, a page at a time",
	usage: `list -dsn DSN [-table NAME] [-prefix SCOPE_PREFIX | -principal P] [-state STATES] [-min-age D]
          [-max-age D] [-live | -expired] [-limit N] [-after TOKEN | -all] [-json]

Lists records in (scope, key) order, byte by byte. A page ends with the token
of the next one ("next: TOKEN"; in JSON, "next"): pass it to -after. -all
follows the pages to the end. Stuck keys, for example, are pending, live and
old: idem list -state pending -live -min-age 10m

Scopes begin with the quoted principal ("tenant-42" POST "/orders"), so
one tenant's records are idem list -principal tenant-42 (the same as
-prefix '"tenant-42" ').

A record of idemgrpc or idemconnect (status 0) shows its answer's code
beside the status ("0 gRPC OK", "0 Connect NotFound"); -json adds "answer".`,
	needsDB: true,
	timeout: time.Minute,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, *env) error {
		prefix := prefixFlags(fs, "only records")
		states := fs.String("state", "", "only records in these states, comma-separated: pending, completed")
		minAge := fs.Duration("min-age", 0, "only records claimed at least this long ago")
		maxAge := fs.Duration("max-age", 0, "only records claimed at most this long ago")
		live := fs.Bool("live", false, "only records whose retention has not passed")
		expired := fs.Bool("expired", false, "only records whose retention has passed (awaiting purge)")
		limit := fs.Int("limit", idem.DefaultListLimit, fmt.Sprintf("records per page, at most %d", idem.MaxListLimit))
		after := fs.String("after", "", "start after this position: the next-page token a previous list printed")
		all := fs.Bool("all", false, "list every page, not only the first")
		var f idem.ListFilter
		e.check = func() error { // before the database is opened
			p, err := prefix()
			if err != nil {
				return err
			}
			f = idem.ListFilter{ScopePrefix: p, MinAge: *minAge, MaxAge: *maxAge, Limit: *limit}
			if *limit < 1 || *limit > idem.MaxListLimit {
				return usageError(fmt.Sprintf("-limit %d is outside 1..%d", *limit, idem.MaxListLimit))
			}
			switch {
			case *live && *expired:
				return usageError("-live and -expired exclude each other")
			case *live:
				f.Expiry = idem.LiveOnly
			case *expired:
				f.Expiry = idem.ExpiredOnly
			}
			if *states != "" {
				for _, name := range strings.Split(*states, ",") {
					st, err := idem.ParseState(strings.TrimSpace(name))
					if err != nil {
						return usageError("-state: " + err.Error())
					}
					f.States = append(f.States, st)
				}
			}
			if *after != "" {
				c, err := idem.ParseCursor(*after)
				if err != nil {
					return usageError("-after: " + err.Error())
				}
				f.After = &c
			}
			return nil
		}
		return func(ctx context.Context, e *env) error {
			var (
				records []idem.RecordInfo
				next    *idem.Cursor
			)
			for {
				p, err := e.target.store.List(ctx, f)
				if err != nil {
					return err
				}
				records = append(records, p.Records...)
				next = p.Next
				if !*all || next == nil {
					break
				}
				f.After = next
				if !e.json { // print page by page: -all may be long
					if err := printRecords(ctx, e, records, nil, false); err != nil {
						return err
					}
					records = records[:0]
				}
			}
			return printRecords(ctx, e, records, next, true)
		}
	},
}

// printRecords prints records as a table, or as JSON with the next page's
// token; last says whether a text listing ends here. A record an RPC
// adapter stored shows the code of its answer beside its status 0.
func printRecords(ctx context.Context, e *env, records []idem.RecordInfo, next *idem.Cursor, last bool) error {
	answers := make([]*rpcAnswer, len(records))
	for i, r := range records {
		a, err := answerOf(ctx, e, r)
		if err != nil {
			return err
		}
		answers[i] = a
	}
	if e.json {
		out := struct {
			Records []recordJSON `json:"records"`
			Next    string       `json:"next,omitempty"`
		}{Records: []recordJSON{}}
		for i, r := range records {
			j := toJSON(r)
			j.Answer = answers[i]
			out.Records = append(out.Records, j)
		}
		if next != nil {
			out.Next = next.Token()
		}
		return writeJSON(e.stdout, out)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	for i, r := range records {
		status := "-"
		switch a := answers[i]; {
		case a != nil && a.Protocol == "grpc":
			status = fmt.Sprintf("%d gRPC %s", r.Status, a.Code)
		case a != nil:
			status = fmt.Sprintf("%d Connect %s", r.Status, a.Code)
		case r.State == idem.StateCompleted:
			status = fmt.Sprint(r.Status)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s old\t%d B\n", r.Scope, r.Key, r.State, liveness(r), status, age(r.Age), r.BodyBytes)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if last && next != nil {
		fmt.Fprintf(e.stdout, "next: %s\n", next.Token())
	}
	return nil
}

var deleteCommand = command{
	name:    "delete",
	summary: "delete one key's record, so its next request does the work again",
	usage: `delete -dsn DSN [-table NAME] (-scope SCOPE | -principal P -method M -route R) -key KEY
          [-force] [-json]

Deletes the record of one key: its next request does the work again instead
of replaying the stored answer. A record that is pending and live may still
have a request working on it, so it is refused (exit 4) unless -force is given;
use -force for a claim whose request is known to be gone. Exits 3 when there
is no record. The scope is given as for inspect ("idem help inspect").`,
	needsDB: true,
	timeout: time.Minute,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, *env) error {
		scope, key := keyFlags(fs, e)
		force := fs.Bool("force", false, "delete a pending, live record too")
		return func(ctx context.Context, e *env) error {
			var err error
			if *force {
				err = e.target.store.ForceDelete(ctx, *scope, *key)
			} else {
				err = e.target.store.Delete(ctx, *scope, *key)
			}
			if inflight := (*idem.InFlightRecordError)(nil); errors.As(err, &inflight) {
				// The core's message names ForceDelete, the library's way.
				r := inflight.Record
				return fmt.Errorf("%w: key %q in scope %q is %v and live until %s (claimed %s ago): a request may still be working on it; -force deletes it anyway",
					idem.ErrRecordInFlight, r.Key, r.Scope, r.State, r.ExpiresAt.Format(time.RFC3339), age(r.Age))
			}
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, map[string]any{"deleted": true, "scope": *scope, "key": *key})
			}
			fmt.Fprintf(e.stdout, "deleted %q in scope %q\n", *key, *scope)
			return nil
		}
	},
}
