package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemhttp/idemhttptest"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

func TestMain(m *testing.M) { containers.Main(m) }

func open(t *testing.T, params string) *sql.DB {
	t.Helper()
	return containers.SharedDB(t, containers.MySQL(t)+"?"+params)
}

func newDriver(t *testing.T, params string, opts mysql.Options) *mysql.Driver {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := mysql.New(ctx, open(t, params), opts)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestConformance(t *testing.T) {
	for _, v := range []struct {
		name   string
		params string
		level  sql.IsolationLevel
	}{
		{"repeatable-read", "", sql.LevelRepeatableRead},
		{"read-committed", "", sql.LevelReadCommitted},
		// DSN settings that change what the driver reports or how it sends
		// values must not change idem's behaviour.
		{"repeatable-read-found-rows-interpolated", "clientFoundRows=true&interpolateParams=true&parseTime=true&loc=Local", sql.LevelRepeatableRead},
	} {
		t.Run(v.name, func(t *testing.T) {
			conformance.Run(t, conformance.Backend[*sql.Tx]{
				Name: "mysql/" + v.name,
				Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
					return newDriver(t, v.params, mysql.Options{Isolation: v.level})
				},
				InsertLegacy:  insertLegacy,
				BeginReadOnly: func(t *testing.T, _ dialect.Driver[*sql.Tx]) *sql.Tx { return beginReadOnly(t, v.params) },
				BreakCommit: func(t *testing.T) conformance.CommitBreaker[*sql.Tx] {
					return commitBreaker(t, v.params, mysql.Options{Isolation: v.level})
				},
			})
		})
	}
}

// insertLegacy writes rows as the first schema version did: its columns,
// DATETIME(6) times in UTC.
var insertLegacy = conformance.LegacyInserter("INSERT INTO `%s` (scope, idem_key, fingerprint, status, header, body, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
	func(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.000000") })

// The HTTP middleware's suite on MySQL.
func TestHTTP(t *testing.T) {
	idemhttptest.Run(t, conformance.Backend[*sql.Tx]{
		Name: "mysql",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			return newDriver(t, "", mysql.Options{})
		},
	})
}

func TestNewRefusesNonStrictSQLMode(t *testing.T) {
	ctx := context.Background()
	_, err := mysql.New(ctx, open(t, "sql_mode=%27NO_ENGINE_SUBSTITUTION%27"), mysql.Options{})
	if !errors.Is(err, idem.ErrInvalidConfig) || !strings.Contains(err.Error(), "sql_mode") {
		t.Fatalf("New on a non-strict session: %v, want ErrInvalidConfig naming sql_mode", err)
	}
}

func TestNewRefusesOtherDriver(t *testing.T) {
	db, err := sql.Open("mysql-not-registered", "")
	if err == nil {
		db.Close()
		t.Fatal("sql.Open of an unknown driver succeeded")
	}
	if _, err := mysql.New(context.Background(), nil, mysql.Options{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Fatalf("New(nil): %v, want ErrInvalidConfig", err)
	}
	if _, err := mysql.New(context.Background(), open(t, ""), mysql.Options{Isolation: sql.LevelSnapshot}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Fatalf("New with snapshot isolation: %v, want ErrInvalidConfig", err)
	}
}

// The driver gives back the handle it was made with (DB) and refuses a nil
// transaction in Wrap with ErrBadTx.
func TestDriverAccessors(t *testing.T) {
	db := open(t, "")
	d, err := mysql.New(t.Context(), db, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d.DB() != db {
		t.Errorf("DB() is not the *sql.DB New was given")
	}
	if _, err := d.Wrap(nil); !errors.Is(err, idem.ErrBadTx) {
		t.Errorf("Wrap(nil): %v, want ErrBadTx", err)
	}
}

// A body over the server's max_allowed_packet is a typed error, the effect
// is rolled back, and the connection stays usable.
func TestBodyOverMaxAllowedPacket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db := open(t, "")
	var maxPacket int
	if err := db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&maxPacket); err != nil {
		t.Fatal(err)
	}
	d := newDriver(t, "", mysql.Options{})
	store, err := idem.New(d, idem.Config{Table: "idem_packet_test", MaxBody: 2 * maxPacket})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		db.Exec("DROP TABLE IF EXISTS idem_packet_test, idem_packet_test_schema, idem_packet_test_fence")
	})
	req := idem.Request{Scope: "s", Key: "big", Fingerprint: idem.FingerprintRequest("POST", "/", nil)}
	_, err = store.Do(ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		return idem.Response{Status: 200, Body: make([]byte, maxPacket+1)}, nil
	})
	if !errors.Is(err, idem.ErrTooLarge) {
		t.Fatalf("body of %d bytes (max_allowed_packet %d): %v, want ErrTooLarge", maxPacket+1, maxPacket, err)
	}
	if _, err := store.Lookup(ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("after the refused body, Lookup: %v, want ErrNotFound", err)
	}
	res, err := store.Do(ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		return idem.Response{Status: 200, Body: make([]byte, maxPacket/2)}, nil
	})
	if err != nil || res.Outcome != idem.Won {
		t.Fatalf("body of half the packet: %+v, %v", res.Outcome, err)
	}
	res, err = store.Do(ctx, req, nil2xx)
	if err != nil || res.Outcome != idem.Replay || len(res.Response.Body) != maxPacket/2 {
		t.Fatalf("replay of a large body: %v, %d bytes, %v", res.Outcome, len(res.Response.Body), err)
	}
}

func nil2xx(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
	return idem.Response{Status: 200}, nil
}

// InnoDB's REPEATABLE READ would hide a record committed after the
// transaction's first read from a plain SELECT; the loser's locking read
// must see it, so the claim replays instead of failing or retrying.
func TestLoserSeesCommitAfterSnapshot(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := newDriver(t, "", mysql.Options{Isolation: sql.LevelRepeatableRead})
	store, err := idem.New(d, idem.Config{Table: "idem_snapshot_test"})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	db := open(t, "")
	t.Cleanup(func() {
		db.Exec("DROP TABLE IF EXISTS idem_snapshot_test, idem_snapshot_test_schema, idem_snapshot_test_fence")
	})

	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM idem_snapshot_test").Scan(&n); err != nil {
		t.Fatal(err) // the snapshot is taken here
	}
	req := idem.Request{Scope: "s", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/", []byte("x"))}
	if _, err := store.Do(ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		return idem.Response{Status: 201, Body: []byte("winner")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	claim, err := store.Claim(ctx, tx, req)
	if err != nil {
		t.Fatalf("Claim in a transaction whose snapshot predates the winner: %v, want a replay", err)
	}
	if claim.Outcome != idem.Replay || string(claim.Response.Body) != "winner" {
		t.Fatalf("Claim: %v %q, want replay of the winner", claim.Outcome, claim.Response.Body)
	}
}
