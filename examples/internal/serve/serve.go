// Package serve runs the example services' HTTP servers: until a signal,
// with a graceful shutdown, and writes their JSON answers.
package serve

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main runs run with a context that ends on SIGINT or SIGTERM and a text
// logger on stderr, and exits with status 1 when run fails.
func Main(name string, run func(ctx context.Context, logger *slog.Logger) error) {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, logger); err != nil {
		logger.Error(name + ": " + err.Error())
		stop()
		os.Exit(1)
	}
}

// Until serves h on addr until ctx ends, then shuts down within 10 seconds.
// It logs "<name>: listening" with the URL and attrs.
func Until(ctx context.Context, name, addr string, h http.Handler, logger *slog.Logger, attrs ...any) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
	logger.Info(name+": listening", append([]any{"url", "http://" + ln.Addr().String()}, attrs...)...)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info(name + ": shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// JSON writes v as a JSON answer with status.
func JSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "could not encode the answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
