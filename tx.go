package idem

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idem/dialect"
)

// The core owns every transaction it runs (Do's, Purge's, Migrate's): it
// begins them through the driver (dialect.Driver.Begin, which returns a
// dialect.Tx), runs the dialect's statements in them, and ends them. This
// file holds how: the options of one call, the context a transaction is
// begun with, and the rollback that must happen even after the caller left.

// Option changes how one call runs its transaction.
type Option func(*callOptions)

type callOptions struct {
	isolation sql.IsolationLevel
}

// Isolation runs the call's transaction at level instead of the level the
// driver was configured with; one store serves every level. A driver refuses
// a level its database lacks with ErrInvalidConfig (SQLite accepts every
// level: its transactions are serializable).
func Isolation(level sql.IsolationLevel) Option {
	return func(o *callOptions) { o.isolation = level }
}

func newCallOptions(opts []Option) callOptions {
	var o callOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o
}

// rollbackTimeout bounds a rollback run after the caller's context ended.
const rollbackTimeout = 5 * time.Second

// rollback ends tx even when ctx is already cancelled, within a bound.
func rollback[TTx any](ctx context.Context, tx dialect.Tx[TTx]) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
	defer cancel()
	_ = tx.Rollback(ctx) // nothing to keep; a failed rollback closes the connection in every driver
}

// txContext is the context a transaction of Do is begun with. It follows
// the caller's context until detach; after that the caller going away no
// longer ends it, and the timeout given to detach does, with
// ErrCommitTimeout as its cause (context.Cause). Its Err is then
// context.DeadlineExceeded, as for any deadline, never context.Canceled:
// the error of a statement it interrupted must not read as the caller's
// cancellation while the caller's context is live.
type txContext struct {
	context.Context // WithCancelCause of the caller's, without its cancellation
	cancel          context.CancelCauseFunc
	caller          context.Context
	follow          func() bool // stops following the caller's context
	timer           *time.Timer

	mu       sync.Mutex
	deadline time.Time // set by detach
}

func followContext(ctx context.Context) *txContext {
	c, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	return &txContext{Context: c, cancel: cancel, caller: ctx, follow: context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })}
}

// detach stops following the caller's context and bounds what is left by
// timeout. It reports false when the caller's context had already ended
// (the transaction may already be rolling back). That includes the
// instant in which the caller's Done is closed but the function following
// it has not run yet: a goroutine woken by Done can get here inside it.
func (c *txContext) detach(timeout time.Duration) bool {
	if !c.follow() {
		return false
	}
	if c.caller.Err() != nil {
		c.cancel(context.Cause(c.caller))
		return false
	}
	c.mu.Lock()
	c.deadline = time.Now().Add(timeout)
	c.mu.Unlock()
	c.timer = time.AfterFunc(timeout, func() { c.cancel(ErrCommitTimeout) })
	return true
}

// Deadline is the commit timeout's end once detached.
func (c *txContext) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, !c.deadline.IsZero()
}

// Err is context.DeadlineExceeded once the commit timeout ended the
// context, and the embedded context's error otherwise.
func (c *txContext) Err() error {
	err := c.Context.Err()
	if err != nil && errors.Is(context.Cause(c.Context), ErrCommitTimeout) {
		return context.DeadlineExceeded
	}
	return err
}

func (c *txContext) release() {
	c.follow()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.cancel(nil)
}
