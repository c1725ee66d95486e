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
// Every case is a parallel subtest on a Fixture (a store on a fresh table of
// its own), and checks the effect count in a table of its own, written in the
// same transaction as the claim, the way a user's order or payment row would
// be. Backend differences are read from dialect.Capabilities, never from
// which package runs. A failure names the backend, the key and, where a
// case can tell, the likely cause.
//
// The harness (Backend, Case, RunCases, Fixture, WrappedTx, Observer) is
// exported: idemhttp/idemhttptest builds on it, and so can a suite of your
// own.
//
// Races are proven, not hoped for. An Observer on the store's driver sees
// each client's Begin and statements; the winner holds the key until its
// losers are waiting inside their claims, and the case fails unless they
// still wait when it lets go, answer only afterwards, and retry only after
// errors the dialect calls retryable. Where writers wait on the whole
// database (Capabilities.DatabaseWriteLock, SQLite) the losers queue at
// BEGIN: a race there proves the queue, one winner and replays after it,
// never two claim statements at once.
package conformance

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// Run runs every conformance case against b as parallel subtests of t:
// the examples; the model, which draws sequences of operations and checks
// each step against a reference (see ModelTimeEnv for its bounds); and
// History, concurrent work under injected faults checked for
// linearizability. A Backend with Restart fails: the restarts would
// disturb the other cases.
func Run[TTx any](t *testing.T, b Backend[TTx]) {
	t.Helper()
	if b.Restart != nil {
		t.Fatalf("conformance: Backend %q has Restart, but Run's cases share its server: run History and Restarts alone (RunCases with one of them)", b.Name)
	}
	RunCases(t, b, append(cases[TTx](), explorations[TTx]()...))
}

// RunExamples runs the example cases alone, without the model and the
// histories: for a suite that checks something beside the lifecycle itself
// (a table a migration tool made, an alternative claim statement), where
// their run time buys nothing new.
func RunExamples[TTx any](t *testing.T, b Backend[TTx]) {
	t.Helper()
	RunCases(t, b, cases[TTx]())
}

// explorations are the cases that generate what they check.
func explorations[TTx any]() []Case[TTx] {
	return []Case[TTx]{
		{"Model", testModel[TTx]},
		History[TTx](),
	}
}

// History is the case Run runs as "History": workers run a seeded mix of
// Do and lease work on a few keys while COMMITs fail, the history is
// checked for linearizability against an idempotent register per key, and
// the database for exactly-once effects. On a Backend with Restart it also
// restarts the server during the run; run it alone there, with RunCases,
// on a server no other test uses:
//
//	conformance.RunCases(t, b, []conformance.Case[TTx]{conformance.History[TTx]()})
func History[TTx any]() Case[TTx] {
	return Case[TTx]{"History", testHistory[TTx]}
}

func cases[TTx any]() []Case[TTx] {
	return append([]Case[TTx]{
		{"FreshClaimAndComplete", testFreshClaimAndComplete[TTx]},
		{"DoWinsAndCommits", testDoWinsAndCommits[TTx]},
		{"ReplayByteForByte", testReplayByteForByte[TTx]},
		{"ReplayEmptyBody", testReplayEmptyBody[TTx]},
		{"NoStatusReplays", testNoStatusReplays[TTx]},
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
		{"NotAnOutcome", testNotAnOutcome[TTx]},
		{"PurgeBatchSizes", testPurgeBatchSizes[TTx]},
		{"PurgeBesideTakeover", testPurgeBesideTakeover[TTx]},
		{"PurgersRace", testPurgersRace[TTx]},
		{"WaitBoundOnlyForClaim", testWaitBoundScope[TTx]},
		{"SubMillisecondWaitBound", testSubMillisecondWaitBound[TTx]},
		{"BusyIsNotInFlight", testBusyIsNotInFlight[TTx]},
		{"ReadFirstSettledKeys", testReadFirstSettledKeys[TTx]},
		{"ReadFirstOpenKeys", testReadFirstOpenKeys[TTx]},
		{"SlowWinnerNotOvertaken", testSlowWinnerNotOvertaken[TTx]},
		{"CommitSurvivesHangUp", testCommitSurvivesHangUp[TTx]},
		{"CommitTimeoutBeforeCommit", testCommitTimeoutBeforeCommit[TTx]},
		{"FunctionEndsTransaction", testFunctionEndsTransaction[TTx]},
		{"MigrateUpgradesUnversioned", testMigrateUpgradesUnversioned[TTx]},
		{"MigrateRefusesNewer", testMigrateRefusesNewer[TTx]},
		{"MigrateConcurrently", testMigrateConcurrently[TTx]},
		{"MigrateAfterCrashBeforeVersion", testMigrateAfterCrashBeforeVersion[TTx]},
		{"LookupInTransaction", testLookupInTransaction[TTx]},
		{"PerCallIsolation", testPerCallIsolation[TTx]},
		{"LeaseLifecycle", testLeaseLifecycle[TTx]},
		{"LeaseLoserWaits", testLeaseLoserWaits[TTx]},
		{"LeaseTakeoverOneWinner", testLeaseTakeoverOneWinner[TTx]},
		{"LeaseFencing", testLeaseFencing[TTx]},
		{"LeaseTakeoverReported", testLeaseTakeoverReported[TTx]},
		{"LeaseExtend", testLeaseExtend[TTx]},
		{"LeaseDownstreamKey", testLeaseDownstreamKey[TTx]},
		{"LeasePurgeKeepsLive", testLeasePurgeKeepsLive[TTx]},
		{"LeaseReleaseResumes", testLeaseReleaseResumes[TTx]},
		{"LeaseMismatch", testLeaseMismatch[TTx]},
		{"LeaseNotAnOutcome", testLeaseNotAnOutcome[TTx]},
		{"DoLeaseHeartbeat", testDoLeaseHeartbeat[TTx]},
		{"ExpiredLeasesResume", testExpiredLeasesResume[TTx]},
		{"RecoveryResumesKilledHolder", testRecoveryResumesKilledHolder[TTx]},
		{"RecoveryRunnersRace", testRecoveryRunnersRace[TTx]},
		{"LeaseAndDoShareKeys", testLeaseAndDoShareKeys[TTx]},
		{"LeaseBadInput", testLeaseBadInput[TTx]},
		{"LeaseFencingAcrossLifetimes", testLeaseFencingAcrossLifetimes[TTx]},
		{"LeaseClaimsOnLiveLease", testLeaseClaimsOnLiveLease[TTx]},
		{"LeaseReleaseNotUndone", testLeaseReleaseNotUndone[TTx]},
		{"LeaseNeverWritesPlainClaim", testLeaseNeverWritesPlainClaim[TTx]},
		{"LeaseInFlightCarriesLeaseEnd", testLeaseInFlightCarriesLeaseEnd[TTx]},
		{"LeaseHolderWaitsItsOwnBound", testLeaseHolderWaitsItsOwnBound[TTx]},
		{"DoLeaseStopsWhenLeaseUnknown", testDoLeaseStopsWhenLeaseUnknown[TTx]},
		{"DoLeaseOutlivesHangUp", testDoLeaseOutlivesHangUp[TTx]},
		{"DoLeaseRefusedResponseReleases", testDoLeaseRefusedResponseReleases[TTx]},
		{"ResumeNeverStartsIntention", testResumeNeverStartsIntention[TTx]},
		{"LeaseExpiredRecordStartsClean", testLeaseExpiredRecordStartsClean[TTx]},
		{"LeaseObserved", testLeaseObserved[TTx]},
		{"LeaseAccessors", testLeaseAccessors[TTx]},
		{"AdminInspect", testAdminInspect[TTx]},
		{"AdminList", testAdminList[TTx]},
		{"AdminDelete", testAdminDelete[TTx]},
		{"AdminCounts", testAdminCounts[TTx]},
		{"UniqueViolationInFunction", testUniqueViolationInFunction[TTx]},
		{"AnswerAfterFailedStatement", testAnswerAfterFailedStatement[TTx]},
		{"LeaseAnswerAfterFailedStatement", testLeaseAnswerAfterFailedStatement[TTx]},
		{"DeadlockSwallowedInFunction", testDeadlockSwallowedInFunction[TTx]},
		{"DeadlockRetried", testDeadlockRetried[TTx]},
		{"ClaimInReadOnlyTransaction", testClaimInReadOnlyTransaction[TTx]},
		{"CommitConnectionLost", testCommitConnectionLost[TTx]},
	}, BatchCases[TTx]()...)
}

// env is one case's world: a fixture, and an effect table the case's work
// writes to, in the same transaction as the claim, the way a user's order
// or payment row would be.
type env[TTx any] struct {
	*Fixture[TTx]
	effects string
	// obs sees the transactions of the store's driver, in cases made with
	// setupObserved.
	obs *Observer
}

// setup makes a case's fixture with a store configured by cfg.
func setup[TTx any](t *testing.T, b Backend[TTx], cfg idem.Config) *env[TTx] {
	t.Helper()
	f := NewFixture(t, b, FixtureOptions[TTx]{Config: cfg})
	return &env[TTx]{Fixture: f, effects: createEffects(f)}
}

// setupObserved is setup with an Observer on the store's driver, for cases
// that prove contention.
func setupObserved[TTx any](t *testing.T, b Backend[TTx], cfg idem.Config) *env[TTx] {
	t.Helper()
	obs := NewObserver()
	f := NewFixture(t, b, FixtureOptions[TTx]{Config: cfg, Wrap: func(d dialect.Driver[TTx]) dialect.Driver[TTx] { return Observe(d, obs) }})
	return &env[TTx]{Fixture: f, effects: createEffects(f), obs: obs}
}

// createEffects creates a case's effect table: a row per effect, its
// label (k) and the scope of the record it belongs to, beside which a
// sharded backend keeps it.
func createEffects[TTx any](f *Fixture[TTx]) string {
	f.T.Helper()
	return f.CreateScopedTable("fx", "k VARCHAR(255) NOT NULL, scope VARCHAR(255) NOT NULL")
}

// effect is the user's write, made in the claim's transaction, for a
// record of DefaultScope.
func (e *env[TTx]) effect(ctx context.Context, tx TTx, label string) error {
	return e.effectIn(ctx, tx, DefaultScope, label)
}

// effectIn is effect for a record of scope.
func (e *env[TTx]) effectIn(ctx context.Context, tx TTx, scope, label string) error {
	q, err := e.Driver.Wrap(tx)
	if err != nil {
		return err
	}
	_, err = q.Exec(ctx, e.effectInsert(scope, label))
	return err
}

// effectInsert is the INSERT of an effect labelled label for a record of
// scope.
func (e *env[TTx]) effectInsert(scope, label string) string {
	return "INSERT INTO " + e.effects + " (k, scope) VALUES (" + sqlString(label) + ", " + sqlString(scope) + ")"
}

// sqlString is s as a SQL string literal, quotes doubled. MySQL also reads
// a backslash as an escape (unless NO_BACKSLASH_ESCAPES): the suite's
// labels and scopes hold none.
func sqlString(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// effectCounts counts the effect table's rows by label.
func (e *env[TTx]) effectCounts() (map[string]int64, error) {
	rows, err := e.Driver.Pool().Query(e.Ctx, "SELECT k, COUNT(*) FROM "+e.effects+" GROUP BY k")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			return nil, err
		}
		counts[k] = n
	}
	return counts, rows.Err()
}

// serverAnswers waits, within ctx, until a statement on the pool succeeds.
func (e *env[TTx]) serverAnswers(ctx context.Context) error {
	for {
		_, err := e.Driver.Pool().Exec(ctx, "SELECT 1")
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server does not answer: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(historyServerPoll):
		}
	}
}

// readAgain runs read, and again after an error (three tries at most):
// after a restart the pool may still hold connections it broke.
func (e *env[TTx]) readAgain(read func() error) error {
	err := read()
	for try := 1; err != nil && try < 3; try++ {
		select {
		case <-e.Ctx.Done():
			return err
		case <-time.After(historyServerPoll):
		}
		err = read()
	}
	return err
}

// effectCount counts committed effects with label.
func (e *env[TTx]) effectCount(label string) int64 {
	e.T.Helper()
	return e.Count("SELECT COUNT(*) FROM " + e.effects + " WHERE k = '" + label + "'")
}

// request builds a request for key in the case's default scope.
func request(key, body string) idem.Request {
	return idem.Request{
		Scope:       DefaultScope,
		Key:         key,
		Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(body)),
	}
}

// work returns a Func that writes one effect labelled label, for a record
// of DefaultScope, and answers resp.
func (e *env[TTx]) work(label string, resp idem.Response) idem.Func[TTx] {
	return e.workIn(DefaultScope, label, resp)
}

// workIn is work for a record of scope.
func (e *env[TTx]) workIn(scope, label string, resp idem.Response) idem.Func[TTx] {
	return func(ctx context.Context, tx TTx) (idem.Response, error) {
		if err := e.effectIn(ctx, tx, scope, label); err != nil {
			return idem.Response{}, err
		}
		return resp, nil
	}
}

// do runs store.Do and fails the case on error.
func (e *env[TTx]) do(store *idem.Store[TTx], req idem.Request, fn idem.Func[TTx], opts ...idem.Option) idem.Result {
	e.T.Helper()
	res, err := store.Do(e.Ctx, req, fn, opts...)
	if err != nil {
		e.Fatalf(req.Key, "Do: %v", err)
	}
	return res
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
