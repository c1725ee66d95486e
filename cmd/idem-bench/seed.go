package main

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
)

// The yardsticks next to idem: the floor (the bare write plus a plain
// insert of the key) and the seed's SQL as written, each in two execution
// styles. "plain" sends every statement alone, as the driver does by
// default. The idem style sends the benchmark's own statements the way idem
// sends its own: on pgx BEGIN goes with the first of them and COMMIT with
// the last, in one round trip each (the user's order INSERT is always sent
// alone, as it is inside Store.Do); on MySQL and MariaDB their values are
// written into the text as literals (one round trip each, where a statement
// with arguments is a server-side prepare and execute by default); on
// SQLite they run as statements prepared once per connection.

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

// ytx is one transaction of a yardstick, in one execution style.
type ytx interface {
	// exec and query send one of the benchmark's own statements; query
	// scans the first row into dest and reports whether there was one.
	exec(ctx context.Context, q string, args ...any) error
	query(ctx context.Context, q string, args []any, dest ...any) (bool, error)
	// write sends the user's INSERT, always alone, as inside Store.Do.
	write(ctx context.Context) error
	// commit sends q (when not empty) and COMMIT.
	commit(ctx context.Context, q string, args ...any) error
	// end rolls back what a failed request left open and frees the
	// connection.
	end(ctx context.Context, failed bool)
}

// yardstick runs body in a transaction of begin.
func yardstick(begin func(ctx context.Context) (ytx, error), body func(ctx context.Context, tx ytx, req idem.Request, n int64) (idem.Outcome, error)) scheme {
	return func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
		tx, err := begin(ctx)
		if err != nil {
			return 0, err
		}
		out, err := body(ctx, tx, req, n)
		tx.end(ctx, err != nil)
		return out, err
	}
}

// bareScheme is the user's write alone.
func bareScheme(begin func(ctx context.Context) (ytx, error)) scheme {
	return yardstick(begin, func(ctx context.Context, tx ytx, _ idem.Request, _ int64) (idem.Outcome, error) {
		if err := tx.write(ctx); err != nil {
			return 0, err
		}
		return idem.Won, tx.commit(ctx, "")
	})
}

// floorScheme is the user's write, then the key's plain INSERT with COMMIT.
func floorScheme(begin func(ctx context.Context) (ytx, error), s seedSQL) scheme {
	return yardstick(begin, func(ctx context.Context, tx ytx, req idem.Request, _ int64) (idem.Outcome, error) {
		if err := tx.write(ctx); err != nil {
			return 0, err
		}
		return idem.Won, tx.commit(ctx, s.floor, req.Scope, req.Key, req.Fingerprint[:])
	})
}

// seedScheme sends the seed's SQL; duplicate tells the duplicate-key error
// of a claim that returns nothing.
func seedScheme(begin func(ctx context.Context) (ytx, error), s seedSQL, duplicate func(error) bool) scheme {
	return yardstick(begin, func(ctx context.Context, tx ytx, req idem.Request, n int64) (idem.Outcome, error) {
		args := []any{req.Scope, req.Key, req.Fingerprint[:]}
		var won bool
		var err error
		if s.claimReturns {
			won, err = tx.query(ctx, s.claim, args)
		} else if err = tx.exec(ctx, s.claim, args...); err == nil {
			won = true
		} else if duplicate(err) {
			err = nil
		}
		if err != nil {
			return 0, err
		}
		if !won {
			var rec seedRecord
			if _, err := tx.query(ctx, s.read, []any{req.Scope, req.Key}, &rec.fingerprint, &rec.status, &rec.header, &rec.body); err != nil {
				return 0, err
			}
			if err := tx.commit(ctx, ""); err != nil {
				return 0, err
			}
			return rec.outcome(req)
		}
		if err := tx.write(ctx); err != nil {
			return 0, err
		}
		resp := response(n)
		return idem.Won, tx.commit(ctx, s.update, resp.Status, encodeHeader(resp.Header), resp.Body, req.Scope, req.Key)
	})
}

// --- pgx ---

// pgxTx is a yardstick's transaction on a pooled pgx connection. piped:
// BEGIN goes with the first of the benchmark's own statements and COMMIT
// with the last, in one round trip each; otherwise each is sent alone.
type pgxTx struct {
	c      *pgxpool.Conn
	insert string
	piped  bool
	held   bool // BEGIN not sent yet
}

func pgxBegin(pool *pgxpool.Pool, insertSQL string, piped bool) func(ctx context.Context) (ytx, error) {
	return func(ctx context.Context) (ytx, error) {
		c, err := pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		t := &pgxTx{c: c, insert: insertSQL, piped: piped, held: true}
		if !piped {
			if err := t.send(ctx, "", nil, nil, false); err != nil {
				t.end(ctx, true)
				return nil, err
			}
		}
		return t, nil
	}
}

// send sends, in one round trip: a held BEGIN, q (when not empty; its rows
// to read) and, when commit is set, COMMIT. BEGIN or COMMIT alone goes the
// way pgx sends it (a simple query).
func (t *pgxTx) send(ctx context.Context, q string, args []any, read func(pgx.Rows) error, commit bool) error {
	if q == "" && t.held != commit {
		stmt := "commit"
		if t.held {
			stmt, t.held = "begin", false
		}
		tag, err := t.c.Conn().Exec(ctx, stmt)
		if err == nil && commit && tag.String() == "ROLLBACK" {
			err = errRolledBack
		}
		return err
	}
	b := &pgx.Batch{}
	if t.held {
		b.Queue("begin")
		t.held = false
	}
	if q != "" {
		if qq := b.Queue(q, args...); read != nil {
			qq.Query(read)
		}
	}
	var tag pgconn.CommandTag
	if commit {
		b.Queue("commit").Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	}
	err := t.c.Conn().SendBatch(ctx, b).Close()
	if err == nil && commit && tag.String() == "ROLLBACK" {
		err = errRolledBack
	}
	return err
}

func (t *pgxTx) exec(ctx context.Context, q string, args ...any) error {
	return t.send(ctx, q, args, nil, false)
}

func (t *pgxTx) query(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	found := false
	err := t.send(ctx, q, args, func(rows pgx.Rows) error {
		if found = rows.Next(); found && len(dest) > 0 {
			return rows.Scan(dest...)
		}
		return nil
	}, false)
	return found, err
}

func (t *pgxTx) write(ctx context.Context) error {
	if t.held {
		// The user's write goes alone: BEGIN first.
		if err := t.send(ctx, "", nil, nil, false); err != nil {
			return err
		}
	}
	return t.exec(ctx, t.insert, customer, itemID)
}

func (t *pgxTx) commit(ctx context.Context, q string, args ...any) error {
	if !t.piped && q != "" {
		if err := t.exec(ctx, q, args...); err != nil {
			return err
		}
		q = ""
	}
	return t.send(ctx, q, args, nil, true)
}

func (t *pgxTx) end(ctx context.Context, failed bool) {
	if conn := t.c.Conn(); failed && conn.PgConn().TxStatus() != 'I' {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = conn.Exec(rctx, "rollback")
	}
	t.c.Release() // a connection left inside a transaction is closed
}

// errRolledBack: COMMIT answered ROLLBACK (the transaction had failed).
var errRolledBack = errors.New("COMMIT rolled back")

// --- database/sql ---

// sqlStyle is how the benchmark sends its own statements on database/sql.
type sqlStyle struct {
	// inline writes values into the statement as literals (MySQL).
	inline bool
	// prepared holds statements prepared once on the pool (SQLite); a
	// transaction runs them on its connection (prepared there once).
	prepared map[string]*sql.Stmt
}

// prepareAll prepares queries on db for a prepared style.
func prepareAll(ctx context.Context, db *sql.DB, queries ...string) (map[string]*sql.Stmt, error) {
	m := map[string]*sql.Stmt{}
	for _, q := range queries {
		s, err := db.PrepareContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("prepare %q: %w", q, err)
		}
		m[q] = s
	}
	return m, nil
}

func (st sqlStyle) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	if s := st.prepared[query]; s != nil {
		return tx.StmtContext(ctx, s).ExecContext(ctx, args...)
	}
	if st.inline {
		q, err := inlineValues(query, args)
		if err != nil {
			return nil, err
		}
		return tx.ExecContext(ctx, q)
	}
	return tx.ExecContext(ctx, query, args...)
}

func (st sqlStyle) query(ctx context.Context, tx *sql.Tx, query string, args ...any) (*sql.Rows, error) {
	if s := st.prepared[query]; s != nil {
		return tx.StmtContext(ctx, s).QueryContext(ctx, args...)
	}
	if st.inline {
		q, err := inlineValues(query, args)
		if err != nil {
			return nil, err
		}
		return tx.QueryContext(ctx, q)
	}
	return tx.QueryContext(ctx, query, args...)
}

// sqlTx is a yardstick's transaction on database/sql in style st.
type sqlTx struct {
	tx     *sql.Tx
	st     sqlStyle
	insert string
}

func sqlBegin(db *sql.DB, st sqlStyle, insertSQL string) func(ctx context.Context) (ytx, error) {
	return func(ctx context.Context) (ytx, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return nil, err
		}
		return &sqlTx{tx: tx, st: st, insert: insertSQL}, nil
	}
}

func (t *sqlTx) exec(ctx context.Context, q string, args ...any) error {
	_, err := t.st.exec(ctx, t.tx, q, args...)
	return err
}

func (t *sqlTx) query(ctx context.Context, q string, args []any, dest ...any) (bool, error) {
	rows, err := t.st.query(ctx, t.tx, q, args...)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	found := rows.Next()
	if found && len(dest) > 0 {
		err = rows.Scan(dest...)
	}
	if err == nil {
		err = rows.Err()
	}
	if err == nil {
		err = rows.Close()
	}
	return found, err
}

func (t *sqlTx) write(ctx context.Context) error {
	_, err := t.tx.ExecContext(ctx, t.insert, customer, itemID)
	return err
}

func (t *sqlTx) commit(ctx context.Context, q string, args ...any) error {
	if q != "" {
		if err := t.exec(ctx, q, args...); err != nil {
			return err
		}
	}
	return t.tx.Commit()
}

func (t *sqlTx) end(context.Context, bool) { _ = t.tx.Rollback() }

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
