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

// --- pgx ---

// pgxSeed sends the seed's SQL on a pooled pgx connection; piped: BEGIN
// with the claim and the UPDATE with COMMIT.
func pgxSeed(pool *pgxpool.Pool, s seedSQL, insertSQL string, piped bool) scheme {
	return func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
		return onConn(ctx, pool, func(conn *pgx.Conn) (idem.Outcome, error) {
			var won bool
			claim := func(rows pgx.Rows) error { won = rows.Next(); return nil }
			args := []any{req.Scope, req.Key, req.Fingerprint[:]}
			if piped {
				b := &pgx.Batch{}
				b.Queue("begin")
				b.Queue(s.claim, args...).Query(claim)
				if err := conn.SendBatch(ctx, b).Close(); err != nil {
					return 0, err
				}
			} else {
				if _, err := conn.Exec(ctx, "begin"); err != nil {
					return 0, err
				}
				if err := pgxQuery(ctx, conn, claim, s.claim, args...); err != nil {
					return 0, err
				}
			}
			if !won {
				var rec seedRecord
				err := pgxQuery(ctx, conn, func(rows pgx.Rows) error {
					if rows.Next() {
						return rows.Scan(&rec.fingerprint, &rec.status, &rec.header, &rec.body)
					}
					return nil
				}, s.read, req.Scope, req.Key)
				if err != nil {
					return 0, err
				}
				if err := pgxCommit(ctx, conn); err != nil {
					return 0, err
				}
				return rec.outcome(req)
			}
			if _, err := conn.Exec(ctx, insertSQL, customer, itemID); err != nil {
				return 0, err
			}
			resp := response(n)
			update := []any{resp.Status, encodeHeader(resp.Header), resp.Body, req.Scope, req.Key}
			if piped {
				return idem.Won, pgxCommitWith(ctx, conn, s.update, update...)
			}
			if _, err := conn.Exec(ctx, s.update, update...); err != nil {
				return 0, err
			}
			return idem.Won, pgxCommit(ctx, conn)
		})
	}
}

// pgxBare is the user's write alone on a pgx pool.
func pgxBare(pool *pgxpool.Pool, insertSQL string) scheme {
	return func(ctx context.Context, _ idem.Request, _ int64) (idem.Outcome, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := tx.Exec(ctx, insertSQL, customer, itemID); err != nil {
			return 0, err
		}
		return idem.Won, tx.Commit(ctx)
	}
}

// pgxFloor sends the floor on a pooled pgx connection; piped: the key's
// INSERT with COMMIT.
func pgxFloor(pool *pgxpool.Pool, s seedSQL, insertSQL string, piped bool) scheme {
	return func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
		return onConn(ctx, pool, func(conn *pgx.Conn) (idem.Outcome, error) {
			if _, err := conn.Exec(ctx, "begin"); err != nil {
				return 0, err
			}
			if _, err := conn.Exec(ctx, insertSQL, customer, itemID); err != nil {
				return 0, err
			}
			args := []any{req.Scope, req.Key, req.Fingerprint[:]}
			if piped {
				return idem.Won, pgxCommitWith(ctx, conn, s.floor, args...)
			}
			if _, err := conn.Exec(ctx, s.floor, args...); err != nil {
				return 0, err
			}
			return idem.Won, pgxCommit(ctx, conn)
		})
	}
}

// onConn runs fn on a connection of pool and rolls back whatever
// transaction fn left open when it failed.
func onConn(ctx context.Context, pool *pgxpool.Pool, fn func(conn *pgx.Conn) (idem.Outcome, error)) (idem.Outcome, error) {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Release() // a connection left inside a transaction is closed
	out, err := fn(c.Conn())
	if err != nil && c.Conn().PgConn().TxStatus() != 'I' {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, _ = c.Conn().Exec(rctx, "rollback")
	}
	return out, err
}

// pgxQuery runs a query and hands its rows to read.
func pgxQuery(ctx context.Context, conn *pgx.Conn, read func(pgx.Rows) error, query string, args ...any) error {
	rows, err := conn.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	if err := read(rows); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}

// errRolledBack: COMMIT answered ROLLBACK (the transaction had failed).
var errRolledBack = errors.New("COMMIT rolled back")

func pgxCommit(ctx context.Context, conn *pgx.Conn) error {
	tag, err := conn.Exec(ctx, "commit")
	if err == nil && tag.String() == "ROLLBACK" {
		err = errRolledBack
	}
	return err
}

// pgxCommitWith sends a statement and COMMIT in one round trip.
func pgxCommitWith(ctx context.Context, conn *pgx.Conn, query string, args ...any) error {
	b := &pgx.Batch{}
	b.Queue(query, args...)
	var tag pgconn.CommandTag
	b.Queue("commit").Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	err := conn.SendBatch(ctx, b).Close()
	if err == nil && tag.String() == "ROLLBACK" {
		err = errRolledBack
	}
	return err
}

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

// sqlSeed sends the seed's SQL on database/sql in style st; duplicate
// tells the duplicate-key error of a plain claim INSERT.
func sqlSeed(db *sql.DB, st sqlStyle, s seedSQL, insertSQL string, duplicate func(error) bool) scheme {
	return func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		args := []any{req.Scope, req.Key, req.Fingerprint[:]}
		var won bool
		if s.claimReturns {
			rows, err := st.query(ctx, tx, s.claim, args...)
			if err != nil {
				return 0, err
			}
			won = rows.Next()
			if err := closeRows(rows); err != nil {
				return 0, err
			}
		} else {
			_, err := st.exec(ctx, tx, s.claim, args...)
			switch {
			case err == nil:
				won = true
			case !duplicate(err):
				return 0, err
			}
		}
		if !won {
			var rec seedRecord
			rows, err := st.query(ctx, tx, s.read, req.Scope, req.Key)
			if err != nil {
				return 0, err
			}
			if rows.Next() {
				if err := rows.Scan(&rec.fingerprint, &rec.status, &rec.header, &rec.body); err != nil {
					rows.Close()
					return 0, err
				}
			}
			if err := closeRows(rows); err != nil {
				return 0, err
			}
			if err := tx.Commit(); err != nil {
				return 0, err
			}
			return rec.outcome(req)
		}
		if _, err := tx.ExecContext(ctx, insertSQL, customer, itemID); err != nil {
			return 0, err
		}
		resp := response(n)
		if _, err := st.exec(ctx, tx, s.update, resp.Status, encodeHeader(resp.Header), resp.Body, req.Scope, req.Key); err != nil {
			return 0, err
		}
		return idem.Won, tx.Commit()
	}
}

// sqlFloor sends the floor on database/sql in style st.
func sqlFloor(db *sql.DB, st sqlStyle, s seedSQL, insertSQL string) scheme {
	return func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, insertSQL, customer, itemID); err != nil {
			return 0, err
		}
		if _, err := st.exec(ctx, tx, s.floor, req.Scope, req.Key, req.Fingerprint[:]); err != nil {
			return 0, err
		}
		return idem.Won, tx.Commit()
	}
}

// sqlBare is the user's write alone on database/sql.
func sqlBare(db *sql.DB, insertSQL string) scheme {
	return func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, insertSQL, customer, itemID); err != nil {
			return 0, err
		}
		return idem.Won, tx.Commit()
	}
}

func closeRows(rows *sql.Rows) error {
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
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
