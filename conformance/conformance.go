// Package conformance is the suite every idem backend runs to prove it keeps
// the lifecycle's promises on a real database: one winner per key, byte-exact
// replays, mismatches refused, bounded waits, retention takeover, purge that
// never blocks claims, and clear errors for bad input with nothing written.
//
// It is an ordinary package, not a test file, so a new dialect proves itself
// by calling Run from its own tests:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Backend[*sql.Tx]{
//			Name: "mydb",
//			Open: func(t *testing.T) dialect.Driver[*sql.Tx] { ... },
//		})
//	}
//
// Every case is a parallel subtest with its own tables, and checks the
// effect count in a table of its own, written in the same transaction as the
// claim, the way a user's order or payment row would be. Backend differences
// are read from dialect.Capabilities, never from which package runs.
package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// Backend is what a dialect's tests hand to Run.
type Backend[TTx any] struct {
	// Name appears in every failure message ("postgres/pgx/serializable").
	Name string
	// Open returns the driver one test runs on. Tests may share a database:
	// each creates and drops its own tables. Open may call t.Skip or t.Fatal.
	Open func(t *testing.T) dialect.Driver[TTx]
}

// caseTimeout bounds every case, so a backend that hangs fails instead.
const caseTimeout = 2 * time.Minute

// Run runs every conformance case against b as parallel subtests of t.
func Run[TTx any](t *testing.T, b Backend[TTx]) {
	t.Helper()
	if b.Open == nil {
		t.Fatalf("conformance: Backend %q has no Open", b.Name)
	}
	for _, c := range cases[TTx]() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, b)
		})
	}
}

type testCase[TTx any] struct {
	name string
	run  func(t *testing.T, b Backend[TTx])
}

func cases[TTx any]() []testCase[TTx] {
	return []testCase[TTx]{
		{"FreshClaimAndComplete", testFreshClaimAndComplete[TTx]},
		{"DoWinsAndCommits", testDoWinsAndCommits[TTx]},
		{"ReplayByteForByte", testReplayByteForByte[TTx]},
		{"ReplayEmptyBody", testReplayEmptyBody[TTx]},
		{"Mismatch", testMismatch[TTx]},
		{"ScopesIsolateKeys", testScopesIsolateKeys[TTx]},
		{"LoserWaitsThenReplays", testLoserWaitsThenReplays[TTx]},
		{"WinnerRollsBackLoserWins", testWinnerRollsBackLoserWins[TTx]},
		{"ThirtyTwoClaimsOneEffect", testThirtyTwoClaims[TTx]},
		{"ClaimAfterEarlierRead", testClaimAfterEarlierRead[TTx]},
		{"WaitBound", testWaitBound[TTx]},
		{"ContextCancelledWhileWaiting", testContextCancelled[TTx]},
		{"FuncErrorRollsBack", testFuncErrorRollsBack[TTx]},
		{"PanicRollsBack", testPanicRollsBack[TTx]},
		{"ServerErrorNotStored", testServerErrorNotStored[TTx]},
		{"ServerErrorStoredByPolicy", testServerErrorStoredByPolicy[TTx]},
		{"CommittedWithoutCompleteIsInFlight", testAbandonedClaim[TTx]},
		{"DatabaseClockAndRetention", testDatabaseClock[TTx]},
		{"RetentionTakeover", testRetentionTakeover[TTx]},
		{"LiveKeyNeverTakenOver", testLiveKeyNeverTakenOver[TTx]},
		{"ConcurrentTakeoverOneWinner", testConcurrentTakeover[TTx]},
		{"PurgeWhileClaiming", testPurgeWhileClaiming[TTx]},
		{"RetryExhaustion", testRetryExhaustion[TTx]},
		{"RetryThenSucceed", testRetryThenSucceed[TTx]},
		{"BadRequestInput", testBadRequestInput[TTx]},
		{"BadTableName", testBadTableName[TTx]},
		{"ResponseTooLarge", testResponseTooLarge[TTx]},
		{"InvalidStatus", testInvalidStatus[TTx]},
		{"CompleteWithoutWonClaim", testCompleteWithoutWin[TTx]},
		{"CompleteTwice", testCompleteTwice[TTx]},
		{"NilTransaction", testNilTx[TTx]},
		{"FinishedTransaction", testFinishedTx[TTx]},
		{"LookupOutsideTransaction", testLookup[TTx]},
		{"CompleteGuardsClaimedRow", testCompleteGuardsClaimedRow[TTx]},
		{"InFlightRecordOtherBodyIsMismatch", testInFlightMismatch[TTx]},
		{"CompleteFindsNothingRollsBack", testCompleteFindsNothing[TTx]},
		{"StatusPolicy", testStatusPolicy[TTx]},
		{"PurgeBatchSizes", testPurgeBatchSizes[TTx]},
		{"PurgeBesideTakeover", testPurgeBesideTakeover[TTx]},
		{"WaitBoundOnlyForClaim", testWaitBoundScope[TTx]},
		{"SubMillisecondWaitBound", testSubMillisecondWaitBound[TTx]},
		{"ReadFirstSettledKeys", testReadFirstSettledKeys[TTx]},
		{"ReadFirstOpenKeys", testReadFirstOpenKeys[TTx]},
		{"SlowWinnerNotOvertaken", testSlowWinnerNotOvertaken[TTx]},
		{"CommitSurvivesHangUp", testCommitSurvivesHangUp[TTx]},
		{"FunctionEndsTransaction", testFunctionEndsTransaction[TTx]},
	}
}

// env is one case's world: a driver, a store on a fresh table, and an effect
// table the case's work writes to.
type env[TTx any] struct {
	t       *testing.T
	name    string
	ctx     context.Context
	driver  dialect.Driver[TTx]
	store   *idem.Store[TTx]
	table   string
	effects string
}

var tableSeq atomic.Int64

// tablePrefix keeps tables of concurrent test binaries on one server apart.
var tablePrefix = func() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "idemc_" + hex.EncodeToString(b)
}()

// setup opens the backend, creates fresh tables and a store configured by
// cfg (its Table is set here), and drops the tables when the case ends.
func setup[TTx any](t *testing.T, b Backend[TTx], cfg idem.Config) *env[TTx] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
	t.Cleanup(cancel)
	d := b.Open(t)
	e := &env[TTx]{t: t, name: b.Name, ctx: ctx, driver: d}
	e.table = fmt.Sprintf("%s_%d", tablePrefix, tableSeq.Add(1))
	e.effects = e.table + "_fx"
	cfg.Table = e.table
	if cfg.WaitBound == 0 {
		cfg.WaitBound = 20 * time.Second // generous: -race on two cores is slow
	}
	store, err := idem.New(d, cfg)
	if err != nil {
		t.Fatalf("[%s] idem.New: %v", b.Name, err)
	}
	e.store = store
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("[%s] Migrate: %v", b.Name, err)
	}
	// Migrate twice: it must be idempotent too.
	if err := store.Migrate(ctx); err != nil {
		t.Fatalf("[%s] second Migrate: %v", b.Name, err)
	}
	e.exec(d.Pool(), "CREATE TABLE "+e.effects+" (k VARCHAR(255) NOT NULL)")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, name := range []string{e.effects, e.table} {
			if _, err := d.Pool().Exec(ctx, "DROP TABLE "+name); err != nil {
				t.Errorf("[%s] drop %s: %v", b.Name, name, err)
			}
		}
	})
	return e
}

// fatalf fails the case naming the backend and the key.
func (e *env[TTx]) fatalf(key, format string, args ...any) {
	e.t.Helper()
	e.t.Fatalf("[%s] key %q: %s", e.name, key, fmt.Sprintf(format, args...))
}

func (e *env[TTx]) errorf(key, format string, args ...any) {
	e.t.Helper()
	e.t.Errorf("[%s] key %q: %s", e.name, key, fmt.Sprintf(format, args...))
}

func (e *env[TTx]) exec(q dialect.Queryer, stmt string) {
	e.t.Helper()
	if _, err := q.Exec(e.ctx, stmt); err != nil {
		e.t.Fatalf("[%s] %s: %v", e.name, stmt, err)
	}
}

// effect is the user's write, made in the claim's transaction.
func (e *env[TTx]) effect(ctx context.Context, tx TTx, label string) error {
	q, err := e.driver.Wrap(tx)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, "INSERT INTO "+e.effects+" (k) VALUES ('"+label+"')")
	return err
}

// effects counts committed effects with label.
func (e *env[TTx]) effectCount(label string) int64 {
	e.t.Helper()
	return e.count("SELECT COUNT(*) FROM " + e.effects + " WHERE k = '" + label + "'")
}

// records counts the rows of the idem table, expired or not.
func (e *env[TTx]) records() int64 {
	e.t.Helper()
	return e.count("SELECT COUNT(*) FROM " + e.table)
}

func (e *env[TTx]) count(query string) int64 {
	e.t.Helper()
	rows, err := e.driver.Pool().Query(e.ctx, query)
	if err != nil {
		e.t.Fatalf("[%s] %s: %v", e.name, query, err)
	}
	defer rows.Close()
	var n int64
	if !rows.Next() {
		e.t.Fatalf("[%s] %s: no row (%v)", e.name, query, rows.Err())
	}
	if err := rows.Scan(&n); err != nil {
		e.t.Fatalf("[%s] %s: %v", e.name, query, err)
	}
	return n
}

// request builds a request for key in the case's default scope.
func request(key, body string) idem.Request {
	return idem.Request{
		Scope:       "tenant-1 POST /orders",
		Key:         key,
		Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(body)),
	}
}

// work returns a Func that writes one effect labelled label and answers
// resp.
func (e *env[TTx]) work(label string, resp idem.Response) idem.Func[TTx] {
	return func(ctx context.Context, tx TTx) (idem.Response, error) {
		if err := e.effect(ctx, tx, label); err != nil {
			return idem.Response{}, err
		}
		return resp, nil
	}
}

// do runs store.Do and fails the case on error.
func (e *env[TTx]) do(store *idem.Store[TTx], req idem.Request, fn idem.Func[TTx]) idem.Result {
	e.t.Helper()
	res, err := store.Do(e.ctx, req, fn)
	if err != nil {
		e.fatalf(req.Key, "Do: %v", err)
	}
	return res
}

// begin starts a transaction through the driver for the manual path.
func (e *env[TTx]) begin() dialect.Txn[TTx] {
	e.t.Helper()
	txn, err := e.driver.Begin(e.ctx, dialect.BeginOptions{WaitBound: e.store.Config().WaitBound})
	if err != nil {
		e.t.Fatalf("[%s] Begin: %v", e.name, err)
	}
	return txn
}

// clock is a settable clock for retention cases.
type clock struct{ now atomic.Pointer[time.Time] }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}

func (c *clock) set(t time.Time)     { t = t.UTC().Truncate(time.Microsecond); c.now.Store(&t) }
func (c *clock) Now() time.Time      { return *c.now.Load() }
func (c *clock) add(d time.Duration) { c.set(c.Now().Add(d)) }

// t0 is a fixed instant with microseconds, far from the epoch.
var t0 = time.Date(2031, 3, 14, 15, 9, 26, 535897000, time.UTC)
