package galera_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/mysql"
)

// spread is one idem driver over every node of the cluster, as a service
// behind a load balancer would see it: each transaction begins on the next
// node in turn, and each statement on the pool (lookups, the suite's counts)
// goes to the next node too. Two requests of one case therefore meet on
// different nodes: a claim committed on one is checked, replayed or
// conflicted with on another.
type spread struct {
	nodes []*mysql.Driver
	next  atomic.Uint64
	pool  *spreadPool
	// begun and failed count, per node, the transactions begun and those
	// that ended in an error (at BEGIN, a statement or COMMIT).
	begun, failed []atomic.Int64
}

var _ dialect.Driver[*sql.Tx] = (*spread)(nil)

func newSpread(nodes []*mysql.Driver) *spread {
	p := &spreadPool{}
	for _, n := range nodes {
		p.nodes = append(p.nodes, n.Pool())
	}
	return &spread{nodes: nodes, pool: p, begun: make([]atomic.Int64, len(nodes)), failed: make([]atomic.Int64, len(nodes))}
}

// counts reports, per node, transactions begun and failed.
func (s *spread) counts() string {
	var b strings.Builder
	for i := range s.nodes {
		fmt.Fprintf(&b, "n%d: %d begun, %d failed; ", i+1, s.begun[i].Load(), s.failed[i].Load())
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// Dialect is the first node's: every node runs the same server.
func (s *spread) Dialect() dialect.Dialect { return s.nodes[0].Dialect() }

// Begin begins on the next node.
func (s *spread) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	i := s.next.Add(1) % uint64(len(s.nodes))
	s.begun[i].Add(1)
	tx, err := s.nodes[i].Begin(ctx, opts)
	if err != nil {
		s.failed[i].Add(1)
		return nil, err
	}
	return &countedTx{Tx: tx, failed: &s.failed[i]}, nil
}

// countedTx counts a transaction that fails: a statement's error, or
// COMMIT's. It keeps the prepared statements of the transaction it wraps
// (mysql's are plain, so there is no other ability to keep).
type countedTx struct {
	dialect.Tx[*sql.Tx]
	failed *atomic.Int64
	done   bool
}

func (t *countedTx) fail(err error) error {
	if err != nil && !t.done {
		t.done = true
		t.failed.Add(1)
	}
	return err
}

func (t *countedTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	n, err := t.Tx.Exec(ctx, query, args...)
	return n, t.fail(err)
}

func (t *countedTx) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	rows, err := t.Tx.Query(ctx, query, args...)
	return rows, t.fail(err)
}

func (t *countedTx) Commit(ctx context.Context) error { return t.fail(t.Tx.Commit(ctx)) }

// Wrap adapts a transaction begun on any node.
func (s *spread) Wrap(tx *sql.Tx) (dialect.Queryer, error) { return s.nodes[0].Wrap(tx) }

// Pool sends each statement to the next node.
func (s *spread) Pool() dialect.Queryer { return s.pool }

// spreadPool is the pools of every node, used in turn. It keeps the
// nodes' prepared lookups (dialect.Preparer).
type spreadPool struct {
	nodes []dialect.Queryer
	next  atomic.Uint64
}

var _ dialect.Preparer = (*spreadPool)(nil)

func (p *spreadPool) pick() dialect.Queryer {
	return p.nodes[p.next.Add(1)%uint64(len(p.nodes))]
}

func (p *spreadPool) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	return p.pick().Exec(ctx, query, args...)
}

func (p *spreadPool) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	return p.pick().Query(ctx, query, args...)
}

func (p *spreadPool) ExecPrepared(ctx context.Context, query string, args ...any) (int64, error) {
	return dialect.ExecPrepared(ctx, p.pick(), query, args...)
}

func (p *spreadPool) QueryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	return dialect.QueryPrepared(ctx, p.pick(), query, args...)
}
