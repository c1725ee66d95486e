package idemhttp_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// TestKeyFuncs: what each key function returns, and which sentinel its
// errors wrap (ErrKeyMissing answers "key-missing", anything else
// "key-invalid").
func TestKeyFuncs(t *testing.T) {
	withHeader := func(name string, values ...string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/", nil)
		for _, v := range values {
			r.Header.Add(name, v)
		}
		return r
	}
	plain := httptest.NewRequest(http.MethodPost, "/", nil)
	for _, tc := range []struct {
		name    string
		key     idemhttp.KeyFunc
		r       *http.Request
		body    string
		want    string
		wantErr error
	}{
		{"header", idemhttp.HeaderKeyFunc("x-github-delivery"), withHeader("X-GitHub-Delivery", "d-1"), "", "d-1", nil},
		{"header as sent, quotes and all", idemhttp.HeaderKeyFunc("webhook-id"), withHeader("Webhook-Id", `"msg_1"`), "", `"msg_1"`, nil},
		{"header missing", idemhttp.HeaderKeyFunc("webhook-id"), plain, "", "", idemhttp.ErrKeyMissing},
		{"header repeated", idemhttp.HeaderKeyFunc("svix-id"), withHeader("Svix-Id", "a", "b"), "", "", idem.ErrInvalidKey},
		{"default: Idempotency-Key", idemhttp.DefaultKey, withHeader(idemhttp.HeaderKey, `"k-1"`), "", "k-1", nil},
		{"default: no Idempotency-Key", idemhttp.DefaultKey, plain, "", "", idemhttp.ErrKeyMissing},
		{"default: repeated", idemhttp.DefaultKey, withHeader(idemhttp.HeaderKey, "a", "b"), "", "", idem.ErrInvalidKey},
		{"field", idemhttp.JSONKeyFunc("id"), plain, `{"object":"event","id":"evt_1"}`, "evt_1", nil},
		{"field with escapes", idemhttp.JSONKeyFunc("id"), plain, `{"id":"evt\u005f1"}`, "evt_1", nil},
		{"number", idemhttp.JSONKeyFunc("id"), plain, `{"id": -12.5e3 }`, "-12.5e3", nil},
		{"nested", idemhttp.JSONKeyFunc("data", "object", "id"), plain, `{"data":{"object":{"id":"pi_1"}}}`, "pi_1", nil},
		{"field missing", idemhttp.JSONKeyFunc("id"), plain, `{"type":"x"}`, "", idemhttp.ErrKeyMissing},
		{"field null", idemhttp.JSONKeyFunc("id"), plain, `{"id":null}`, "", idemhttp.ErrKeyMissing},
		{"nested field missing", idemhttp.JSONKeyFunc("data", "id"), plain, `{"data":{}}`, "", idemhttp.ErrKeyMissing},
		{"field a bool", idemhttp.JSONKeyFunc("id"), plain, `{"id":true}`, "", idem.ErrInvalidKey},
		{"field an array", idemhttp.JSONKeyFunc("id"), plain, `{"id":["a"]}`, "", idem.ErrInvalidKey},
		{"through a string", idemhttp.JSONKeyFunc("data", "id"), plain, `{"data":"x"}`, "", idem.ErrInvalidKey},
		{"through null", idemhttp.JSONKeyFunc("data", "id"), plain, `{"data":null}`, "", idem.ErrInvalidKey},
		{"not JSON", idemhttp.JSONKeyFunc("id"), plain, `id=evt_1`, "", idem.ErrInvalidKey},
		{"JSON, not an object", idemhttp.JSONKeyFunc("id"), plain, `"evt_1"`, "", idem.ErrInvalidKey},
		{"trailing garbage", idemhttp.JSONKeyFunc("id"), plain, `{"id":"evt_1"} x`, "", idem.ErrInvalidKey},
		{"empty body", idemhttp.JSONKeyFunc("id"), plain, ``, "", idem.ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.key(tc.r, []byte(tc.body))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("key = %q, %v; want an error wrapping %v", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("key = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestJSONKeyFuncWithoutPath: a JSONKeyFunc without a field is a mistake
// in the program, found when it is made.
func TestJSONKeyFuncWithoutPath(t *testing.T) {
	defer func() {
		if p := recover(); p == nil || !strings.Contains(p.(string), "JSONKeyFunc") {
			t.Fatalf("recover() = %v, want a panic that names JSONKeyFunc", p)
		}
	}()
	idemhttp.JSONKeyFunc()
}

// TestKeyOptionalRefusedWithKeyOrVerify: a request without a key would
// pass KeyOptional's way untouched, skipping Key and Verify; New says so.
func TestKeyOptionalRefusedWithKeyOrVerify(t *testing.T) {
	store := newStore(t)
	principal := func(*http.Request) string { return "p" }
	for name, cfg := range map[string]idemhttp.Config{
		"Key":    {Principal: principal, KeyOptional: true, Key: idemhttp.HeaderKeyFunc("webhook-id")},
		"Verify": {Principal: principal, KeyOptional: true, Verify: func(*http.Request, []byte) error { return nil }},
	} {
		t.Run(name, func(t *testing.T) {
			mw, err := idemhttp.New(store, cfg)
			if !errors.Is(err, idem.ErrInvalidConfig) || !strings.Contains(err.Error(), "KeyOptional") {
				t.Fatalf("New = %v, %v; want an error wrapping idem.ErrInvalidConfig that names KeyOptional", mw, err)
			}
		})
	}
}

// TestVerifyWithDefaultKey: Verify also guards the Idempotency-Key header
// of API clients (a signed API), and runs before the key is read.
func TestVerifyWithDefaultKey(t *testing.T) {
	var logs bytes.Buffer
	mw, err := idemhttp.New(newStore(t), idemhttp.Config{
		Principal: func(*http.Request) string { return "p" },
		Unrouted:  true,
		Verify: func(r *http.Request, body []byte) error {
			if r.Header.Get("X-Signed") != string(body) {
				return errors.New("unsigned")
			}
			return nil
		},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	var runs int
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { runs++; w.Write([]byte("ok")) }))
	for i, tc := range []struct {
		key, signed string
		status      int
		replayed    string
	}{
		{"", "", http.StatusUnauthorized, ""},
		{"k", "", http.StatusUnauthorized, ""},
		{"", "b", http.StatusBadRequest, ""},
		{"k", "b", http.StatusOK, ""},
		{"k", "b", http.StatusOK, "true"},
		{"k", "", http.StatusUnauthorized, ""},
	} {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("b"))
		if tc.key != "" {
			r.Header.Set(idemhttp.HeaderKey, tc.key)
		}
		if tc.signed != "" {
			r.Header.Set("X-Signed", tc.signed)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != tc.status || rec.Header().Get(idemhttp.HeaderReplayed) != tc.replayed {
			t.Errorf("request %d: %d replayed=%q, want %d %q", i, rec.Code, rec.Header().Get(idemhttp.HeaderReplayed), tc.status, tc.replayed)
		}
	}
	if runs != 1 {
		t.Errorf("handler ran %d times, want 1", runs)
	}
	// Each refusal is logged with its reason, which the answer leaves out.
	if n := strings.Count(logs.String(), "level=WARN msg=\"idemhttp: refused a request that failed verification; nothing claimed\""); n != 3 {
		t.Errorf("%d refusals logged, want 3:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "error=unsigned"); n != 3 {
		t.Errorf("%d reasons logged, want 3:\n%s", n, logs.String())
	}
}
