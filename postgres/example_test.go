package postgres_test

import (
	"context"
	"errors"
	"log"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/postgres"
)

// signUp is the work of one sign-up request, for the examples below.
type signUp func(ctx context.Context, tx pgx.Tx) (idem.Response, error)

// run runs work under store.Do with the request's key.
func run(work signUp) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	driver, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := idem.New(driver, idem.Config{})
	if err != nil {
		log.Fatal(err)
	}
	req := idem.Request{Scope: "tenant-7 POST /accounts", Key: "k-1", Fingerprint: idem.FingerprintRequest("POST", "/accounts", []byte("ann@example.com"))}
	res, err := store.Do(ctx, req, idem.Func[pgx.Tx](work))
	if err != nil {
		log.Fatal(err)
	}
	if res.NotStored != nil {
		log.Printf("answered %d without storing it: %v", res.Response.Status, res.NotStored)
	}
}

// A statement that fails aborts a PostgreSQL transaction: after a unique
// violation every later statement fails, so a 409 answered then cannot be
// stored (Do returns it with Result.NotStored set, and a retry runs the
// work again). A savepoint around the statement that may fail keeps the
// transaction usable: pgx's Tx.Begin inside a transaction is SAVEPOINT,
// Rollback is ROLLBACK TO SAVEPOINT, Commit is RELEASE SAVEPOINT. The 409
// is then stored and replayed like any answer.
func Example_savepoint() {
	email := "ann@example.com"
	run(func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
		sp, err := tx.Begin(ctx) // SAVEPOINT
		if err != nil {
			return idem.Response{}, err
		}
		_, err = sp.Exec(ctx, "INSERT INTO accounts (email) VALUES ($1)", email)
		if errors.Is(postgres.NewDialect().Classify(err), idem.ErrUniqueViolation) {
			if err := sp.Rollback(ctx); err != nil { // ROLLBACK TO SAVEPOINT: the transaction goes on
				return idem.Response{}, err
			}
			return idem.Response{Status: 409, Body: []byte(`{"error":"email taken"}`)}, nil
		}
		if err != nil {
			return idem.Response{}, err
		}
		if err := sp.Commit(ctx); err != nil { // RELEASE SAVEPOINT
			return idem.Response{}, err
		}
		return idem.Response{Status: 201}, nil
	})
}

// Where the conflict is the only failure to expect, INSERT ... ON CONFLICT
// DO NOTHING never fails on it: no row inserted means the email is taken,
// and the transaction stays usable for the stored 409.
func Example_onConflict() {
	email := "ann@example.com"
	run(func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
		tag, err := tx.Exec(ctx, "INSERT INTO accounts (email) VALUES ($1) ON CONFLICT (email) DO NOTHING", email)
		if err != nil {
			return idem.Response{}, err
		}
		if tag.RowsAffected() == 0 {
			return idem.Response{Status: 409, Body: []byte(`{"error":"email taken"}`)}, nil
		}
		return idem.Response{Status: 201}, nil
	})
}
