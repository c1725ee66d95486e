package containers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
)

// fakeServer is a backend whose image check and start are stand-ins: no
// Docker, and nothing from the environment (its variables are never set).
func fakeServer(reason string, start func() string) *server {
	return &server{
		name:         "fake",
		title:        "Fake",
		dsnEnv:       "IDEM_FAKE_DSN_NEVER_SET",
		imageEnv:     "IDEM_FAKE_IMAGE_NEVER_SET",
		defaultImage: "fake:1",
		ensure:       func(string) (string, bool) { return reason, false },
		start: func(context.Context, string) (testcontainers.Container, string, error) {
			return nil, start(), nil
		},
	}
}

// TestConcurrentCallersShareOneServer: callers that ask for a backend at the
// same time, from several goroutines, wait for one start and all get its
// DSN; later callers get it too, without another start.
func TestConcurrentCallersShareOneServer(t *testing.T) {
	var starts atomic.Int32
	release := make(chan struct{})
	s := fakeServer("", func() string {
		n := starts.Add(1)
		<-release
		return fmt.Sprintf("fake://server-%d", n)
	})
	const callers = 8
	dsns := make([]string, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { dsns[i] = s.dsnFor(t) })
	}
	// The first caller is starting the server; the others must wait for it
	// rather than start their own.
	deadline := time.Now().Add(10 * time.Second)
	for starts.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if n := starts.Load(); n != 1 {
		t.Fatalf("%d starts while the first was still running, want 1", n)
	}
	close(release)
	wg.Wait()
	for i, dsn := range dsns {
		if dsn != "fake://server-1" {
			t.Errorf("caller %d got %q, want the one server's fake://server-1", i, dsn)
		}
	}
	if dsn := s.dsnFor(t); dsn != "fake://server-1" || starts.Load() != 1 {
		t.Errorf("a later caller got %q after %d starts, want fake://server-1 after 1", dsn, starts.Load())
	}
	if err := s.terminate(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.get(); err == nil {
		t.Error("a call after terminate succeeded, want an error")
	}
}

// TestUnavailableBackend: a backend that cannot be had skips every caller,
// saying why and which variables help, or fails them when IDEM_REQUIRE
// names it; it is never started.
func TestUnavailableBackend(t *testing.T) {
	for _, require := range []string{"", "fake"} {
		t.Run("IDEM_REQUIRE="+require, func(t *testing.T) {
			t.Setenv(EnvRequire, require)
			s := fakeServer("no usable Docker engine (test)", func() string {
				t.Error("an unavailable backend was started")
				return ""
			})
			var wg sync.WaitGroup
			recs := make([]*recorder, 4)
			for i := range recs {
				recs[i] = &recorder{TB: t}
				wg.Go(func() {
					defer func() {
						if r := recover(); r != nil && r != errStop {
							panic(r)
						}
					}()
					s.dsnFor(recs[i])
				})
			}
			wg.Wait()
			for i, r := range recs {
				got, other := r.skip, r.fatal
				if require != "" {
					got, other = r.fatal, r.skip
				}
				if got == "" || other != "" {
					t.Errorf("caller %d: skip %q, fatal %q; want only a %s", i, r.skip, r.fatal, map[bool]string{true: "failure", false: "skip"}[require != ""])
				}
				for _, want := range []string{"no usable Docker engine (test)", "IDEM_FAKE_DSN_NEVER_SET", EnvRequire} {
					if !strings.Contains(got, want) {
						t.Errorf("caller %d: message %q does not name %q", i, got, want)
					}
				}
			}
		})
	}
}

var errStop = fmt.Errorf("recorder: stopped")

// recorder is a testing.TB for goroutines: it records Fatalf and Skipf and
// stops the goroutine instead of the test.
type recorder struct {
	testing.TB
	mu          sync.Mutex
	fatal, skip string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.mu.Lock()
	r.fatal = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	panic(errStop)
}

func (r *recorder) Skipf(format string, args ...any) {
	r.mu.Lock()
	r.skip = fmt.Sprintf(format, args...)
	r.mu.Unlock()
	panic(errStop)
}
