package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// Round trips are what a request costs most, so this package's queryers
// and transactions are dialect.Pipeliners: statements that need no answer in
// between go to the server together, as one pgx.Batch (pgx's pipeline
// mode), and a pipeline stops at its first error like a sequence does.

// batchOf queues stmts in a new pgx.Batch.
func batchOf(stmts ...dialect.Statement) *pgx.Batch {
	b := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(stmts)+2)}
	for _, s := range stmts {
		queue(b, s)
	}
	return b
}

func queue(b *pgx.Batch, s dialect.Statement) {
	qq := b.Queue(s.SQL, s.Args...)
	switch {
	case s.Rows != nil:
		qq.Query(func(rows pgx.Rows) error { return s.Rows(pgxRows{rows}) })
	case s.Affected != nil:
		qq.Exec(func(ct pgconn.CommandTag) error { return s.Affected(ct.RowsAffected()) })
	}
}

// batchSender is what a pgx.Tx, *pgx.Conn and *pgxpool.Pool have for
// pipelines.
type batchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// sendBatch sends b and reads all its results.
func sendBatch(ctx context.Context, s batchSender, b *pgx.Batch) error {
	return txClosed(s.SendBatch(ctx, b).Close())
}

// pgxRows gives pgx.Rows the Close() error of dialect.Rows.
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}
