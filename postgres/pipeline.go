package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// The statements of one lifecycle step (the claim with its lock_timeout
// around it, say) go to the server in one round trip when the Queryer can
// pipeline them: pgx transactions can, native or under database/sql. Other
// Queryers run them one by one; the result is the same, as a pipeline stops
// at the first error like a sequence does.

// batcher is implemented by this package's Queryers that send a pgx.Batch
// in one round trip, inside the transaction.
type batcher interface {
	sendBatch(ctx context.Context, b *pgx.Batch) error
}

// rowReader is what a step reads: the common part of pgx.Rows and
// dialect.Rows.
type rowReader interface {
	Next() bool
	Scan(dest ...any) error
}

// step is one statement: rows reads its rows, or exec gets the affected row
// count (either may be nil).
type step struct {
	sql  string
	args []any
	rows func(rowReader) error
	exec func(rowsAffected int64) error
}

// run runs steps on q, pipelined when q can.
func run(ctx context.Context, q dialect.Queryer, steps ...step) error {
	if b, ok := q.(batcher); ok {
		batch := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(steps)+1)}
		for _, s := range steps {
			queue(batch, s)
		}
		return b.sendBatch(ctx, batch)
	}
	for _, s := range steps {
		if err := runOne(ctx, q, s); err != nil {
			return err
		}
	}
	return nil
}

func queue(b *pgx.Batch, s step) {
	qq := b.Queue(s.sql, s.args...)
	switch {
	case s.rows != nil:
		qq.Query(func(rows pgx.Rows) error { return s.rows(rows) })
	case s.exec != nil:
		qq.Exec(func(ct pgconn.CommandTag) error { return s.exec(ct.RowsAffected()) })
	}
}

func runOne(ctx context.Context, q dialect.Queryer, s step) error {
	if s.rows == nil {
		n, err := q.Exec(ctx, s.sql, s.args...)
		if err == nil && s.exec != nil {
			err = s.exec(n)
		}
		return err
	}
	rows, err := q.Query(ctx, s.sql, s.args...)
	if err != nil {
		return err
	}
	if err := s.rows(rows); err != nil {
		rows.Close()
		return err
	}
	return dialect.CloseRows(rows)
}

// deferrer is implemented by the transactions Driver.Begin returns: they
// can hold the completing statement back and send it with COMMIT, in one
// round trip. The statement must fail when it finds nothing to complete, so
// that the pipeline never reaches COMMIT without the record.
type deferrer interface {
	deferUntilCommit(sql string, args []any) bool
}

// notClaimedCode is the SQLSTATE the guarded completion raises when it
// updated no row (division by a count of zero).
const notClaimedCode = "22012"

// completionError turns the guard's failure into ErrNotClaimed.
func completionError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == notClaimedCode {
		return dialect.Classified(dialect.ErrNotClaimed, err)
	}
	return err
}
