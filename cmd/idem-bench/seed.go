package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// The yardsticks next to idem: the bare write, the floor (the bare write
// plus a plain insert of the key) and the seed's SQL as written. The floor
// and the seed send the benchmark's own statements the way idem sends its
// own, so that they differ from idem only in their SQL: on pgx through a
// transaction of idem's driver (BEGIN goes with the first of them and
// COMMIT with the last, in one round trip each; the user's order INSERT is
// always sent alone, as it is inside Store.Do); on MySQL and MariaDB with
// their values written into the text as literals (one round trip each,
// where a statement with arguments is a server-side prepare and execute by
// default); on SQLite through idem's driver, which keeps them prepared.

// seedSQL is the seed's SQL for one table, on one backend's dialect of SQL.
type seedSQL struct {
	// floor records the key the plainest way.
	floor string
	// claim is the seed's claim: INSERT ... ON CONFLICT DO NOTHING
	// RETURNING, or (returns false) a plain INSERT whose duplicate-key
	// error tells the loser.
	claim        string
	claimReturns bool
	// read is the replay's read of the record; update stores the response.
	read, update string
}

// newSeedSQL writes the yardsticks' statements for table on family's SQL.
// Records get the columns idem's schema requires (times now and a day from
// now), so they live in idem's own table beside its records.
func newSeedSQL(family, table string) seedSQL {
	switch family {
	case "postgres":
		insert := `INSERT INTO ` + table + ` (scope, idem_key, fingerprint, created_at, expires_at)
VALUES ($1, $2, $3, now(), now() + interval '1 day')`
		return seedSQL{
			floor:        insert,
			claim:        insert + ` ON CONFLICT (scope, idem_key) DO NOTHING RETURNING idem_key`,
			claimReturns: true,
			read:         `SELECT fingerprint, status, header, body FROM ` + table + ` WHERE scope = $1 AND idem_key = $2`,
			update:       `UPDATE ` + table + ` SET status = $1, header = $2, body = $3 WHERE scope = $4 AND idem_key = $5`,
		}
	case "mysql":
		insert := `INSERT INTO ` + table + ` (scope, idem_key, fingerprint, created_at, expires_at)
VALUES (?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 DAY)`
		return seedSQL{
			floor:  insert,
			claim:  insert,
			read:   `SELECT fingerprint, status, header, body FROM ` + table + ` WHERE scope = ? AND idem_key = ?`,
			update: `UPDATE ` + table + ` SET status = ?, header = ?, body = ? WHERE scope = ? AND idem_key = ?`,
		}
	case "sqlite":
		insert := `INSERT INTO ` + table + ` (scope, idem_key, fingerprint, created_at, expires_at)
VALUES (?, ?, ?, CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST((unixepoch('subsec') + 86400) * 1000000 AS INTEGER))`
		return seedSQL{
			floor:        insert,
			claim:        insert + ` ON CONFLICT (scope, idem_key) DO NOTHING RETURNING idem_key`,
			claimReturns: true,
			read:         `SELECT fingerprint, status, header, body FROM ` + table + ` WHERE scope = ? AND idem_key = ?`,
			update:       `UPDATE ` + table + ` SET status = ? , header = ?, body = ? WHERE scope = ? AND idem_key = ?`,
		}
	}
	panic("no seed SQL for " + family)
}

// seedRecord is what the seed's replay reads.
type seedRecord struct {
	fingerprint []byte
	status      *int64
	header      []byte
	body        []byte
}

// outcome judges a record the seed's claim lost to, as idem does: another
// fingerprint is a mismatch, a stored response a replay, else in flight.
func (r seedRecord) outcome(req idem.Request) (idem.Outcome, error) {
	switch {
	case r.fingerprint == nil:
		return 0, errors.New("seed: the claim lost, but the key has no record")
	case !bytes.Equal(r.fingerprint, req.Fingerprint[:]):
		return idem.Mismatch, nil
	case r.status == nil:
		return idem.InFlight, nil
	}
	return idem.Replay, nil
}

// yardsticks are a target's bare write, floor and seed, on transactions
// whose native type is TTx.
type yardsticks[TTx any] struct {
	// plain begins a transaction the way an application does (the bare
	// write); idem begins one whose statements travel the way idem's own
	// do (the floor and the seed): on pgx and SQLite a transaction of
	// idem's driver, elsewhere a plain one too.
	plain, idem func(ctx context.Context) (dialect.Tx[TTx], error)
	// write sends the user's INSERT, always alone, as inside Store.Do.
	write func(ctx context.Context, tx TTx) error
	sql   seedSQL
	// inline writes the values of the benchmark's own statements into
	// their text as literals (MySQL and MariaDB).
	inline bool
	// duplicate tells the duplicate-key error of a claim that returns
	// nothing.
	duplicate func(error) bool
}

// sqlBegin begins a plain database/sql transaction on db.
func sqlBegin(db *sql.DB) func(ctx context.Context) (dialect.Tx[*sql.Tx], error) {
	return func(ctx context.Context) (dialect.Tx[*sql.Tx], error) {
		return dialect.BeginSQL(ctx, db, dialect.SQLBegin{})
	}
}

// driverBegin begins a transaction of idem's driver drv.
func driverBegin[TTx any](drv dialect.Driver[TTx]) func(ctx context.Context) (dialect.Tx[TTx], error) {
	return func(ctx context.Context) (dialect.Tx[TTx], error) {
		return drv.Begin(ctx, dialect.BeginOptions{})
	}
}

// add gives t the schemes bare, floor, seed and bare-5ms.
func (y yardsticks[TTx]) add(t *target) {
	t.schemes[schemeBare] = inTx(y.plain, y.bare)
	t.schemes[schemeFloor] = inTx(y.idem, y.floor)
	t.schemes[schemeSeed] = inTx(y.idem, y.seed)
	slow := y
	slow.write = withCall(y.write, providerDelay)
	t.schemes[schemeBareCall] = inTx(y.plain, slow.bare)
}

// inTx runs body in a transaction of begin, rolled back unless body
// committed it.
func inTx[TTx any](begin func(ctx context.Context) (dialect.Tx[TTx], error),
	body func(ctx context.Context, tx dialect.Tx[TTx], req idem.Request, n int64) (idem.Outcome, error)) scheme {
	return func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
		tx, err := begin(ctx)
		if err != nil {
			return 0, err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		return body(ctx, tx, req, n)
	}
}

// bare is the user's write alone.
func (y yardsticks[TTx]) bare(ctx context.Context, tx dialect.Tx[TTx], _ idem.Request, _ int64) (idem.Outcome, error) {
	if err := y.write(ctx, tx.Native()); err != nil {
		return 0, err
	}
	return idem.Won, tx.Commit(ctx)
}

// floor is the user's write, then the key's plain INSERT with COMMIT.
func (y yardsticks[TTx]) floor(ctx context.Context, tx dialect.Tx[TTx], req idem.Request, _ int64) (idem.Outcome, error) {
	if err := y.write(ctx, tx.Native()); err != nil {
		return 0, err
	}
	insert := dialect.Statement{SQL: y.sql.floor, Args: []any{req.Scope, req.Key, req.Fingerprint[:]}}
	return idem.Won, y.commit(ctx, tx, insert)
}

// seed sends the seed's SQL: the claim, then either the user's write and
// the response's UPDATE, or the read of the record the claim lost to.
func (y yardsticks[TTx]) seed(ctx context.Context, tx dialect.Tx[TTx], req idem.Request, n int64) (idem.Outcome, error) {
	won := false
	claim := dialect.Statement{SQL: y.sql.claim, Args: []any{req.Scope, req.Key, req.Fingerprint[:]}}
	if y.sql.claimReturns {
		claim.Rows = func(rows dialect.Rows) error {
			won = rows.Next()
			return nil
		}
	}
	err := y.send(ctx, tx, claim)
	switch {
	case err == nil && !y.sql.claimReturns:
		won = true
	case err != nil && y.duplicate != nil && y.duplicate(err):
		err = nil
	}
	if err != nil {
		return 0, err
	}
	if !won {
		var rec seedRecord
		read := dialect.Statement{SQL: y.sql.read, Args: []any{req.Scope, req.Key}, Rows: func(rows dialect.Rows) error {
			if !rows.Next() {
				return nil
			}
			return rows.Scan(&rec.fingerprint, &rec.status, &rec.header, &rec.body)
		}}
		if err := y.send(ctx, tx, read); err != nil {
			return 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, err
		}
		return rec.outcome(req)
	}
	if err := y.write(ctx, tx.Native()); err != nil {
		return 0, err
	}
	resp := response(n)
	update := dialect.Statement{SQL: y.sql.update, Args: []any{resp.Status, encodeHeader(resp.Header), resp.Body, req.Scope, req.Key}}
	return idem.Won, y.commit(ctx, tx, update)
}

// send runs s the way idem sends its own statements: values inlined when
// y.inline, in a pipeline where the transaction pipelines (pgx: BEGIN goes
// with the first statement), prepared where it keeps statements prepared
// (SQLite), else as it is.
func (y yardsticks[TTx]) send(ctx context.Context, q dialect.Queryer, s dialect.Statement) error {
	if y.inline {
		text, err := inlineValues(s.SQL, s.Args)
		if err != nil {
			return err
		}
		s.SQL, s.Args = text, nil
	}
	if _, ok := q.(dialect.Pipeliner); ok {
		return dialect.Pipeline(ctx, q, s)
	}
	if s.Rows == nil {
		_, err := dialect.ExecPrepared(ctx, q, s.SQL, s.Args...)
		return err
	}
	rows, err := dialect.QueryPrepared(ctx, q, s.SQL, s.Args...)
	if err != nil {
		return err
	}
	if err := s.Rows(rows); err != nil {
		rows.Close()
		return err
	}
	return dialect.CloseRows(rows)
}

// commit sends s with COMMIT where the transaction can hold it back for
// COMMIT (pgx), else before COMMIT.
func (y yardsticks[TTx]) commit(ctx context.Context, tx dialect.Tx[TTx], s dialect.Statement) error {
	if y.inline || !dialect.DeferToCommit(tx, s) {
		if err := y.send(ctx, tx, s); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

// inlineValues replaces each ? of query with the literal of its argument:
// strings and bytes as hexadecimal (X'...'), integers in decimal, nil as
// NULL. The benchmark's statements have no ? inside quotes.
func inlineValues(query string, args []any) (string, error) {
	var b strings.Builder
	b.Grow(len(query) + 64*len(args))
	next := 0
	for i := 0; i < len(query); i++ {
		if query[i] != '?' {
			b.WriteByte(query[i])
			continue
		}
		if next == len(args) {
			return "", fmt.Errorf("inline: more placeholders than %d arguments in %q", len(args), query)
		}
		switch v := args[next].(type) {
		case nil:
			b.WriteString("NULL")
		case int:
			b.WriteString(strconv.Itoa(v))
		case int64:
			b.WriteString(strconv.FormatInt(v, 10))
		case []byte:
			fmt.Fprintf(&b, "X'%X'", v)
		case string:
			fmt.Fprintf(&b, "X'%X'", v)
		default:
			return "", fmt.Errorf("inline: cannot write a %T as a literal", v)
		}
		next++
	}
	if next != len(args) {
		return "", fmt.Errorf("inline: %d arguments for %d placeholders in %q", len(args), next, query)
	}
	return b.String(), nil
}
