package galera_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
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
	tx, _, err := s.begin(ctx, opts)
	return tx, err
}

// begin begins on the next node, and says which (0 for n1).
func (s *spread) begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], int, error) {
	i := s.next.Add(1) % uint64(len(s.nodes))
	s.begun[i].Add(1)
	tx, err := s.nodes[i].Begin(ctx, opts)
	if err != nil {
		s.failed[i].Add(1)
		return nil, int(i), err
	}
	return &countedTx{Tx: tx, failed: &s.failed[i]}, int(i), nil
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

// Exec runs the statement on the next node. A CREATE TABLE returns once
// every node has the table: a node applies another's DDL a moment later,
// and an INSERT there (which a causal wait of the pools' wsrep_sync_wait=1
// does not cover) would fail with 1146 until then. The SELECT on each node
// is that causal wait: it runs once the node has applied the CREATE.
func (p *spreadPool) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	n, err := p.pick().Exec(ctx, query, args...)
	if table, ok := createdTable(query); err == nil && ok {
		for _, node := range p.nodes {
			rows, qerr := node.Query(ctx, "SELECT 1 FROM "+table+" LIMIT 0")
			if qerr == nil {
				qerr = dialect.CloseRows(rows)
			}
			if qerr != nil {
				return n, fmt.Errorf("%s, waiting for every node to have it: %w", query, qerr)
			}
		}
	}
	return n, err
}

// createdTable returns the table a CREATE TABLE [IF NOT EXISTS] statement
// creates.
func createdTable(query string) (string, bool) {
	f := strings.Fields(query)
	if len(f) < 3 || !strings.EqualFold(f[0], "CREATE") || !strings.EqualFold(f[1], "TABLE") {
		return "", false
	}
	if len(f) > 5 && strings.EqualFold(f[2], "IF") && strings.EqualFold(f[3], "NOT") && strings.EqualFold(f[4], "EXISTS") {
		return strings.TrimSuffix(f[5], "("), true
	}
	return strings.TrimSuffix(f[2], "("), true
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

// behindSpread is a spread whose transaction begun while another is open
// holds the open one's node's applier (applierHold) until the open one
// ends. The open one's statements after that point run on a node that has
// not applied what the others committed since: a claim there is made before
// its node has another node's commit of the key, every time, where spread
// alone gives that race now and then.
type behindSpread struct {
	*spread
	t    *testing.T
	hold *applierHold
	mu   sync.Mutex
	open *behindTx // the transaction open alone, if any
}

func newBehindSpread(t *testing.T, nodes []*mysql.Driver) *behindSpread {
	return &behindSpread{spread: newSpread(nodes), t: t, hold: newApplierHold(t, containers.Galera(t))}
}

// Begin begins on the next node, first holding the applier of the node of
// the transaction already open, if there is one.
func (b *behindSpread) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if o := b.open; o != nil && o.release == nil {
		o.release = b.hold.on(b.t, o.node)
	}
	tx, i, err := b.begin(ctx, opts)
	if err != nil || b.open != nil {
		return tx, err
	}
	b.open = &behindTx{Tx: tx, owner: b, node: i}
	return b.open, nil
}

// behindTx is the transaction open alone on a behindSpread. Ending it ends
// the hold on its node, before its COMMIT: the node then applies what it
// missed, and a conflicting claim fails there (the applier aborts it) or at
// certification.
type behindTx struct {
	dialect.Tx[*sql.Tx]
	owner   *behindSpread
	node    int
	release func()
}

func (t *behindTx) end() {
	t.owner.mu.Lock()
	defer t.owner.mu.Unlock()
	if t.owner.open == t {
		t.owner.open = nil
	}
	if t.release != nil {
		t.release()
	}
}

func (t *behindTx) Commit(ctx context.Context) error {
	t.end()
	return t.Tx.Commit(ctx)
}

func (t *behindTx) Rollback(ctx context.Context) error {
	t.end()
	return t.Tx.Rollback(ctx)
}
