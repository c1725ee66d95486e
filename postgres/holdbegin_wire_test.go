package postgres

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/dialect"
)

// fakeServer speaks just enough of PostgreSQL's protocol (the startup and
// simple queries, which pgx sends in QueryExecModeSimpleProtocol, a
// pipeline as one query of several statements) for a connection through
// HoldBegin to run on it, over an in-memory pipe. It records each query
// message: one per round trip.
type fakeServer struct {
	mu      sync.Mutex
	queries []string
	// failBegin makes BEGIN fail (the first statement of a query that
	// starts with it).
	failBegin bool
	// terminate ends the session at COMMIT as a server shutting down does
	// (a FATAL 57P01, then the connection closes): before COMMIT runs, or
	// right after COMMIT's result when the signal came while it ran.
	terminate terminateAt
}

type terminateAt uint8

const (
	terminateNever terminateAt = iota
	terminateBeforeCommit
	terminateAfterCommit
)

func (s *fakeServer) sent() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.queries)
}

func (s *fakeServer) serve(c net.Conn) {
	defer c.Close()
	be := pgproto3.NewBackend(c, c)
	if _, err := be.ReceiveStartupMessage(); err != nil {
		return
	}
	be.Send(&pgproto3.AuthenticationOk{})
	be.Send(&pgproto3.ParameterStatus{Name: "server_version", Value: "17.0"})
	be.Send(&pgproto3.ParameterStatus{Name: "standard_conforming_strings", Value: "on"})
	be.Send(&pgproto3.ParameterStatus{Name: "client_encoding", Value: "UTF8"})
	be.Send(&pgproto3.BackendKeyData{ProcessID: 1, SecretKey: []byte{0, 0, 0, 1}})
	status := byte('I')
	be.Send(&pgproto3.ReadyForQuery{TxStatus: status})
	for be.Flush() == nil {
		m, err := be.Receive()
		if err != nil {
			return
		}
		q, ok := m.(*pgproto3.Query)
		if !ok {
			return // Terminate, or what the fake does not speak
		}
		s.mu.Lock()
		s.queries = append(s.queries, q.String)
		failBegin, terminate := s.failBegin, s.terminate
		s.mu.Unlock()
		shutDown := func() {
			be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"})
			_ = be.Flush()
		}
		fail := func(code string) {
			be.Send(&pgproto3.ErrorResponse{Severity: "ERROR", Code: code, Message: "fake " + code})
			if status == 'T' {
				status = 'E'
			}
		}
	statements:
		for _, stmt := range strings.Split(q.String, "\n;") {
			stmt = strings.ToLower(strings.TrimSpace(stmt))
			switch {
			case stmt == "" || strings.HasPrefix(stmt, "--"):
				be.Send(&pgproto3.EmptyQueryResponse{})
			case strings.HasPrefix(stmt, "rollback"):
				status = 'I'
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("ROLLBACK")})
			case status == 'E':
				fail("25P02")
				break statements
			case strings.HasPrefix(stmt, "begin") && failBegin:
				fail("XX000")
				break statements
			case strings.HasPrefix(stmt, "begin"):
				status = 'T'
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("BEGIN")})
			case stmt == "commit" && terminate == terminateBeforeCommit:
				shutDown()
				return
			case stmt == "commit":
				status = 'I'
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("COMMIT")})
				if terminate == terminateAfterCommit {
					shutDown()
					return
				}
			case strings.Contains(stmt, "1/0"):
				fail("22012")
				break statements
			case strings.Contains(stmt, "server_version_num"):
				be.Send(&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("v"), DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1}}})
				be.Send(&pgproto3.DataRow{Values: [][]byte{[]byte("170000")}})
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")})
			default:
				be.Send(&pgproto3.CommandComplete{CommandTag: []byte("INSERT 0 1")})
			}
		}
		be.Send(&pgproto3.ReadyForQuery{TxStatus: status})
	}
}

// fakeConfig is a pgx configuration whose connections go to s, in the
// simple protocol the fake speaks.
func fakeConfig(t *testing.T, s *fakeServer) *pgx.ConnConfig {
	t.Helper()
	cc, err := pgx.ParseConfig("postgres://idem@127.0.0.1:5432/idem?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	cc.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cc.DialFunc = func(context.Context, string, string) (net.Conn, error) {
		client, server := net.Pipe()
		go s.serve(server)
		return client, nil
	}
	return cc
}

// openFake opens a *sql.DB of one connection on a new fakeServer, through
// HoldBegin when held is set.
func openFake(t *testing.T, held bool) (*sql.DB, *fakeServer) {
	t.Helper()
	s := &fakeServer{}
	connector := stdlib.GetConnector(*fakeConfig(t, s))
	if held {
		connector = HoldBegin(connector)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	return db, s
}

// TestHoldBeginWire: what a connection through HoldBegin sends, query by
// query (each one round trip), for the cases its documentation lists.
// (Prepared statements need the extended protocol the fake does not speak:
// the integration tests cover them.)
func TestHoldBeginWire(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	insert := "insert into t values (1)"
	for _, tc := range []struct {
		name      string
		failBegin bool
		run       func(t *testing.T, db *sql.DB, d *SQLDriver)
		want      []string
	}{{
		name: "a transaction that runs nothing sends nothing",
		run: func(t *testing.T, db *sql.DB, _ *SQLDriver) {
			for _, end := range []func(*sql.Tx) error{(*sql.Tx).Commit, (*sql.Tx).Rollback} {
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
				if err != nil {
					t.Fatal(err)
				}
				if err := end(tx); err != nil {
					t.Errorf("end of an empty transaction: %v", err)
				}
			}
		},
	}, {
		name: "BEGIN goes alone before the first statement",
		run: func(t *testing.T, db *sql.DB, _ *SQLDriver) {
			tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable, ReadOnly: true})
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := tx.ExecContext(ctx, insert); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{"begin isolation level serializable read only", insert, insert, "commit"},
	}, {
		name: "idem's transaction: BEGIN with the claim, the completion with COMMIT",
		run: func(t *testing.T, _ *sql.DB, d *SQLDriver) {
			tx, err := d.Begin(ctx, dialect.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if dialect.DeferToCommit(tx, dialect.Statement{SQL: "update early"}) {
				t.Error("held a statement before BEGIN was sent")
			}
			if err := dialect.Pipeline(ctx, tx, dialect.Statement{SQL: "insert claim"}); err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Native().ExecContext(ctx, insert); err != nil {
				t.Fatal(err)
			}
			if !dialect.DeferToCommit(tx, dialect.Statement{SQL: "update complete"}) {
				t.Fatal("DeferToCommit declined")
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{"begin\n;insert claim", insert, "update complete\n;commit"},
	}, {
		name: "a held completion that finds nothing: ErrNotClaimed, rolled back",
		run: func(t *testing.T, _ *sql.DB, d *SQLDriver) {
			tx, err := d.Begin(ctx, dialect.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := dialect.Pipeline(ctx, tx, dialect.Statement{SQL: "insert claim"}); err != nil {
				t.Fatal(err)
			}
			if !dialect.DeferToCommit(tx, dialect.Statement{SQL: "select 1/0"}) {
				t.Fatal("DeferToCommit declined")
			}
			err = tx.Commit(ctx)
			if !errors.Is(err, dialect.ErrNotClaimed) || errors.Is(err, dialect.ErrCommitUnknown) {
				t.Errorf("Commit = %v, want ErrNotClaimed", err)
			}
		},
		want: []string{"begin\n;insert claim", "select 1/0\n;commit", "rollback"},
	}, {
		name:      "a failed BEGIN: its error at the first statement, nothing after it sent",
		failBegin: true,
		run: func(t *testing.T, db *sql.DB, _ *SQLDriver) {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatalf("BeginTx = %v, want nil (it sends nothing)", err)
			}
			_, err = tx.ExecContext(ctx, insert)
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "XX000" || !strings.Contains(err.Error(), "held BEGIN") {
				t.Errorf("first statement: %v, want BEGIN's error", err)
			}
			if _, err := tx.ExecContext(ctx, insert); !errors.Is(err, dialect.ErrTxDone) {
				t.Errorf("second statement: %v, want ErrTxDone", err)
			}
			if err := tx.Commit(); !errors.Is(err, dialect.ErrTxDone) {
				t.Errorf("Commit: %v, want ErrTxDone", err)
			}
		},
		want: []string{"begin"},
	}, {
		name:      "Raw's Conn sends BEGIN first, and closes the connection when it fails",
		failBegin: true,
		run: func(t *testing.T, db *sql.DB, _ *SQLDriver) {
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			err = conn.Raw(func(dc any) error {
				if _, ok := dc.(*stdlib.Conn); ok {
					t.Error("Raw handed out a *stdlib.Conn")
				}
				if pc := dc.(interface{ Conn() *pgx.Conn }).Conn(); !pc.IsClosed() {
					t.Error("the *pgx.Conn of a transaction whose BEGIN failed is open")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		},
		want: []string{"begin"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			db, s := openFake(t, true)
			d, err := NewSQL(ctx, db, Options{})
			if err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			s.failBegin = tc.failBegin
			before := len(s.queries)
			s.mu.Unlock()
			tc.run(t, db, d)
			if got := s.sent()[before:]; !slices.Equal(got, tc.want) {
				t.Errorf("sent %q, want %q", got, tc.want)
			}
		})
	}
}

// TestNewSQLWithoutHoldBegin: on a plain *sql.DB NewSQL's transactions are
// as before, BEGIN and COMMIT each alone and no statement held.
func TestNewSQLWithoutHoldBegin(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db, s := openFake(t, false)
	d, err := NewSQL(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := len(s.sent())
	tx, err := d.Begin(ctx, dialect.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tx.(dialect.CommitDeferrer); ok {
		t.Error("a plain *sql.DB's transaction is a CommitDeferrer")
	}
	if err := dialect.Pipeline(ctx, tx, dialect.Statement{SQL: "insert claim"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, want := s.sent()[before:], []string{"begin", "insert claim", "commit"}; !slices.Equal(got, want) {
		t.Errorf("sent %q, want %q", got, want)
	}
}
