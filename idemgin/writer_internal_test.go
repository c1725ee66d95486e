package idemgin

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestRunWriter: the run's writer keeps gin's rules (a held status, a
// header written once) and sends nothing before the commit.
func TestRunWriter(t *testing.T) {
	t.Run("held status", func(t *testing.T) {
		rec := httptest.NewRecorder()
		rw := newRunWriter(t.Context(), rec)
		if rw.Status() != http.StatusOK || rw.Size() != -1 || rw.Written() {
			t.Fatalf("fresh: status %d size %d written %v, want 200 -1 false", rw.Status(), rw.Size(), rw.Written())
		}
		rw.WriteHeader(http.StatusEarlyHints) // dropped: 1xx cannot be sent before the commit
		rw.WriteHeader(0)                     // ignored, as in gin
		if rw.explicit || rw.Status() != http.StatusOK {
			t.Fatalf("after 103 and 0: status %d explicit %v, want 200 and no status set", rw.Status(), rw.explicit)
		}
		rw.WriteHeader(http.StatusCreated)
		rw.Flush() // writes the header, as gin's Flush does
		if !rw.Written() || rw.Size() != 0 || rec.Code != http.StatusCreated {
			t.Fatalf("after Flush: written %v size %d, recorded %d; want true 0 201", rw.Written(), rw.Size(), rec.Code)
		}
		rw.WriteHeader(http.StatusAccepted) // too late
		if n, err := rw.WriteString("hello"); n != 5 || err != nil {
			t.Fatalf("WriteString = %d, %v", n, err)
		}
		if n, err := rw.Write([]byte(" you")); n != 4 || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		if rw.Status() != http.StatusCreated || rw.Size() != 9 || rec.Body.String() != "hello you" {
			t.Fatalf("status %d size %d body %q, want 201 9 %q", rw.Status(), rw.Size(), rec.Body.String(), "hello you")
		}
	})
	t.Run("bare flush", func(t *testing.T) {
		rec := httptest.NewRecorder()
		rw := newRunWriter(t.Context(), rec)
		rw.Flush()
		if rw.Written() || rec.Flushed {
			t.Fatalf("a bare Flush wrote the header (%v) or flushed (%v): a handler that only flushed has not answered", rw.Written(), rec.Flushed)
		}
	})
	t.Run("write implies 200", func(t *testing.T) {
		rec := httptest.NewRecorder()
		rw := newRunWriter(t.Context(), rec)
		rw.Header().Set("X-A", "1")
		_, _ = rw.Write([]byte("x"))
		if rec.Code != http.StatusOK || rec.Header().Get("X-A") != "1" || !rw.Written() {
			t.Fatalf("recorded %d %v", rec.Code, rec.Header())
		}
	})
	t.Run("nothing early", func(t *testing.T) {
		rw := newRunWriter(t.Context(), httptest.NewRecorder())
		if _, _, err := rw.Hijack(); !errors.Is(err, http.ErrNotSupported) {
			t.Fatalf("Hijack: %v, want ErrNotSupported", err)
		}
		if rw.Pusher() != nil {
			t.Fatal("Pusher is not nil")
		}
		if err := http.NewResponseController(rw).SetWriteDeadline(time.Now()); !errors.Is(err, http.ErrNotSupported) {
			t.Fatalf("SetWriteDeadline: %v, want ErrNotSupported", err)
		}
	})
}

// TestRunWriterCloseNotify: CloseNotify fires when the run's context
// ends, and not after the run.
func TestRunWriterCloseNotify(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	rw := newRunWriter(ctx, httptest.NewRecorder())
	ch := rw.CloseNotify()
	if rw.CloseNotify() != ch {
		t.Fatal("CloseNotify made a second channel")
	}
	cancel()
	select {
	case v := <-ch:
		if !v {
			t.Fatal("CloseNotify sent false")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("CloseNotify did not fire after the context ended")
	}

	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	done := newRunWriter(ctx2, httptest.NewRecorder())
	ch2 := done.CloseNotify()
	done.close()
	cancel2()
	select {
	case <-ch2:
		t.Fatal("CloseNotify fired after the run ended")
	case <-time.After(50 * time.Millisecond):
	}
}

// TestSealedWriter: after the answer, writes are refused and the status
// stays the answer's.
func TestSealedWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	rw := newRunWriter(t.Context(), rec)
	rw.WriteHeader(http.StatusNoContent)
	rw.WriteHeaderNow()
	s := sealedWriter{rw}
	s.WriteHeader(http.StatusInternalServerError)
	if _, err := s.Write([]byte("x")); !errors.Is(err, ErrAnswered) {
		t.Fatalf("Write: %v, want ErrAnswered", err)
	}
	if _, err := s.WriteString("x"); !errors.Is(err, ErrAnswered) {
		t.Fatalf("WriteString: %v, want ErrAnswered", err)
	}
	if s.Status() != http.StatusNoContent || rec.Code != http.StatusNoContent || rec.Body.Len() != 0 {
		t.Fatalf("status %d, recorded %d %q; want 204 and nothing more", s.Status(), rec.Code, rec.Body.String())
	}
}
