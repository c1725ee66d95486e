package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/idemkit/idem"
)

// keyFlags adds -scope and -key, both required: a command without them is
// refused before the database is opened.
func keyFlags(fs *flag.FlagSet, e *env) (scope, key *string) {
	scope = fs.String("scope", "", "the key's scope (required), as the service builds it: with idemhttp, \"PRINCIPAL METHOD ROUTE\"")
	key = fs.String("key", "", "the idempotency key (required)")
	e.check = func() error {
		if *scope == "" || *key == "" {
			return usageError("-scope and -key are required")
		}
		return nil
	}
	return scope, key
}

var inspectCommand = command{
	name:    "inspect",
	summary: "show one key's record, whatever its state",
	usage: `inspect -dsn DSN [-table NAME] -scope SCOPE -key KEY [-json]

Shows the record of one key: its state (pending or completed), whether its
retention has passed, the stored status, the sizes of the stored header and
body, the request fingerprint, when it was claimed and when it expires. Expired
records that purge has not deleted yet are shown too. Exits 3 when there is
no record.`,
	needsDB: true,
	timeout: time.Minute,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, *env) error {
		scope, key := keyFlags(fs, e)
		return func(ctx context.Context, e *env) error {
			r, err := e.target.store.Inspect(ctx, *scope, *key)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, toJSON(r))
			}
			w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintf(w, "scope\t%s\n", r.Scope)
			fmt.Fprintf(w, "key\t%s\n", r.Key)
			fmt.Fprintf(w, "state\t%s, %s\n", r.State, liveness(r))
			if r.State == idem.StateCompleted {
				fmt.Fprintf(w, "status\t%d\n", r.Status)
				fmt.Fprintf(w, "stored\t%d header bytes, %d body bytes\n", r.HeaderBytes, r.BodyBytes)
			}
			fmt.Fprintf(w, "fingerprint\t%s\n", hex.EncodeToString(r.Fingerprint[:]))
			fmt.Fprintf(w, "claimed\t%s (%s ago)\n", r.CreatedAt.Format(time.RFC3339Nano), age(r.Age))
			fmt.Fprintf(w, "expires\t%s\n", r.ExpiresAt.Format(time.RFC3339Nano))
			return w.Flush()
		}
	},
}

var listCommand = command{
	name:    "list",
	summary: "list records by scope prefix, state and age, a page at a time",
	usage: `list -dsn DSN [-table NAME] [-prefix SCOPE_PREFIX] [-state STATES] [-min-age D] [-max-age D]
          [-live | -expired] [-limit N] [-after TOKEN | -all] [-json]

Lists records in (scope, key) order, byte by byte. A page ends with the token
of the next one ("next: TOKEN"; in JSON, "next"): pass it to -after. -all
follows the pages to the end. Stuck keys, for example, are pending, live and
old: idem list -state pending -live -min-age 10m`,
	needsDB: true,
	timeout: time.Minute,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, *env) error {
		prefix := fs.String("prefix", "", "only records whose scope starts with this")
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
			f = idem.ListFilter{ScopePrefix: *prefix, MinAge: *minAge, MaxAge: *maxAge, Limit: *limit}
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
					if err := printRecords(e, records, nil, false); err != nil {
						return err
					}
					records = records[:0]
				}
			}
			return printRecords(e, records, next, true)
		}
	},
}

// printRecords prints records as a table, or as JSON with the next page's
// token; last says whether a text listing ends here.
func printRecords(e *env, records []idem.RecordInfo, next *idem.Cursor, last bool) error {
	if e.json {
		out := struct {
			Records []recordJSON `json:"records"`
			Next    string       `json:"next,omitempty"`
		}{Records: []recordJSON{}}
		for _, r := range records {
			out.Records = append(out.Records, toJSON(r))
		}
		if next != nil {
			out.Next = next.Token()
		}
		return writeJSON(e.stdout, out)
	}
	w := tabwriter.NewWriter(e.stdout, 0, 0, 2, ' ', 0)
	for _, r := range records {
		status := "-"
		if r.State == idem.StateCompleted {
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
	usage: `delete -dsn DSN [-table NAME] -scope SCOPE -key KEY [-force] [-json]

Deletes the record of one key: its next request does the work again instead
of replaying the stored answer. A record that is pending and live may still
have a request working on it, so it is refused (exit 4) unless -force is given;
use -force for a claim whose request is known to be gone. Exits 3 when there
is no record.`,
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
